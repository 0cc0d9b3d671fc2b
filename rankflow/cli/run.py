"""``rankflow run`` (alias ``sweep``): a config and its sweep into a results directory."""

from __future__ import annotations

import argparse

from .. import config as config_lib
from .common import add_set_option, check_chunk


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
    run.add_argument(
        "--executor",
        choices=("local", "submitit"),
        default="local",
        help="local: this process, every local device; submitit: a SLURM job "
        "array, one task per group of chunks (default: %(default)s)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_slurm_options(run)
    run.set_defaults(func=cmd_run)


def add_slurm_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``--executor submitit``."""
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


def slurm_options(args: argparse.Namespace) -> dict:
    """The ``slurm`` mapping of ``sweep.execute`` from the parsed SLURM options."""
    return {
        "partition": args.partition,
        "time": args.time,
        "gpus_per_task": args.gpus_per_task,
        "array_parallelism": args.array_parallelism,
        "jobs": args.jobs,
        "cluster": args.cluster,
    }


def cmd_run(args: argparse.Namespace) -> int:
    """Validate the config (before compiling), then run its sweep into ``--out``."""
    from ..sweep import enable_compilation_cache, execute

    check_chunk(args.chunk)
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
