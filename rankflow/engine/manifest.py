"""A results directory's names and identity: its tables and files, the manifest
(``manifest.json``, read and type-checked) and the :class:`Identity` every chunk file of
its sweep records; the chunk files' paths.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.fields import ConfigError
from ..config.usercode import code_hash

__all__ = [
    "CONFIG",
    "FORMAT",
    "MANIFEST",
    "RESULTS",
    "STATES",
    "STATUS",
    "Identity",
    "ResultsError",
    "chunk_dir",
    "chunk_path",
    "identity_of",
    "read_manifest",
]

RESULTS = "results.parquet"
# The factors at the saves (save.states): one row per run × path × save, like RESULTS.
STATES = "states.parquet"
CONFIG = "config.json"
MANIFEST = "manifest.json"
# Format 2: chunks record their sweep's identity; the manifest its number of runs.
FORMAT = 2
# The ``status`` column's values; a program's status codes 0, 1, 2 index them.
STATUS = ("ok", "diverged", "max_steps")


def chunk_dir(out: str | Path, table: str = RESULTS) -> Path:
    """The folder of a table's chunk files."""
    return Path(out) / table


def chunk_path(out: str | Path, index: int, table: str = RESULTS) -> Path:
    """Chunk ``index``'s file of a table (``results.parquet``, or another table of the
    same directory written chunk by chunk alongside it)."""
    return chunk_dir(out, table) / f"chunk-{index:05d}.parquet"


class ResultsError(ConfigError):
    """A results directory (or table) that cannot be read as it stands: missing, empty,
    corrupt, or (with ``strict``) incomplete."""


@dataclass(frozen=True)
class Identity:
    """What every chunk file of a sweep records (parquet key-value metadata
    ``rankflow``): its config's hash and plan, and the hash of the user code it ran
    (``code``: a custom loss, :func:`rankflow.config.usercode.code_hash`; None where
    there is none); ``legacy``: a directory written before chunks recorded it (its
    unmarked chunks are its own)."""

    config_hash: str
    chunk_size: int | None
    chunks: int
    legacy: bool = False
    code: str | None = None

    def record(self, index: int) -> bytes:
        """The metadata of chunk ``index``."""
        plan = {"chunk_size": self.chunk_size, "chunks": self.chunks, "chunk": index}
        code = {"code": self.code} if self.code is not None else {}
        return json.dumps({"config_hash": self.config_hash, **plan, **code}).encode()


def read_manifest(out: str | Path) -> dict[str, Any]:
    """``DIR/manifest.json``; raises :class:`ResultsError` (one line) when corrupt."""
    path = Path(out) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest, dict) or not {"config_hash", "chunks"} <= manifest.keys():
            raise ValueError("missing config_hash or chunks")
        _check_manifest_types(manifest)
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path}: corrupt manifest ({e}); rerun into a new --out") from None
    return manifest


def _check_manifest_types(manifest: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first entry of a manifest of the wrong type (an
    edited file): resuming and reading compare and count with them."""

    def count(v: Any, optional: bool) -> bool:
        return (v is None and optional) or (type(v) is int and v >= 0)

    wrong = [
        ("config_hash", "a string", isinstance(manifest["config_hash"], str)),
        ("chunks", "a count", count(manifest["chunks"], False)),
        ("chunk_size", "a count or null", count(manifest.get("chunk_size"), True)),
        ("runs", "a count or null", count(manifest.get("runs"), True)),
        ("format", "a count", count(manifest.get("format", 1), False)),
        ("code", "a table", isinstance(manifest.get("code", {}), dict)),
    ]
    for key, what, ok in wrong:
        if not ok:
            raise ValueError(f"{key} = {json.dumps(manifest.get(key))} is not {what}")


def identity_of(manifest: Mapping[str, Any]) -> Identity:
    """The chunk identity a manifest stands for."""
    return Identity(
        manifest["config_hash"],
        manifest.get("chunk_size"),
        manifest["chunks"],
        legacy=manifest.get("format", 1) < FORMAT,
        code=code_hash(manifest.get("code")),
    )
