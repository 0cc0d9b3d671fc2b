"""``rankflow run`` (alias ``sweep``): a config and its sweep into a results directory."""

from __future__ import annotations

import argparse

from .. import config as config_lib
from ..claim import check_out
from .common import add_executor_options, add_set_option, check_chunk, slurm_options


def add_parser(sub) -> None:
    """``run``/``sweep`` CONFIG --out DIR [--resume] [--chunk N] [--executor ...]."""
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
    add_set_option(
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
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_executor_options(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """Validate the config (before compiling), then run its sweep into ``--out``."""
    from ..sweep import enable_compilation_cache, execute

    check_chunk(args.chunk)
    check_out(args.out, "sweep")
    overrides = config_lib.parse_set(args.sets)
    cfg = config_lib.resolve(args.config, overrides)  # errors here, before compiling
    enable_compilation_cache()
    _, summary = execute(
        cfg,
        args.out,
        resume=args.resume,
        chunk=args.chunk,
        executor=args.executor,
        slurm=slurm_options(args),
        quiet=args.quiet,
    )
    print(f"{summary.line()} → {args.out}")
    return 0
