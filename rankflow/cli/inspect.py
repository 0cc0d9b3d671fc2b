"""``rankflow inspect``: a pretrained checkpoint's balance fingerprint; tables, figures."""

from __future__ import annotations

import argparse
import time

from ..config.fields import ConfigError
from ..engine import progress
from ..engine.writer import check_out
from .common import add_command


def add_parser(sub) -> None:
    """``inspect PATH --out DIR [--arch] [--layers] [--heads] [--scatter] ...``."""
    parser = add_command(
        sub,
        "inspect",
        cmd_inspect,
        help="inspect a pretrained safetensors checkpoint for the balance fingerprint "
        "of weight decay, head by head, against a null pairing",
        description="Read PATH (a .safetensors file, a sharded model.safetensors.index.json, "
        "or a folder holding either plus config.json, or a .zip of such a folder) one layer "
        "at a time with numpy, and "
        "measure per layer, head and pair (key–query: A = W_Q^h, B = W_K^h; value–output: "
        "A = W_V^h, B = W_O^hᵀ) the relative balance gap ‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + "
        "‖BᵀB‖_F), the correlation of the Gram entries, frob_minus_nuc / l2_penalty and the "
        "ranks of ABᵀ, beside a null pairing (B of another head). Writes DIR/heads.parquet "
        "and heads.csv (the table), grams.parquet, summary.md, scatter.png, layers.png, and "
        "inspect.json last.",
    )
    _add_checkpoint_options(parser)
    _add_series_options(parser)
    parser.add_argument("--no-figures", action="store_true", help="write tables only")
    parser.add_argument("--quiet", action="store_true", help="no summary, no progress bar")


@progress.reported("inspect")
def cmd_inspect(args: argparse.Namespace) -> int:
    """Inspect the checkpoint into ``--out``, its figures drawn by ``rankflow.plots``
    (unless ``--no-figures``); print the summary."""
    from .. import plots
    from ..inspect import inspect_checkpoint, is_series

    if not args.rank_tol > 0:  # also NaN; before anything is read or written
        raise ConfigError(
            f"--rank-tol: must be > 0 (a fraction of s_1, e.g. 1e-3), got {args.rank_tol}"
        )
    if is_series(args.path, args.steps, args.revision):
        return _series(args)
    path = args.path[0] + (f"@{args.revision[0]}" if args.revision else "")
    if args.lr is not None or args.lam is not None or args.lr_schedule is not None:
        raise ConfigError("--lam/--lr/--lr-schedule: these describe a series; give several PATHs")
    check_out(args.out, "inspect")
    t0 = time.perf_counter()
    figures = None if args.no_figures else plots.inspection_figures
    if args.spectra:
        figures = _spectra_outputs(args, path, figures)
    res = inspect_checkpoint(
        path,
        out=args.out,
        arch=args.arch,
        layers=args.layers,
        heads=args.heads,
        scatter=args.scatter,
        rank_tol=args.rank_tol,
        figures=figures,
        progress=False if args.quiet else None,
    )
    if not args.quiet:
        print(res.summary)
    n = len(res.meta["layers"])
    print(f"{n} layers in {time.perf_counter() - t0:.1f} s → {args.out}")
    return 0


def _spectra_outputs(args: argparse.Namespace, path: str, figures):
    """``figures`` plus the spectra tables (and figure), computed in a first pass."""
    from .. import plots
    from ..inspect import inspect_spectra, locate, with_spectra

    kw = dict(arch=args.arch, layers=args.layers, heads=args.heads)
    spectra = inspect_spectra(locate(path), progress=False if args.quiet else None, **kw)
    figure = None if args.no_figures else plots.spectra_writer()
    return with_spectra(spectra, figures, figure)


def _series(args: argparse.Namespace) -> int:
    """Inspect a checkpoint series into ``--out``; print its summary."""
    from .. import plots
    from ..inspect import inspect_series

    check_out(args.out, "inspect-series")
    if args.scatter:
        raise ConfigError("--scatter: a series draws no Gram scatter; inspect one checkpoint")
    t0 = time.perf_counter()
    res = inspect_series(
        args.path,
        args.steps,
        args.out,
        lr=args.lr,
        lam=args.lam,
        schedule=args.lr_schedule,
        revisions=args.revision,
        statistic=args.statistic,
        arch=args.arch,
        layers=args.layers,
        heads=args.heads,
        rank_tol=args.rank_tol,
        figures=None if args.no_figures else plots.series_figures,
        progress=False if args.quiet else None,
    )
    if not args.quiet:
        print(res.summary)
    print(f"{len(res.steps)} checkpoints in {time.perf_counter() - t0:.1f} s → {args.out}")
    return 0


def _add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """PATH, ``--out`` and what to read and measure of each checkpoint."""
    parser.add_argument(
        "path",
        metavar="PATH",
        nargs="+",
        help="checkpoint file, index or folder, a .zip of one model folder, or a Hugging Face "
        "repo id org/name[@revision] (from the local cache; offline with HF_HUB_OFFLINE=1); "
        "several PATHs (or a folder of revisions step1000/…, or a text list file of "
        "`STEP PATH` lines): a series",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--arch",
        choices=("auto", "bert", "gpt2", "gpt_neox", "llama", "vit"),
        default="auto",
        help="tensor naming and layout (default: %(default)s: config.json's model_type, "
        "else the tensor names)",
    )
    parser.add_argument(
        "--layers",
        nargs="+",
        metavar="L",
        help="layers to inspect, e.g. --layers 0 3 5-7 -1 or --layers 0,3 (default: all)",
    )
    parser.add_argument(
        "--heads",
        type=int,
        metavar="N",
        help="number of query heads, overriding config.json (needed without it unless the "
        "family's usual head dimension is right)",
    )
    parser.add_argument(
        "--scatter",
        nargs="+",
        metavar="LAYER:HEAD",
        help="heads for the Gram scatter figure (default: head 0 of the first, middle and "
        "last inspected layers)",
    )
    parser.add_argument(
        "--rank-tol",
        type=float,
        default=1e-3,
        metavar="TOL",
        help="numerical rank counts singular values > TOL·s_1 (default: %(default)s)",
    )
    parser.add_argument(
        "--spectra",
        action="store_true",
        help="also write spectra.parquet/.csv (per head W_QK, W_OV; per layer W_Q, W_K, W_V, "
        "W_O: stable_rank, Marchenko–Pastur edge, num_spikes, mp_softrank, alpha, shuffled "
        "null), spectra_sv.parquet and spectra.png",
    )


def _add_series_options(parser: argparse.ArgumentParser) -> None:
    """The options of a checkpoint series: its steps or revisions, and the learning rate
    and weight decay of the prediction its rates are set beside."""
    series = parser.add_argument_group(
        "checkpoint series",
        "the decay of each head's gap against the training step, fitted per head and per "
        "layer; with --lam and a learning rate, beside T5's prediction Π(1 − η_kλ)² "
        "(GD/SGD; an observation for other optimizers) and gradient flow's e^{−2λ∫η}",
    )
    series.add_argument(
        "--steps", nargs="+", type=int, metavar="S", help="training step of each PATH"
    )
    series.add_argument(
        "--revision",
        nargs="+",
        metavar="REV",
        help="revision(s) of the repo id PATH (branch, tag or commit, e.g. step1000); "
        "several: a series, steps from their names unless --steps",
    )
    series.add_argument("--lr", type=float, metavar="ETA", help="constant learning rate η")
    series.add_argument(
        "--lr-schedule",
        metavar="FILE",
        help="learning rate per step: CSV/TSV with columns step and lr (or a parquet "
        "table), interpolated linearly between rows, covering the checkpoints' steps",
    )
    series.add_argument("--lam", type=float, metavar="LAM", help="weight decay λ")
    series.add_argument(
        "--statistic",
        default="balance_gap_rel",
        help="the gap column fitted (default: %(default)s; rotary_gap_rel for rotary models)",
    )
