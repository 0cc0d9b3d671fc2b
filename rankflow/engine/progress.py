"""The progress bar of a sweep (on a terminal only)."""

from __future__ import annotations

import sys

__all__ = ["progress"]


def progress(total: int, done: int, quiet: bool):
    """A tqdm bar over ``total`` runs, ``done`` of them already finished; silent when
    ``quiet`` or when stderr is not a terminal."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=done,
        unit="run",
        desc="rankflow",
        disable=quiet or not sys.stderr.isatty(),
        file=sys.stderr,
        dynamic_ncols=True,
    )
