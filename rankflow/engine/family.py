"""What an experiment family supplies to the engine: its config schema (expansion into
points, structure key, JSON form), its compiled program, and its tables' shape, every
hook declared on :class:`Family` (the optional ones with their defaults).

The core family is :data:`rankflow.core.family.CORE`, the attention family
:data:`rankflow.attention.sweep.ATTENTION`. Everything else — the chunk plan, padding
and sharding, the program cache, status codes, progress, resume, chunk files and the
executors — is the engine's, the same for every family.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..config.points import OnDemand
from ..config.schema import Schema

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


class Family(ABC):
    """An experiment family: every hook the engine calls, declared. A subclass defines
    the required ones (:data:`REQUIRED`: ``tables``, ``status_table``, ``schema`` and the
    abstract methods) or fails when it is defined (``TypeError`` naming them), not
    mid-sweep; the optional ones default to "nothing known" (no memory model, no saves
    limit, no check). ``abstract=True`` in the class statement defers the check to its
    subclasses. Instances must pickle (submitit ships them to array tasks):
    module-level instances of module-level classes do.

    Examples:
      >>> class Half(Family):  # no run_chunk
      ...     tables, status_table, schema = ("results.parquet",), "results.parquet", None
      ...     def paths(self, point): return 1
      ...     def chunk_size(self, point): return 8
      ...     def expected_rows(self, point, runs): return {}
      ...     def result(self, tables): return tables
      Traceback (most recent call last):
      TypeError: family Half lacks the required hook run_chunk of rankflow.engine.Family
    """

    # Its chunked tables (directories of ``DIR``), in the order a chunk writes them:
    # the last one written marks the chunk finished.
    tables: tuple[str, ...]
    # The table with one row per run × path × save, whose last status per run the
    # sweep's summary counts.
    status_table: str
    # Its config (:class:`rankflow.config.schema.Schema`): ``expand(cfg)`` (the points of
    # a resolved config), ``structure_key(point)`` (points with equal keys share one
    # compiled program), ``to_json(cfg)`` (what config.json holds and resume hashes),
    # ``numeric_keys`` (the traced keys; other swept keys become table columns).
    schema: Schema
    # The keys that set one run's memory, named when a chunk runs out of it (and by the
    # default :meth:`memory_parts`).
    size_keys: tuple[str, ...] = ()

    # The hooks a family must define: these attributes and the abstract methods.
    REQUIRED = ("tables", "status_table", "schema")

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        names = Family.REQUIRED + tuple(
            name for name, value in vars(Family).items() if _is_abstract(value)
        )
        missing = [name for name in names if not _defines(cls, name)]
        if missing:
            hooks = "hook " if len(missing) == 1 else "hooks "
            raise TypeError(
                f"family {cls.__name__} lacks the required {hooks}{', '.join(missing)} "
                f"of rankflow.engine.Family"
            )

    @abstractmethod
    def paths(self, point: Mapping[str, Any]) -> int:
        """Runs per point (Monte Carlo paths)."""

    @abstractmethod
    def chunk_size(self, point: Mapping[str, Any]) -> int:
        """Default runs per chunk of the point's structure."""

    @abstractmethod
    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        """Rows of each table written by a chunk of ``runs`` runs of ``point``'s
        structure (a chunk file with other counts is partial, and is redone)."""

    @abstractmethod
    def run_chunk(
        self, points: Sequence[Mapping[str, Any]], chunk: Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        """Run the chunk's runs (``(point index, path)`` pairs of one structure) as one
        batch of the structure's program, padded to ``chunk.pad_to`` runs; each table's
        rows, with a column per ``swept`` structural key."""

    @abstractmethod
    def result(self, tables: Mapping[str, pd.DataFrame]) -> Any:
        """What a sweep returns, from its tables (rows in canonical order)."""

    # --- optional hooks (the resource checks of rankflow.engine.plan.checked_plan) ----

    def run_bytes(self, point: Mapping[str, Any]) -> int | None:
        """Estimated bytes of one run of the point's structure in the batched program
        (O(1) in every size); None: no memory model (chunks are not sized to fit)."""
        return None

    def shared_bytes(self, point: Mapping[str, Any]) -> int:
        """Estimated bytes the runs of one chunk share (data sets); 0 by default."""
        return 0

    def memory_parts(self, point: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
        """One run's bytes by the config keys that set each part (a run that cannot fit
        is refused naming the largest parts' keys); by default all of
        :meth:`run_bytes` under :attr:`size_keys`."""
        return {tuple(self.size_keys): self.run_bytes(point) or 0}

    def result_bytes(self, point: Mapping[str, Any]) -> int:
        """The bytes one run adds to the sweep's tables once read back; 0 by default."""
        return 0

    def saves(self, point: Mapping[str, Any]) -> tuple[int, str, str] | None:
        """Saves per run, the key that sets them and how they come about (a run saving
        too often is refused); None by default: not checked."""
        return None

    def check(self, point: Mapping[str, Any]) -> None:
        """A check of the point's structure before anything compiles (raising a
        one-line ``ConfigError``); none by default."""
        return None


def _is_abstract(value: Any) -> bool:
    return bool(getattr(value, "__isabstractmethod__", False))


def _defines(cls: type, name: str) -> bool:
    """Whether ``cls`` or a base below :class:`Family` defines ``name`` (not abstractly)."""
    for klass in cls.__mro__:
        if klass is Family:
            return False
        if name in vars(klass):
            return not _is_abstract(vars(klass)[name])
    return False
