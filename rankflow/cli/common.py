"""Options that several subcommands share."""

from __future__ import annotations

import argparse
import contextlib
import sys
import textwrap
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..config.fields import ConfigError
from ..core.config import parse_set
from .helptext import WIDTH


def add_command(
    sub,
    name: str,
    func: Callable[[argparse.Namespace], int] | None,
    *,
    help: str,
    description: str | None = None,
    epilog: str | None = None,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` (in ``sub``, an ``add_subparsers`` action),
    which runs ``func`` (None: a group of subcommands). An ``epilog`` (a table of
    config keys) is printed as written, and the description wrapped here."""
    layout = {}
    if epilog is not None:
        layout = {"epilog": epilog, "formatter_class": argparse.RawDescriptionHelpFormatter}
        if description is not None:
            description = textwrap.fill(description, WIDTH, break_on_hyphens=False)
    parser = sub.add_parser(
        name, aliases=list(aliases), help=help, description=description, **layout
    )
    if func is not None:
        parser.set_defaults(func=func)
    return parser


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.sets``."""
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def check_chunk(chunk: int | None) -> None:
    """``--chunk``: a positive number of runs, or unset."""
    if chunk is not None and chunk < 1:
        raise ConfigError(f"--chunk: must be ≥ 1, got {chunk}")


def check_figure_out(out: str, flag: str = "--out") -> None:
    """A figure's path: a suffix matplotlib writes (png, pdf, svg, …), in a folder that
    exists (not made here: a mistyped folder would be made silently), not a folder
    itself; checked before anything is read or drawn."""
    from pathlib import Path

    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(out)
    if path.is_dir():
        raise ConfigError(f"{flag}: {out} is a directory; give a file such as {path / 'fig.png'}")
    kinds = sorted(FigureCanvasBase.get_supported_filetypes())
    if path.suffix.lower().removeprefix(".") not in kinds:
        raise ConfigError(
            f"{flag}: {out} must end in a figure suffix matplotlib writes: "
            f"{', '.join('.' + k for k in kinds)}"
        )
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ConfigError(f"{flag}: the folder {parent} {what}; rankflow plot does not create it")


@contextlib.contextmanager
def warnings_as_lines():
    """Print each warning raised in the block as one line (``rankflow: warning: …``),
    e.g. a results directory's missing chunks when a figure is drawn from it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                print(f"rankflow: warning: {w.message}", file=sys.stderr)


def add_sweep_options(
    parser: argparse.ArgumentParser, config_help: str, set_help: str, chunk_default: str
) -> None:
    """What every sweep command (``run``, ``attention train``) takes: CONFIG, ``--set``,
    ``--out``, ``--resume``, ``--chunk``, ``--quiet`` and the executor's options."""
    parser.add_argument("config", help=config_help)
    add_set_option(parser, set_help)
    parser.add_argument("--out", required=True, metavar="DIR", help="results directory")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in DIR (same config), skipping finished chunks",
    )
    parser.add_argument(
        "--chunk", type=int, metavar="N", help=f"runs per chunk (default: {chunk_default})"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_executor_options(parser)


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and the options of ``--executor submitit``, for every sweep command
    (``run`` and ``attention train``: both go through the one engine)."""
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


def slurm_options(args: argparse.Namespace) -> dict:
    """The ``slurm`` mapping of the engine's ``execute`` from the parsed SLURM options,
    each number checked (≥ 1) before anything is planned or submitted."""
    for flag in ("time", "gpus_per_task", "array_parallelism", "jobs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')}: must be ≥ 1, got {value}")
    return {
        "partition": args.partition,
        "time": args.time,
        "gpus_per_task": args.gpus_per_task,
        "array_parallelism": args.array_parallelism,
        "jobs": args.jobs,
        "cluster": args.cluster,
    }


def run_sweep(resolve: Callable[..., Mapping[str, Any]], execute: Callable[..., Any], args) -> int:
    """A sweep command (``run``, ``attention train``): resolve ``args.config`` with its
    ``--set`` overrides (every config error before compiling), run the family's sweep
    (``execute``) into ``--out`` with the executor options, print the summary."""
    from ..engine import enable_compilation_cache
    from ..engine.writer import check_out

    check_chunk(args.chunk)
    check_out(args.out, "sweep")
    cfg = resolve(args.config, parse_set(args.sets))
    enable_compilation_cache()
    _, summary = execute(
        cfg,
        args.out,
        resume=args.resume,
        chunk=args.chunk,
        executor=args.executor,
        slurm=slurm_options(args),
        quiet=args.quiet,
        result=False,  # the summary, counted chunk by chunk: the table is not read back
    )
    print(f"{summary.line()} → {args.out}")
    return 0
