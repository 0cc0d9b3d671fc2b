"""The points of a sweep, counted and made on demand.

A ``[sweep]`` table of lists stands for their product; :class:`Points` is that product
as a sequence whose length is the product of the list sizes and whose items are made
when read, so a sweep is counted and planned without holding a config per point.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .fields import ConfigError, Schema, copy_config, env_limit, set_dotted

__all__ = ["EXACT_CHECK", "MAX_STRUCTURES", "Points", "max_structures", "validated"]

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


class Points(Sequence):
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
        schema: Schema,
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
        self.cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
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
        """The index into each sweep list of point ``i``."""
        out = []
        for size in reversed(self.shape):
            i, c = divmod(i, size)
            out.append(c)
        return tuple(reversed(out))

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

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"point {i} of a sweep of {n}")
        i %= n
        if i in self.cache:
            self.cache.move_to_end(i)
            return self.cache[i]
        point = self.cache[i] = self.make(i)
        if len(self.cache) > self.CACHE:
            self.cache.popitem(last=False)
        return point

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Points({' × '.join(map(str, self.shape)) or '1'} of {self.axes})"

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

    def groups(self, key: Callable[[Mapping[str, Any]], str]) -> list[list[int]]:
        """Point indices grouped by ``key`` (a structure key: a function of the
        structural values alone), in order of first appearance, each group in index
        order. ``key`` is evaluated once per combination of structural values."""
        import numpy as np

        struct = self.structural_axes()
        sizes = [self.shape[a] for a in struct]
        n_combos = math.prod(sizes)
        first: dict[str, int] = {}  # key → its group
        combo_group = np.empty(n_combos, np.int64)
        for combo in range(n_combos):
            coords = [0] * len(self.shape)
            rest = combo
            for a, size in zip(reversed(struct), reversed(sizes)):
                rest, coords[a] = divmod(rest, size)
            k = key(self[self.flat_index(coords)])
            combo_group[combo] = first.setdefault(k, len(first))
        if len(first) == 1:
            return [list(range(len(self)))]
        index = np.arange(len(self))
        all_coords = np.unravel_index(index, self.shape)
        combo_of = np.ravel_multi_index([all_coords[a] for a in struct], sizes)
        group_of = combo_group[combo_of]
        members = [np.flatnonzero(group_of == g) for g in range(len(first))]
        members.sort(key=lambda m: m[0])
        return [m.tolist() for m in members]


def validated(
    validate: Callable[[dict[str, Any]], None], derive: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A family's ``finish`` of a point: ``validate`` it (raising ``ConfigError``), then
    fill its derived values with ``derive`` (which returns the point)."""

    def finish(point: dict[str, Any]) -> dict[str, Any]:
        validate(point)
        return derive(point)

    return finish
