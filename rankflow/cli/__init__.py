"""The ``rankflow`` command. Parses arguments and calls the library; nothing else.

One module per subcommand, each with ``add_parser(subparsers)`` that builds its parser
and sets the function it runs (``func``): ``run`` (also ``sweep``), ``plot``,
``compare``, ``inspect``, ``attention``, ``reproduce``, ``demo``.
"""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError
from . import attention, compare, demo, inspect, plot, reproduce, run

__all__ = ["build_parser", "main"]

SUBCOMMANDS = (run, plot, compare, inspect, attention, reproduce, demo)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``rankflow`` and every subcommand."""
    ap = argparse.ArgumentParser(
        prog="rankflow",
        description="Weight decay on factorised weights W = ABᵀ: flows and optimizers, "
        "checked against exact theory.",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run ``rankflow ARGV``; exit status 2 on a config error (printed on stderr)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"rankflow: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
