"""The states of a sweep's runs (``save.states``): the factors at the saves, read from
a results directory's states table (``DIR/states.parquet/``, :data:`.store.STATES`) or
from a table in memory, as arrays per run with a leading time axis.

The table (written by :func:`rankflow.core.program.states_table`) has one row per run ×
path × save: ``run_id``, ``path``, ``t``, ``status``, one column per factor (``A``,
``B``, or ``W_1 …``) holding its entries flattened row-major in the run's dtype, and
``shapes``, the JSON text ``{"A": [m, r], …}`` they are reshaped by. It is read with
:func:`.store.load`'s checks (only the chunks of the manifest's sweep).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .store import MANIFEST, STATES, ResultsError, load

__all__ = ["RunStates", "States", "StatesKeyError", "load_states", "states_of"]


@dataclass(frozen=True, eq=False)
class RunStates:
    """The factors of one run (one path) at its saves, read-only arrays with a leading
    time axis: ``t`` ``(saves,)`` (optimizer steps), ``status`` ``(saves,)`` (the
    results table's; the factors are NaN where it is not ``ok``), and ``factors``,
    name → ``(saves, rows, cols)``: ``A`` ``(saves, m, r)`` and ``B`` ``(saves, n, r)``
    at depth 2 (W = ABᵀ), ``W_1`` … ``W_L`` at depth L (W = W_L ⋯ W_1)."""

    run_id: int
    path: int
    t: np.ndarray
    status: np.ndarray
    factors: dict[str, np.ndarray]

    @property
    def A(self) -> np.ndarray:
        """``(saves, m, r)``: the left factor at every save (depth 2)."""
        return self._factor("A")

    @property
    def B(self) -> np.ndarray:
        """``(saves, n, r)``: the right factor at every save (depth 2)."""
        return self._factor("B")

    @property
    def W(self) -> tuple[np.ndarray, ...]:
        """Every factor in order: ``(A, B)``, or ``(W_1, …, W_L)`` at depth L."""
        return tuple(self.factors.values())

    def _factor(self, name: str) -> np.ndarray:
        if name not in self.factors:
            have = ", ".join(self.factors)
            raise AttributeError(
                f"run {self.run_id}: a depth-{len(self.factors)} run has factors {have} "
                f"(.W), not {name}"
            )
        return self.factors[name]


class States(Mapping):
    """The states of a sweep's runs (:func:`load_states`, or ``df.attrs["states"]`` of
    :func:`rankflow.run` with ``save.states = true``): a read-only mapping from
    ``(run_id, path)`` to :class:`RunStates`; ``states[run_id]`` is the run's one path
    (a stochastic run of several paths is indexed by the pair). Immutable: a copy of
    it (pandas deep-copies ``attrs`` with every operation) is the object itself."""

    def __init__(self, runs: Mapping[tuple[int, int], RunStates]):
        self._runs = dict(runs)
        self._paths: dict[int, list[int]] = {}
        for run_id, path in self._runs:
            self._paths.setdefault(run_id, []).append(path)

    def __getitem__(self, key: int | tuple[int, int]) -> RunStates:
        if isinstance(key, tuple):
            if key not in self._runs:
                raise StatesKeyError(f"states: no run_id {key[0]} path {key[1]} {self._held()}")
            return self._runs[key]
        paths = self._paths.get(int(key)) if isinstance(key, int | np.integer) else None
        if paths is None:
            raise StatesKeyError(f"states: no run_id {key!r} {self._held()}")
        if len(paths) > 1:
            raise StatesKeyError(
                f"states: run_id {key} has {len(paths)} paths; index states[{key}, p] with "
                f"p in 0…{max(paths)}"
            )
        return self._runs[int(key), paths[0]]

    def _held(self) -> str:
        ids = sorted(self._paths)
        span = f"run_ids {ids[0]}…{ids[-1]}" if ids else "no runs"
        return f"(these states hold {len(ids):,} runs: {span})"

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, key: object) -> bool:
        return key in self._runs or (isinstance(key, int | np.integer) and int(key) in self._paths)

    @property
    def run_ids(self) -> list[int]:
        """The run_ids held, ascending."""
        return sorted(self._paths)

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __deepcopy__(self, memo: dict) -> States:
        return self

    def __repr__(self) -> str:
        ids = self.run_ids
        span = f": run_ids {ids[0]}…{ids[-1]}" if ids else ""
        return f"States({len(self._runs):,} runs × paths{span})"


class StatesKeyError(ResultsError, KeyError):
    """A run_id (or path) that a :class:`States` does not hold: one line."""

    def __str__(self) -> str:
        return str(self.args[0])


def states_of(df: pd.DataFrame) -> States:
    """The :class:`States` of a states table (rows in the canonical order, as
    :func:`load` gives them): each run's rows stacked into ``(saves, rows, cols)``
    arrays by the shapes its ``shapes`` column records."""
    keys = df[["run_id", "path"]].to_numpy(np.int64)
    cut = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    bounds = zip([0, *cut.tolist()], [*cut.tolist(), len(df)])
    t, status = df["t"].to_numpy(np.float64), df["status"].astype(str).to_numpy()
    runs = {}
    for lo, hi in bounds if len(df) else ():
        factors = {}
        for name, shape in json.loads(df["shapes"].iat[lo]).items():
            x = np.stack(df[name].iloc[lo:hi].to_list()).reshape(hi - lo, *shape)
            factors[name] = _frozen(x)
        run_id, path = (int(v) for v in keys[lo])
        times, codes = _frozen(t[lo:hi].copy()), _frozen(status[lo:hi].copy())
        runs[run_id, path] = RunStates(run_id, path, times, codes, factors)
    return States(runs)


def _frozen(x: np.ndarray) -> np.ndarray:
    x.setflags(write=False)
    return x


def load_states(path: str | Path, *, strict: bool = False) -> States:
    """The factors at the saves of a results directory written with ``save.states =
    true``: a :class:`States`, ``(run_id, path)`` → :class:`RunStates` (``states[run_id]``
    for a run of one path), read with :func:`load`'s checks (only the manifest's chunks;
    missing ones warned of, or with ``strict`` raised). A directory without states, or
    not a results directory, raises :class:`ResultsError` in one line.

    Examples:
      A theory function at a run's own states: T1's gap and the balance matrix at the
      last save equal the table's ``frob_minus_nuc`` and ``balance_gap`` there.

      >>> import tempfile
      >>> import numpy as np
      >>> import rankflow
      >>> from rankflow import theory
      >>> cfg = {"x64": True, "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
      ...        "model": {"r": 2}, "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
      ...        "save": {"t1": 500, "num": 3, "states": True}}
      >>> with tempfile.TemporaryDirectory() as out:
      ...     df = rankflow.run(cfg, out=out)
      ...     states = rankflow.load_states(out)
      >>> run = states[0]  # run_id 0, its one path
      >>> run.t.tolist(), run.A.shape, run.B.shape
      ([0.0, 250.0, 500.0], (3, 2, 2), (3, 2, 2))
      >>> D = theory.balance(run.A[-1], run.B[-1])
      >>> last = df.iloc[-1]
      >>> bool(abs(np.linalg.norm(D) - last["balance_gap"]) < 1e-12)
      True
      >>> bool(abs(theory.t1_gap(run.A[-1], run.B[-1]) - last["frob_minus_nuc"]) < 1e-12)
      True
    """
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p}: no such results directory")
    if p.is_dir() and (p / MANIFEST).is_file() and not (p / STATES).exists():
        raise ResultsError(
            f"{p}: holds no states (its sweep ran with save.states = false); run it with "
            f"save.states = true (--set save.states=true) into a new --out"
        )
    if p.is_file() or (p.is_dir() and p.name != STATES and not (p / MANIFEST).exists()):
        raise ResultsError(f"{p}: not a rankflow results directory (no {MANIFEST})")
    return states_of(load(p / STATES if p.name != STATES else p, strict=strict))
