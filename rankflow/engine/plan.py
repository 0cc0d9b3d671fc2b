"""Plans of a sweep: its points cut into chunks, and a chunk's runs laid out as one
padded batch, sharded over the local devices.

The plan is a pure function of the resolved config and the chunk size: points are
grouped by structure (one compiled program per group, in order of first appearance),
and each group's runs ``(run_id, path)`` are cut into chunks. Every chunk of a group is
padded to the same batch shape, so a group compiles once however many chunks it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .family import Chunk, Family

__all__ = ["Chunk", "chunk_plan", "pad_runs", "plan", "shard", "swept_structure_keys"]


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
    groups: dict[str, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(structure_key(point), []).append(i)
    chunks: list[Chunk] = []
    for g, members in enumerate(groups.values()):
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


def shard(params: Mapping[str, np.ndarray], dtype_of: Callable[[str], Any]) -> dict[str, Any]:
    """A batch of 1-d parameter arrays on the devices: padded (with copies of its last
    run) to a multiple of their number and, with several, sharded across them, so each
    run's arithmetic is the same whatever the number of devices. ``dtype_of(key)``: the
    traced dtype of each key (call under the program's ``jax.enable_x64``)."""
    import jax
    import jax.numpy as jnp

    n = len(next(iter(params.values())))
    devices = jax.devices()
    padded = -(-n // len(devices)) * len(devices)
    batch = {
        k: jnp.asarray(np.pad(np.asarray(v), (0, padded - n), mode="edge"), dtype_of(k))
        for k, v in params.items()
    }
    if len(devices) > 1:
        mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
        batch = jax.device_put(batch, sharding)
    return batch
