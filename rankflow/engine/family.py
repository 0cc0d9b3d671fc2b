"""What an experiment family supplies to the engine: its config schema (expansion into
points, structure key, JSON form), its compiled program, and its tables' shape.

The core family is :data:`rankflow.sweep.CORE`, the attention family
:data:`rankflow.attention.sweep.ATTENTION`. Everything else — the chunk plan, padding
and sharding, the program cache, status codes, progress, resume, chunk files and the
executors — is the engine's, the same for every family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pandas as pd

__all__ = ["Family"]


class Family(Protocol):
    """An experiment family. Instances must pickle (submitit ships them to array
    tasks): module-level instances of module-level classes do."""

    # Its chunked tables (directories of ``DIR``), in the order a chunk writes them:
    # the last one written marks the chunk finished.
    tables: tuple[str, ...]
    # The table with one row per run × path × save, whose last status per run the
    # sweep's summary counts.
    status_table: str

    def expand(self, cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The points of a resolved config (its sweep's product)."""
        ...

    def structure_key(self, point: Mapping[str, Any]) -> str:
        """What of a point shapes its compiled program: points with equal keys share
        one program and may share a chunk."""
        ...

    def to_json(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """The resolved config as written to ``config.json`` and hashed by resume."""
        ...

    def paths(self, point: Mapping[str, Any]) -> int:
        """Runs per point (Monte Carlo paths)."""
        ...

    def chunk_size(self, point: Mapping[str, Any]) -> int:
        """Default runs per chunk of the point's structure."""
        ...

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        """Rows of each table written by a chunk of ``runs`` runs of ``point``'s
        structure (a chunk file with other counts is partial, and is redone)."""
        ...

    def run_chunk(
        self,
        points: Sequence[Mapping[str, Any]],
        runs: Sequence[tuple[int, int]],
        cfg: Mapping[str, Any],
        pad_to: int | None,
    ) -> dict[str, pd.DataFrame]:
        """Run ``runs`` (``(point index, path)`` pairs of one structure) as one batch of
        the structure's program, padded to ``pad_to`` runs; each table's rows."""
        ...

    def result(self, tables: Mapping[str, pd.DataFrame]) -> Any:
        """What a sweep returns, from its tables (rows in canonical order)."""
        ...
