"""``rankflow compare``: a discrete optimizer next to its flow; tables, then figures."""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
import time
from pathlib import Path

from ..core import config as config_lib
from ..engine import progress
from ..engine.writer import check_out
from .common import add_command, add_set_option
from .helptext import WIDTH


def verdict_help() -> str:
    """The verdicts and the exit status, after the options in ``--help``, with the
    tolerances of ``rankflow.compare.verdict`` (those ``rankflow reproduce`` uses)."""
    from ..compare import ORDER_TOL, WEAK_TOL

    paragraphs = (
        "verdicts: every fitted order in η (table order: gd, momentum, momentum_coupled "
        f"against their flows, T8, tolerance {ORDER_TOL:g}; table weak: sgd and "
        f"sgd_gaussian with noise = gradient against their SMEs, T10, tolerance "
        f"{WEAK_TOL:g}; the tolerances of rankflow reproduce) is judged against p = 1: "
        "inconclusive when its standard error is NaN (fewer than 3 learning rates) or "
        "above the tolerance, else pass when |order - 1| <= tolerance, else fail. Printed "
        "per point of a sweep with the orders between consecutive halvings, log2(d_j / "
        "d_(j+1)), and written to verdict.csv and halvings.csv. sgd_gaussian with "
        "parameter noise (T6) has no order and no verdict.",
        "exit status: 0 when every verdict passes (or there is none), 1 when one fails "
        "(an inconclusive one is printed with its reason, as reproduce does, and does not "
        "fail the command; tables, figures and summary are written either way), 2 on a "
        "refused input (nothing written).",
    )
    return "\n\n".join(textwrap.fill(p, WIDTH) for p in paragraphs)


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
        epilog=options_help() + "\n\n" + verdict_help(),
    )
    compare.add_argument("config", help="TOML config naming a discrete optimizer")
    add_set_option(compare, "override a config key or a compare.* option (repeatable)")
    compare.add_argument("--out", required=True, metavar="DIR", help="output directory")


@progress.reported("compare")
def cmd_compare(args: argparse.Namespace) -> int:
    """The comparison's tables and summary, with one figure per table, into ``--out``;
    prints each fit's verdict and exits 1 when one fails (inconclusive ones are printed,
    not failed: an SE too wide to judge is not evidence against the order)."""
    from .. import plots
    from ..compare import compare, judge
    from ..compare.summary import NO_VERDICT, verdict_lines

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
    judged = judge(tables)
    if not judged:
        print(f"verdict: none. {NO_VERDICT}")
        return 0
    for line in verdict_lines(judged):
        print(line)
    verdicts = judged["verdict"]["verdict"]
    passed = int((verdicts == "pass").sum())
    failed = int((verdicts == "fail").sum())
    print(f"verdict: {passed} of {len(verdicts)} fitted orders pass, {failed} fail")
    return 1 if failed else 0
