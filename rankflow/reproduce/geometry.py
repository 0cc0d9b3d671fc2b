"""Experiment ``geometry``: decoupled decay with a bounded update (docs/theory.md, T14),
``X_{k+1} = (1 − ηλ)X_k − ηU_k`` with ``‖U_k‖ ≤ ρ``, which keeps
``‖X_k‖ ≤ ρ/λ + (1 − ηλ)^k(‖X_0‖ − ρ/λ)``.

``sims/reproduce/geometry.toml``: GD, sign descent, Lion and Muon (``dynamics.kind``) on
the diagonal loss ``½‖ABᵀ − diag(s)‖²`` with ``s ≫ 1/λ``, whose unconstrained minimiser
lies far outside the ball of radius ``ρ/λ``; float64, the factors saved at every step.
Claims, each about where the runs go (the bound alone holds for any update of norm ≤ ρ):

- ``geometry.sign_bound_reached`` (T14): sign descent and Lion (max norm, ρ = 1) end with
  ``max|A|``, ``max|B|`` at ρ/λ, and never above the T14 bound.
- ``geometry.muon_bound`` (T14): Muon's factors (spectral norm) end near ρ/λ with ρ the
  supremum of optax's Newton–Schulz quintic (:func:`rankflow.theory.newton_schulz_sup`),
  above 1/λ (so ρ = 1 would be wrong), and never above the T14 bound.

An observation with a figure: the balance gap ``‖AᵀA − BᵀB‖_F`` against ``(1 − ηλ)^{2k}``
per optimizer.

Every claim is a pure function of the norms table (:func:`norms_table`) and ρ, so that its
mutants (tests/claims/test_mutants_geometry.py) can feed it a wrong radius, a wrong ρ or
the table of runs whose decay is not multiplied by η.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import plots, theory
from ..engine.states import load_states
from ._common import Claim, Context, fmt, run_sweep, sweep_config, verdict

NAME = "geometry"
CONFIG = "geometry"
# The claims whose verdict can be pass (tests/claims/test_mutants_geometry.py: their mutants).
CLAIMS = ("geometry.sign_bound_reached", "geometry.muon_bound")
SIGN_KINDS = ("sign_gd", "lion")
MUON_KIND = "muon"
# Sign descent's largest entry has a constant sign once it is at the edge, so it follows
# the bound with equality: 1/λ − (1 − ηλ)^k(1/λ − |X_0|), 2e-5 below 1/λ after 200 steps
# of ηλ = 0.05 (measured 2.4e-5, 1.6e-5). A wrong radius (1/(2λ)) misses it by 50%.
SIGN_TOL = 1e-3
# Muon's update has spectral norm p⁵(σ/‖M‖_F) of its momentum's singular values, in
# [0.68, 1.134] (optax's quintic), so its factors settle below ρ/λ: measured 0.1% and 3%
# below. ρ = 1 is 13% below ρ = 1.134.
MUON_TOL = 0.05
# Inputs whose nonzero singular values are ≥ 2% of their Frobenius norm (newton_schulz_sup).
MUON_LOW = 0.02
# The bound is an inequality met with equality by sign descent: float64 rounding only.
BOUND_TOL = 1e-12


def validate(mode: str) -> None:
    sweep_config(CONFIG, mode)


def muon_rho() -> float:
    """Muon's ρ for factors m × r with m ≥ r (shape scale 1): the supremum of optax's
    5-step quintic over singular values ≥ ``MUON_LOW`` of the Frobenius norm, 1.134357."""
    return theory.newton_schulz_sup(low=MUON_LOW)


def norms_table(df: pd.DataFrame, states) -> pd.DataFrame:
    """One row per (run, factor, save) of a ``save.states`` sweep (its table ``df`` and
    :func:`rankflow.load_states` of it): ``dynamics.kind``, ``dynamics.eta``,
    ``dynamics.lam``, ``factor`` (A, B), ``t`` and the factor's ``max_norm`` and
    ``spectral_norm``."""
    rows = []
    for run_id, g in df.groupby("run_id"):
        first = g.iloc[0]
        s = states[int(run_id)]
        for name, X in s.factors.items():
            X = np.asarray(X, np.float64)
            rows.append(
                pd.DataFrame(
                    {
                        "run_id": int(run_id),
                        "dynamics.kind": first["dynamics.kind"],
                        "dynamics.eta": float(first["dynamics.eta"]),
                        "dynamics.lam": float(first["dynamics.lam"]),
                        "factor": name,
                        "t": np.asarray(s.t, np.float64),
                        "max_norm": np.abs(X).max(axis=(1, 2)),
                        "spectral_norm": np.linalg.norm(X, ord=2, axis=(1, 2)),
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def _curves(norms: pd.DataFrame, kinds, column: str, rho: float):
    """Per (run, factor) of ``kinds``: λ·(final norm)/ρ − 1, and the largest excess over
    the T14 bound with ``ρ`` relative to it (≤ 0 when the bound holds)."""
    ends, excess = [], []
    for _, g in norms[norms["dynamics.kind"].isin(kinds)].groupby(["run_id", "factor"]):
        g = g.sort_values("t")
        eta, lam = float(g["dynamics.eta"].iloc[0]), float(g["dynamics.lam"].iloc[0])
        x = g[column].to_numpy(float)
        with jax.enable_x64(True):
            bound = np.asarray(theory.t14_bound(x[0], rho, eta, lam, jnp.asarray(g["t"])))
        ends.append(x[-1] * lam / rho - 1)
        excess.append(float(np.max((x - bound) / np.maximum(bound, 1.0))))
    return np.asarray(ends), np.asarray(excess)


def sign_bound_claim(norms: pd.DataFrame, rho: float = 1.0) -> Claim:
    """T14: sign descent and Lion end with every factor's max norm within ``SIGN_TOL`` of
    ρ/λ (relative), and never exceed the T14 bound (beyond ``BOUND_TOL``)."""
    ends, excess = _curves(norms, SIGN_KINDS, "max_norm", rho)
    worst_end = float(np.max(np.abs(ends))) if ends.size else float("nan")
    worst_excess = float(np.max(excess)) if excess.size else float("nan")
    return Claim(
        experiment=NAME,
        name="geometry.sign_bound_reached",
        source="T14",
        statement="Sign descent and Lion with decoupled decay ηλ update by ±η per entry "
        "(max norm ρ = 1): on a loss whose minimiser lies outside the max-norm ball of "
        "radius ρ/λ, each factor's largest entry is pushed to ρ/λ and never beyond the "
        "bound ρ/λ + (1 − ηλ)^k(‖X_0‖ − ρ/λ).",
        prediction=f"max|A|, max|B| → ρ/λ = {fmt(rho)}/λ; ≤ the T14 bound at every step",
        measurement=f"final λ·max|X|/ρ − 1: {', '.join(fmt(e, 3) for e in ends)} "
        f"({len(ends)} factors of {', '.join(SIGN_KINDS)}); largest excess over the bound "
        f"(relative): {fmt(worst_excess, 3)}",
        tolerance=f"|λ·max|X|/ρ − 1| ≤ {SIGN_TOL:g} at the end; excess ≤ {BOUND_TOL:g} "
        "(float64 rounding)",
        verdict=verdict(ends.size > 0 and worst_end <= SIGN_TOL and worst_excess <= BOUND_TOL),
        figure="geometry.png",
    )


def muon_bound_claim(norms: pd.DataFrame, rho: float | None = None) -> Claim:
    """T14: Muon's factors end with spectral norm within ``MUON_TOL`` of ρ/λ (relative),
    above 1/λ, and never exceed the T14 bound with ρ (beyond ``BOUND_TOL``)."""
    rho = muon_rho() if rho is None else float(rho)
    ends, excess = _curves(norms, (MUON_KIND,), "spectral_norm", rho)
    last = norms[norms["dynamics.kind"] == MUON_KIND].sort_values("t")
    last = last.groupby(["run_id", "factor"]).tail(1)
    above = (last["spectral_norm"] * last["dynamics.lam"]).to_numpy(float)
    worst_end = float(np.max(np.abs(ends))) if ends.size else float("nan")
    worst_excess = float(np.max(excess)) if excess.size else float("nan")
    ok = (
        ends.size > 0
        and worst_end <= MUON_TOL
        and bool(np.all(above > 1.0))
        and worst_excess <= BOUND_TOL
    )
    return Claim(
        experiment=NAME,
        name="geometry.muon_bound",
        source="T14",
        statement="Muon with decoupled decay ηλ updates by an orthogonalised momentum whose "
        "spectral norm is at most ρ, not 1: the supremum of optax's 5-step Newton–Schulz "
        f"quintic over singular values ≥ {MUON_LOW:g} of the Frobenius norm "
        f"(≈ {fmt(muon_rho(), 7)}; 1.2024 over all inputs). On a loss whose minimiser lies "
        "outside the spectral ball of radius ρ/λ, each factor's spectral norm ends near ρ/λ, "
        "above 1/λ, and never beyond the T14 bound.",
        prediction=f"‖A‖₂, ‖B‖₂ → ρ/λ with ρ = {fmt(rho, 7)}, > 1/λ; ≤ the T14 bound",
        measurement=f"final λ·‖X‖₂: {', '.join(fmt(a, 6) for a in above)}; λ‖X‖₂/ρ − 1: "
        f"{', '.join(fmt(e, 3) for e in ends)}; largest excess over the bound (relative): "
        f"{fmt(worst_excess, 3)}",
        tolerance=f"|λ‖X‖₂/ρ − 1| ≤ {MUON_TOL:g} and λ‖X‖₂ > 1 at the end; excess ≤ {BOUND_TOL:g}",
        verdict=verdict(ok),
        figure="geometry.png",
    )


def balance_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, save): ``dynamics.kind``, ``t``, ``gap_ratio`` = ‖D_k‖_F/‖D_0‖_F
    and ``decay`` = (1 − ηλ)^{2k}."""
    rows = []
    for _, g in df.groupby("run_id"):
        g = g.sort_values("t")
        eta, lam = float(g["dynamics.eta"].iloc[0]), float(g["dynamics.lam"].iloc[0])
        gap = g["balance_gap"].to_numpy(float)
        t = g["t"].to_numpy(float)
        rows.append(
            pd.DataFrame(
                {
                    "dynamics.kind": g["dynamics.kind"].iloc[0],
                    "t": t,
                    "gap_ratio": gap / gap[0],
                    "decay": (1 - eta * lam) ** (2 * t),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def balance_observation(balance: pd.DataFrame) -> Claim:
    end = balance.sort_values("t").groupby("dynamics.kind", sort=False).tail(1)
    peak = balance.groupby("dynamics.kind", sort=False)["gap_ratio"].max()
    parts = [
        f"{r['dynamics.kind']}: {fmt(r['gap_ratio'], 3)} (max {fmt(peak[r['dynamics.kind']], 3)})"
        for _, r in end.iterrows()
    ]
    same = ""
    if {"sign_gd", "lion"} <= set(balance["dynamics.kind"]):
        a, b = (balance[balance["dynamics.kind"] == k].sort_values("t")["gap_ratio"].to_numpy()
                for k in ("sign_gd", "lion"))  # fmt: skip
        if len(a) == len(b):
            diff = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-300)))
            same = f"; sign_gd and Lion differ by at most {fmt(diff, 3)} (relative) at any save"
    return Claim(
        experiment=NAME,
        name="geometry.balance_gap",
        source="observation (T5, T14)",
        statement="GD's balance gap contracts like (1 − ηλ)^{2k} (T5); for sign descent, Lion "
        "and Muon the middle term of T14's balance step does not cancel, so the theory "
        "gives no rate: the gap of each is shown against (1 − ηλ)^{2k}.",
        prediction="GD: ‖D_k‖/‖D_0‖ ≈ (1 − ηλ)^{2k}; the others: no prediction",
        measurement=f"‖D_K‖/‖D_0‖ at the last step K = {int(end['t'].max())}, against "
        f"(1 − ηλ)^{{2K}} = {fmt(float(end['decay'].iloc[0]), 3)}: " + "; ".join(parts) + same,
        tolerance="—",
        verdict="observation",
        figure="geometry.png",
    )


def run_experiment(ctx: Context) -> None:
    _, df = run_sweep(ctx, CONFIG)
    df = df.copy(deep=False)
    df.attrs = {}  # the states are read from the run's directory, not written as a table
    ctx.table("geometry_runs", df)
    norms = norms_table(df, load_states(ctx.runs(CONFIG)))
    ctx.table("geometry_norms", norms)
    balance = balance_table(df)
    ctx.table("geometry_balance", balance)
    plots.geometry_figure(norms, balance, muon_rho(), ctx.figures / "geometry.png")
    ctx.claims += [sign_bound_claim(norms), muon_bound_claim(norms), balance_observation(balance)]
