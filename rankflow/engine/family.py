"""What an experiment family supplies to the engine: its config schema (expansion into
points, structure key, JSON form), its compiled program, and its tables' shape.

The core family is :data:`rankflow.core.family.CORE`, the attention family
:data:`rankflow.attention.sweep.ATTENTION`. Everything else — the chunk plan, padding
and sharding, the program cache, status codes, progress, resume, chunk files and the
executors — is the engine's, the same for every family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import pandas as pd

__all__ = ["Chunk", "Family"]


@dataclass(frozen=True)
class Chunk:
    """The engine's unit of work: runs of one structure, run as one padded batch."""

    index: int
    group: int
    runs: tuple[tuple[int, int], ...]  # (run_id, path)
    pad_to: int  # batch size of the group's program

    @property
    def rows(self) -> int:
        return len(self.runs)


class Family(Protocol):
    """An experiment family. Instances must pickle (submitit ships them to array
    tasks): module-level instances of module-level classes do."""

    # Its chunked tables (directories of ``DIR``), in the order a chunk writes them:
    # the last one written marks the chunk finished.
    tables: tuple[str, ...]
    # The table with one row per run × path × save, whose last status per run the
    # sweep's summary counts.
    status_table: str
    # Its config module: ``expand(cfg)`` (the points of a resolved config),
    # ``structure_key(point)`` (points with equal keys share one compiled program),
    # ``to_json(cfg)`` (what config.json holds and resume hashes), ``NUMERIC_KEYS``
    # (the traced keys; other swept keys become table columns).
    schema: ModuleType

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
        self, points: Sequence[Mapping[str, Any]], chunk: Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        """Run the chunk's runs (``(point index, path)`` pairs of one structure) as one
        batch of the structure's program, padded to ``chunk.pad_to`` runs; each table's
        rows, with a column per ``swept`` structural key."""
        ...

    def result(self, tables: Mapping[str, pd.DataFrame]) -> Any:
        """What a sweep returns, from its tables (rows in canonical order)."""
        ...
