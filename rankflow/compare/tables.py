"""The tables of a comparison (columns in :data:`COLUMNS`), from the saved states of the
optimizer's and the flow's runs: ``trajectory`` (T8), ``contraction`` (gd, T5),
``order`` (deterministic pairs, T8) and ``sde`` (sgd_gaussian with parameter noise, T6);
the columns of the SME tables ``moments`` and ``weak`` (built in :mod:`.sme`) too."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import theory
from ..core.program import STATUS, Program, params_of

__all__ = [
    "COLUMNS",
    "NOISE_SETTING",
    "SETTING",
    "contraction_table",
    "frame",
    "order_table",
    "save_index",
    "sde_table",
    "setting_of",
    "trajectory_table",
]

# The setting of a comparison, repeated in every table so that figures read it.
SETTING = (
    "dynamics.kind",
    "flow.kind",
    "problem.kind",
    "problem.m",
    "problem.n",
    "model.r",
    "init.kind",
    "solver.method",
    "solver.adaptive",
    "solver.dt",
    "x64",
    "dynamics.eta",
    "dynamics.lam",
    "dynamics.sigma",
    "dynamics.mu",
)

# The noise model of the SME tables' pairs (only those tables carry it).
NOISE_SETTING = ("dynamics.noise", "dynamics.batch", "problem.samples")

COLUMNS: dict[str, tuple[str, ...]] = {
    # One row per save time of the config (t in steps).
    "trajectory": SETTING
    + (
        "t",
        "measure",  # "paths" (deterministic) or "mean over K paths"
        "distance",  # ‖θ_k − θ(k)‖_F (of the means over paths for sgd_gaussian)
        "relative_distance",  # distance / ‖θ(k)‖_F
        "mc_floor",  # sgd_gaussian: √(Σ Var/K) of both, the distance of equal means; NaN
        "optimizer.balance_gap",  # ‖AᵀA − BᵀB‖_F (mean over paths)
        "flow.balance_gap",
        "optimizer.balance_trace",  # tr(AᵀA − BᵀB) (mean over paths)
        "flow.balance_trace",
        "optimizer.status",  # worst status over paths: ok / diverged / max_steps
        "flow.status",
    ),
    # gd: one row per step k of the window; the ratio is from step k to k + 1.
    "contraction": SETTING
    + (
        "t",
        "gap",  # ‖D_k‖_F
        "ratio",  # ‖D_{k+1}‖_F / ‖D_k‖_F, measured
        "t5_ratio",  # ‖T5 step of D_k‖_F / ‖D_k‖_F (theory.gd_balance_step, exact)
        "gd_contraction",  # (1 − ηλ)²
        "gf_contraction",  # e^{−2ηλ}
        "t5_deviation",  # |ratio − t5_ratio|
        "gd_deviation",  # |ratio − (1 − ηλ)²|
        "gf_deviation",  # |ratio − e^{−2ηλ}|
        "t5_residual",  # ‖D_{k+1} − T5 step‖_F / ‖D_{k+1}‖_F (the matrix identity)
    ),
    # Deterministic pairs: one row per learning rate (dynamics.eta varies here).
    "order": SETTING
    + (
        "steps",  # horizon in steps, order_t1 · 2^j
        "horizon",  # η · steps, the same for every row
        "distance",  # ‖θ_K − θ(K)‖_F at the horizon
        "relative_distance",
        "order",  # fitted order p of distance ≈ C ηᵖ (all rows)
        "order_stderr",
    ),
    # sgd_gaussian: one row per save time and role (optimizer / flow).
    "sde": SETTING
    + (
        "t",
        "role",  # "optimizer" (dynamics.kind) or "flow" (flow.kind)
        "paths",  # finite paths at t
        "mean",  # mean of balance_trace over paths
        "std",  # its std over paths (ddof 1)
        "q10",
        "q90",
        "se",  # Monte Carlo standard error of the mean, std/√paths
        "theory",  # T6: E[tr D(t)] of the stochastic flow
        "z",  # (mean − theory)/se
    ),
    # SGD against its SME (sgd; sgd_gaussian with noise = gradient): one row per save
    # time, role and observable, over the paths at the config's η.
    "moments": SETTING
    + NOISE_SETTING
    + (
        "t",
        "role",  # "optimizer" (dynamics.kind) or "flow" (flow.kind)
        "observable",  # loss, balance_trace (tr D) or balance_gap (‖D‖_F)
        "paths",  # finite paths at t
        "mean",  # mean over paths
        "std",  # std over paths (ddof 1)
        "se",  # Monte Carlo standard error of the mean, std/√paths
        "q10",
        "q90",
    ),
    # SGD against its SME: one row per observable and learning rate (dynamics.eta
    # varies here), at a horizon fixed in ηt.
    "weak": SETTING
    + NOISE_SETTING
    + (
        "observable",
        "steps",  # horizon in steps, order_t1 · 2^j
        "horizon",  # η · steps, the same for every row
        "optimizer.paths",  # finite paths at the horizon
        "optimizer.mean",  # mean over paths
        "optimizer.se",  # its Monte Carlo standard error
        "flow.paths",
        "flow.mean",
        "flow.se",
        "error",  # optimizer.mean − flow.mean: the weak error
        "error_se",  # √(optimizer.se² + flow.se²)
        "z",  # error / error_se
        "order",  # fitted weak order p of |error| ≈ C ηᵖ (sme.weak_order; all rows)
        "order_stderr",
    ),
    # Judged from order and weak (rankflow.compare.verdict, written beside them; not returned
    # by compare): one row per pair of consecutive learning rates η/2^j, η/2^(j+1) of a fit.
    "halvings": SETTING
    + (
        "table",  # the table judged: order (T8) or weak (T10)
        "observable",  # distance (order table) or the weak table's observable
        "halving",  # j: dynamics.eta is η/2^j, eta_next is η/2^(j+1)
        "eta_next",  # the next learning rate, η/2^(j+1)
        "error",  # the distance (order) or |error| (weak) at dynamics.eta, at the horizon
        "error_next",  # the same at eta_next
        "halving_order",  # log(error/error_next) / log(η/eta_next), i.e. log2 of the ratio
        "halving_order_stderr",  # weak: Monte Carlo SE (delta method); NaN: deterministic
    ),
    # Judged from order and weak: one row per fit, a point's order table or one observable
    # of its weak table (dynamics.eta: the largest η); the verdict's rule is
    # rankflow.compare.verdict's.
    "verdict": SETTING
    + (
        "table",  # the table judged: order (T8) or weak (T10)
        "observable",  # distance (order table) or the weak table's observable
        "horizon",  # η · steps, the same for every learning rate
        "rates",  # learning rates with a finite, nonzero error (those fitted)
        "order",  # fitted order: theory.convergence_order (order), sme.weak_order (weak)
        "order_stderr",
        "expected_order",  # p: 1 for each pair compare fits (T8; T10)
        "tolerance",  # ORDER_TOL (order) or WEAK_TOL (weak), as rankflow reproduce uses
        "verdict",  # inconclusive if SE > tolerance or NaN; else pass iff |order − p| ≤ tolerance
        "last_halving_order",  # halving_order between the two smallest learning rates
        "reading",  # computed: why inconclusive, or a fail not yet asymptotic at the largest η
    ),
}

# The runs of each side are dicts of float64 ``A``, ``B`` ``(runs, saves, ·, ·)``, ``A_raw``,
# ``B_raw`` in the run's precision and ``status`` codes ``(runs, saves)``.


def save_index(program: Program, ts) -> np.ndarray:
    """The positions of the whole steps ``ts`` among ``program``'s save times."""
    where = {int(round(t)): i for i, t in enumerate(program.ts)}
    return np.array([where[int(t)] for t in ts])


def _frob(X: np.ndarray, axes=(-2, -1)) -> np.ndarray:
    return np.sqrt(np.sum(X**2, axis=axes))


def _theta_distance(A1, B1, A2, B2) -> tuple[np.ndarray, np.ndarray]:
    """‖(A1, B1) − (A2, B2)‖_F and ‖(A2, B2)‖_F over the last two axes."""
    dist = np.sqrt(_frob(A1 - A2) ** 2 + _frob(B1 - B2) ** 2)
    return dist, np.sqrt(_frob(A2) ** 2 + _frob(B2) ** 2)


def _balance_np(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return np.swapaxes(A, -1, -2) @ A - np.swapaxes(B, -1, -2) @ B


def _status(codes: np.ndarray) -> np.ndarray:
    """Worst status over paths (axis 0), as strings."""
    return np.array(STATUS)[np.max(codes, axis=0)]


def setting_of(opt: Mapping[str, Any], flow: Mapping[str, Any], m: int, n: int) -> dict:
    """The :data:`SETTING` columns of a comparison of the resolved configs ``opt`` (the
    optimizer's) and ``flow`` (its flow's) on an m×n problem."""
    s, d = flow["solver"], opt["dynamics"]
    return {
        "dynamics.kind": d["kind"],
        "flow.kind": flow["dynamics"]["kind"],
        "problem.kind": opt["problem"]["kind"],
        "problem.m": m,
        "problem.n": n,
        "model.r": opt["model"]["r"],
        "init.kind": opt["init"]["kind"],
        "solver.method": s["method"],
        "solver.adaptive": bool(s["adaptive"]),
        "solver.dt": float(s["dt"]),
        "x64": bool(opt["x64"]),
        "dynamics.eta": float(d["eta"]),
        "dynamics.lam": float(d["lam"]),
        "dynamics.sigma": float(d["sigma"]),
        "dynamics.mu": float(d["mu"]),
        "dynamics.noise": d["noise"],
        "dynamics.batch": int(d["batch"]),
        "problem.samples": opt["problem"]["samples"],
    }


def frame(name: str, setting: dict, cols: dict[str, Any]) -> pd.DataFrame:
    """The table ``name``: the ``setting`` repeated on every row beside ``cols`` (equal
    lengths; a key of both takes ``cols``'), in the order of ``COLUMNS[name]``."""
    n = len(next(iter(cols.values())))
    df = pd.DataFrame({**{k: [v] * n for k, v in setting.items()}, **cols})
    return df[list(COLUMNS[name])]


def trajectory_table(setting, ts, opt, flow, i_opt, i_flow, stochastic) -> pd.DataFrame:
    """The ``trajectory`` table at the whole steps ``ts`` (positions ``i_opt``, ``i_flow``
    among each side's saves): ‖θ_k − θ(k)‖_F, of the means over paths when
    ``stochastic``, with its Monte Carlo floor (T8)."""
    # Deterministic pairs: run 0 has the config's η (the others serve the order).
    runs = slice(None) if stochastic else slice(0, 1)
    A1, B1 = opt["A"][runs, i_opt], opt["B"][runs, i_opt]
    A2, B2 = flow["A"][runs, i_flow], flow["B"][runs, i_flow]
    K = A1.shape[0]
    if stochastic:
        dist, norm = _theta_distance(A1.mean(0), B1.mean(0), A2.mean(0), B2.mean(0))
        var = sum(X.var(axis=0, ddof=1).sum(axis=(-2, -1)) for X in (A1, B1, A2, B2))
        # Where all paths coincide (t = 0) the variance is rounding: the floor is 0.
        same = np.all(np.ptp(A1, axis=0) == 0, axis=(-2, -1))
        floor = np.where(same, 0.0, np.sqrt(var / K))
        measure = f"mean over {K} paths"
    else:
        dist, norm = _theta_distance(A1[0], B1[0], A2[0], B2[0])
        floor = np.full(len(ts), np.nan)
        measure = "paths"
    return frame(
        "trajectory",
        setting,
        {
            "t": np.asarray(ts, float),
            "measure": [measure] * len(ts),
            "distance": dist,
            "relative_distance": dist / norm,
            "mc_floor": floor,
            "optimizer.balance_gap": _frob(_balance_np(A1, B1)).mean(0),
            "flow.balance_gap": _frob(_balance_np(A2, B2)).mean(0),
            "optimizer.balance_trace": (_frob(A1) ** 2 - _frob(B1) ** 2).mean(0),
            "flow.balance_trace": (_frob(A2) ** 2 - _frob(B2) ** 2).mean(0),
            "optimizer.status": _status(opt["status"][runs, i_opt]),
            "flow.status": _status(flow["status"][runs, i_flow]),
        },
    )


def contraction_table(setting, program, point, opt, steps) -> pd.DataFrame:
    """The ``contraction`` table of GD over the window ``steps``: T5 at every step, with
    G = ∇L from the problem's loss, next to (1 − ηλ)² and e^{−2ηλ} (T4)."""
    ii = save_index(program, steps)
    eta, lam = point["dynamics"]["eta"], point["dynamics"]["lam"]
    with jax.enable_x64(point["x64"]):
        A = jnp.asarray(opt["A_raw"][0, ii])
        B = jnp.asarray(opt["B_raw"][0, ii])
        data = program.data(params_of(point, 0))
        grad_W = jax.vmap(jax.grad(lambda W: program.problem.loss(W, data)))
        G = grad_W(A @ jnp.swapaxes(B, -1, -2))
        D = np.asarray(jax.vmap(theory.balance)(A, B), np.float64)
        step = jax.vmap(theory.gd_balance_step, in_axes=(0, 0, 0, None, None))
        D_t5 = np.asarray(step(A[:-1], B[:-1], G[:-1], eta, lam), np.float64)
    with jax.enable_x64(True):  # exact constants, whatever the run's precision
        gd_c = float(theory.gd_contraction(eta, lam))
        gf_c = float(theory.gf_contraction(eta, lam))
    gap = _frob(D)
    ratio = gap[1:] / gap[:-1]
    t5_ratio = _frob(D_t5) / gap[:-1]
    n = len(ratio)
    return frame(
        "contraction",
        setting,
        {
            "t": np.asarray(steps[:-1], float),
            "gap": gap[:-1],
            "ratio": ratio,
            "t5_ratio": t5_ratio,
            "gd_contraction": np.full(n, gd_c),
            "gf_contraction": np.full(n, gf_c),
            "t5_deviation": np.abs(ratio - t5_ratio),
            "gd_deviation": np.abs(ratio - gd_c),
            "gf_deviation": np.abs(ratio - gf_c),
            "t5_residual": _frob(D[1:] - D_t5) / gap[1:],
        },
    )


def order_table(setting, runs, horizons, opt, flow, i_opt, i_flow) -> pd.DataFrame:
    """The ``order`` table: the distance of run j (η/2^j) at its horizon, and the order
    fitted over all runs (``theory.convergence_order``, T8)."""
    j = np.arange(len(runs))
    dist, norm = _theta_distance(
        opt["A"][j, i_opt], opt["B"][j, i_opt], flow["A"][j, i_flow], flow["B"][j, i_flow]
    )
    etas = np.array([r["dynamics.eta"] for r in runs])
    try:
        p, se = theory.convergence_order(etas, dist)
    except ValueError:  # fewer than two usable points (diverged, or zero distance)
        p, se = math.nan, math.nan
    df = frame(
        "order",
        setting,
        {
            "steps": np.asarray(horizons, np.int64),
            "horizon": etas * np.asarray(horizons, float),
            "distance": dist,
            "relative_distance": dist / norm,
            "order": np.full(len(runs), p),
            "order_stderr": np.full(len(runs), se),
        },
    )
    df["dynamics.eta"] = etas
    df["dynamics.mu"] = [float(r["dynamics.mu"]) for r in runs]
    return df


def sde_table(setting, ts, opt, flow, i_opt, i_flow, point, m, n) -> pd.DataFrame:
    """The ``sde`` table of sgd_gaussian and its stochastic flow: statistics of
    tr D over paths at ``ts``, against the closed form of T6."""
    d = point["dynamics"]
    trace0 = float(_frob(opt["A"][0, 0]) ** 2 - _frob(opt["B"][0, 0]) ** 2)  # t = 0
    with jax.enable_x64(True):
        t6 = np.asarray(
            theory.sgf_mean_balance_trace(
                np.float64(trace0),
                d["eta"],
                d["lam"],
                d["sigma"],
                m,
                n,
                point["model"]["r"],
                np.asarray(ts, np.float64),
            )
        )
    frames = []
    for role, res, ii in (("optimizer", opt, i_opt), ("flow", flow, i_flow)):
        trace = _frob(res["A"][:, ii]) ** 2 - _frob(res["B"][:, ii]) ** 2  # (paths, saves)
        count = np.sum(np.isfinite(trace), axis=0)
        mean = np.nanmean(trace, axis=0)
        std = np.nanstd(trace, axis=0, ddof=1)
        se = std / np.sqrt(count)
        # Where all paths coincide (t = 0) the spread is rounding: z is undefined.
        spread = np.nanmax(trace, axis=0) > np.nanmin(trace, axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(spread & (se > 0), (mean - t6) / se, np.nan)
        frames.append(
            frame(
                "sde",
                setting,
                {
                    "t": np.asarray(ts, float),
                    "role": [role] * len(ts),
                    "paths": count,
                    "mean": mean,
                    "std": std,
                    "q10": np.nanquantile(trace, 0.1, axis=0),
                    "q90": np.nanquantile(trace, 0.9, axis=0),
                    "se": se,
                    "theory": t6,
                    "z": z,
                },
            )
        )
    return pd.concat(frames, ignore_index=True)
