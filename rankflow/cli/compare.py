"""``rankflow compare``: a discrete optimizer next to its flow; tables, then figures."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from ..core import config as config_lib
from ..engine import progress
from ..engine.writer import check_out
from .common import add_command, add_set_option


def options_help() -> str:
    """The ``compare.*`` options, from the table that validates them
    (``rankflow.compare.OPTIONS``, defaults of ``rankflow.compare.Options``)."""
    from ..compare import OPTIONS, Options

    defaults = {f.name: f.default for f in dataclasses.fields(Options)}
    lines = ["compare options (--set compare.KEY=VALUE, or a [compare] table):"]
    for key, (_, _, doc) in OPTIONS.items():
        default = "" if defaults[key] is None else f" (default {defaults[key]})"
        lines.append(f"  compare.{key}: {doc}{default}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    """``compare CONFIG --out DIR [--set KEY=VALUE ...]``."""
    compare = add_command(
        sub,
        "compare",
        cmd_compare,
        help="run a discrete optimizer and its flow side by side: trajectory distance, "
        "per-step contraction (T5), order in η (T8), SGF mean against T6, SGD against "
        "its SME with the weak order (T10)",
        description="Run CONFIG.toml's optimizer (dynamics.kind: gd, sgd_gaussian, sgd, "
        "momentum or momentum_coupled) and the flow it discretises on the same problem, start and "
        "hyperparameters; write tables (parquet, CSV), figures (PNG) and summary.md to DIR. "
        "With a [sweep] (or --set 'sweep.dynamics.eta=[0.05,0.1]'), every point is compared "
        "and the tables are joined, with a sweep table of one row per point and sweep.png.",
        epilog=options_help(),
    )
    compare.add_argument("config", help="TOML config naming a discrete optimizer")
    add_set_option(compare, "override a config key or a compare.* option (repeatable)")
    compare.add_argument("--out", required=True, metavar="DIR", help="output directory")


@progress.reported("compare")
def cmd_compare(args: argparse.Namespace) -> int:
    """The comparison's tables and summary, with one figure per table, into ``--out``."""
    from .. import plots
    from ..compare import compare

    check_out(args.out, "compare")
    t0 = time.perf_counter()
    tables = compare(
        args.config,
        out=args.out,
        overrides=config_lib.parse_set(args.sets),
        figures=plots.write_compare_figures,
    )
    print(f"{', '.join(tables)} in {time.perf_counter() - t0:.1f} s → {args.out}")
    print(f"summary → {Path(args.out) / 'summary.md'}")
    return 0
