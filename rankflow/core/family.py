"""The core family on the engine: a core config's points, cut into chunks, run on every
local device or as a SLURM job array, each finished chunk written atomically to
``DIR/results.parquet/``; resumable after any kill (:mod:`rankflow.engine`).

Points are grouped by :func:`config.structure_key` (one compiled
:class:`~rankflow.core.program.Program` per group); each group's runs ``(run_id, path)``
are cut into chunks of :func:`default_chunk_size` runs.

With ``save.states = true`` the sweep runs as :data:`CORE_STATES`, whose chunks also
write the factors at the saves (``DIR/states.parquet/``, beside the results' chunks):
their bytes count in the chunk's memory and the sweep's results, and a sweep whose
states would exceed a limit is refused before compiling (:func:`check_states`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import engine
from ..config.fields import ConfigError, env_limit
from ..engine import Chunk, Summary, enable_compilation_cache, store
from ..engine.resources import check_fits, gib, host_memory, nearest_disk
from ..engine.states import states_of
from . import config as config_lib
from . import vocabulary
from .observables import OBSERVABLES, num_singular_values
from .problems import problem_class
from .program import run_tables

__all__ = [
    "CORE",
    "CORE_STATES",
    "Chunk",
    "Summary",
    "check_states",
    "default_chunk_size",
    "enable_compilation_cache",
    "execute",
    "plan",
    "read_back_bytes",
    "state_bytes",
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
    kind, depth = problem_class(p["kind"]), model.get("depth", 2)
    item, m, n, state, wide = _sizes(point)
    mn = kind.shape_keys
    saves = vocabulary.save_count(point)
    columns = len(OBSERVABLES) + depth - 2 + num_singular_values(m, n, wide)
    table_columns = columns + len(config_lib.NUMERIC_KEYS) + 12  # ids, t, structure
    save_key = ("save.ts",) if point["save"]["ts"] is not None else ("save.num",)
    # The problem's data, by the keys that set each part (Problem.data_memory), first.
    parts = dict(kind.data_memory(p, item))
    for keys, nbytes in {
        # Solvers keep several stages of the state (Tsit5: 7, plus momentum and the
        # error estimate); depth L's chain rule holds L partial products beside it.
        ("model.r", "model.depth", *mn): item * (24 * state + 2 * depth * wide * (m + n)),
        # The target, W and the observables' SVD work arrays.
        mn: item * 4 * m * n,
        # Saved observables in the program, then the float64 rows (DataFrame, parquet).
        save_key: saves * (item * columns + 8 * 3 * table_columns),
    }.items():
        parts[keys] = parts.get(keys, 0) + nbytes
    if point["save"].get("states"):
        # The factors at the saves: in the program, in arrow while written, in the
        # parquet writer's pages; a row object per factor and save in the table.
        parts[("save.states", *save_key, "model.r", *mn)] = saves * (
            3 * item * state + 2 * _ROW_OBJECT * depth
        )
    return parts


# Bytes of one row's object in the states table (a NumPy view of a factor's entries).
_ROW_OBJECT = 112


def _sizes(point: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """``(item, m, n, state, wide)``: bytes per float, W's shape, the entries of every
    factor together and the widest inner dimension."""
    p, model = point["problem"], point["model"]
    depth, r = model.get("depth", 2), model["r"]
    item = 8 if point["x64"] else 4
    m, n = problem_class(p["kind"]).shape_of(p)
    if isinstance(r, list | tuple):  # depth L: the L − 1 widths listed
        dims = (n, *r, m)
        return item, m, n, sum(a * b for a, b in zip(dims, dims[1:])), max(r)
    return item, m, n, n * r + (depth - 2) * r * r + r * m, r


def read_back_bytes(point: Mapping[str, Any]) -> int:
    """The bytes one run's states take once read back (``save.states``; 0 without):
    their table's entries and a row object per factor and save, and the arrays stacked
    from them."""
    if not point["save"].get("states"):
        return 0
    rows = _ROW_OBJECT * point["model"].get("depth", 2) * vocabulary.save_count(point)
    return 2 * state_bytes(point) + rows


def state_bytes(point: Mapping[str, Any]) -> int:
    """The bytes of one run's states on disk (``save.states``; 0 without): every
    factor's entries at every save and path, in the run's dtype, with the list
    offsets of their parquet column (random floats do not compress)."""
    if not point["save"].get("states"):
        return 0
    item, _, _, state, _ = _sizes(point)
    depth = point["model"].get("depth", 2)
    return vocabulary.save_count(point) * (item * state + 8 * depth)


def _per_run_bytes(point: Mapping[str, Any]) -> int:
    """An estimate of one run's memory in the batched program (:func:`memory_parts`)."""
    return sum(memory_parts(point).values())


def result_bytes(point: Mapping[str, Any]) -> int:
    """The bytes one run adds to the sweep's results table once it is read back (its
    rows, float64 or pointers per column, and a copy while sorting). States read back
    (``save.states``) are :func:`check_states`'s: the command never reads them."""
    p, model = point["problem"], point["model"]
    m, n = problem_class(p["kind"]).shape_of(p)
    r = model["r"]
    k = num_singular_values(m, n, max(r) if isinstance(r, list | tuple) else r)
    columns = len(OBSERVABLES) + model.get("depth", 2) - 2 + k + len(config_lib.NUMERIC_KEYS) + 12
    return 2 * 8 * columns * vocabulary.save_count(point)


def default_chunk_size(point: Mapping[str, Any]) -> int:
    """Runs per chunk: a power of two that keeps a chunk under ``CHUNK_BYTES``."""
    fit = max(1, CHUNK_BYTES // _per_run_bytes(point))
    return int(min(MAX_CHUNK, 2 ** int(np.log2(fit))))


class CoreFamily(engine.Family):
    """Factor pairs W = ABᵀ under a flow or an optimizer: config
    :data:`rankflow.core.config.SCHEMA`, program :class:`rankflow.core.program.Program`,
    one table (one row per run × path × save); with ``states``, the states table beside
    it (``save.states``: written first, so a chunk's results file marks both
    finished)."""

    schema = config_lib.SCHEMA
    status_table = store.RESULTS

    def __init__(self, states: bool = False):
        self.states = states

    @property
    def tables(self) -> tuple[str, ...]:
        return (store.STATES, store.RESULTS) if self.states else (store.RESULTS,)

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
        """Before compiling: the problem kind's checks (:meth:`~.problems.Problem.precheck`;
        a custom loss is evaluated once on a sample W)."""
        p = point["problem"]
        problem_class(p["kind"]).precheck(p, point["x64"])

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        return {table: runs * vocabulary.save_count(point) for table in self.tables}

    def run_chunk(
        self, points: Sequence[Mapping[str, Any]], chunk: Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        return run_tables(points, chunk.runs, swept, pad_to=chunk.pad_to)

    def result(self, tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
        """The results table; with states, ``df.attrs["states"]`` holds them
        (:class:`rankflow.engine.states.States`, as :func:`rankflow.load_states` reads)."""
        df = tables[store.RESULTS]
        if self.states:
            df.attrs["states"] = states_of(tables[store.STATES])
        return df


CORE = CoreFamily()
# The core family of a config with save.states = true.
CORE_STATES = CoreFamily(states=True)


def plan(cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)`` of a resolved core config; ``chunk`` runs per chunk
    (default: :func:`default_chunk_size` of each structure)."""
    return engine.plan(CORE, cfg, chunk)


def execute(cfg: Mapping[str, Any], out: str | Path | None = None, **options: Any):
    """A resolved core config's sweep through the engine (:func:`rankflow.engine.execute`;
    ``options``: ``resume``, ``chunk``, ``executor``, ``slurm``, ``quiet``, ``result``);
    returns the family's result and a :class:`Summary`. With ``save.states``, as
    :data:`CORE_STATES`, once :func:`check_states` has passed."""
    if not cfg["save"]["states"]:
        return engine.execute(CORE, cfg, out, **options)
    result = options.get("result", True) or out is None
    check_states(cfg, out, options.get("chunk"), read_back=result)
    return engine.execute(CORE_STATES, cfg, out, **options)


# Default of RANKFLOW_MAX_STATES_GIB: the most GiB of states one sweep may write.
MAX_STATES_GIB = 16


def check_states(
    cfg: Mapping[str, Any], out: str | Path | None, chunk: int | None = None, read_back=True
) -> None:
    """Refuse, in one line naming ``save.states``, its size and the limit, a sweep whose
    states (:func:`state_bytes` per run, O(structures) to sum) exceed
    ``RANKFLOW_MAX_STATES_GIB`` (default :data:`MAX_STATES_GIB`), the disk free where
    ``out`` lies, or (``read_back``: the Python call's table, its states stacked from
    their rows) the host's free memory."""

    def sizes(point):  # one run's states on disk and read back, per structure
        return state_bytes(point), read_back_bytes(point)

    _, chunks = engine.plan(CORE_STATES, cfg, chunk, facts=sizes)
    groups = [(chunks.group_runs(g), f) for g, f in enumerate(chunks.facts)]
    need, held = sum(n * disk for n, (disk, _) in groups), sum(n * mem for n, (_, mem) in groups)
    runs = f"{chunks.runs:,} runs"
    limit = env_limit("RANKFLOW_MAX_STATES_GIB", MAX_STATES_GIB)
    if need > limit * 2**30:
        raise ConfigError(
            f"save.states: the states of {runs} need about {gib(need)}, more than the "
            f"limit of {gib(limit * 2**30)}; save less often, sweep fewer points, or "
            f"raise the limit with RANKFLOW_MAX_STATES_GIB={-(-need // 2**30)}"
        )
    fix = "save less often or sweep fewer points"
    if out is not None:
        check_fits(need, ["save.states"], runs, "writing the states", nearest_disk(out), fix)
    if read_back:
        check_fits(held, ["save.states"], runs, "reading the states back", host_memory(), fix)
