"""Plans of a sweep: its points cut into chunks, and a chunk's runs laid out as one
padded batch, sharded over the local devices.

The plan is a pure function of the resolved config and the chunk size: points are
grouped by structure (one compiled program per group, in order of first appearance),
and each group's runs ``(run_id, path)`` are cut into chunks. Every chunk of a group is
padded to the same batch shape, so a group compiles once however many chunks it has.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..config.fields import ConfigError, check_size
from ..config.points import OnDemand, Points
from .family import Chunk, Family, Runs
from .resources import (
    budget,
    check_fits,
    check_saves,
    dominant_keys,
    free_memory,
    gib,
    host_memory,
    sizes_text,
)

__all__ = [
    "Chunk",
    "ChunkPlan",
    "checked_plan",
    "chunk_plan",
    "device_memory",
    "pad_runs",
    "plan",
    "resource_error",
    "swept_structure_keys",
]


class ChunkPlan(OnDemand):
    """The chunks of a sweep, made on demand: each group's runs cut into chunks of its
    ``size`` runs, all padded to the group's batch shape, chunk ``i`` found by bisection
    over the groups. Holds one entry per group, never a list of runs, so planning costs
    O(structures) and each chunk O(1), whatever the sweep's size. ``groups``: each
    group's point indices (in order), paths per point and chunk size; ``facts``: what
    :func:`checked_plan` learnt from each group's first point (or None)."""

    def __init__(self, groups: Sequence[tuple[Sequence[int], int, int]], facts: Sequence[Any] = ()):
        self.groups, self.facts = list(groups), list(facts)
        self.counts = [-(-len(m) * p // n) for m, p, n in self.groups]
        self.offsets = list(itertools.accumulate(self.counts, initial=0))

    def __len__(self) -> int:
        return self.offsets[-1]

    what = "chunk"

    def item(self, i: int) -> Chunk:
        g = bisect.bisect_right(self.offsets, i) - 1
        members, paths, size = self.groups[g]
        total = len(members) * paths
        start = (i - self.offsets[g]) * size
        runs = Runs(members, paths, start, min(start + size, total))
        return Chunk(i, g, runs, min(size, total))

    def __iter__(self) -> Iterator[Chunk]:  # group by group, without a bisection per chunk
        i = 0
        for g, (members, paths, size) in enumerate(self.groups):
            total = len(members) * paths
            for start in range(0, total, size):
                yield Chunk(
                    i, g, Runs(members, paths, start, min(start + size, total)), min(size, total)
                )
                i += 1

    def __repr__(self) -> str:
        return f"ChunkPlan({len(self)} chunks of {self.runs:,} runs in {len(self.groups)} groups)"

    @property
    def runs(self) -> int:
        """Runs of every chunk together."""
        return sum(len(m) * p for m, p, _ in self.groups)

    def group_runs(self, g: int) -> int:
        """Runs of group ``g``."""
        members, paths, _ = self.groups[g]
        return len(members) * paths

    def first(self, g: int) -> int:
        """The first point of group ``g``."""
        return self.groups[g][0][0]

    def pad(self, g: int) -> int:
        """The batch size of group ``g``'s program."""
        return min(self.groups[g][2], self.group_runs(g))

    def resized(self, chunk: int) -> ChunkPlan:
        """The same groups cut into chunks of ``chunk`` runs."""
        return ChunkPlan([(m, p, chunk) for m, p, _ in self.groups], self.facts)


def chunk_plan(
    points: Sequence[Mapping[str, Any]],
    structure_key: Callable[[Mapping[str, Any]], str],
    *,
    paths: Callable[[Mapping[str, Any]], int],
    size: Callable[[Mapping[str, Any]], int],
    facts: Callable[[Mapping[str, Any]], Any] | None = None,
) -> ChunkPlan:
    """Points grouped by ``structure_key`` (one program per group, in order of first
    appearance); each group's runs ``(run_id, path)`` (``paths`` of its first point per
    point) cut into chunks of ``size`` (of its first point) runs, all padded to the
    group's batch shape. ``facts`` (of each group's first point, evaluated with the
    key) are kept as the plan's ``facts``. A :class:`~rankflow.config.points.Points` is
    grouped by its structural axes, each group's members by index arithmetic."""

    def learn(point):
        return paths(point), size(point), facts(point) if facts is not None else None

    if isinstance(points, Points):  # keyed once per structure, not once per point
        found = [(m, *m.also) for m in points.groups(structure_key, also=learn)]
    else:
        by_key: dict[str, list[int]] = {}
        for i, point in enumerate(points):
            by_key.setdefault(structure_key(point), []).append(i)
        found = [(m, *learn(points[m[0]])) for m in by_key.values()]
    runs_n = sum(len(members) * p for members, p, _, _ in found)
    check_size(runs_n, f"{len(points):,} points × their dynamics.paths")
    return ChunkPlan([(m, p, n) for m, p, n, _ in found], [f for *_, f in found])


def plan(family: Family, cfg: Mapping[str, Any], chunk: int | None = None, facts=None):
    """``(points, chunks)`` of a family's resolved config; ``chunk`` runs per chunk
    (default: the family's ``chunk_size`` of each structure); ``facts``: see
    :func:`chunk_plan`."""
    points = family.schema.expand(cfg)  # resolve's expansion, where cfg is resolve's
    chunks = chunk_plan(
        points,
        family.schema.structure_key,
        paths=family.paths,
        size=lambda point: chunk or family.chunk_size(point),
        facts=facts,
    )
    return points, chunks


def checked_plan(
    family: Family, cfg: Mapping[str, Any], chunk: int | None, executor: str = "local"
):
    """``(chunk, points, chunks)``: the plan of :func:`plan`, checked before anything
    compiles, on the first point of each structure (made once, as it is grouped), each
    check O(1) in the sizes:

    - a run saving more than :func:`~.resources.max_saves` times is refused (the
      family's ``saves(point)``, where it says);
    - run locally, a structure one run of which needs more memory than the device has
      free is refused, naming the estimate and the keys that set it (``run_bytes``,
      where the family has a memory model; ``memory_parts``; ``shared_bytes``: what a
      chunk's runs share), and chunks that do not fit are shrunk (``chunk``: the size
      used);
    - the family's ``check(point)`` (a custom loss is evaluated once);
    - then a sweep whose results tables (``result_bytes`` per run) would not fit in
      memory when read back is refused."""
    local = executor == "local"
    free, where = device_memory() if local else (0, "")
    learn = partial(_facts, family, free=free, where=where, local=local)
    points, chunks = plan(family, cfg, chunk, facts=learn)
    if local:
        fit = _fit(chunks, chunk, free)
        if fit != chunk:
            print(
                f"rankflow: chunks of {chunks[0].pad_to} runs need more than the {gib(free)} "
                f"free on the {where}; running chunks of {fit} runs (--chunk)",
                file=sys.stderr,
            )
            chunk, chunks = fit, chunks.resized(fit)
    total = sum(chunks.group_runs(g) * f["result"] for g, f in enumerate(chunks.facts))
    if total:  # read back at the end
        fix = "sweep fewer points or save less often"
        runs = f"{chunks.runs:,} runs"
        check_fits(total, ["sweep"], runs, "its results table", host_memory(), fix)
    return chunk, points, chunks


def _facts(family, point, *, free: int, where: str, local: bool) -> dict[str, int]:
    """What :func:`checked_plan` needs of a structure, from its first point, refusing
    it at once where a check fails: its saves, a run that cannot fit ``free`` bytes
    (``local``, where the family has a memory model), the family's own check. ``one``:
    a run's bytes (0 without a memory model); ``shared``: a chunk's; ``result``: a
    run's read back."""
    saves = family.saves(point)
    if saves is not None:
        check_saves(*saves)
    one = family.run_bytes(point) if local else None
    out = {"one": one or 0, "shared": family.shared_bytes(point) if one else 0}
    if one and out["shared"] + one > budget(free):
        keys = dominant_keys(family.memory_parts(point))
        check_fits(out["shared"] + one, keys, sizes_text(point, keys), free=(free, where))
    out["result"] = family.result_bytes(point)
    family.check(point)
    return out


def _fit(chunks: ChunkPlan, chunk: int | None, free: int) -> int | None:
    """The chunk size that fits ``free`` bytes (``chunk`` when every chunk does)."""
    room = budget(free)
    fit = chunk
    for g, f in enumerate(chunks.facts):
        pad, one, shared = chunks.pad(g), f["one"], f["shared"]
        if one and shared + pad * one > room:
            fit = min(fit or pad, max(1, (room - shared) // one))
    return fit


def device_memory() -> tuple[int, str]:
    """Bytes free on the first device, and what it is
    (:func:`rankflow.engine.resources.free_memory`)."""
    return free_memory()


def resource_error(
    exc: BaseException, family: Family, point: Mapping[str, Any], rows: int
) -> ConfigError | None:
    """A one-line error for an XLA resource error (out of memory) while running a chunk
    of ``rows`` runs of ``point``'s structure; None for any other exception."""
    text = str(exc)
    if "RESOURCE_EXHAUSTED" not in text and "out of memory" not in text.lower():
        return None
    sizes = sizes_text(point, family.size_keys) if family.size_keys else "its sizes"
    return ConfigError(
        f"out of memory running a chunk of {rows} runs ({sizes}); pass a smaller "
        f"--chunk or make the problem smaller"
    )


def swept_structure_keys(cfg: Mapping[str, Any], numeric_keys: Sequence[str]) -> list[str]:
    """Structural keys a config sweeps over (they become table columns)."""
    return [k for k in (cfg.get("sweep") or {}) if k not in numeric_keys]


def pad_runs(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], pad_to: int | None
) -> dict[str, np.ndarray]:
    """The batch of ``rows`` (one run's values each) as one array per key, padded with
    copies of the last run to ``pad_to`` runs, so that every chunk of a structure has
    the same shape and its program compiles once (the caller drops the padding)."""
    padded = list(rows) + [rows[-1]] * max(0, (pad_to or 0) - len(rows))
    return {k: np.array([r[k] for r in padded]) for k in keys}
