"""``rankflow run`` (alias ``sweep``): a config and its sweep into a results directory."""

from __future__ import annotations

import argparse

from ..core import config as config_lib
from ..engine import progress
from .common import add_command, add_sweep_options, run_sweep
from .helptext import SWEEP_EXAMPLE, run_epilog


def add_parser(sub) -> None:
    """``run``/``sweep`` CONFIG --out DIR [--resume] [--chunk N] [--executor ...]."""
    run = add_command(
        sub,
        "run",
        cmd_run,
        aliases=("sweep",),
        help="run one config and its [sweep] (chunked, resumable, on every device or "
        "on SLURM) into a results directory",
        description="Run CONFIG.toml: every point of its [sweep]. Numeric axes share one "
        "compiled program per structure and run vmapped in chunks, sharded over all "
        "local devices; each finished chunk is written atomically to "
        "DIR/results.parquet/, so a killed sweep continues with --resume. "
        "`rankflow sweep` is the same command.",
        epilog=run_epilog(),
    )
    add_sweep_options(
        run,
        "TOML config file (see sims/ for examples)",
        "override a config key, e.g. --set dynamics.lam=0.1, or sweep one: "
        f"{SWEEP_EXAMPLE} (repeatable; values are TOML literals; see below)",
        "sized so a chunk needs ≲ 256 MiB",
    )


@progress.reported("run")
def cmd_run(args: argparse.Namespace) -> int:
    """Validate the config (before compiling), then run its sweep into ``--out``."""
    from ..core.family import execute

    return run_sweep(config_lib.resolve, execute, args)
