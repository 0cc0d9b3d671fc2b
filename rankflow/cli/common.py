"""Options that several subcommands share."""

from __future__ import annotations

import argparse

from ..config import ConfigError


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``args.sets``."""
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def check_chunk(chunk: int | None) -> None:
    """``--chunk``: a positive number of runs, or unset."""
    if chunk is not None and chunk < 1:
        raise ConfigError(f"--chunk: must be ≥ 1, got {chunk}")
