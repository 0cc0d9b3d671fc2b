"""One structural config → one compiled, vmapped program → a tidy results table.

A *point* is one resolved config (a sweep expands into many). Points that differ only
in the numeric keys of ``config.NUMERIC_KEYS`` share one :class:`Program`: those
values (and the Monte Carlo path index) are traced inputs, batched with ``vmap``, so a
sweep over 100 values of λ compiles once. So is sgd's minibatch size
(``config.PROGRAM_KEYS``): its runs draw ``dynamics.batch_pad`` points and use the first
``dynamics.batch``.

Programs save observables only (``SaveAt(ts, fn=...)`` for flows, a scan that computes
them at the save steps for optimizers), never whole trajectories; with ``save.states``
they also return the factors at the saves, the sweep's second table
(:func:`states_table`, ``DIR/states.parquet``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..config.fields import traced_in
from ..engine import programs
from ..engine.programs import TRACE_COUNTS
from ..engine.status import STATUS, with_status
from ..engine.store import RESULTS, STATES
from ..numerics import batching
from ..numerics import solve as solve_lib
from ..numerics.batching import per_device, shard
from ..numerics.schedules import kinks, schedule_columns, schedule_of, unit_clock
from ..numerics.solve import max_abs
from . import config as config_lib
from . import vocabulary
from .dynamics import dynamics_of
from .dynamics.vector_fields import drift_field, factor_grads, factors_of, initial_state, noise_term
from .factors import depth_observable_names, depth_observables, init_depth_factors, inner_widths
from .factors import product as product_of
from .observables import OBSERVABLES, num_singular_values, observables
from .optimizers import iterate, make_optimizer
from .problems import Problem, draw_minibatch, init_factors, make_problem

__all__ = [
    "PARAM_KEYS",
    "Program",
    "STATUS",
    "TRACE_COUNTS",
    "factor_names",
    "params_of",
    "program_for",
    "run_runs",
    "run_tables",
    "states_table",
]

# Keys of the per-run parameter batch: the numeric config keys, the minibatch size (sgd
# traces it: config.PROGRAM_KEYS) and the path index.
PARAM_KEYS = config_lib.PROGRAM_KEYS + ("path",)
# The dynamics' traced values by their names in the section (lam, eta, sigma, mu): the
# ``hyper`` dict the vector fields and optimizers read.
HYPER = traced_in(config_lib.SCHEMA, "dynamics")
# Batches of adaptive solves from this many runs on have their batching measured.
MEASURE_FROM = 16
# Structural columns always present in a table (swept structural keys are added).
STRUCT_COLUMNS = ("problem.kind", "init.kind", "dynamics.kind", "solver.method", "model.r")


@dataclass
class Program:
    """The compiled program of one structure. ``run(params)`` takes a dict of 1-d
    arrays (one entry per run, keys ``PARAM_KEYS``) and returns numpy arrays:
    every observable with shape ``(runs, saves)``, ``sv`` ``(runs, saves, k)`` and
    ``status`` ``(runs, saves)`` (codes into ``STATUS``).

    With ``save = "states"`` it returns the factors ``theta = (A, B)`` at the saves
    instead of observables (and the momentum ``M`` of momentum flows): memory
    O(saves × state), for analyses that need trajectories (``rankflow compare``, tests).
    A point with ``save.states = true`` returns both: the observables and ``theta``
    (leaves ``(runs, saves, rows, cols)``, NaN where the status is not ok).
    """

    point: dict[str, Any]
    key: str
    save: str = "observables"
    problem: Problem = field(init=False)
    ts: np.ndarray = field(init=False)
    dtype: Any = field(init=False)

    def __post_init__(self):
        self.problem = make_problem(self.point)
        self.ts = np.asarray(vocabulary.save_times(self.point))
        self.schedule = schedule_of(self.point["dynamics"], float(self.ts[-1]))
        self.dtype = jnp.float64 if self.point["x64"] else jnp.float32
        self.kind = self.point["dynamics"]["kind"]
        self.dynamics = dynamics_of(self.kind)  # the registered kind: what it can do
        self.depth = self.point["model"].get("depth", 2)
        self.widths = inner_widths(self.point["model"])
        self._jitted = jax.jit(per_device(jax.vmap(self._single)))
        # Adaptive solves: how to batch them is measured (rankflow.numerics.batching).
        self._measured = self.continuous and self.point["solver"]["adaptive"]

    @property
    def continuous(self) -> bool:
        return self.dynamics.continuous

    @property
    def keeps_states(self) -> bool:
        """Whether the observables come with the factors (``save.states``)."""
        return self.save == "observables" and bool(self.point["save"].get("states"))

    @property
    def num_sv(self) -> int:
        if self.depth != 2:
            return min(*self.problem.shape, *self.widths)
        return num_singular_values(*self.problem.shape, self.point["model"]["r"])

    @property
    def observable_names(self) -> tuple[str, ...]:
        """The scalar columns of this program's table (``sv_1 …`` follow)."""
        return OBSERVABLES if self.depth == 2 else depth_observable_names(self.depth)

    def run(
        self, params: Mapping[str, np.ndarray], *, measure: bool = True
    ) -> dict[str, np.ndarray]:
        """Run a batch of runs. With several devices, the batch is sharded across all of
        them (padded to a multiple of their number); each run's arithmetic is the same
        whatever the number of devices. ``measure=False``: adaptive solves are mapped
        without measuring the batching (one compilation; for one-off batches, where the
        measurement's compilations would cost more than they save)."""
        n = len(params["seed"])
        with jax.enable_x64(self.point["x64"]):
            batch = shard({k: params[k] for k in PARAM_KEYS}, self._param_dtype)
            if self._measured:
                out = self._run_adaptive(batch, n, measure)
            else:
                out = self._jitted(batch)
            return jax.tree.map(lambda x: np.asarray(x)[:n], out)

    def _run_adaptive(self, batch, n: int, measure: bool = True):
        """A batch of adaptive solves. Under ``vmap`` they step in lockstep until the
        slowest run is done; one after another (``lax.map``) each takes its own steps.
        Which is faster depends on the spread of step counts, the sizes and the machine,
        so from ``MEASURE_FROM`` runs on it is measured once per structure on a probe of
        the batch (:func:`rankflow.numerics.batching.choose`) and cached; smaller batches use an
        earlier measurement of the structure, or ``lax.map`` (faster in every case
        measured here: 64 Tsit5 solves 0.52 s mapped, 2.84 s vmapped; BENCHMARKS.md)."""
        if measure and (n >= MEASURE_FROM or self.key in batching.chosen()):
            return batching.run(self._single, batch, self.key)
        return batching.run(self._single, batch, self.key, strategy="map")

    def _param_dtype(self, k: str):
        return jnp.int32 if k in ("seed", "problem.seed", "path", "dynamics.batch") else self.dtype

    def data(self, params: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The problem data of one run (``params``: one run's values, as from
        :func:`params_of`), exactly as the program draws them."""
        with jax.enable_x64(self.point["x64"]):
            return self._make_data(self.typed(params))

    def _make_data(self, p):
        data_key = jax.random.fold_in(jax.random.PRNGKey(p["problem.seed"]), 0)
        return self.problem.make_data(data_key, p["problem.noise"], self.dtype)

    # -- the traced program --------------------------------------------------------------

    def start(self, p: Mapping[str, jax.Array]):
        """One run's ``(data, theta0, hyper, noise_key)`` from its traced values ``p``
        (keys ``PARAM_KEYS``, as typed arrays): what the program starts from, so that
        analyses (``rankflow.core.convergence``) can re-solve a run without copying its PRNG
        layout."""
        base = jax.random.PRNGKey(p["seed"])
        init_key = jax.random.fold_in(base, 1)
        # Paths of one run share data and start, and differ in their noise only.
        noise_key = jax.random.fold_in(jax.random.fold_in(base, 2), p["path"])
        data = self._make_data(p)
        theta0 = self._init(init_key, data, p)
        hyper = {k: p[f"dynamics.{k}"] for k in HYPER}
        if self.dynamics.minibatches:
            hyper["batch"] = p["dynamics.batch"]  # traced: b of batch_pad (config.py)
        return data, theta0, hyper, noise_key

    def _init(self, key, data, p):
        """θ(0): the pair ``(A, B)`` at depth 2, ``(W_1, …, W_L)`` beyond."""
        i = self.point["init"]
        if self.depth != 2:
            return init_depth_factors(
                i["kind"],
                key,
                data.get("target"),
                self.problem.shape,
                self.widths,
                p["init.scale"],
                p["init.imbalance"],
                i.get("pairs") or range(1, self.depth),
                self.dtype,
            )
        return init_factors(
            i["kind"],
            key,
            self.problem,
            data,
            self.point["model"]["r"],
            p["init.scale"],
            p["init.imbalance"],
            self.dtype,
        )

    def typed(self, params: Mapping[str, Any]) -> dict[str, jax.Array]:
        """One run's values (as from :func:`params_of`) as the typed arrays the program
        traces (call under ``jax.enable_x64(point["x64"])``)."""
        return {k: jnp.asarray(params[k], self._param_dtype(k)) for k in PARAM_KEYS}

    def _single(self, p: dict[str, jax.Array]) -> dict[str, jax.Array]:
        TRACE_COUNTS[self.key] += 1
        data, theta0, hyper, noise_key = self.start(p)
        if self.continuous:
            obs, reached, max_steps_hit = self._integrate(theta0, data, hyper, noise_key)
        else:
            obs, reached, max_steps_hit = self._iterate(theta0, data, hyper, noise_key)
        return self._finish(obs, reached, max_steps_hit)

    def _observe(self, state, data, hyper):
        """The saved values of one state: the factors themselves (``save = "states"``) or
        the observables, depth 2's of ``(A, B)`` or depth L's of ``(W_1, …, W_L)``."""
        theta = factors_of(self.kind, state) if self.continuous else state
        if self.save == "states":
            out = {"theta": theta}
            if self.continuous and self.dynamics.momentum:
                out["M"] = state[1]
        elif self.depth != 2:
            loss = self.problem.loss(product_of(theta), data)
            out = depth_observables(theta, loss, hyper["lam"], self.point["save"]["rank_tol"])
        else:
            A, B = theta
            loss = self.problem.loss(A @ B.T, data)
            out = observables(A, B, loss, hyper["lam"], self.point["save"]["rank_tol"])
        if self.keeps_states:
            out["theta"] = theta
        out["_max_abs"] = max_abs(theta)
        return out

    def _finish(self, obs, reached, max_steps_hit):
        """Status per save: diverged from the first save whose state is non-finite or
        beyond ``solver.diverge_norm``, whose loss or any observable is not finite
        (depth L's product of large factors can overflow while every factor is within
        the norm: :func:`~rankflow.engine.status.with_status`), or that the solver never
        reached; observables are NaN wherever the status is not ok."""
        max_abs = obs.pop("_max_abs")
        ok = (max_abs <= self.point["solver"]["diverge_norm"]) & reached
        return with_status(obs, ok, reached, max_steps_hit)

    def drift(self):
        """The (drift) vector field of this program's flow, with its schedule."""
        return drift_field(self.kind, self.problem, self.schedule)

    def noise(self, theta0):
        """The SDE's diffusion as :meth:`rankflow.numerics.solve.Setup.terms` takes it (a
        function of the Brownian path's factory): its noise model, problem, batch and
        schedule, from θ(0)."""
        return functools.partial(
            noise_term,
            self.kind,
            theta0,
            model=self.point["dynamics"]["noise"],
            problem=self.problem,
            batch=self.point["dynamics"]["batch"],
            schedule=self.schedule,
        )

    def _integrate(self, theta0, data, hyper, noise_key):
        """The flow of ``dynamics.kind`` from θ(0) = ``theta0``, solved as ``[solver]``
        says (:func:`rankflow.numerics.solve.setup`), with its Brownian motion from
        ``noise_key`` (SDEs): the observables at the saves."""
        kind = self.kind
        sde = self.dynamics.sde
        setup = solve_lib.setup(
            self.point["solver"],
            self.ts,
            key=noise_key if sde else None,
            watched=functools.partial(factors_of, kind),
            jump_ts=kinks(self.schedule),
        )
        return solve_lib.solve(
            setup.terms(self.drift(), self.noise(theta0) if sde else None),
            initial_state(kind, theta0),
            (data, hyper),
            setup,
            observe=lambda y: self._observe(y, data, hyper),
        )

    def _optimizer(self, kind: str, hyper, key):
        """``make_optimizer`` of ``kind``, with the learning-rate schedule if any."""
        if self.schedule.constant:
            # The constant-η call keeps make_optimizer's three-argument form, which a
            # stand-in optimizer (tests/claims/test_mutants_discrete.py) also takes.
            return make_optimizer(kind, hyper, key)
        return make_optimizer(kind, hyper, key, self.schedule)

    def _iterate(self, theta0, data, hyper, noise_key):
        """The optimizer of ``dynamics.kind`` from ``theta0``, its noise and minibatches
        from ``noise_key``: the observables at the saves
        (:func:`rankflow.core.optimizers.iterate`)."""
        opt = self._optimizer(self.kind, hyper, jax.random.fold_in(noise_key, 0))
        if self.point["dynamics"]["noise"] == "gradient":
            # sgd_gaussian with gradient-space noise: G + σξ, ξ fresh at every step k,
            # into the step of its noiseless kind (gd).
            opt = self._optimizer(self.dynamics.noiseless, hyper, noise_key)
            grad_key = jax.random.fold_in(noise_key, 2)
            noisy_grads = factor_grads(self.problem, w_noise=True)

            def grads(theta, k):
                key = jax.random.fold_in(grad_key, k)
                xi = jax.random.normal(key, self.problem.shape, jnp.float32).astype(self.dtype)
                return noisy_grads(theta, data, hyper["sigma"] * xi)
        elif self.dynamics.minibatches:
            batch_grads = factor_grads(self.problem, minibatch=True)
            batch_key = jax.random.fold_in(noise_key, 1)
            pad = self.point["dynamics"]["batch_pad"]

            def grads(theta, k):
                # A fresh minibatch, without replacement, at every step k: the first
                # hyper["batch"] of batch_pad points drawn (one program for every b).
                key = jax.random.fold_in(batch_key, k)
                idx = draw_minibatch(key, self.problem.samples, hyper["batch"], pad)
                return batch_grads(theta, data, idx)
        else:
            full_grads = factor_grads(self.problem)

            def grads(theta, k):
                return full_grads(theta, data)

        steps = np.rint(self.ts).astype(np.int64)
        return iterate(opt, grads, theta0, steps, lambda theta: self._observe(theta, data, hyper))


def program_for(point: Mapping[str, Any], save: str = "observables") -> Program:
    """The (cached) program of a point's structure."""
    key = config_lib.structure_key(point) + save
    return programs.program(key, lambda: Program(dict(point), key, save))


def params_of(point: Mapping[str, Any], path: int) -> dict[str, Any]:
    """One run's traced values (keys ``PARAM_KEYS``): the point's numeric keys, with
    ``problem.seed`` defaulting to ``seed``, and the path index."""
    flat = config_lib.flatten(point)
    out = {k: flat[k] for k in config_lib.PROGRAM_KEYS}
    if out["problem.seed"] is None:
        out["problem.seed"] = out["seed"]
    out["path"] = path
    return out


def run_runs(
    points: Sequence[Mapping[str, Any]],
    runs: Sequence[tuple[int, int]],
    swept: Sequence[str],
    pad_to: int | None = None,
) -> pd.DataFrame:
    """Run ``runs`` — ``(point index, path)`` pairs of one structure — as one batch of
    the structure's program and return their rows. ``pad_to`` pads the batch (with
    copies of its last run, dropped afterwards) so that every chunk of a sweep has the
    same shape and the program compiles once."""
    return run_tables(points, runs, swept, pad_to)[RESULTS]


def run_tables(
    points: Sequence[Mapping[str, Any]],
    runs: Sequence[tuple[int, int]],
    swept: Sequence[str],
    pad_to: int | None = None,
) -> dict[str, pd.DataFrame]:
    """:func:`run_runs`'s batch as the sweep's tables: ``{RESULTS: rows}``, and with
    ``save.states`` also ``{STATES: states_table(...)}``, from one run of the program."""
    ids, paths = runs.arrays() if hasattr(runs, "arrays") else _run_arrays(runs)
    first = points[int(ids[0])]
    program = program_for(first)
    params = batch_of(points, ids, paths, first)
    padded = {
        k: np.concatenate([v, np.repeat(v[-1:], max(0, (pad_to or 0) - len(v)))])
        for k, v in params.items()
    }
    out = jax.tree.map(lambda x: x[: len(ids)], program.run(padded))
    tables = {RESULTS: _table(program, first, ids, paths, params, out, swept)}
    if program.keeps_states:
        tables[STATES] = states_table(program, ids, paths, out)
    return tables


def factor_names(depth: int) -> tuple[str, ...]:
    """The states table's factor columns: ``("A", "B")`` at depth 2 (W = ABᵀ),
    ``("W_1", …, "W_L")`` beyond (W = W_L ⋯ W_1)."""
    return ("A", "B") if depth == 2 else tuple(f"W_{j + 1}" for j in range(depth))


def states_table(program: Program, ids, paths, out) -> pd.DataFrame:
    """The factors of a batch of runs at their saves (``out["theta"]``: leaves ``(runs,
    saves, rows, cols)``), one row per run × path × save like the results table:
    ``run_id``, ``path``, ``t``, ``status``, each factor as one column of its entries
    flattened row-major (the run's dtype, bit for bit: A ``m·r``, B ``n·r``; depth L
    W_j ``d_j·d_{j−1}``), and ``shapes``, the JSON text ``{"A": [m, r], …}`` that
    :func:`rankflow.engine.states.states_of` reshapes them by."""
    T, n = len(program.ts), len(ids)
    cols = _id_columns(program, ids, paths, out)
    shapes = {}
    for name, x in zip(factor_names(program.depth), out["theta"]):
        cols[name] = list(np.ascontiguousarray(x).reshape(n * T, -1))
        shapes[name] = list(x.shape[2:])
    cols["shapes"] = [json.dumps(shapes)] * (n * T)
    return pd.DataFrame(cols)


def _id_columns(program: Program, ids, paths, out) -> dict[str, Any]:
    """The columns that say which row is which, in every table of a batch of runs:
    ``run_id``, ``path`` and ``t`` (run-major, saves fastest) and ``status``."""
    T, n = len(program.ts), len(ids)
    return {
        "run_id": np.repeat(ids, T),
        "path": np.repeat(paths, T),
        "t": np.tile(program.ts, n),
        "status": pd.Categorical.from_codes(
            out["status"].reshape(-1).astype(np.int64), categories=list(STATUS)
        ),
    }


def _run_arrays(runs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.asarray(list(runs), np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def batch_of(
    points: Sequence[Mapping[str, Any]],
    ids: np.ndarray,
    paths: np.ndarray,
    first: Mapping[str, Any],
) -> dict[str, np.ndarray]:
    """The traced values (``PARAM_KEYS``) of the runs ``(ids[j], paths[j])`` of one
    structure (``first``: any point of it), one array per key. Points of a sweep
    (:class:`~rankflow.config.points.Points`) are read by index arithmetic, without
    making a config per run: the last run is made in full and checked against it (the
    core's ``derive`` writes no traced key); other sequences, point by point."""
    column = getattr(points, "column", None)
    if column is not None:
        out = {k: column(k, ids, first) for k in config_lib.PROGRAM_KEYS}
        if out["problem.seed"].dtype == object:  # unset: the top-level seed
            out["problem.seed"] = out["seed"]
        out["path"] = np.asarray(paths, np.int64)
        last = params_of(points[int(ids[-1])], int(paths[-1]))
        if all(out[k][-1] == v and type(out[k][-1].item()) is type(v) for k, v in last.items()):
            return out
    rows = [params_of(points[i], p) for i, p in zip(ids.tolist(), paths.tolist())]
    return {k: np.array([r[k] for r in rows]) for k in PARAM_KEYS}


def _table(program: Program, point, ids, paths, params, out, swept) -> pd.DataFrame:
    """The rows of a batch of runs of one structure (``point``: any of its points;
    ``ids``, ``paths``: the runs; ``params``: the batch, padded or not). Every run of a
    structure has the same structural values, so those columns come from ``point``
    once (a list, a width list or a ragged one, as its text); the numeric ones from
    ``params`` (as ``np.array`` of the runs' values, the dtypes those of the values);
    the observables and singular values as one float64 block."""
    T = len(program.ts)
    n = len(ids)
    cols = _id_columns(program, ids, paths, out)
    for k in config_lib.NUMERIC_KEYS:
        cols[k] = np.repeat(params[k][:n], T)
    depth = ("model.depth",) if program.depth != 2 else ()
    flat = config_lib.flatten(point)
    for k in dict.fromkeys(STRUCT_COLUMNS + depth + tuple(swept)):
        if k in params:  # a swept dynamics.batch: each run's own (one program for all)
            cols[k] = np.repeat(params[k][:n], T)
            continue
        v = flat[k]
        if isinstance(v, list):  # widths (depth L), singular values, save times: text
            v = str(v)
        if k.startswith("solver.") and not program.continuous:
            v = None  # optimizers use no ODE solver
        cols[k] = np.repeat([v] * n, T)
    for k, v in schedule_columns(
        "dynamics", program.point["dynamics"], program.schedule.t1
    ).items():
        cols[k] = np.repeat([v] * n, T)
    if not program.schedule.constant:
        clock = unit_clock(program.ts, program.schedule, not program.continuous)
        cols["lr_clock"] = np.repeat(params["dynamics.eta"][:n], T) * np.tile(clock, n)
    names = list(program.observable_names)
    values = np.concatenate([np.stack([out[m] for m in names], -1), out["sv"]], -1)
    sv = [f"sv_{j + 1}" for j in range(out["sv"].shape[-1])]
    body = pd.DataFrame(values.reshape(n * T, -1).astype(np.float64), columns=names + sv)
    return pd.concat([pd.DataFrame(cols), body], axis=1)
