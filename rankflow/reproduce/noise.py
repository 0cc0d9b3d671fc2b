"""Experiment ``noise``: the noise of real SGD against parameter noise (docs/theory.md T6, T9, T10).

One problem (``sims/reproduce/noise_models.toml``: matrix sensing 6×6, m = n, imbalanced
start with ‖D(0)‖_F = 1, float64) under the stochastic flow with each noise model,
Euler–Maruyama at fixed dt and dt/4, and real minibatch ``sgd`` on the same data
(``noise_sgd_sensing.toml``; ``noise_sgd_regression.toml`` for a second problem). The
runs save the factors (``save = "states"``), so that D = AᵀA − BᵀB is checked as a matrix.

- ``noise.no_floor`` (T6 against T9): with the same σ, η, λ and start, parameter noise
  leaves ‖D‖_F at T6's floor (``theory.sgf_floor``) and gradient noise does not. m = n
  shows it best: there T9's drift is ``−(2ηλ + η²σ²m)D``, so D → 0 on every path, while
  at m ≠ n gradient noise has a non-zero equilibrium of D (``η²σ²(m BᵀB − n AᵀA)`` against
  ``2ηλD``) that is not a noise floor. Euler–Maruyama leaves a floor of its own for
  gradient noise (the per-step term ``η²σ²(BᵀΔΞᵀΔΞB − AᵀΔΞΔΞᵀA)`` fluctuates about its
  mean), of order √dt: the claim measures it at dt and dt/4.
- ``noise.sgd_step_mean`` (T10): the mean over minibatches of real SGD's one-step D against
  ``theory.minibatch_step_mean(..., replace=False)``, entry by entry in Monte Carlo SE, on
  sensing and on regression; the wrong batch scalings 1/b² and no 1/b must be > 10 SE off.
- ``noise.t9_pathwise`` (T9): on every path of the gradient-noise flow,
  ``D(t) = e^{−(2ηλ + η²σ²m)t} D(0)`` up to the discretisation: the deviation must vanish
  with dt at the strong order of Euler–Maruyama (½ to 1), which a wrong rate cannot do.
- ``noise.sme_weak_order`` (T10 with T4; Li, Tai & E) and ``noise.sme_step_noise``
  (T10): minibatch SGD against its SME (``sims/reproduce/noise_sme.toml``), judged by the
  size of the SME's error against the noiseless flow's and by the SME's noise on one
  Euler–Maruyama step (:mod:`rankflow.reproduce.noise_sme`, which says why a weak order
  alone cannot judge an SME).

Each claim is a pure function of the experiment's tables (``*_claim``), so that
``tests/claims/test_mutants_noise.py`` can run it on data of a wrong theory or implementation.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import plots, theory
from ..core import config as config_lib
from ..core.dynamics.vector_fields import minibatch_spread
from ..core.program import params_of, program_for
from . import noise_sme
from ._common import Claim, Context, config_path, fmt, full_overrides, sweep_config, verdict
from .noise_sme import run_chunked, sample_gradients

NAME = "noise"
CONFIGS = ("noise_models", "noise_sgd_sensing", "noise_sgd_regression")
# The claims that can pass (each has a mutant in tests/claims/test_mutants_noise.py).
CLAIMS = ("noise.no_floor", "noise.sgd_step_mean", "noise.t9_pathwise",
          "noise.sme_weak_order", "noise.sme_step_noise")  # fmt: skip
# σ of the parameter- and gradient-noise runs of the claims: η²σ²m = 0.06 is 30% of 2ηλ,
# so a wrong T9 rate moves D by ~0.05–0.1 of ‖D(0)‖, several times Euler–Maruyama's error.
CLAIM_SIGMA = 0.5
# The fine step is dt/REFINE: strong errors shrink by 4^{−½} = 0.5 (order ½) to 0.25.
REFINE = 4
# Monte Carlo: |mean − theory| ≤ 4 SE per entry; a correct theory misses it with
# probability 6e-5 per entry, ≲ 1e-3 over the 12 entries of the two problems.
Z_MAX = 4.0
# The wrong batch scalings (1/b², no 1/b) must be this many SE off: the data resolve b.
Z_WRONG = 10.0
# Gradient noise's late ‖D‖ (RMS) must be below T6's parameter-noise floor by this factor.
FLOOR_FACTOR = 20.0
# Strong order of the deviations: Euler–Maruyama's ½ (the noise) to 1 (the drift), less
# 0.1 for the Monte Carlo error of a ratio of two means over 32+ paths (measured ≲ 0.05).
ORDER_RANGE = (0.4, 1.1)
# Gradient noise's late ‖D‖ must shrink at least as 4^{−¼} = 0.71 when dt is quartered
# (√dt gives 0.5); parameter noise's floor is the SDE's, the same at both steps.
SHRINK_MAX = REFINE**-0.25


def validate(mode: str) -> None:
    points = {name: sweep_config(name, mode) for name in CONFIGS}
    same = ("problem", "init", "model")
    a, b = points["noise_models"], points["noise_sgd_sensing"]
    config_path("noise_sme")
    full_overrides("noise_sme", mode)
    for section in same:
        if a[section] != b[section]:
            raise config_lib.ConfigError(
                f"{section}: noise_sgd_sensing.toml must match noise_models.toml (SGD against "
                "its SME on one problem)"
            )


# --- running: the factors at the saves ----------------------------------------------------


def _d_columns(r: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(r) for j in range(i, r)]


def balance_of(df: pd.DataFrame, r: int) -> np.ndarray:
    """The matrices D (rows, r, r) from a states table's ``d_i_j`` columns (i ≤ j)."""
    D = np.zeros((len(df), r, r))
    for i, j in _d_columns(r):
        D[:, i, j] = D[:, j, i] = df[f"d_{i}_{j}"].to_numpy()
    return D


def run_states(
    point: Mapping[str, Any], sigmas: Sequence[float] = (0.0,)
) -> tuple[pd.DataFrame, tuple[np.ndarray, np.ndarray]]:
    """Run ``point`` (``dynamics.paths`` paths at each σ of ``sigmas``; σ is traced, so one
    compilation) and return a tidy table of its states: per run, path and save, the
    entries ``d_i_j`` of D = AᵀA − BᵀB, ``balance_gap`` ‖D‖_F, ``balance_trace`` tr D,
    ``size`` ‖A‖_F² + ‖B‖_F², and the point's keys the claims read; and the start (A, B)
    that every path shares."""
    program = program_for(point, save="states")
    paths = point["dynamics"]["paths"]
    rows = [params_of(point, p) | {"dynamics.sigma": s} for s in sigmas for p in range(paths)]
    A, B = run_chunked(program, rows)  # (runs, saves, ·, r)
    D = np.einsum("ksir,ksiq->ksrq", A, A) - np.einsum("ksir,ksiq->ksrq", B, B)
    runs, saves, r = D.shape[0], D.shape[1], D.shape[2]
    d = point["dynamics"]
    cols: dict[str, Any] = {
        "dynamics.kind": d["kind"],
        "dynamics.noise": d["noise"],
        "solver.dt": point["solver"]["dt"] if d["kind"] == "stochastic_flow" else 1.0,
        "problem.kind": point["problem"]["kind"],
        "problem.m": point["problem"]["m"],
        "problem.n": point["problem"]["n"],
        "model.r": r,
        "dynamics.eta": d["eta"],
        "dynamics.lam": d["lam"],
        "dynamics.batch": d["batch"],
        "dynamics.sigma": np.repeat([row["dynamics.sigma"] for row in rows], saves),
        "path": np.repeat([row["path"] for row in rows], saves),
        "t": np.tile(program.ts, runs),
        "balance_gap": np.linalg.norm(D, axis=(2, 3)).reshape(-1),
        "balance_trace": np.trace(D, axis1=2, axis2=3).reshape(-1),
        "size": (np.sum(A**2, axis=(2, 3)) + np.sum(B**2, axis=(2, 3))).reshape(-1),
    }
    for i, j in _d_columns(r):
        cols[f"d_{i}_{j}"] = D[:, :, i, j].reshape(-1)
    return pd.DataFrame(cols), (A[0, 0], B[0, 0])


def matched_sigma(point: Mapping[str, Any], A0, B0) -> float:
    """σ of isotropic gradient noise whose W-space covariance has the trace of the minibatch
    noise's at (A0, B0): ``σ² mn = s² Σ_k ‖δ_k‖²``, s the spread of ``FactorNoise``."""
    p = point["problem"]
    _, deltas = sample_gradients(point, A0, B0)
    s = minibatch_spread(p["samples"], point["dynamics"]["batch"])
    return float(np.sqrt(s**2 * np.sum(deltas**2) / (p["m"] * p["n"])))


# --- tables: pure functions of the states ------------------------------------------------


def floor_table(flows: pd.DataFrame) -> pd.DataFrame:
    """Per noise model, σ and dt: E‖D‖_F² over the second half of the run (each path's time
    average one sample; ``late_ms`` with its SE), its RMS, and T6's parameter-noise floor
    ``theory.sgf_floor`` of the measured E(‖A‖²+‖B‖²) and E tr D (``floor_ms``): the
    reference for both models, as the claim compares them at the same σ, η, λ."""
    rows = []
    keys = ["dynamics.noise", "dynamics.sigma", "solver.dt"]
    for (noise, sigma, dt), g in flows.groupby(keys):
        late = g[g["t"] >= g["t"].max() / 2]
        per = late.groupby("path").agg(
            d2=("balance_gap", lambda x: float(np.mean(np.square(x)))),
            size=("size", "mean"),
            trace=("balance_trace", "mean"),
        )
        s = g.iloc[0]
        shape = (int(s["model.r"]), int(s["problem.m"]), int(s["problem.n"]))
        floor = theory.sgf_floor(s["dynamics.eta"], sigma, s["dynamics.lam"], *shape,
                                 per["size"].mean(), per["trace"].mean())  # fmt: skip
        k = len(per)
        rows.append(
            {"dynamics.noise": noise, "dynamics.sigma": sigma, "solver.dt": dt, "paths": k}
            | {"late_ms": per["d2"].mean(), "late_ms_se": per["d2"].std(ddof=1) / np.sqrt(k)}
            | {"late_rms": np.sqrt(per["d2"].mean()), "floor_ms": float(floor)}
            | {"floor_rms": float(np.sqrt(floor))}
        )
    return pd.DataFrame(rows)


def pathwise_table(flows: pd.DataFrame) -> pd.DataFrame:
    """T9 at m = n on every path of the gradient-noise runs: per σ, dt and path, the largest
    ``‖D(t) − e^{−(2ηλ + η²σ²m)t} D(0)‖_F / ‖D(0)‖_F`` over the saves
    (``theory.gradient_noise_balance``), as ``deviation``."""
    rows = []
    grad = flows[flows["dynamics.noise"] == "gradient"]
    for (sigma, dt, path), g in grad.groupby(["dynamics.sigma", "solver.dt", "path"]):
        g = g.sort_values("t")
        s = g.iloc[0]
        D = balance_of(g, int(s["model.r"]))
        with jax.enable_x64(True):
            pred = np.asarray(theory.gradient_noise_balance(
                jnp.asarray(D[0]), s["dynamics.eta"], s["dynamics.lam"], sigma,
                int(s["problem.m"]), jnp.asarray(g["t"].to_numpy())))  # fmt: skip
        dev = np.linalg.norm(D - pred, axis=(1, 2)) / np.linalg.norm(D[0])
        rows.append({"dynamics.sigma": sigma, "solver.dt": dt, "path": path,
                     "deviation": float(np.max(dev))})  # fmt: skip
    return pd.DataFrame(rows)


def step_table(
    D1: np.ndarray, A0, B0, gbar, deltas, eta: float, lam: float, batch: int, kind: str
) -> pd.DataFrame:
    """T10, one SGD step: per entry (i ≤ j) of D' = A'ᵀA' − B'ᵀB' over the paths ``D1``
    (paths, r, r), the mean and its SE, ``theory.minibatch_step_mean(..., replace=False)``
    at the start and the z-score; beside it the z-scores of the wrong batch scalings
    (the noise term, prediction − ``theory.gd_balance_step``, times 1/b: ``z_b2``; times b:
    ``z_no_b``) and of sampling with replacement (``z_replace``)."""
    with jax.enable_x64(True):
        args = [jnp.asarray(x) for x in (A0, B0, gbar, deltas)]
        pred = np.asarray(theory.minibatch_step_mean(*args, eta, lam, batch, replace=False))
        repl = np.asarray(theory.minibatch_step_mean(*args, eta, lam, batch, replace=True))
        base = np.asarray(theory.gd_balance_step(*args[:3], eta, lam))
    mean, se = D1.mean(axis=0), D1.std(axis=0, ddof=1) / np.sqrt(len(D1))
    wrong = {"z_b2": base + (pred - base) / batch, "z_no_b": base + (pred - base) * batch,
             "z_replace": repl}  # fmt: skip
    rows = []
    for i, j in _d_columns(D1.shape[1]):
        row = {"problem.kind": kind, "entry": f"{i},{j}", "paths": len(D1), "batch": batch}
        row |= {"mean": mean[i, j], "se": se[i, j], "theory": pred[i, j]}
        row |= {"noise_term": pred[i, j] - base[i, j], "z": (mean[i, j] - pred[i, j]) / se[i, j]}
        row |= {k: (mean[i, j] - w[i, j]) / se[i, j] for k, w in wrong.items()}
        rows.append(row)
    return pd.DataFrame(rows)


def one_step(sgd: pd.DataFrame, start, point: Mapping[str, Any], batch: int | None = None):
    """:func:`step_table` of an SGD states table (its saves t = 1) from ``start`` (A, B);
    ``batch``: the batch size the theory is given (default the point's)."""
    gbar, deltas = sample_gradients(point, *start)
    D1 = balance_of(sgd[sgd["t"] == 1], point["model"]["r"])
    d = point["dynamics"]
    return step_table(D1, *start, gbar, deltas, d["eta"], d["lam"],
                      batch or d["batch"], point["problem"]["kind"])  # fmt: skip


def band_table(states: pd.DataFrame, model: str) -> pd.DataFrame:
    """‖D‖_F over paths per save: mean, 10% and 90% quantiles (the figure's bands)."""
    g = states.groupby("t")["balance_gap"]
    out = pd.DataFrame({"mean": g.mean(), "q10": g.quantile(0.1), "q90": g.quantile(0.9)})
    return out.reset_index().assign(model=model)


def theory_lines(flows: pd.DataFrame, floor: pd.DataFrame) -> pd.DataFrame:
    """The theory curves of the figure, per σ of the gradient runs: T9's
    ``‖D(0)‖ e^{−(2ηλ + η²σ²m)t}`` (``theory.gradient_noise_balance``, m = n), the flow
    without noise's ``e^{−2ηλt}`` (σ = 0) and T6's RMS floor at that σ (dt of the rows)."""
    rows = []
    for sigma, g in flows[flows["dynamics.noise"] == "gradient"].groupby("dynamics.sigma"):
        s = g.iloc[0]
        ts = np.sort(g["t"].unique())
        D0 = balance_of(g[g["t"] == 0].iloc[:1], int(s["model.r"]))[0]
        for name, sg in (("T9", sigma), ("no noise", 0.0)):
            with jax.enable_x64(True):
                D = np.asarray(theory.gradient_noise_balance(
                    jnp.asarray(D0), s["dynamics.eta"], s["dynamics.lam"], sg,
                    int(s["problem.m"]), jnp.asarray(ts)))  # fmt: skip
            rows.append(pd.DataFrame({"t": ts, "value": np.linalg.norm(D, axis=(1, 2))})
                        .assign(line=name, sigma=sigma))  # fmt: skip
        par = floor[(floor["dynamics.noise"] == "parameter") & (floor["dynamics.sigma"] == sigma)]
        rows.append(pd.DataFrame({"t": ts, "value": float(par["floor_rms"].iloc[0])})
                    .assign(line="T6 floor", sigma=sigma))  # fmt: skip
    return pd.concat(rows, ignore_index=True)


# --- claims: pure functions of the tables -----------------------------------------------


def _at(floor: pd.DataFrame, noise: str) -> pd.DataFrame:
    return floor[floor["dynamics.noise"] == noise].sort_values("solver.dt", ascending=False)


def no_floor_claim(floor: pd.DataFrame) -> Claim:
    """T6 against T9 (m = n, the same σ, η, λ, start): from :func:`floor_table` of the
    claim's runs at dt and dt/4, parameter noise's late E‖D‖² is T6's floor within
    ``Z_MAX`` SE at both steps, while gradient noise's late RMS is ``FLOOR_FACTOR`` times
    below that floor and shrinks by ``SHRINK_MAX`` or more when dt is quartered."""
    par, grad = _at(floor, "parameter"), _at(floor, "gradient")
    z = ((par["late_ms"] - par["floor_ms"]) / par["late_ms_se"]).abs()
    below = float(par["floor_rms"].iloc[0] / grad["late_rms"].iloc[0]) if len(grad) else 0.0
    shrink_g = float(grad["late_rms"].iloc[-1] / grad["late_rms"].iloc[0]) if len(grad) else 1.0
    shrink_p = float(par["late_rms"].iloc[-1] / par["late_rms"].iloc[0]) if len(par) else 1.0
    dts = ", ".join(f"{v:g}" for v in grad["solver.dt"])
    ok = len(par) == len(grad) == 2 and z.max() <= Z_MAX
    ok = ok and below >= FLOOR_FACTOR and shrink_g <= SHRINK_MAX
    return Claim(
        experiment=NAME,
        name="noise.no_floor",
        source="T6, T9",
        statement="With the same σ, η, λ and start (m = n), parameter noise leaves ‖AᵀA − "
        "BᵀB‖_F at a floor, while gradient-space noise (SGD's kind) keeps balancing: its "
        "Itô drift −(2ηλ + η²σ²m)D has no noise term left in D.",
        prediction="parameter: late E‖D‖² = T6's ησ²(r+1)E(‖A‖²+‖B‖²)/(2λ) at every dt; "
        "gradient: no floor (only Euler–Maruyama's, which vanishes as dt → 0)",
        measurement=f"σ = {fmt(float(par['dynamics.sigma'].iloc[0]))}, dt = {dts}, "
        f"{int(par['paths'].min())} paths: parameter late RMS "
        + ", ".join(fmt(v) for v in par["late_rms"])
        + f" against T6's {fmt(float(par['floor_rms'].iloc[0]))} (max |z| {z.max():.2f}; "
        f"ratio fine/coarse {shrink_p:.3f}); gradient late RMS "
        + ", ".join(fmt(v) for v in grad["late_rms"])
        + f": {below:.0f}× below the floor, ratio fine/coarse {shrink_g:.3f}",
        tolerance=f"parameter |z| ≤ {Z_MAX:g} at both dt; gradient ≥ {FLOOR_FACTOR:g}× below "
        f"the floor at the coarse dt and shrinking by ≤ {SHRINK_MAX:.3f} (order ≥ ¼) when dt "
        f"is divided by {REFINE} (Euler–Maruyama's own floor is O(√dt): 0.5 expected)",
        verdict=verdict(ok),
        figure="noise_models.png",
        one_sided="gradient noise's part is a bound (at least 20× below the floor, "
        "shrinking with dt); T9's exact decay of D on every path, which a wrong rate "
        "fails in either direction, is checked two-sided by noise.t9_pathwise",
    )


def sgd_step_claim(step: pd.DataFrame) -> Claim:
    """T10: from :func:`step_table` rows of sensing and regression, every entry of the mean
    one-step D' is T10's conditional mean within ``Z_MAX`` SE, and the wrong batch
    scalings (1/b², no 1/b) are ``Z_WRONG`` SE off on each problem."""
    parts, ok = [], {"sensing", "regression"} <= set(step["problem.kind"])
    for kind, g in step.groupby("problem.kind"):
        z, b2, nob, rep = (float(g[c].abs().max()) for c in ("z", "z_b2", "z_no_b", "z_replace"))
        ok = ok and z <= Z_MAX and min(b2, nob) >= Z_WRONG
        parts.append(
            f"{kind} (b = {int(g['batch'].iloc[0])}, {int(g['paths'].iloc[0])} paths, "
            f"{len(g)} entries): max |z| {z:.2f}; 1/b² {b2:.1f}, no 1/b {nob:.1f}, with "
            f"replacement {rep:.1f}; noise term up to {fmt(float(g['noise_term'].abs().max()), 3)}"
            f" = {float((g['noise_term'] / g['se']).abs().max()):.0f} SE"
        )
    return Claim(
        experiment=NAME,
        name="noise.sgd_step_mean",
        source="T10",
        statement="The mean over minibatches of one real SGD step's D' = A'ᵀA' − B'ᵀB' is "
        "T5 with Ḡ plus the minibatch noise term (η²/(bN))·(N−b)/(N−1)·Σ_k (Bᵀδ_kᵀδ_kB − "
        "Aᵀδ_kδ_kᵀA) (batches drawn without replacement).",
        prediction="theory.minibatch_step_mean(replace=False) at the start, per entry",
        measurement="; ".join(parts),
        tolerance=f"|z| ≤ {Z_MAX:g} per entry on both problems (a correct theory misses it "
        f"with probability ≲ 1e-3 over the entries), and max |z| ≥ {Z_WRONG:g} for the "
        "noise term scaled by 1/b² and without 1/b (the data resolve the batch scaling)",
        verdict=verdict(ok),
        figure="noise_models.png",
    )


def t9_pathwise_claim(pathwise: pd.DataFrame) -> Claim:
    """T9 at m = n on every path: from :func:`pathwise_table` at dt and dt/4, the largest
    deviation from ``e^{−(2ηλ + η²σ²m)t} D(0)`` shrinks at a strong order in
    ``ORDER_RANGE`` (mean over paths), as Euler–Maruyama's error does; a wrong rate leaves
    a deviation that does not shrink (order ≈ 0)."""
    per = pathwise.groupby("solver.dt")["deviation"].agg(["mean", "max", "count"])
    per = per.sort_index(ascending=False)
    dts = per.index.to_numpy(np.float64)
    order = float("nan")
    if len(per) == 2 and np.all(per["mean"] > 0):
        order = float(np.log(per["mean"].iloc[0] / per["mean"].iloc[1]) / np.log(dts[0] / dts[1]))
    lo, hi = ORDER_RANGE
    return Claim(
        experiment=NAME,
        name="noise.t9_pathwise",
        source="T9",
        statement="Under gradient-space noise at m = n, D(t) = e^{−(2ηλ + η²σ²m)t} D(0) on "
        "every path: D is deterministic although A and B are not.",
        prediction="max over saves of ‖D(t) − T9(t)‖_F/‖D(0)‖_F → 0 on every path as dt → 0, "
        "at Euler–Maruyama's strong order (½ for its noise, 1 for its drift)",
        measurement=f"σ = {fmt(float(pathwise['dynamics.sigma'].iloc[0]))}; "
        + "; ".join(
            f"dt = {dt:g}: mean over {int(r['count'])} paths {fmt(r['mean'], 3)}, every path "
            f"≤ {fmt(r['max'], 3)}"
            for dt, r in per.iterrows()
        )
        + f"; order {order:.3f}",
        tolerance=f"order in [{lo:g}, {hi:g}] (½ to 1, less 0.1 for the Monte Carlo error of "
        "the ratio of means); a wrong rate leaves an O(1) deviation, order ≈ 0",
        verdict=verdict(lo <= order <= hi),
        figure="noise_models.png",
    )


# --- running ----------------------------------------------------------------------------


def _variant(point: Mapping[str, Any], **over: Any) -> dict[str, Any]:
    return config_lib.resolve(point, {k.replace("__", "."): v for k, v in over.items()})


def flow_runs(point: Mapping[str, Any], sigmas: Sequence[float]) -> pd.DataFrame:
    """Parameter and gradient noise from ``point`` at each σ of ``sigmas``, at its dt and
    dt/``REFINE`` (four compilations), as one :func:`run_states` table."""
    dt = point["solver"]["dt"]
    frames = []
    for noise in ("parameter", "gradient"):
        for step in (dt, dt / REFINE):
            v = _variant(point, dynamics__noise=noise, dynamics__sigma=sigmas[0],
                         solver__dt=step)  # fmt: skip
            frames.append(run_states(v, sigmas)[0])
    return pd.concat(frames, ignore_index=True)


def run_experiment(ctx: Context) -> None:
    models = sweep_config("noise_models", ctx.mode)
    sme, start = run_states(models)
    sigma_fig = matched_sigma(models, *start)
    flows = flow_runs(models, (CLAIM_SIGMA, sigma_fig))
    claim_flows = flows[flows["dynamics.sigma"] == CLAIM_SIGMA]
    floor = floor_table(flows)
    pathwise = pathwise_table(claim_flows)
    sgd_points = {k: sweep_config(f"noise_sgd_{k}", ctx.mode) for k in ("sensing", "regression")}
    step = pd.concat([one_step(*run_states(p), p) for p in sgd_points.values()])
    # SGD beside its SME: the flow's paths and saves (a second, small program).
    sgd_fig = _variant(sgd_points["sensing"], dynamics__paths=models["dynamics"]["paths"],
                       save__ts=[float(t) for t in sme["t"].unique()])  # fmt: skip
    sgd, _ = run_states(sgd_fig)
    coarse = flows["solver.dt"] == models["solver"]["dt"]
    fig = flows[coarse & (flows["dynamics.sigma"] == sigma_fig)]
    bands = pd.concat(
        [band_table(fig[fig["dynamics.noise"] == n], n) for n in ("parameter", "gradient")]
        + [band_table(sme, "minibatch"), band_table(sgd, "sgd")],
        ignore_index=True,
    )
    lines = theory_lines(flows[flows["solver.dt"] == models["solver"]["dt"]], floor)
    for name, df in (("flows", flows), ("floor", floor), ("pathwise", pathwise),
                     ("step", step), ("bands", bands), ("lines", lines)):  # fmt: skip
        ctx.table(f"noise_{name}", df)
    ctx.notes.append(
        f"The figure's parameter and gradient noise use σ = {sigma_fig:.4g}, matched to the "
        f"trace of the minibatch noise's covariance at the start; the claims use σ = "
        f"{CLAIM_SIGMA:g}."
    )
    plots.noise_models_figure(bands, lines, floor, step, sigma_fig, CLAIM_SIGMA,
                              ctx.figures / "noise_models.png")  # fmt: skip
    ctx.claims.append(no_floor_claim(floor[floor["dynamics.sigma"] == CLAIM_SIGMA]))
    ctx.claims.append(sgd_step_claim(step))
    ctx.claims.append(t9_pathwise_claim(pathwise))
    sme_tables = noise_sme.sme_tables(
        config_path("noise_sme"),
        full_overrides("noise_sme", ctx.mode),
        step_paths=noise_sme.STEP_PATHS[ctx.mode],
        out=ctx.runs("noise_sme"),
        figures=plots.write_compare_figures,
    )
    for table, df in sme_tables.items():
        ctx.table(f"noise_sme_{table}", df)
    shutil.copyfile(ctx.runs("noise_sme") / "weak.png", ctx.figures / "noise_sme_weak.png")
    ctx.claims.append(noise_sme.sme_weak_order_claim(sme_tables["weak"], sme_tables["errors"]))
    ctx.claims.append(noise_sme.sme_step_noise_claim(sme_tables["step"]))
