"""``rankflow plot``: a quick look at a results directory."""

from __future__ import annotations

import argparse

from ..config.fields import ConfigError
from .common import add_command, check_figure_out, warnings_as_lines


def add_parser(sub) -> None:
    """``plot DIR --out FIG.png [--x] [--y] [--hue] [--logy] [--theory]``."""
    plot = add_command(
        sub,
        "plot",
        cmd_plot,
        help="quick look at a results directory: median and interquartile band over seeds/paths",
    )
    plot.add_argument("results", metavar="DIR", help="results directory")
    plot.add_argument("--x", default="t", help="x column (default: %(default)s)")
    plot.add_argument("--y", default="balance_gap", help="y column (default: %(default)s)")
    plot.add_argument("--hue", help="one line per value of this column, e.g. dynamics.lam")
    plot.add_argument("--logy", action="store_true", help="log-scale y axis")
    plot.add_argument(
        "--theory",
        action="store_true",
        help="each line's predicted decay (rankflow fit's law and window), in its colour",
    )
    plot.add_argument("--out", required=True, metavar="FIG.png", help="figure to write")


def cmd_plot(args: argparse.Namespace) -> int:
    """``plots.quick_plot`` of the results table, after checking ``--out`` and the
    columns."""
    check_figure_out(args.out)
    from .. import plots
    from ..engine.store import load

    with warnings_as_lines():
        df = load(args.results)
    for col in (args.x, args.y, args.hue):
        if col is not None and col not in df.columns:
            raise ConfigError(
                f"--{'x' if col == args.x else 'y' if col == args.y else 'hue'}: no column "
                f"{col!r} in {args.results}; columns: {', '.join(df.columns)}"
            )
    if args.theory and args.x != "t":
        raise ConfigError(f"--theory: the laws are drawn against --x t, not {args.x!r}")
    if args.theory and "head" in df.columns:
        raise ConfigError("--theory: per-head tables are fitted head by head: rankflow fit DIR")
    theory = None
    if args.theory:
        from ..fitting import fit

        theory = fit(args.results, column=args.y)  # its config.json gives the settings
    plots.quick_plot(
        df, x=args.x, y=args.y, hue=args.hue, logy=args.logy, theory=theory, out_path=args.out
    )
    print(f"figure → {args.out}")
    return 0
