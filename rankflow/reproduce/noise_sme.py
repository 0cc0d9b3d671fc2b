"""Experiment ``noise``, its SME part: minibatch SGD against its stochastic modified equation
(docs/theory.md, T10; Li, Tai & E), judged by the size of the SME's error and by its noise.

A weak order alone cannot judge an SME. At a fixed horizon in ηt the noise moves E[tr D]
by O(η) only, so *any* SDE with SGD's drift — the noiseless gradient flow included — is
weakly first order in η: an SME whose noise was 16× too small (the spread without its
square root) measured order 1.007 ± 0.013 while its error was 7× larger. Two claims
therefore look at what the noise does at leading order:

- ``noise.sme_weak_order`` (T10; the flow's side from T4): ``rankflow compare`` of
  ``sgd`` against its SME (``sims/reproduce/noise_sme.toml``). The weak error of E[tr D]
  at the horizon is first order in η (this catches a noise of the wrong order in η, e.g.
  √η with time in steps), *and* at every η it is below the weak error of the noiseless
  flow on the same SGD paths by ``FLOW_Z`` standard errors. The flow's E[tr D] is T4's
  closed form ``e^{−2ηλt} tr D(0)`` (``theory.gf_balance_gap``; no run, no Monte Carlo
  error), so the comparison costs nothing. An SME with too little noise sits on the
  flow (gain ≈ 0 SE); the right one is 7× closer to SGD (≥ 16 SE at ``--quick``).
- ``noise.sme_step_noise`` (T10): the SME's noise itself, on simulated states. Over many
  paths of ONE Euler–Maruyama step of the SME (the flow ``rankflow compare`` runs, at its
  dt) from the shared start, with N the increment minus its mean over paths, the sample
  second moments E[N_AᵀN_A]/dt, E[N_BᵀN_B]/dt and their difference (T10's Itô term of D)
  equal ``theory.minibatch_noise_balance_drift`` at λ = 0 (its noise term; with B = 0,
  resp. A = 0, for the parts) entry by entry within ``STEP_Z_MAX`` SE, while the
  with-replacement formula (a 5% change of the variance at b = 4 of N = 64) and the batch
  off by one (b ± 1) are at least ``STEP_Z_WRONG`` SE off. One Euler–Maruyama step is
  exact in distribution (no discretisation error) and cheap; the Monte Carlo error is the
  only one, so this resolves the spread's formula, which no weak error at a horizon can.

Together with ``noise.sgd_step_mean`` (SGD's one-step mean is T10's) the chain is closed:
SGD's noise is T10's, the SME's noise is T10's, and over a horizon SGD and the SME agree
to O(η) with the SME beating the noiseless flow.

:func:`sme_tables` runs both claims' data from a config (the experiment's own by
default), so that a test can run it in-process after monkeypatching rankflow's source
(drop ``rankflow.engine.programs``' cache first: compiled programs are cached by
structure). The claims are pure functions of its tables.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import compare as compare_lib
from .. import theory
from ..compare.options import split_options
from ..compare.run import flow_config
from ..core import config as config_lib
from ..core.program import PARAM_KEYS, params_of, program_for
from ._common import Claim, config_path, fmt, verdict

NAME = "noise"
# SGD against its first-order SME: weak order 1 in η at fixed ηt, fitted within WEAK_TOL
# with a standard error ≤ WEAK_TOL, every η's error resolved (|z| ≥ WEAK_Z) so that the
# fit is of errors, not of Monte Carlo noise.
WEAK_ORDER = 1.0
WEAK_TOL = compare_lib.WEAK_TOL  # 0.2, rankflow compare's (rankflow.compare.verdict.WEAK_TOL)
WEAK_Z = 2.0
WEAK_OBSERVABLE = "balance_trace"
# At every η, |SGD − flow| − |SGD − SME| of E[tr D] in SE (both errors' SEs added in
# quadrature, which ignores that SGD's mean is shared: conservative). Measured: ≥ 16 SE
# (--quick, at η = 0.04) on the right SME; ≈ 0 for an SME with a 16× too small noise.
FLOW_Z = 5.0
# One Euler–Maruyama step: paths per mode. The relative SE of a diagonal second moment is
# ≈ 0.7/√paths (0.0055 measured at 16384 paths, where the with-replacement formula, 5%
# at b = 4 of N = 64, was 9–11 SE off per diagonal entry): ~13 SE at 32768, ~19 at 131072.
STEP_PATHS = {"quick": 32768, "full": 131072}
# |z| ≤ 4 per entry (18 entries: a right theory misses with probability ≲ 1e-3), and every
# wrong formula ≥ 2·4 SE off in some entry: data that followed it would miss by ≥ 4 SE more.
STEP_Z_MAX = 4.0
STEP_Z_WRONG = 8.0
# Runs per call of a compiled program: a single call of 16384 one-step SGD runs after a
# flow's in one process was seen to stall XLA:CPU (no progress, no CPU); 4096 did not.
CHUNK = 4096
# The parts of the one-step table: E[N_AᵀN_A]/dt, E[N_BᵀN_B]/dt and their difference.
PARTS = ("A", "B", "D")
# The wrong formulas the one-step data must resolve: (column, batch offset, replace).
WRONG = (("z_replace", 0, True), ("z_b_plus", 1, False), ("z_b_minus", -1, False))


# --- running --------------------------------------------------------------------------------


def run_chunked(program, rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The factors at the saves of ``rows`` (float64 ``(runs, saves, ·, r)``), run
    ``CHUNK`` runs at a time (the last chunk padded with copies of its last run), so that
    every call has one shape: one compilation, bounded memory."""
    parts = []
    for lo in range(0, len(rows), CHUNK):
        chunk = rows[lo : lo + CHUNK]
        n = len(chunk)
        chunk = chunk + [chunk[-1]] * (min(CHUNK, len(rows)) - n)
        out = program.run({k: np.asarray([r[k] for r in chunk]) for k in PARAM_KEYS})
        parts.append([np.asarray(x[:n], np.float64) for x in out["theta"]])
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def sample_gradients(point: Mapping[str, Any], A0, B0) -> tuple[np.ndarray, np.ndarray]:
    """Ḡ (m×n) and the deviations δ_k = g_k − Ḡ (N×m×n) of the per-sample gradients of the
    point's data (``Problem.sample_losses``) at W = A0 B0ᵀ."""
    program = program_for(point, save="states")
    data = program.data(params_of(point, 0))
    with jax.enable_x64(point["x64"]):
        W = jnp.asarray(A0) @ jnp.asarray(B0).T
        g = np.asarray(jax.jacrev(program.problem.sample_losses)(W, data), np.float64)
    gbar = g.mean(axis=0)
    return gbar, g - gbar


def sme_step_states(
    point: Mapping[str, Any], paths: int, solver_set: set[str] | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """One Euler–Maruyama step of the SME of the SGD ``point`` (``rankflow compare``'s flow:
    ``compare.run.flow_config``, Euler at dt = 0.1 step unless ``solver_set`` names solver
    keys the config set) on ``paths`` paths from the start they share: A, B float64
    ``(paths, 2, ·, r)`` at t = 0 and t = dt, and dt."""
    flow = flow_config(dict(point), set(solver_set or ()))
    dt = float(flow["solver"]["dt"])
    one = config_lib.resolve(flow, {"dynamics.paths": paths, "save.ts": [0.0, dt]})
    program = program_for(one, save="states")
    base = params_of(one, 0)
    A, B = run_chunked(program, [base | {"path": p} for p in range(paths)])
    return A, B, dt


# --- tables: pure functions of the states and of compare's tables ----------------------------


def _noise_parts(A0, B0, deltas, eta: float, batch: int, replace: bool) -> dict[str, np.ndarray]:
    """T10's noise term of D, ``theory.minibatch_noise_balance_drift`` at λ = 0, and its
    two parts (B = 0 leaves −E[N_BᵀN_B]/dt, A = 0 leaves E[N_AᵀN_A]/dt)."""
    with jax.enable_x64(True):
        A0, B0, deltas = (jnp.asarray(x) for x in (A0, B0, deltas))

        def drift(a, b):
            return np.asarray(theory.minibatch_noise_balance_drift(
                a, b, deltas, eta, 0.0, batch, replace=replace))  # fmt: skip

        return {"A": drift(jnp.zeros_like(A0), B0), "B": -drift(A0, jnp.zeros_like(B0)),
                "D": drift(A0, B0)}  # fmt: skip


def sme_step_table(
    A: np.ndarray, B: np.ndarray, dt: float, deltas: np.ndarray, eta: float, batch: int
) -> pd.DataFrame:
    """T10 on one Euler–Maruyama step of the SME (A, B: ``(paths, 2, ·, r)`` from
    :func:`sme_step_states`; ``deltas``: :func:`sample_gradients` at the start): per part
    (``A``: E[N_AᵀN_A]/dt, ``B``: E[N_BᵀN_B]/dt, ``D``: their difference; N the
    increment minus its mean over paths, the second moment with 1/(P − 1)) and entry
    i ≤ j, the mean over paths, its SE, T10's prediction (batches without replacement)
    and the z-score; beside it the z-scores against the with-replacement formula and
    against the batch off by one (b + 1, b − 1)."""
    P = len(A)
    NA = A[:, 1] - A[:, 1].mean(axis=0)
    NB = B[:, 1] - B[:, 1].mean(axis=0)
    XA = np.einsum("pir,pis->prs", NA, NA) * (P / (P - 1) / dt)
    XB = np.einsum("pir,pis->prs", NB, NB) * (P / (P - 1) / dt)
    X = {"A": XA, "B": XB, "D": XA - XB}
    A0, B0 = A[0, 0], B[0, 0]
    pred = _noise_parts(A0, B0, deltas, eta, batch, False)
    wrong = {c: _noise_parts(A0, B0, deltas, eta, batch + db, rep) for c, db, rep in WRONG}
    r = A.shape[-1]
    rows = []
    for part in PARTS:
        mean, se = X[part].mean(axis=0), X[part].std(axis=0, ddof=1) / np.sqrt(P)
        for i in range(r):
            for j in range(i, r):
                row = {"part": part, "entry": f"{i},{j}", "paths": P, "batch": batch}
                row |= {"samples": len(deltas), "dt": dt, "mean": mean[i, j], "se": se[i, j]}
                row |= {"theory": pred[part][i, j]}
                row |= {"z": (mean[i, j] - pred[part][i, j]) / se[i, j]}
                row |= {c: (mean[i, j] - w[part][i, j]) / se[i, j] for c, w in wrong.items()}
                rows.append(row)
    return pd.DataFrame(rows)


def sme_error_table(weak: pd.DataFrame, moments: pd.DataFrame) -> pd.DataFrame:
    """Per η, the weak error of E[tr D] of SGD against its SME (``weak``) and against the
    noiseless flow, whose tr D is T4's ``e^{−2ηλt} tr D(0)`` exactly
    (``theory.gf_balance_gap``; tr D(0) the start's, from ``moments``): both errors with
    their SEs (the flow's is SGD's alone) and ``gain_z``, by how many SE the SME's |error|
    is below the flow's."""
    rows = weak[weak["observable"] == WEAK_OBSERVABLE].sort_values("dynamics.eta")
    start = moments[(moments["observable"] == WEAK_OBSERVABLE) & (moments["t"] == 0)]
    trace0 = float(start["mean"].iloc[0])
    lam = float(rows["dynamics.lam"].iloc[0])
    out = []
    for _, w in rows.iterrows():
        with jax.enable_x64(True):
            flow = float(theory.gf_balance_gap(trace0, w["dynamics.eta"], lam, float(w["steps"])))
        flow_error = w["optimizer.mean"] - flow
        se = float(np.hypot(w["error_se"], w["optimizer.se"]))
        out.append({"dynamics.eta": w["dynamics.eta"], "steps": int(w["steps"]),
                    "horizon": w["horizon"], "paths": int(w["optimizer.paths"]),
                    "sme_error": w["error"], "sme_error_se": w["error_se"],
                    "flow_trace": flow, "flow_error": flow_error,
                    "flow_error_se": w["optimizer.se"],
                    "gain_z": (abs(flow_error) - abs(w["error"])) / se})  # fmt: skip
    return pd.DataFrame(out)


def sme_tables(
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    step_paths: int = STEP_PATHS["quick"],
    out: str | Path | None = None,
    figures: Any = None,
) -> dict[str, pd.DataFrame]:
    """Both SME claims' data: ``rankflow compare`` of the SGD ``config`` (default
    ``sims/reproduce/noise_sme.toml``, with ``overrides`` — dotted keys, ``compare.*``
    included — as ``compare`` takes them; ``out``, ``figures`` passed on) and
    ``step_paths`` paths of one Euler–Maruyama step of its SME. Returns compare's tables
    (``trajectory``, ``moments``, ``weak``), ``errors`` (:func:`sme_error_table`) and
    ``step`` (:func:`sme_step_table`)."""
    config = config_path("noise_sme") if config is None else config
    tables = dict(compare_lib.compare(config, out=out, overrides=overrides, figures=figures))
    raw = copy.deepcopy(dict(config_lib.load_config(config)))
    _, rest = split_options(raw, overrides)
    point = config_lib.resolve(raw, rest)
    solver_set = set((raw.get("solver") or {}).keys())
    solver_set |= {k.split(".", 1)[1] for k in rest if k.startswith("solver.")}
    A, B, dt = sme_step_states(point, step_paths, solver_set)
    _, deltas = sample_gradients(point, A[0, 0], B[0, 0])
    d = point["dynamics"]
    tables["errors"] = sme_error_table(tables["weak"], tables["moments"])
    tables["step"] = sme_step_table(A, B, dt, deltas, d["eta"], d["batch"])
    return tables


# --- claims: pure functions of the tables -------------------------------------------------


def sme_weak_order_claim(weak: pd.DataFrame, errors: pd.DataFrame) -> Claim:
    """T10 with T4 (SGD against its SME and against the noiseless flow): from compare's
    ``weak`` table, the order of the weak error of E[tr D] in η at fixed ηt
    (``compare.weak_order``) is ``WEAK_ORDER`` within ``WEAK_TOL``, its standard error at
    most ``WEAK_TOL``, every η's error resolved (|z| ≥ ``WEAK_Z``); and from
    :func:`sme_error_table`, at every η the SME's |error| is ``FLOW_Z`` SE below the
    noiseless flow's."""
    rows = weak[weak["observable"] == WEAK_OBSERVABLE].sort_values("dynamics.eta")
    order, se = compare_lib.weak_order(weak, WEAK_OBSERVABLE)
    z = rows["z"].abs()
    ok = len(rows) >= 3 and abs(order - WEAK_ORDER) <= WEAK_TOL and se <= WEAK_TOL
    ok = ok and bool(np.all(z >= WEAK_Z))
    ok = ok and len(errors) == len(rows) and bool(np.all(errors["gain_z"] >= FLOW_Z))
    if len(rows) and len(errors):
        first = rows.iloc[0]
        measurement = (
            f"ηt = {fmt(float(first['horizon']), 3)}, "
            f"{int(first['optimizer.paths'])} paths per η, η = "
            + ", ".join(f"{v:g}" for v in rows["dynamics.eta"])
            + ": SME error "
            + ", ".join(
                f"{fmt(e, 3)} ± {fmt(s, 2)}" for e, s in zip(rows["error"], rows["error_se"])
            )
            + f" (order {order:.3f} ± {se:.3f}); noiseless flow's error "
            + ", ".join(fmt(e, 3) for e in errors["flow_error"])
            + ": the SME's below it by "
            + ", ".join(f"{g:.1f}" for g in errors["gain_z"])
            + " SE"
        )
    else:
        measurement = "no weak table"
    tolerance = (
        f"|order − {WEAK_ORDER:g}| ≤ {WEAK_TOL:g}, its SE ≤ {WEAK_TOL:g}, every |z| ≥ "
        f"{WEAK_Z:g}; at every η, |flow error| − |SME error| ≥ {FLOW_Z:g} SE (the two errors' "
        "SEs in quadrature)"
    )
    return Claim(
        experiment=NAME,
        name="noise.sme_weak_order",
        source="T10",
        statement="Minibatch SGD and its stochastic modified equation (W-space noise with "
        "the minibatch gradient's covariance) agree in distribution to first order in η, "
        "and the SME's noise matters: the SME is closer to SGD than the noiseless flow is.",
        prediction=f"weak error of E[tr D] at a fixed ηt of order {WEAK_ORDER:g} (Li, Tai & "
        "E; a noise of the wrong size in η, e.g. √η with time in steps, gives ≈ 0), and "
        "below the noiseless flow's (T4: e^{−2ηλt} tr D(0)) at every η — which any SDE "
        "with SGD's drift, the flow included, would not be, since all have order 1",
        measurement=measurement,
        tolerance=tolerance,
        verdict=verdict(ok),
        figure="noise_sme_weak.png",
    )


def sme_step_noise_claim(step: pd.DataFrame) -> Claim:
    """T10 on one Euler–Maruyama step of the SME: from :func:`sme_step_table`, every entry
    of every part is T10's within ``STEP_Z_MAX`` SE, and each wrong formula (with
    replacement, b + 1, b − 1) is ``STEP_Z_WRONG`` SE off in some entry."""
    ok = set(step["part"]) == set(PARTS) if len(step) else False
    z = float(step["z"].abs().max()) if len(step) else float("nan")
    wrong = {c: float(step[c].abs().max()) if len(step) else 0.0 for c, _, _ in WRONG}
    ok = ok and z <= STEP_Z_MAX and min(wrong.values()) >= STEP_Z_WRONG
    if len(step):
        s = step.iloc[0]
        d = step[step["part"] == "D"]
        measurement = (
            f"{int(s['paths'])} paths of one step (dt = {s['dt']:g}), b = {int(s['batch'])} "
            f"of N = {int(s['samples'])}, {len(step)} entries: max |z| {z:.2f}; with "
            f"replacement {wrong['z_replace']:.1f} SE off, b + 1 {wrong['z_b_plus']:.1f}, "
            f"b − 1 {wrong['z_b_minus']:.1f}; T10's term of D up to "
            f"{fmt(float(d['theory'].abs().max()), 3)} = "
            f"{float((d['theory'] / d['se']).abs().max()):.0f} SE"
        )
    else:
        measurement = "no step table"
    return Claim(
        experiment=NAME,
        name="noise.sme_step_noise",
        source="T10",
        statement="The SME's noise is T10's: over one Euler–Maruyama step of the simulated "
        "SME, the covariance of the factors' increments gives the Itô term "
        "(η²/(bN))·(N−b)/(N−1)·Σ_k (Bᵀδ_kᵀδ_kB − Aᵀδ_kδ_kᵀA) of D, and each of its parts.",
        prediction="E[N_AᵀN_A]/dt, E[N_BᵀN_B]/dt and their difference = "
        "theory.minibatch_noise_balance_drift(replace=False) at λ = 0 (with B = 0, A = 0 "
        "for the parts), per entry",
        measurement=measurement,
        tolerance=f"|z| ≤ {STEP_Z_MAX:g} per entry, and max |z| ≥ {STEP_Z_WRONG:g} against "
        "the with-replacement formula and against b ± 1 (the data resolve the spread)",
        verdict=verdict(ok),
    )
