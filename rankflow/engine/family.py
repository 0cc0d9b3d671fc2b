"""What an experiment family supplies to the engine: its config schema (expansion into
points, structure key, JSON form), its compiled program, and its tables' shape.

The core family is :data:`rankflow.core.family.CORE`, the attention family
:data:`rankflow.attention.sweep.ATTENTION`. Everything else — the chunk plan, padding
and sharding, the program cache, status codes, progress, resume, chunk files and the
executors — is the engine's, the same for every family.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ..config.points import OnDemand

__all__ = ["Chunk", "Family", "Runs"]


class Runs(OnDemand):
    """The runs ``(point index, path)`` of a chunk without listing them: ranks ``start``
    to ``stop`` of its group's runs, each point of ``members`` (in order) giving
    ``paths`` runs. ``members`` is a group's :class:`~rankflow.config.points.Members`
    (made by index arithmetic) or a plain sequence of point indices, so a chunk costs
    O(1) memory and its runs O(chunk) time, whatever the sweep's size."""

    def __init__(self, members: Sequence[int], paths: int, start: int, stop: int):
        self.members, self.paths, self.start, self.stop = members, paths, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def arrays(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The point indices and paths of runs ``start`` to ``stop`` of the chunk (all by
        default), as two int64 arrays."""
        stop = len(self) if stop is None else stop
        lo, hi = self.start + start, self.start + stop
        if hi <= lo:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        first, last = lo // self.paths, (hi - 1) // self.paths + 1
        take = getattr(self.members, "take", None)
        ids = take(first, last) if take else np.asarray(self.members[first:last], np.int64)
        ids = np.repeat(ids, self.paths)[lo - first * self.paths : hi - first * self.paths]
        return ids, np.arange(lo, hi, dtype=np.int64) % self.paths

    what = "run"

    def item(self, i: int) -> tuple[int, int]:
        ids, paths = self.arrays(i, i + 1)
        return int(ids[0]), int(paths[0])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        ids, paths = self.arrays()
        return zip(ids.tolist(), paths.tolist())

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Runs({self.start}:{self.stop} of a group, {self.paths} paths per point)"


@dataclass(frozen=True)
class Chunk:
    """The engine's unit of work: runs of one structure, run as one padded batch."""

    index: int
    group: int
    runs: Sequence[tuple[int, int]]  # (run_id, path): a :class:`Runs`, or a tuple of pairs
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
