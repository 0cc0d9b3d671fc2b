"""``rankflow attention``: train a transformer whose heads are factor pairs; plot it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config.fields import ConfigError
from ..engine import progress
from .common import add_command, add_sweep_options, run_sweep, warnings_as_lines
from .helptext import SWEEP_EXAMPLE, attention_epilog

# The rebuttal experiments' figures (rankflow.attention.tables.LAYOUTS).
REBUTTAL = ("lambda", "lr_control", "dh", "contrast")


def add_parser(sub) -> None:
    """``attention train CONFIG --out DIR ...`` and ``attention plot FIGURE DIR ...``."""
    attention = add_command(
        sub,
        "attention",
        None,
        help="a transformer whose heads are factor pairs: train it (optimizers with "
        "weight decay per parameter group, or gradient flow) and plot its heads",
        description="Attention layers (docs/theory.md): a flax NNX decoder-only transformer "
        "with per-head W_Q, W_K, W_V, W_O, weight decay per group (qk, vo, mlp, embed, "
        "norm) and per-head observables of both factor pairs.",
    )
    attention_sub = attention.add_subparsers(dest="attention_command", required=True)
    _add_train(attention_sub)
    _add_plot(attention_sub)


def _add_train(attention_sub) -> None:
    att_train = add_command(
        attention_sub,
        "train",
        cmd_train,
        help="train CONFIG.toml's sweep into DIR: heads table (run × step × layer × "
        "head × pair), loss table (train/val), config.json; resumable",
        description="Train every point of CONFIG.toml's [sweep]. Numeric keys (marked *) "
        "share one compiled, vmapped program per structure; each finished chunk is "
        "written atomically to DIR/results.parquet/ (heads) and DIR/loss.parquet/ "
        "(losses), so a killed run continues with --resume.",
        epilog=attention_epilog(),
    )
    add_sweep_options(
        att_train,
        "TOML config file (see sims/attention/)",
        "override a config key, e.g. --set dynamics.lam=0.1, or sweep one: "
        f"{SWEEP_EXAMPLE} (repeatable; values are TOML literals; see below)",
        "≤ 32 per structure",
    )
    att_train.add_argument(
        "--export-every",
        type=int,
        metavar="K",
        help="also write Hugging Face checkpoints (safetensors + config.json; GPT-2 "
        "naming, ViT for images) every K steps to DIR/export/run_<id>/step_<k>/, which "
        "rankflow inspect reads (= --set train.export_every=K)",
    )


def _add_plot(attention_sub) -> None:
    att_plot = add_command(
        attention_sub,
        "plot",
        cmd_plot,
        help="figures of attention results: rank (per-head rank vs λ), balance (per-head "
        "balance gap vs step, one DIR per dynamics), ablation (validation loss, mean ± std "
        "over seeds, per weight-decay variant); the rebuttal experiments lambda, "
        "lr_control, dh (one DIR) and contrast (the ViT's DIR, then char_lm's), which also "
        "print their markdown table",
    )
    att_plot.add_argument("figure", choices=("rank", "balance", "ablation", *REBUTTAL))
    att_plot.add_argument("results", nargs="+", metavar="DIR", help="results directories")
    att_plot.add_argument("--out", required=True, metavar="FIG.png", help="figure to write")
    att_plot.add_argument(
        "--table",
        metavar="TABLE.md",
        help="ablation and the rebuttal experiments: also write the markdown table",
    )


@progress.reported("attention train")
def cmd_train(args: argparse.Namespace) -> int:
    """Validate the config (before compiling), then train its sweep into ``--out``."""
    from ..attention import resolve
    from ..attention.sweep import execute

    if args.export_every is not None:
        args.sets = [*args.sets, f"train.export_every={args.export_every}"]
    return run_sweep(resolve, execute, args)


def cmd_plot(args: argparse.Namespace) -> int:
    """One figure of attention results directories (and the ablation's markdown table)."""
    from .. import plots
    from ..attention import load
    from ..attention.sweep import validation_baseline
    from ..attention.tables import ablation_markdown, by_variant

    with warnings_as_lines():
        tables = [load(d) for d in args.results]
    if args.figure in REBUTTAL:
        return _plot_rebuttal(args, tables)
    if args.figure != "balance" and len(tables) > 1:
        raise ConfigError(f"{args.figure}: takes one results directory")
    if args.figure == "rank":
        plots.attention_rank_figure(tables[0].heads, args.out)
    elif args.figure == "balance":
        plots.attention_balance_figure([t.heads for t in tables], args.out)
    else:
        baseline = validation_baseline(args.results[0])
        loss = by_variant(tables[0].loss)
        plots.attention_ablation_figure(loss, args.out, baseline=baseline)
        if args.table:
            Path(args.table).write_text(ablation_markdown(tables[0].loss))
            print(f"table → {args.table}")
    print(f"figure → {args.out}")
    return 0


def _plot_rebuttal(args: argparse.Namespace, tables) -> int:
    """A rebuttal experiment's markdown table (printed, and ``--table``) and figure."""
    import json

    from ..attention.tables import LAYOUTS, experiment, markdown
    from ..plots.rebuttal import experiment_figure

    want = 2 if args.figure == "contrast" else 1
    if len(tables) != want:
        raise ConfigError(
            f"{args.figure}: takes {want} results director{'ies' if want > 1 else 'y'}, "
            f"got {len(tables)}"
        )
    cfg = json.loads((Path(args.results[0]) / "config.json").read_text())["config"]
    results = [(t.loss, t.heads) for t in tables]
    summary, finals = experiment(args.figure, results, D=int(cfg["attention"]["D"]))
    text = markdown(summary, *LAYOUTS[args.figure])
    print(text, end="")
    if args.table:
        Path(args.table).write_text(text)
        print(f"table → {args.table}")
    experiment_figure(args.figure, finals, args.out)
    print(f"figure → {args.out}")
    return 0
