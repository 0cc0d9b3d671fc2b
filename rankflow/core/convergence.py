"""Strong and weak convergence of an SDE config's solver against the step ``dt``, on
shared Brownian paths, and Itô's formula for a function of the state from the vector
fields rankflow integrates (docs/theory.md, T9, T10; issue #15's solver rules).

Every path of a run is solved at each ``dt`` and at a finer reference ``dt_ref`` from
the same data, start and noise key as :class:`rankflow.core.program.Program` uses for it
(``Program.start``), with one ``VirtualBrownianTree`` per path shared by every ``dt``
(:func:`rankflow.numerics.solve.setup`'s ``brownian_tol``). Its tolerance is
``dt_ref / 8``: the tree bisects ``[0, t1]`` down to nodes ``t1·2^{-k}`` finer than every
step, so when the steps are dyadic fractions of ``t1`` every step end is a node and every
increment is an exact draw from the one path (no interpolation inside the tree's last
level), whatever ``dt``; the extra levels cost only a logarithmic factor per step.

Strong error: ``E‖θ_dt(T) − θ_ref(T)‖_F`` (and the same for D = AᵀA − BᵀB); weak error:
``E[f(θ_dt(T))] − E[f(θ_ref(T))]`` (or minus an exact value), both as means over paths,
their orders fitted as slopes in log–log with standard errors from the spread over
paths (delta method over the paths' joint covariance across ``dt``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..numerics.solve import setup, solve
from . import vocabulary
from .dynamics import dynamics_of
from .dynamics.vector_fields import factors_of, initial_state
from .program import PARAM_KEYS, params_of, program_for

__all__ = [
    "BROWNIAN_TOL_PER_DT",
    "balance_of",
    "errors",
    "fit_order",
    "ito_generator",
    "solve_paths",
    "strong_order",
    "weak_order",
]

# The Brownian tree's tolerance as a fraction of the reference step (module docstring).
BROWNIAN_TOL_PER_DT = 1 / 8


def balance_of(A, B):
    """``D = AᵀA − BᵀB`` over the last two axes (stacks of factors allowed)."""
    return jnp.swapaxes(A, -1, -2) @ A - jnp.swapaxes(B, -1, -2) @ B


def _check_dyadic(t1: float, ts: np.ndarray, dts: Sequence[float]) -> None:
    """Every save and step end must be a node of the Brownian tree: ``dt = t1·2^{-k}``
    and saves on multiples of the coarsest ``dt``."""
    for dt in dts:
        k = np.log2(t1 / dt)
        if not np.isclose(k, np.round(k), rtol=0, atol=1e-9):
            raise ValueError(f"dt: must be save.t1 / 2^k (= {t1} / 2^k), got {dt}")
    coarse = max(dts)
    q = ts / coarse
    if not np.allclose(q, np.round(q), rtol=0, atol=1e-9):
        raise ValueError(f"save times: must be multiples of the coarsest dt {coarse}")


def _batch(point: Mapping[str, Any], paths: int, program) -> dict[str, jax.Array]:
    rows = [params_of(point, path) for path in range(paths)]
    typed = [program.typed(r) for r in rows]
    return {k: jnp.stack([t[k] for t in typed]) for k in PARAM_KEYS}


@functools.lru_cache(maxsize=32)
def _compiled(key: str, dt: float, method: str, tol: float, n_steps: int, point_box):
    """The jitted, path-vmapped solve of one structure at one ``dt``."""
    point = point_box.point
    program = program_for(point, save="states")
    kind, problem = point["dynamics"]["kind"], program.problem
    if not dynamics_of(kind).sde:
        raise ValueError(f"dynamics.kind: convergence needs an SDE, got {kind!r}")
    field = program.drift()

    def observe(data, y):
        A, B = factors_of(kind, y)
        return {"A": A, "B": B, "loss": problem.loss(A @ B.T, data)}

    def one(p):
        data, theta0, hyper, key = program.start(p)
        fixed = {"method": method, "adaptive": False, "dt": dt, "max_steps": n_steps + 1}
        how = setup(fixed, program.ts, key=key, brownian_tol=tol)
        saved = solve(
            how.terms(field, program.noise(theta0)),
            initial_state(kind, theta0),
            (data, hyper),
            how,
            observe=functools.partial(observe, data),
        )
        return saved.ys

    return jax.jit(jax.vmap(one))


class _Box:
    """A point, hashable by its structure key (for the compile cache)."""

    def __init__(self, point, key):
        self.point, self.key = point, key

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return self.key == other.key


def solve_paths(
    point: Mapping[str, Any],
    dt: float,
    paths: int,
    *,
    brownian_tol: float,
    method: str | None = None,
) -> dict[str, np.ndarray]:
    """Paths ``0..paths−1`` of a resolved SDE point (``stochastic_flow`` or
    ``stochastic_momentum_flow``, any ``dynamics.noise``) solved with fixed steps ``dt``
    on the Brownian tree of tolerance ``brownian_tol``: ``A`` (paths, saves, m, r), ``B``
    (paths, saves, n, r), ``loss`` (paths, saves), ``D`` (paths, saves, r, r) at the
    point's save times ``ts``. ``method`` overrides ``solver.method`` (it goes to
    :func:`rankflow.numerics.solve.setup` unchecked: the config layer's refusals do not
    apply)."""
    program = program_for(point, save="states")
    method = method or point["solver"]["method"]
    n_steps = int(np.ceil(np.round(program.ts[-1] / dt, 9)))
    key = program.key + f"|{dt}|{method}|{brownian_tol}"
    fn = _compiled(key, float(dt), method, float(brownian_tol), n_steps, _Box(point, key))
    with jax.enable_x64(point["x64"]):
        out = jax.tree.map(np.asarray, fn(_batch(point, paths, program)))
    out["D"] = np.asarray(balance_of(out["A"], out["B"]))
    out["ts"] = program.ts
    return out


def errors(
    point: Mapping[str, Any],
    dts: Sequence[float],
    dt_ref: float,
    paths: int,
    *,
    method: str | None = None,
) -> pd.DataFrame:
    """The tidy table of errors against the reference solve (``dt_ref``, same paths):
    one row per ``dt``, path and save time, with ``theta_error`` ``‖θ_dt − θ_ref‖_F``
    (A and B together), ``balance_error`` ``‖D_dt − D_ref‖_F``, ``tr_balance``,
    ``loss`` and their reference values ``tr_balance_ref``, ``loss_ref``."""
    ts = np.asarray(vocabulary.save_times(point))
    _check_dyadic(float(ts[-1]), ts, [*dts, dt_ref])
    tol = BROWNIAN_TOL_PER_DT * dt_ref
    ref = solve_paths(point, dt_ref, paths, brownian_tol=tol, method=method)
    frames = []
    for dt in dts:
        out = solve_paths(point, dt, paths, brownian_tol=tol, method=method)
        theta_err = np.sqrt(
            np.sum((out["A"] - ref["A"]) ** 2, axis=(-2, -1))
            + np.sum((out["B"] - ref["B"]) ** 2, axis=(-2, -1))
        )
        cols = {
            "theta_error": theta_err,
            "balance_error": np.sqrt(np.sum((out["D"] - ref["D"]) ** 2, axis=(-2, -1))),
            "tr_balance": np.trace(out["D"], axis1=-2, axis2=-1),
            "tr_balance_ref": np.trace(ref["D"], axis1=-2, axis2=-1),
            "loss": out["loss"],
            "loss_ref": ref["loss"],
        }
        P, S = theta_err.shape
        frame = {"dt": np.full(P * S, dt), "path": np.repeat(np.arange(P), S), "t": np.tile(ts, P)}
        frame.update({k: v.reshape(-1) for k, v in cols.items()})
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True)


def fit_order(dts: Sequence[float], per_path: np.ndarray) -> dict[str, Any]:
    """The slope of ``log |mean over paths|`` against ``log dt``: ``per_path`` is
    (paths, len(dts)), column i the per-path values whose mean is the error at
    ``dts[i]``. Returns ``order``, its standard error ``se`` (delta method: the
    covariance over paths of the column means, so correlation from shared Brownian
    paths is accounted for), and ``errors`` and ``error_se`` per ``dt``."""
    per_path = np.asarray(per_path, np.float64)
    P = per_path.shape[0]
    mean = per_path.mean(axis=0)
    cov = np.cov(per_path, rowvar=False, ddof=1).reshape(len(dts), len(dts)) / P
    x = np.log(np.asarray(dts, np.float64))
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    order = float(w @ np.log(np.abs(mean)))
    # d log|ē_i| = dē_i / ē_i
    g = w / mean
    se = float(np.sqrt(g @ cov @ g))
    return {"order": order, "se": se, "errors": mean, "error_se": np.sqrt(np.diag(cov))}


def _last(table: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    last = table[table["t"] == table["t"].max()]
    wide = last.pivot(index="path", columns="dt", values=column)
    return np.asarray(wide.columns, np.float64), wide.to_numpy()


def strong_order(table: pd.DataFrame, column: str = "theta_error") -> dict[str, Any]:
    """The fitted strong order of an :func:`errors` table: the mean over paths of
    ``column`` at the last save against ``dt`` (:func:`fit_order`)."""
    dts, per_path = _last(table, column)
    return fit_order(dts, per_path) | {"dts": dts}


def weak_order(
    table: pd.DataFrame, observable: str = "tr_balance", exact: float | None = None
) -> dict[str, Any]:
    """The fitted weak order of an :func:`errors` table: ``E[f_dt(T)] − E[f_ref(T)]``
    at the last save for ``f`` = ``observable`` (``tr_balance`` or ``loss``), or
    ``E[f_dt(T)] − exact``; differences taken path by path (shared Brownian paths make
    their spread that of the strong error, not of f)."""
    dts, values = _last(table, observable)
    if exact is None:
        _, ref = _last(table, observable + "_ref")
        diffs = values - ref
    else:
        diffs = values - exact
    return fit_order(dts, diffs) | {"dts": dts}


def ito_generator(
    f: Callable, field: Callable, noise, t, y, args, control_shape: tuple[int, ...]
) -> tuple[Any, Any]:
    """Itô's formula for ``f`` along ``dy = b(y) dt + Σ_j σ_j(y) dβ_j``: returns the
    drift ``f'(y)b + ½ Σ_j f''(y)[σ_j, σ_j]`` and the stacked dβ coefficients
    ``f'(y)σ_j`` (leading axis j), with ``b = field(t, y, args)`` and the columns
    ``σ_j = noise.vf_prod(t, y, args, e_j)`` for the unit controls ``e_j`` of shape
    ``control_shape``: the SDE exactly as diffrax steps it (Euler–Maruyama's
    increment is ``b dt + vf_prod(dβ)``), derivatives by autodiff."""
    dtype = jax.tree.leaves(y)[0].dtype
    size = int(np.prod(control_shape))
    units = jnp.eye(size, dtype=dtype).reshape((size, *control_shape))
    columns = jax.vmap(lambda e: noise.vf_prod(t, y, args, e))(units)

    def first(v):
        return jax.jvp(f, (y,), (v,))[1]

    def second(v):
        return jax.jvp(lambda z: jax.jvp(f, (z,), (v,))[1], (y,), (v,))[1]

    coeffs = jax.vmap(first)(columns)
    ito = jax.tree.map(lambda x: 0.5 * jnp.sum(x, axis=0), jax.vmap(second)(columns))
    drift = jax.tree.map(jnp.add, first(field(t, y, args)), ito)
    return drift, coeffs
