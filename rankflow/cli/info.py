"""``rankflow info``: versions, devices and settings, to paste into a bug report."""

from __future__ import annotations

import argparse
import json

from .common import add_command


def add_parser(sub) -> None:
    """``info [--json]``."""
    info = add_command(
        sub,
        "info",
        cmd_info,
        help="versions, devices (platform, kind, memory), x64, the compilation cache and "
        "thread settings, to paste into a bug report",
    )
    info.add_argument("--json", action="store_true", help="print them as JSON")


def cmd_info(args: argparse.Namespace) -> int:
    """Print :func:`rankflow.engine.sysinfo.info` as text (or JSON with ``--json``)."""
    from ..engine.sysinfo import format_info, info

    found = info()
    print(json.dumps(found, indent=2) if args.json else format_info(found))
    return 0
