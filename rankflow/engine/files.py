"""Files written whole or not at all: :func:`atomic_write` (a hidden temporary, then a
rename) and :func:`write_outputs` (a command's outputs and the marker that lists them,
replacing a previous run's as a whole)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["atomic_write", "write_outputs"]


def atomic_write(path: Path, write) -> None:
    """Write ``path`` through ``write(tmp)`` on a hidden temporary file of the same
    folder, then rename it into place: readers see the old file or the new, never a
    half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    # mkstemp makes the file private (0600); a results file gets the usual mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(
    out: Path,
    marker: str,
    meta: Mapping[str, Any],
    files: Mapping[str, Any],
    later: Callable[[], Mapping[str, Any]] | None = None,
) -> list[str]:
    """Write every entry of ``files`` atomically into ``out``, then those of ``later()``
    (made only then: figures are drawn after the tables are written), then the marker
    file ``marker``: ``meta`` with the list of outputs. An entry is ``name: value``: a
    table (written as parquet or CSV by the name's suffix), a text, a ``write(path)``,
    or None for a file the caller has already written. The old marker goes first, so a
    directory whose marker exists is complete; the previous run's outputs that this run
    did not write go last, so a rerun replaces them as a whole (a run that fails leaves
    them, and the rerun that succeeds removes them). Returns the names written."""

    def writer(name: str, value: Any) -> Callable:
        if isinstance(value, pd.DataFrame):
            if name.endswith(".csv"):
                return lambda p: value.to_csv(p, index=False)
            return lambda p: value.to_parquet(p, index=False)
        if isinstance(value, str):
            return lambda p: Path(p).write_text(value)
        return value

    out.mkdir(parents=True, exist_ok=True)
    # The previous outputs, kept beside the marker until the new marker lists this run's.
    pending = out / f".{marker}.previous"
    previous = sorted(set(_outputs_of(out / marker)) | set(_outputs_of(pending)))
    if previous:
        atomic_write(pending, lambda p: Path(p).write_text(json.dumps({"outputs": previous})))
    (out / marker).unlink(missing_ok=True)  # no marker until everything below is written
    for name, value in files.items():
        if value is not None:
            atomic_write(out / name, writer(name, value))
    more = later() if later else {}
    for name, value in more.items():
        if value is not None:
            atomic_write(out / name, writer(name, value))
    written = [*files, *more]
    meta = dict(meta, outputs=written)
    atomic_write(out / marker, writer(marker, json.dumps(meta, indent=2, default=str)))
    _remove_stale(out, previous, {*written, marker})
    pending.unlink(missing_ok=True)
    return written


def _outputs_of(path: Path) -> list[str]:
    """The ``outputs`` a marker file lists; none when it is absent or unreadable."""
    try:
        names = json.loads(path.read_text()).get("outputs")
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _remove_stale(out: Path, previous: Iterable[str], written: set[str]) -> None:
    """Remove each file of ``previous`` not in ``written``: only plain files (or links)
    at a relative name inside ``out``, never a directory, a hidden name (the lock, a
    temporary) or a path that leaves ``out``."""
    for name in previous:
        parts = Path(name).parts
        if name in written or not parts or parts[0].startswith((".", "/")) or ".." in parts:
            continue
        path = out / name
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
