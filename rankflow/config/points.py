"""The points of a sweep, counted and made on demand.

A ``[sweep]`` table of lists stands for their product; :class:`Points` is that product
as a sequence whose length is the product of the list sizes and whose items are made
when read, so a sweep is counted and planned without holding a config per point.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .fields import (
    ConfigError,
    Sections,
    copy_config,
    env_limit,
    flatten,
    get_dotted,
    set_dotted,
)

__all__ = [
    "EXACT_CHECK",
    "MAX_STRUCTURES",
    "Members",
    "OnDemand",
    "Points",
    "frozen_gc",
    "max_structures",
    "paused_gc",
    "shared_base",
]

# Sweeps of at most this many points are checked point by point; larger ones through
# their representatives (see Points.representatives).
EXACT_CHECK = 4096
# Default of RANKFLOW_MAX_STRUCTURES: the most structures (combinations of the swept
# values of non-numeric keys) a sweep may have. Each is a program compiled (seconds to
# minutes) and kept in the program cache, and each is validated before anything runs.
MAX_STRUCTURES = 1024


def max_structures() -> int:
    """The most structures a sweep may have: ``RANKFLOW_MAX_STRUCTURES`` (default 1024)."""
    return env_limit("RANKFLOW_MAX_STRUCTURES", MAX_STRUCTURES)


class OnDemand(Sequence):
    """A sequence whose items are made when read (:meth:`item`, for 0 ≤ i < len), never
    held as a list: indexing (negative too), slices as lists, and equality with any
    sequence of equal items. ``what`` names an item in the ``IndexError``."""

    what = "item"

    def item(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.item(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.what} {i} of {n}")
        return self.item(i % n)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


class Points(OnDemand):
    """The points of a sweep, a sequence made on demand: the product of the ``[sweep]``
    lists is counted, never materialised. ``points[i]`` is the config of point ``i``
    (row-major, the first key slowest) passed through ``finish`` (a family's validate
    and derive); the most recently used points are kept, so a point read twice is the
    same object, as in a list.

    ``numeric``: the keys traced by the family's program. Points whose structural
    (other) swept values agree share a structure; :meth:`groups` and
    :meth:`representatives` use it to stay cheap for large sweeps."""

    CACHE = 4096

    def __init__(
        self,
        cfg: Mapping[str, Any],
        schema: Sections,
        finish: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        numeric: Sequence[str] = (),
    ):
        sweep = cfg.get("sweep") or {}
        self.base = {k: v for k, v in cfg.items() if k != "sweep"}
        self.axes = list(sweep)
        self.values = [list(sweep[k]) for k in self.axes]
        self.shape = tuple(len(v) for v in self.values)
        self.numeric = tuple(numeric)
        self.schema = schema
        self.finish = finish
        self.strides = _strides(self.shape)
        self.cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._arrays: dict[int, np.ndarray] = {}
        self._check_structures()

    def _check_structures(self) -> None:
        """Refuse more structures than :func:`max_structures` (counted from the list
        sizes, before any point is made)."""
        struct = self.structural_axes()
        count, limit = math.prod(self.shape[a] for a in struct), max_structures()
        if count > limit:
            sizes = " × ".join(f"{len(self.values[a]):,} {self.axes[a]}" for a in struct)
            raise ConfigError(
                f"sweep: {count:,} structures ({sizes} values of non-numeric keys; each "
                f"compiles a program of its own) exceed the limit of {limit:,}; sweep "
                f"fewer of them, or raise the limit with RANKFLOW_MAX_STRUCTURES={count}"
            )

    def __len__(self) -> int:
        return math.prod(self.shape)

    def coords(self, i: int) -> tuple[int, ...]:
        """The index into each sweep list of point ``i`` (mixed radix, the first key
        slowest)."""
        return tuple((i // step) % size for step, size in zip(self.strides, self.shape))

    def flat_index(self, coords: Sequence[int]) -> int:
        """The point index of one index per sweep list."""
        i = 0
        for c, size in zip(coords, self.shape):
            i = i * size + c
        return i

    def make(self, i: int) -> dict[str, Any]:
        """A fresh config of point ``i`` (not cached)."""
        point = copy_config(self.base, self.schema)
        for k, values, c in zip(self.axes, self.values, self.coords(i)):
            set_dotted(point, k, copy.deepcopy(values[c]), self.schema)
        point["sweep"] = {}
        return self.finish(point) if self.finish else point

    what = "point"

    def item(self, i: int) -> dict[str, Any]:
        if i in self.cache:
            self.cache.move_to_end(i)
            return self.cache[i]
        point = self.cache[i] = self.make(i)
        if len(self.cache) > self.CACHE:
            self.cache.popitem(last=False)
        return point

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Points({' × '.join(map(str, self.shape)) or '1'} of {self.axes})"

    def made(self, indices: Iterable[int]) -> list[dict[str, Any]]:
        """The points ``indices``, made (validated) in one go."""
        with paused_gc():
            return [self[i] for i in indices]

    def structural_axes(self) -> list[int]:
        """Positions of the swept keys that are not numeric (they shape the program)."""
        return [a for a, k in enumerate(self.axes) if k not in self.numeric]

    def representatives(self) -> list[int]:
        """Points whose checks stand for the whole sweep: every point of a small sweep;
        of a large one, every combination of the structural axes' values with each
        numeric axis at its smallest and largest value. The cross-field rules of a
        family compare a numeric value with a bound or with structural values
        (σ > 0 for deterministic dynamics, μ ≤ 1 for discrete momentum, λ of an
        undecayed group), so a violation at any value shows at an extreme one."""
        if len(self) <= EXACT_CHECK:
            return list(range(len(self)))
        choices = []
        for k, values in zip(self.axes, self.values):
            if k in self.numeric and all(isinstance(v, (int, float)) for v in values):
                lo = min(range(len(values)), key=lambda j: values[j])
                hi = max(range(len(values)), key=lambda j: values[j])
                choices.append(sorted({lo, hi}))
            else:
                choices.append(range(len(values)))
        out: list[int] = [0]
        for a, choice_a in enumerate(choices):
            out = [i * self.shape[a] + c for i in out for c in choice_a]
        return sorted(out)

    def combos(self) -> Iterator[tuple[int, ...]]:
        """Every combination of the structural axes' indices, in index order (the
        structures of the sweep, before grouping by key)."""
        return itertools.product(*(range(self.shape[a]) for a in self.structural_axes()))

    def groups(
        self,
        key: Callable[[Mapping[str, Any]], str],
        also: Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> list[Members]:
        """Point indices grouped by ``key`` (a structure key: a function of the
        structural values alone), in order of first appearance, each group's
        :class:`Members` in index order (made by index arithmetic, never listed).
        ``key`` (and ``also``, whose value of a group's first point is its
        ``Members.also``) is evaluated once per combination of structural values, on the
        combination's first point."""
        struct = self.structural_axes()
        found: dict[str, list[tuple[int, ...]]] = {}
        alsos: dict[str, Any] = {}
        with paused_gc():
            for combo in self.combos():
                coords = [0] * len(self.shape)
                for a, c in zip(struct, combo):
                    coords[a] = c
                point = self[self.flat_index(coords)]
                k = key(point)
                if k not in found:
                    found[k] = []
                    alsos[k] = also(point) if also is not None else None
                found[k].append(combo)
            groups = [Members(self.shape, struct, c, alsos[k]) for k, c in found.items()]
        return sorted(groups, key=lambda m: min(m.bases))  # a grid's first member: its base

    def column(self, key: str, ids: np.ndarray, template: Mapping[str, Any]) -> np.ndarray:
        """The values of ``key`` at the points ``ids`` (an integer array), by index
        arithmetic: a swept key's from its list, any other's from ``template`` (a point
        of the same structure). Equal to reading each point where ``finish`` writes no
        swept key and leaves ``key`` as given (the core family's traced keys)."""
        if key not in self.axes:
            return np.full(len(ids), get_dotted(template, key))
        a = self.axes.index(key)
        values = self._arrays.get(a)
        if values is None:
            values = self._arrays[a] = np.asarray(self.values[a])
        return values[(np.asarray(ids) // self.strides[a]) % self.shape[a]]


class Members(OnDemand):
    """The point indices of one group of a sweep, in index order, by index arithmetic:
    the union of the grids of its structural combinations (each fixes the structural
    axes, ``struct``, at its ``combos`` entry and runs over the others). The ``k``-th
    member, and a slice of them, cost O(axes) and O(slice) whatever the sweep's size.
    ``also``: a value :meth:`Points.groups` computed from the group's first point."""

    def __init__(
        self,
        shape: Sequence[int],
        struct: Sequence[int],
        combos: Sequence[tuple[int, ...]],
        also: Any = None,
    ):
        self.shape, self.struct, self.combos, self.also = tuple(shape), tuple(struct), combos, also
        self.strides = _strides(self.shape)
        self.free = [a for a in range(len(self.shape)) if a not in self.struct]
        self.per = math.prod(self.shape[a] for a in self.free)
        # The index of each combination's first member (its free coordinates 0).
        self.bases = [sum(c * self.strides[a] for a, c in zip(self.struct, co)) for co in combos]

    def __len__(self) -> int:
        return len(self.combos) * self.per

    what = "member"

    def item(self, k: int) -> int:
        return self.index(k)

    def __repr__(self) -> str:
        return f"Members({len(self):,} points of {len(self.combos)} structural combinations)"

    def _offsets(self, ranks: np.ndarray) -> np.ndarray:
        """The index offsets, from a combination's first member, of its ``ranks``-th."""
        out = np.zeros(len(ranks), np.int64)
        rest = np.asarray(ranks, np.int64)
        for a in reversed(self.free):
            rest, c = np.divmod(rest, self.shape[a])
            out += c * self.strides[a]
        return out

    def _below(self, base: int, combo: tuple[int, ...], x: int) -> int:
        """How many members of one combination's grid have an index below ``x``: at the
        first axis where a member differs from ``x``'s coordinates it is smaller."""
        if x >= math.prod(self.shape):
            return self.per
        fixed = dict(zip(self.struct, combo))
        count, rest = 0, self.per
        for a, size in enumerate(self.shape):
            xa = (x // self.strides[a]) % size
            if a in fixed:
                if fixed[a] != xa:
                    return count + (rest if fixed[a] < xa else 0)
            else:
                rest //= size
                count += xa * rest
        return count

    def count_below(self, x: int) -> int:
        """How many members have an index below ``x``."""
        return sum(self._below(b, c, x) for b, c in zip(self.bases, self.combos))

    def index(self, k: int) -> int:
        """The ``k``-th member (0 ≤ k < len): direct for one combination, a bisection
        over indices for several."""
        if len(self.combos) == 1:
            index = self.bases[0]
            for a in reversed(self.free):
                k, c = divmod(k, self.shape[a])
                index += c * self.strides[a]
            return index
        lo, hi = 0, math.prod(self.shape) - 1
        while lo < hi:  # the smallest index x with k + 1 members at or below it
            mid = (lo + hi) // 2
            if self.count_below(mid + 1) > k:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def take(self, start: int, stop: int) -> np.ndarray:
        """Members ``start`` to ``stop`` (0 ≤ start ≤ stop ≤ len) as an int64 array."""
        if stop <= start:
            return np.zeros(0, np.int64)
        if len(self.combos) == 1:
            return self.bases[0] + self._offsets(np.arange(start, stop))
        first, last = self.index(start), self.index(stop - 1)
        parts = []
        for base, combo in zip(self.bases, self.combos):
            lo, hi = self._below(base, combo, first), self._below(base, combo, last + 1)
            parts.append(base + self._offsets(np.arange(lo, hi)))
        return np.sort(np.concatenate(parts))


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused while thousands of points are made (dicts
    of scalars, without cycles): each of their allocations otherwise counts towards full
    collections that scan every object the process holds, JAX's included (measured: 40%
    of resolving and planning a 30,000-structure sweep)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def frozen_gc() -> Iterator[None]:
    """The objects alive now (the program cache, JAX's, the plan) left out of Python's
    cyclic garbage collections while a sweep's chunks run, then put back: a full
    collection scanning them all took 130 ms inside a chunk's parquet write (measured),
    one chunk in a few hundred. Collections of newer objects go on. Left alone where the
    process froze objects itself."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _strides(shape: Sequence[int]) -> list[int]:
    """How far apart in index consecutive values of each axis are (row-major)."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def shared_base(
    cfg: Mapping[str, Any], points: Iterable[Mapping[str, Any]], schema: Sections
) -> dict[str, Any]:
    """``cfg`` with every key the sweep does not vary set to the value all ``points``
    share, where they share one: the saved config then holds the derived values (a
    diagonal problem's m, the solver's default method, ...) that every run used, however
    the sweep is made. A key whose derived value differs between points keeps its given
    value; the points hold theirs. One pass over ``points``."""
    out = copy_config(cfg, schema)
    swept = set(cfg.get("sweep") or {})
    shared: dict[str, Any] | None = None
    for point in points:
        flat = flatten(point, schema)
        if shared is None:
            shared = {k: v for k, v in flat.items() if k not in swept and v != get_dotted(cfg, k)}
        else:
            shared = {k: v for k, v in shared.items() if flat[k] == v}
    for key, value in (shared or {}).items():
        set_dotted(out, key, value, schema)
    return out
