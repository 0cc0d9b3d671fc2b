"""Plans of a sweep: its points cut into chunks, and a chunk's runs laid out as one
padded batch, sharded over the local devices.

The plan is a pure function of the resolved config and the chunk size: points are
grouped by structure (one compiled program per group, in order of first appearance),
and each group's runs ``(run_id, path)`` are cut into chunks. Every chunk of a group is
padded to the same batch shape, so a group compiles once however many chunks it has.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..config.fields import ConfigError, check_size
from ..config.points import Points
from .family import Chunk, Family
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
    "checked_plan",
    "chunk_plan",
    "device_memory",
    "pad_runs",
    "plan",
    "resource_error",
    "swept_structure_keys",
]


def chunk_plan(
    points: Sequence[Mapping[str, Any]],
    structure_key: Callable[[Mapping[str, Any]], str],
    *,
    paths: Callable[[Mapping[str, Any]], int],
    size: Callable[[Mapping[str, Any]], int],
) -> list[Chunk]:
    """Points grouped by ``structure_key`` (one program per group, in order of first
    appearance); each group's runs ``(run_id, path)`` (``paths`` of its first point per
    point) cut into chunks of ``size`` (of its first point) runs, all padded to the
    group's batch shape."""
    if isinstance(points, Points):  # keyed once per structure, not once per point
        groups = points.groups(structure_key)
    else:
        by_key: dict[str, list[int]] = {}
        for i, point in enumerate(points):
            by_key.setdefault(structure_key(point), []).append(i)
        groups = list(by_key.values())
    runs_n = sum(len(members) * paths(points[members[0]]) for members in groups)
    check_size(runs_n, f"{len(points):,} points × their dynamics.paths")
    chunks: list[Chunk] = []
    for g, members in enumerate(groups):
        first = points[members[0]]
        runs = [(i, path) for i in members for path in range(paths(first))]
        n = size(first)
        pad = min(n, len(runs))
        for start in range(0, len(runs), n):
            chunks.append(Chunk(len(chunks), g, tuple(runs[start : start + n]), pad))
    return chunks


def plan(family: Family, cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)`` of a family's resolved config; ``chunk`` runs per chunk
    (default: the family's ``chunk_size`` of each structure)."""
    points = family.schema.expand(cfg)
    chunks = chunk_plan(
        points,
        family.schema.structure_key,
        paths=family.paths,
        size=lambda point: chunk or family.chunk_size(point),
    )
    return points, chunks


def checked_plan(
    family: Family, cfg: Mapping[str, Any], chunk: int | None, executor: str = "local"
):
    """``(chunk, points, chunks)``: the plan of :func:`plan`, checked before anything
    compiles, for the first point of each structure, each check O(1) in the sizes:

    - a run saving more than :func:`~.resources.max_saves` times is refused (the
      family's ``saves(point)``);
    - run locally, a structure one run of which needs more memory than the device has
      free is refused, naming the estimate and the keys that set it (``run_bytes``,
      ``memory_parts``, ``shared_bytes``: what a chunk's runs share), and chunks that do
      not fit are shrunk (``chunk``: the size used);
    - a sweep whose results tables (``result_bytes`` per run) would not fit in memory
      when read back is refused;
    - then the family's ``check(point)``, where it has one (a custom loss is evaluated
      once)."""
    points, chunks = plan(family, cfg, chunk)
    firsts = {c.group: points[c.runs[0][0]] for c in chunks}
    saves = getattr(family, "saves", None)
    for point in firsts.values() if saves is not None else ():
        check_saves(*saves(point))
    if executor == "local" and getattr(family, "run_bytes", None) is not None:
        free, where = device_memory()
        fit = _fit(family, firsts, chunks, chunk, free, where)
        if fit != chunk:
            print(
                f"rankflow: chunks of {chunks[0].pad_to} runs need more than the {_gib(free)} "
                f"free on the {where}; running chunks of {fit} runs (--chunk)",
                file=sys.stderr,
            )
            chunk = fit
            points, chunks = plan(family, cfg, chunk)
    result_bytes = getattr(family, "result_bytes", None)
    if result_bytes is not None:  # read back into this process's memory at the end
        rows: dict[int, int] = {}
        for c in chunks:
            rows[c.group] = rows.get(c.group, 0) + c.rows
        total = sum(n * result_bytes(firsts[g]) for g, n in rows.items())
        runs = sum(rows.values())
        fix = "sweep fewer points or save less often"
        check_fits(total, ["sweep"], f"{runs:,} runs", "its results table", host_memory(), fix)
    check = getattr(family, "check", None)
    if check is not None:
        for point in firsts.values():
            check(point)
    return chunk, points, chunks


def _fit(family, firsts, chunks, chunk, free: int, where: str) -> int | None:
    """The chunk size that fits ``free`` bytes (``chunk`` when every chunk does);
    refuses a structure one run of which does not."""
    room = budget(free)
    shared_bytes = getattr(family, "shared_bytes", None)
    fit = chunk
    pad = {c.group: c.pad_to for c in chunks}
    for group, point in firsts.items():
        one = family.run_bytes(point)
        shared = shared_bytes(point) if shared_bytes is not None else 0
        if shared + one > room:
            parts = getattr(family, "memory_parts", None)
            keys = dominant_keys(parts(point)) if parts is not None else family.size_keys
            check_fits(shared + one, keys, sizes_text(point, keys), free=(free, where))
        if shared + pad[group] * one > room:
            fit = min(fit or pad[group], max(1, (room - shared) // one))
    return fit


def _gib(n: float) -> str:
    return gib(n)


def _sizes(family: Family, point: Mapping[str, Any]) -> str:
    return sizes_text(point, family.size_keys)


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
    sizes = _sizes(family, point) if getattr(family, "size_keys", None) else "its sizes"
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
