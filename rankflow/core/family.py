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


def memory_parts(point: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
    """One run's memory in the batched program, by the config keys that set each part
    (bytes; O(1) in every size, depth L included). The parts: the problem's data and
    target; the L factors with the solver's stages of them and the product's work
    arrays; the saved observables; the run's rows of the results table."""
    p, model = point["problem"], point["model"]
    kind, depth, r = p["kind"], model.get("depth", 2), model["r"]
    item = 8 if point["x64"] else 4
    m, n = (len(p["singular_values"]),) * 2 if kind == "diagonal" else (p["m"], p["n"])
    mn = ("problem.singular_values",) if kind == "diagonal" else ("problem.m", "problem.n")
    N = p["samples"]
    # Data drawn as normal variates: while it is made, XLA:CPU holds the PRNG's bits,
    # their float32 values and the cast (measured: 24 bytes per entry in float32, 30 in
    # float64; tests/engine/test_resource_guards.py).
    drawn = {"sensing": N * m * n, "regression": (m + n) * N}.get(kind, 0)
    data = drawn * (16 + 2 * item) + (3 * N * item if kind == "completion" else 0)
    if isinstance(r, list | tuple):  # depth L: the L − 1 widths listed
        dims = (n, *r, m)
        state, wide = sum(a * b for a, b in zip(dims, dims[1:])), max(r)
    else:
        state, wide = n * r + (depth - 2) * r * r + r * m, r
    saves = vocabulary.save_count(point)
    columns = len(OBSERVABLES) + depth - 2 + num_singular_values(m, n, wide)
    table_columns = columns + len(config_lib.NUMERIC_KEYS) + 12  # ids, t, structure
    save_key = ("save.ts",) if point["save"]["ts"] is not None else ("save.num",)
    return {
        ("problem.samples", *mn): data,
        # Solvers keep several stages of the state (Tsit5: 7, plus momentum and the
        # error estimate); depth L's chain rule holds L partial products beside it.
        ("model.r", "model.depth", *mn): item * (24 * state + 2 * depth * wide * (m + n)),
        # The target, W and the observables' SVD work arrays.
        mn: item * 4 * m * n,
        # Saved observables in the program, then the float64 rows (DataFrame, parquet).
        save_key: saves * (item * columns + 8 * 3 * table_columns),
    }


def _per_run_bytes(point: Mapping[str, Any]) -> int:
    """An estimate of one run's memory in the batched program (:func:`memory_parts`)."""
    return sum(memory_parts(point).values())


def result_bytes(point: Mapping[str, Any]) -> int:
    """The bytes one run adds to the sweep's results table once it is read back (its
    rows, float64 or pointers per column, and a copy while sorting)."""
    p, model = point["problem"], point["model"]
    m, n = (len(p["singular_values"]),) * 2 if p["kind"] == "diagonal" else (p["m"], p["n"])
    r = model["r"]
    k = num_singular_values(m, n, max(r) if isinstance(r, list | tuple) else r)
    columns = len(OBSERVABLES) + model.get("depth", 2) - 2 + k + len(config_lib.NUMERIC_KEYS) + 12
    return 2 * 8 * columns * vocabulary.save_count(point)


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
        """Estimated bytes of one run in the batched program (O(1) in every size)."""
        return _per_run_bytes(point)

    def memory_parts(self, point: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
        return memory_parts(point)

    def result_bytes(self, point: Mapping[str, Any]) -> int:
        return result_bytes(point)

    def saves(self, point: Mapping[str, Any]) -> tuple[int, str, str]:
        """Saves per run, the key that sets them and how they come about."""
        sv = point["save"]
        if sv["ts"] is not None:
            return len(sv["ts"]), "save.ts", "the times listed"
        gap = sv["t1"] / (sv["num"] - 1)
        return sv["num"], "save.num", f"one every {gap:,.4g} steps up to save.t1 = {sv['t1']:g}"

    def check(self, point: Mapping[str, Any]) -> None:
        """Before compiling: a custom loss is evaluated once on a sample W."""
        p = point["problem"]
        if p["kind"] == "custom":
            check_custom_loss(p["loss"], p["m"], p["n"], point["x64"])

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        return {store.RESULTS: runs * vocabulary.save_count(point)}

    def run_chunk(
        self, points: Sequence[Mapping[str, Any]], chunk: Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        rows = run_runs(points, chunk.runs, swept, pad_to=chunk.pad_to)
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
