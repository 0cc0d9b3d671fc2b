"""The ``rankflow`` command. Parses arguments and calls the library; nothing else."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import config as config_lib

DEMO_CONFIG = {
    "name": "demo: the paper's Fig. 1 toy",
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": [0.2, 0.4, 0.6, 0.8, 1.0]},
    "model": {"r": 5},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 2000, "num": 201},
    "sweep": {"dynamics.lam": [0.0, 0.01, 0.03, 0.1], "seed": [0, 1, 2]},
}


def _set_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def _executor_options(parser: argparse.ArgumentParser) -> None:
    """--executor and the SLURM options of a sweep command (core or attention)."""
    parser.add_argument(
        "--executor",
        choices=("local", "submitit"),
        default="local",
        help="local: this process, every local device; submitit: a SLURM job "
        "array, one task per group of chunks (default: %(default)s)",
    )
    slurm = parser.add_argument_group("SLURM (--executor submitit)")
    slurm.add_argument("--partition", help="SLURM partition")
    slurm.add_argument(
        "--time",
        type=int,
        default=60,
        metavar="MIN",
        help="time limit of each task in minutes (default: %(default)s)",
    )
    slurm.add_argument("--gpus-per-task", type=int, metavar="N", help="GPUs per task")
    slurm.add_argument(
        "--array-parallelism", type=int, metavar="N", help="tasks of the array running at once"
    )
    slurm.add_argument(
        "--jobs", type=int, metavar="N", help="array tasks (default: one per unfinished chunk)"
    )
    slurm.add_argument(
        "--cluster",
        choices=("slurm", "local", "debug"),
        help="submitit cluster (default: slurm where sbatch exists, else local subprocesses)",
    )


def _slurm(args) -> dict:
    """The SLURM options of a sweep command's arguments."""
    return {
        "partition": args.partition,
        "time": args.time,
        "gpus_per_task": args.gpus_per_task,
        "array_parallelism": args.array_parallelism,
        "jobs": args.jobs,
        "cluster": args.cluster,
    }


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rankflow",
        description="Weight decay on factorised weights W = ABᵀ: flows and optimizers, "
        "checked against exact theory.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        aliases=["sweep"],
        help="run one config and its [sweep] (chunked, resumable, on every device or "
        "on SLURM) into a results directory",
        description="Run CONFIG.toml: every point of its [sweep]. Numeric axes share one "
        "compiled program per structure and run vmapped in chunks, sharded over all "
        "local devices; each finished chunk is written atomically to "
        "DIR/results.parquet/, so a killed sweep continues with --resume. "
        "`rankflow sweep` is the same command.",
        epilog=config_lib.keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("config", help="TOML config file (see sims/ for examples)")
    _set_option(
        run,
        "override a config key, e.g. --set dynamics.lam=0.1 (repeatable; "
        "values are TOML literals, e.g. --set sweep.seed=[0,1,2])",
    )
    run.add_argument("--out", required=True, metavar="DIR", help="results directory")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in DIR (same config), skipping finished chunks",
    )
    run.add_argument(
        "--chunk",
        type=int,
        metavar="N",
        help="runs per chunk (default: sized so a chunk needs ≲ 256 MiB)",
    )
    _executor_options(run)
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    plot = sub.add_parser(
        "plot",
        help="quick look at a results directory: median and interquartile band over seeds/paths",
    )
    plot.add_argument("results", metavar="DIR", help="results directory")
    plot.add_argument("--x", default="t", help="x column (default: %(default)s)")
    plot.add_argument("--y", default="balance_gap", help="y column (default: %(default)s)")
    plot.add_argument("--hue", help="one line per value of this column, e.g. dynamics.lam")
    plot.add_argument("--logy", action="store_true", help="log-scale y axis")
    plot.add_argument("--out", required=True, metavar="FIG.png", help="figure to write")

    compare = sub.add_parser(
        "compare",
        help="run a discrete optimizer and its flow side by side: trajectory distance, "
        "per-step contraction (T5), order in η (T8), SGF mean against T6",
        description="Run CONFIG.toml's optimizer (dynamics.kind: gd, sgd_gaussian, momentum "
        "or momentum_coupled) and the flow it discretises on the same problem, start and "
        "hyperparameters; write tables (parquet, CSV), figures (PNG) and summary.md to DIR. "
        "Options: --set compare.paths=64 (Monte Carlo paths of sgd_gaussian when "
        "dynamics.paths = 1), compare.window_start=0 and compare.window=50 (gd: steps of the "
        "contraction window), compare.halvings=3 (η, η/2, …, η/2^halvings), "
        "compare.order_t1 (horizon of the order measurement in steps at η; default "
        "save.t1).",
    )
    compare.add_argument("config", help="TOML config naming a discrete optimizer")
    _set_option(compare, "override a config key or a compare.* option (repeatable)")
    compare.add_argument("--out", required=True, metavar="DIR", help="output directory")

    inspect = sub.add_parser(
        "inspect",
        help="inspect a pretrained safetensors checkpoint for the balance fingerprint "
        "of weight decay, head by head, against a null pairing",
        description="Read PATH (a .safetensors file, a sharded model.safetensors.index.json, "
        "or a folder holding either plus config.json) one layer at a time with numpy, and "
        "measure per layer, head and pair (key–query: A = W_Q^h, B = W_K^h; value–output: "
        "A = W_V^h, B = W_O^hᵀ) the relative balance gap ‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + "
        "‖BᵀB‖_F), the correlation of the Gram entries, frob_minus_nuc / l2_penalty and the "
        "ranks of ABᵀ, beside a null pairing (B of another head). Writes DIR/heads.parquet "
        "and heads.csv (the table), grams.parquet, summary.md, scatter.png, layers.png, and "
        "inspect.json last.",
    )
    inspect.add_argument("path", metavar="PATH", help="checkpoint file, index or folder")
    inspect.add_argument("--out", required=True, metavar="DIR", help="output directory")
    inspect.add_argument(
        "--arch",
        choices=("auto", "bert", "gpt2", "llama", "vit"),
        default="auto",
        help="tensor naming and layout (default: %(default)s: config.json's model_type, "
        "else the tensor names)",
    )
    inspect.add_argument(
        "--layers",
        nargs="+",
        metavar="L",
        help="layers to inspect, e.g. --layers 0 3 5-7 -1 or --layers 0,3 (default: all)",
    )
    inspect.add_argument(
        "--heads",
        type=int,
        metavar="N",
        help="number of query heads, overriding config.json (needed without it unless the "
        "family's usual head dimension is right)",
    )
    inspect.add_argument(
        "--scatter",
        nargs="+",
        metavar="LAYER:HEAD",
        help="heads for the Gram scatter figure (default: head 0 of the first, middle and "
        "last inspected layers)",
    )
    inspect.add_argument(
        "--rank-tol",
        type=float,
        default=1e-3,
        metavar="TOL",
        help="numerical rank counts singular values > TOL·s_1 (default: %(default)s)",
    )
    inspect.add_argument("--no-figures", action="store_true", help="write tables only")
    inspect.add_argument("--quiet", action="store_true", help="no summary, no progress bar")

    from .attention.config import keys_help as attention_keys_help

    attention = sub.add_parser(
        "attention",
        help="a transformer whose heads are factor pairs: train it (optimizers with "
        "weight decay per parameter group, or gradient flow) and plot its heads",
        description="Attention layers (THEORY.md): a flax NNX decoder-only transformer "
        "with per-head W_Q, W_K, W_V, W_O, weight decay per group (qk, vo, mlp, embed, "
        "norm) and per-head observables of both factor pairs.",
    )
    attention_sub = attention.add_subparsers(dest="attention_command", required=True)
    att_train = attention_sub.add_parser(
        "train",
        help="train CONFIG.toml's sweep into DIR: heads table (run × step × layer × "
        "head × pair), loss table (train/val), config.json; resumable",
        description="Train every point of CONFIG.toml's [sweep]. Numeric keys (marked *) "
        "share one compiled, vmapped program per structure; each finished chunk is "
        "written atomically to DIR/results.parquet/ (heads) and DIR/loss.parquet/ "
        "(losses), so a killed run continues with --resume.",
        epilog=attention_keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    att_train.add_argument("config", help="TOML config file (see sims/attention/)")
    _set_option(
        att_train, "override a config key, e.g. --set train.lam=0.1 (repeatable; TOML literals)"
    )
    att_train.add_argument("--out", required=True, metavar="DIR", help="results directory")
    att_train.add_argument(
        "--resume", action="store_true", help="continue the sweep in DIR (same config)"
    )
    att_train.add_argument(
        "--chunk", type=int, metavar="N", help="runs per chunk (default: ≤ 32 per structure)"
    )
    _executor_options(att_train)
    att_train.add_argument("--quiet", action="store_true", help="no progress bar")
    att_plot = attention_sub.add_parser(
        "plot",
        help="figures of attention results: rank (per-head rank vs λ), balance (per-head "
        "balance gap vs step, one DIR per dynamics), ablation (validation loss, mean ± std "
        "over seeds, per weight-decay variant)",
    )
    att_plot.add_argument("figure", choices=("rank", "balance", "ablation"))
    att_plot.add_argument("results", nargs="+", metavar="DIR", help="results directories")
    att_plot.add_argument("--out", required=True, metavar="FIG.png", help="figure to write")
    att_plot.add_argument(
        "--table", metavar="TABLE.md", help="ablation: also write the markdown table"
    )

    reproduce = sub.add_parser(
        "reproduce",
        help="the paper's claims as experiments: runs them, writes figures, tables and "
        "DIR/report.md with a pass/fail verdict per claim",
        description="Run the experiments of sims/reproduce/ (toy, balancing, rank, discrete, "
        "attention; pretrained with --checkpoint) through rankflow's own machinery and write "
        "DIR/report.md (each claim: prediction, measurement, tolerance, verdict, figure), "
        "DIR/figures/*.png and DIR/tables/. Exit status 0 when every verdict passes, 1 when "
        "one fails. Runs are kept in DIR/runs/, so a rerun into DIR resumes.",
    )
    reproduce.add_argument(
        "--quick", action="store_true", help="small sizes, minutes on a laptop (the default)"
    )
    reproduce.add_argument(
        "--full", action="store_true", help="larger sizes and more seeds (sims/reproduce/full.toml)"
    )
    reproduce.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these experiments (default: all)"
    )
    reproduce.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="a safetensors checkpoint for the pretrained experiment",
    )
    reproduce.add_argument("--out", required=True, metavar="DIR", help="output directory")
    reproduce.add_argument("--quiet", action="store_true", help="no progress lines")

    demo = sub.add_parser(
        "demo",
        help="a short built-in demo: GD on the paper's 5×5 toy "
        "for four λ, writing a results table and a figure",
    )
    demo.add_argument(
        "--out",
        default="rankflow-demo",
        metavar="DIR",
        help="results directory (default: %(default)s)",
    )
    return ap


def cmd_run(args) -> int:
    from .sweep import enable_compilation_cache, execute

    if args.chunk is not None and args.chunk < 1:
        raise config_lib.ConfigError(f"--chunk: must be ≥ 1, got {args.chunk}")
    overrides = config_lib.parse_set(args.sets)
    cfg = config_lib.resolve(args.config, overrides)  # errors here, before compiling
    enable_compilation_cache()
    _, summary = execute(
        cfg,
        args.out,
        resume=args.resume,
        chunk=args.chunk,
        executor=args.executor,
        slurm=_slurm(args),
        quiet=args.quiet,
    )
    print(f"{summary.line()} → {args.out}")
    return 0


def cmd_plot(args) -> int:
    from . import plots
    from .store import load

    df = load(args.results)
    for col in (args.x, args.y, args.hue):
        if col is not None and col not in df.columns:
            raise config_lib.ConfigError(
                f"--{'x' if col == args.x else 'y' if col == args.y else 'hue'}: no column "
                f"{col!r} in {args.results}; columns: {', '.join(df.columns)}"
            )
    plots.quick_plot(df, x=args.x, y=args.y, hue=args.hue, logy=args.logy, out_path=args.out)
    print(f"figure → {args.out}")
    return 0


def cmd_compare(args) -> int:
    from .compare import compare

    t0 = time.perf_counter()
    tables = compare(args.config, out=args.out, overrides=config_lib.parse_set(args.sets))
    print(f"{', '.join(tables)} in {time.perf_counter() - t0:.1f} s → {args.out}")
    print(f"summary → {Path(args.out) / 'summary.md'}")
    return 0


def cmd_inspect(args) -> int:
    from .inspect import inspect_checkpoint

    t0 = time.perf_counter()
    res = inspect_checkpoint(
        args.path,
        out=args.out,
        arch=args.arch,
        layers=args.layers,
        heads=args.heads,
        scatter=args.scatter,
        rank_tol=args.rank_tol,
        figures=not args.no_figures,
        progress=False if args.quiet else None,
    )
    if not args.quiet:
        print(res.summary)
    n = len(res.meta["layers"])
    print(f"{n} layers in {time.perf_counter() - t0:.1f} s → {args.out}")
    return 0


def cmd_attention(args) -> int:
    if args.attention_command == "train":
        from .attention import resolve
        from .attention.sweep import execute
        from .sweep import enable_compilation_cache

        if args.chunk is not None and args.chunk < 1:
            raise config_lib.ConfigError(f"--chunk: must be ≥ 1, got {args.chunk}")
        cfg = resolve(args.config, config_lib.parse_set(args.sets))  # before compiling
        enable_compilation_cache()
        _, summary = execute(
            cfg,
            args.out,
            resume=args.resume,
            chunk=args.chunk,
            executor=args.executor,
            slurm=_slurm(args),
            quiet=args.quiet,
        )
        print(f"{summary.line()} → {args.out}")
        return 0
    from . import plots
    from .attention import load
    from .attention.sweep import validation_baseline

    tables = [load(d) for d in args.results]
    if args.figure != "balance" and len(tables) > 1:
        raise config_lib.ConfigError(f"{args.figure}: takes one results directory")
    if args.figure == "rank":
        plots.attention_rank_figure(tables[0].heads, args.out)
    elif args.figure == "balance":
        plots.attention_balance_figure([t.heads for t in tables], args.out)
    else:
        baseline = validation_baseline(args.results[0])
        plots.attention_ablation_figure(tables[0].loss, args.out, baseline=baseline)
        if args.table:
            Path(args.table).write_text(plots.attention_ablation_markdown(tables[0].loss))
            print(f"table → {args.table}")
    print(f"figure → {args.out}")
    return 0


def cmd_reproduce(args) -> int:
    from .reproduce import check_options, reproduce

    mode, _ = check_options(args.quick, args.full, args.only, args.checkpoint)  # before compiling
    t0 = time.perf_counter()
    res = reproduce(
        args.out, mode=mode, only=args.only, checkpoint=args.checkpoint, quiet=args.quiet
    )
    failed = [c.name for c in res.claims if c.verdict == "fail"]
    passed = sum(c.verdict == "pass" for c in res.claims)
    print(
        f"{passed} of {passed + len(failed)} claims pass"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + f" ({time.perf_counter() - t0:.0f} s) → {res.report}"
    )
    return 0 if res.ok else 1


def cmd_demo(args) -> int:
    from . import plots
    from .api import run

    out = Path(args.out)
    t0 = time.perf_counter()
    df = run(DEMO_CONFIG, out=out, resume=True)
    fig_path = out / "balance.png"
    plots.balance_figure(df, fig_path, target_sv=DEMO_CONFIG["problem"]["singular_values"])
    print(f"{df['run_id'].nunique()} runs in {time.perf_counter() - t0:.1f} s → {out}")
    print(f"figure → {fig_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        command = {"run": cmd_run, "sweep": cmd_run, "plot": cmd_plot, "demo": cmd_demo}
        command["compare"] = cmd_compare
        command["attention"] = cmd_attention
        command["inspect"] = cmd_inspect
        command["reproduce"] = cmd_reproduce
        return command[args.command](args)
    except config_lib.ConfigError as e:
        print(f"rankflow: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
