"""The core family on the engine: a core config's points, cut into chunks, run on every
local device or as a SLURM job array, each finished chunk written atomically to
``DIR/results.parquet/``; resumable after any kill (:mod:`rankflow.engine`).

Points are grouped by :func:`config.structure_key` (one compiled
:class:`~rankflow.core.program.Program` per group); each group's runs ``(run_id, path)``
are cut into chunks of :func:`default_chunk_size` runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from .. import engine
from ..engine import Chunk, Summary, enable_compilation_cache, store
from . import config as config_lib
from . import vocabulary
from .factors import inner_widths
from .observables import OBSERVABLES, num_singular_values
from .problems import check_custom_loss
from .program import run_runs

__all__ = [
    "CORE",
    "Chunk",
    "Summary",
    "default_chunk_size",
    "enable_compilation_cache",
    "execute",
    "plan",
]

# Memory budget of one chunk's program (inputs, problem data, state, saved outputs).
CHUNK_BYTES = 256 * 2**20
MAX_CHUNK = 1024


def _per_run_bytes(point: Mapping[str, Any]) -> int:
    """A generous estimate of one run's memory in the batched program."""
    p, widths = point["problem"], inner_widths(point["model"])
    kind = p["kind"]
    m, n = (len(p["singular_values"]),) * 2 if kind == "diagonal" else (p["m"], p["n"])
    dims = (n, *widths, m)
    N = p["samples"]
    data = {"sensing": N * m * n, "completion": 3 * N, "regression": (m + n) * N}.get(kind, m * n)
    saves = len(vocabulary.save_times(point))
    columns = len(OBSERVABLES) + len(widths) - 1  # depth L: L − 1 balance gaps, at most
    saved = saves * (columns + num_singular_values(m, n, min(widths)) + 2)
    state = sum(a * b for a, b in zip(dims, dims[1:]))  # (m + n)·r at depth 2
    # Solvers keep several stages of the state (Tsit5: 7, plus momentum), and the
    # observables' SVD a few m×n work arrays.
    return 8 * (data + saved + 24 * state + 4 * m * n)


def default_chunk_size(point: Mapping[str, Any]) -> int:
    """Runs per chunk: a power of two that keeps a chunk under ``CHUNK_BYTES``."""
    fit = max(1, CHUNK_BYTES // _per_run_bytes(point))
    return int(min(MAX_CHUNK, 2 ** int(np.log2(fit))))


class CoreFamily:
    """Factor pairs W = ABᵀ under a flow or an optimizer: config :mod:`rankflow.core.config`,
    program :class:`rankflow.core.program.Program`, one table (one row per run × path ×
    save)."""

    tables = (store.RESULTS,)
    schema = config_lib
    status_table = store.RESULTS

    def paths(self, point: Mapping[str, Any]) -> int:
        return point["dynamics"]["paths"]

    # The keys that set one run's memory (named when a run cannot fit the device).
    size_keys = ("problem.m", "problem.n", "problem.samples", "model.r", "save.num")

    def chunk_size(self, point: Mapping[str, Any]) -> int:
        return default_chunk_size(point)

    def run_bytes(self, point: Mapping[str, Any]) -> int:
        """Estimated bytes of one run in the batched program."""
        return _per_run_bytes(point)

    def check(self, point: Mapping[str, Any]) -> None:
        """Before compiling: a custom loss is evaluated once on a sample W."""
        p = point["problem"]
        if p["kind"] == "custom":
            check_custom_loss(p["loss"], p["m"], p["n"], point["x64"])

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        return {store.RESULTS: runs * len(vocabulary.save_times(point))}

    def run_chunk(
        self, points: Sequence[Mapping[str, Any]], chunk: Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        rows = run_runs(list(points), list(chunk.runs), swept, pad_to=chunk.pad_to)
        return {store.RESULTS: rows}

    def result(self, tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
        return tables[store.RESULTS]


CORE = CoreFamily()


def plan(cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)`` of a resolved core config; ``chunk`` runs per chunk
    (default: :func:`default_chunk_size` of each structure)."""
    return engine.plan(CORE, cfg, chunk)


# ``execute(cfg, out=None, *, resume, chunk, executor, slurm, quiet)``: a resolved
# core config's sweep through the engine (:func:`rankflow.engine.execute`); returns the
# family's result and a :class:`Summary`.
execute = partial(engine.execute, CORE)
