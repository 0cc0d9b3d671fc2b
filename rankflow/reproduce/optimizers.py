"""Experiment ``optimizers``: the discrete optimizers no other experiment runs — momentum
with decoupled and with coupled decay, and GD under learning-rate schedules.

Through ``rankflow.compare`` (``sims/reproduce/optimizers_momentum.toml``, a sweep over
``dynamics.kind``), each momentum optimizer against the flow it discretises, η halved
with μ at a fixed horizon ηt:

- ``optimizers.momentum_order`` (T7, T8): decoupled momentum, ``M ← (1−μ)M + μg``,
  ``θ ← θ − η(M + λθ)``, converges to the momentum flow of T7 at first order in η.
- ``optimizers.momentum_coupled_order`` (T8): coupled momentum, ``M ← (1−μ)M + μ(g + λθ)``,
  ``θ ← θ − ηM`` (the decay passes through the EMA), converges to the coupled momentum
  flow ``dM/dt = μ(∇L + λθ − M)``, ``dθ/dt = −ηM`` at first order in η.

Through GD runs saved at every step (``optimizers_schedule.toml``: warmup-cosine and
linear schedules), with ``η_k`` from optax's own schedules (``theory.gd_scheduled_etas``):

- ``optimizers.scheduled_gd_step`` (T5, T11): T5 with η_k holds at every step to float64
  rounding — the exact check that sees a schedule one step off.
- ``optimizers.scheduled_gd_contraction`` (T11): ‖D_k‖/‖D_0‖ follows the leading factor
  ``Π_{j<k}(1 − η_jλ)²`` within the bound T5's η² terms put on it
  (``theory.gd_scheduled_bracket``), and that bound is a small part of the decay.

Each claim is a pure function of a table (``momentum_order_claim``, …). :func:`run_tables`
makes the tables in-process, writing nothing, with every program built afresh, so that a
test can monkeypatch rankflow's source (an optimizer chain, a schedule) and see a claim
fail; :func:`claims` turns the tables into the claims. Every prediction comes from
``rankflow.theory``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import compare as compare_lib
from .. import plots, theory
from ..compare.options import split_options
from ..core import config as config_lib
from ..core.program import params_of, program_for
from ..engine import programs
from ..engine.status import STATUS
from ..numerics.schedules import schedule_of
from . import discrete
from ._common import Claim, Context, config_path, fmt, full_overrides, sweep_config, verdict

NAME = "optimizers"
# The claims that can pass (each has a mutant in tests/claims/test_mutants_optimizers.py).
CLAIMS = (
    "optimizers.momentum_order",
    "optimizers.momentum_coupled_order",
    "optimizers.scheduled_gd_step",
    "optimizers.scheduled_gd_contraction",
)
MOMENTUM_CONFIG = "optimizers_momentum"
SCHEDULE_CONFIG = "optimizers_schedule"
# T8's tolerance (discrete.gd_order): order 1 up to the O(η) correction at the largest η;
# an optimizer that does not converge to the flow has order ≈ 0 and misses it by ≥ 0.85.
ORDER_TOL = discrete.ORDER_TOL
# T5 with η_k is an exact identity: float64 rounding amplified ≤ 10⁵-fold (discrete.T5_TOL).
T5_TOL = discrete.T5_TOL
# The departure from Π(1 − η_jλ)² is checked against a bound computed from the same
# float64 states: rounding of the logs (≲ 1e-14) is all the slack it needs.
LOG_ROUNDING = 1e-12
# "Leading order": the η² terms' bound at the last step is at most this share of the
# decay's exponent |log Π(1 − η_jλ)²| (measured 4% here); a leading factor that is wrong
# by a factor 2 in the exponent (the decay factor not squared) is off by 50%.
LEADING_SHARE = 0.1

# The columns of the schedule table (one row per schedule and step k = 0 … K; the step
# columns describe the step from k to k + 1 and are NaN at k = K).
STEP_COLUMNS = (
    "dynamics.schedule",
    "dynamics.warmup",
    "dynamics.final_fraction",
    "dynamics.eta",
    "dynamics.lam",
    "t",  # step k
    "status",  # the run's status at k (ok / diverged / max_steps)
    "eta_k",  # η(k), optax's (theory.gd_scheduled_etas)
    "gap",  # ‖D_k‖_F
    "ratio",  # ‖D_{k+1}‖_F/‖D_k‖_F, measured
    "t5_ratio",  # ‖T5 step of D_k with η_k‖_F/‖D_k‖_F
    "t5_deviation",  # |ratio − t5_ratio|
    "t5_residual",  # ‖D_{k+1} − T5 step‖_F/‖D_{k+1}‖_F (the matrix identity)
    "leading",  # (1 − η_kλ)²
    "shift",  # |(1 − η_{k+1}λ)² − (1 − η_kλ)²|: what a schedule one step off changes
    "log_gap",  # log(‖D_k‖_F/‖D_0‖_F)
    "log_product",  # log Π_{j<k}(1 − η_jλ)² (theory.gd_scheduled_contraction)
    "bound_low",  # the η² terms' bounds on log_gap − log_product (theory.gd_scheduled_bracket)
    "bound_high",
    "gf_log",  # −2λ∫₀ᵏη, gradient flow's exponent (theory.scheduled_balance_exponent)
)


def validate(mode: str) -> None:
    raw = config_lib.load_config(config_path(MOMENTUM_CONFIG))
    _, rest = split_options(raw, full_overrides(MOMENTUM_CONFIG, mode))
    config_lib.resolve(raw, rest)
    sweep_config(SCHEDULE_CONFIG, mode)


# --- the tables ------------------------------------------------------------------------------


def momentum_tables(mode: str, out: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """``rankflow.compare`` of ``optimizers_momentum`` at ``mode`` (written to ``out`` when
    given): its ``trajectory``, ``order`` and ``sweep`` tables, one point per
    ``dynamics.kind``."""
    return compare_lib.compare(
        config_path(MOMENTUM_CONFIG), out=out, overrides=full_overrides(MOMENTUM_CONFIG, mode)
    )


def _states(point: Mapping[str, Any]):
    """One GD run of ``point`` saved at every step: its program, traced values, A and B
    ``(K + 1, ·, r)`` and status codes ``(K + 1,)``."""
    program = program_for(point, save="states")
    params = params_of(point, 0)
    out = program.run({k: np.asarray([v]) for k, v in params.items()}, measure=False)
    ts = np.asarray(program.ts, np.float64)
    if not np.array_equal(ts, np.arange(len(ts))):
        raise ValueError(
            f"{SCHEDULE_CONFIG}: save at every step (save.num = save.t1 + 1), got {len(ts)} "
            f"saves up to {ts[-1]:g}"
        )
    A, B = (np.asarray(x[0]) for x in out["theta"])
    return program, params, A, B, np.asarray(out["status"][0])


def _t5(program, params, A, B, etas, lam):
    """G_k = ∇L(A_kB_kᵀ), D_k and T5's step of D_k with η_k, for every k (float64)."""
    with jax.enable_x64(True):
        data = program.data(params)

        def one(A, B, eta):
            G = jax.grad(lambda W: program.problem.loss(W, data))(A @ B.T)
            return G, theory.balance(A, B), theory.gd_balance_step(A, B, G, eta, lam)

        out = jax.jit(jax.vmap(one))(jnp.asarray(A), jnp.asarray(B), jnp.asarray(etas))
        return tuple(np.asarray(x, np.float64) for x in out)


def scheduled_gd_table(point: Mapping[str, Any]) -> pd.DataFrame:
    """The columns :data:`STEP_COLUMNS` of one scheduled GD run (a resolved point of
    ``optimizers_schedule``): T5 with η_k at every step, and the decay of ‖D‖_F against
    ``Π(1 − η_jλ)²`` with the η² terms' bound."""
    program, params, A, B, status = _states(point)
    d = point["dynamics"]
    eta, lam = float(d["eta"]), float(d["lam"])
    sch = schedule_of(d, float(point["save"]["t1"]))
    K = len(A) - 1
    ks = np.arange(K + 1)
    etas = theory.gd_scheduled_etas(eta, ks, sch)  # η_0 … η_K (η_K: the shift's)
    G, D, D5 = _t5(program, params, A, B, etas, lam)
    gap = np.linalg.norm(D, axis=(-2, -1))

    def steps(x):  # a per-step column: the step from k to k + 1, NaN at k = K
        return np.concatenate([x, [np.nan]])

    ratio = gap[1:] / gap[:-1]
    t5_ratio = np.linalg.norm(D5[:-1], axis=(-2, -1)) / gap[:-1]
    leading = (1.0 - etas * lam) ** 2
    low, high = theory.gd_scheduled_bracket(A[:-1], B[:-1], G[:-1], etas[:-1], lam)
    with jax.enable_x64(True):
        gf = -np.asarray(theory.scheduled_balance_exponent(eta, lam, ks.astype(float), sch))
    cols = {
        "dynamics.schedule": sch.kind,
        "dynamics.warmup": sch.warmup,
        "dynamics.final_fraction": sch.final_fraction,
        "dynamics.eta": eta,
        "dynamics.lam": lam,
        "t": ks.astype(np.float64),
        "status": np.asarray(STATUS)[status],
        "eta_k": etas,
        "gap": gap,
        "ratio": steps(ratio),
        "t5_ratio": steps(t5_ratio),
        "t5_deviation": steps(np.abs(ratio - t5_ratio)),
        "t5_residual": steps(np.linalg.norm(D[1:] - D5[:-1], axis=(-2, -1)) / gap[1:]),
        "leading": steps(leading[:-1]),
        "shift": steps(np.abs(np.diff(leading))),
        "log_gap": np.log(gap / gap[0]),
        "log_product": np.log(theory.gd_scheduled_contraction(eta, lam, ks, sch)),
        "bound_low": low,
        "bound_high": high,
        "gf_log": gf,
    }
    return pd.DataFrame({k: np.broadcast_to(v, (K + 1,)) for k, v in cols.items()})[
        list(STEP_COLUMNS)
    ]


def schedule_table(mode: str) -> pd.DataFrame:
    """:func:`scheduled_gd_table` of every schedule of ``optimizers_schedule`` at ``mode``."""
    points = config_lib.expand(sweep_config(SCHEDULE_CONFIG, mode))
    return pd.concat([scheduled_gd_table(p) for p in points], ignore_index=True)


def run_tables(mode: str = "quick", out: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """Every table the claims read, made in this process at ``mode`` (``quick`` or
    ``full``): ``momentum_order``, ``momentum_trajectory`` (``rankflow.compare`` of the two
    momentum optimizers, written to ``out`` when given) and ``schedule_steps``
    (:func:`schedule_table`). The cache of compiled programs is emptied first, so the
    code that runs is rankflow's source as it is now (a test may have monkeypatched it):
    ``claims(run_tables("quick"))`` are the experiment's claims on that code (~15 s on
    2 CPU cores).
    """
    programs.release()
    mom = momentum_tables(mode, out)
    return {
        "momentum_order": mom["order"],
        "momentum_trajectory": mom["trajectory"],
        "schedule_steps": schedule_table(mode),
    }


# --- claims: pure functions of the tables -------------------------------------------------


def _order_of(order: pd.DataFrame, kind: str) -> tuple[float, float, pd.DataFrame]:
    """The fitted order, its standard error and the rows of ``kind`` (NaN when absent)."""
    rows = order[order["dynamics.kind"] == kind].sort_values("dynamics.eta", ascending=False)
    if rows.empty:
        return float("nan"), float("nan"), rows
    return float(rows["order"].iloc[0]), float(rows["order_stderr"].iloc[0]), rows


def _order_measurement(p: float, se: float, rows: pd.DataFrame) -> str:
    if rows.empty:
        return "no rows of this optimizer in the order table"
    return (
        f"order {p:.3f} ± {se:.3f} over (η, μ) = "
        + ", ".join(f"({e:g}, {m:g})" for e, m in zip(rows["dynamics.eta"], rows["dynamics.mu"]))
        + f" at ηt = {rows['horizon'].iloc[0]:g}, λ = {rows['dynamics.lam'].iloc[0]:g}; "
        "distances " + ", ".join(fmt(float(v), 3) for v in rows["distance"])
    )


def _order_fields(order: pd.DataFrame, kind: str) -> dict[str, str]:
    """What the two order claims share: prediction, measurement, tolerance, verdict and
    figure, from the rows of ``kind`` in ``compare``'s ``order`` table."""
    p, se, rows = _order_of(order, kind)
    ok = len(rows) >= 2 and bool(np.isfinite(rows["distance"]).all()) and abs(p - 1) <= ORDER_TOL
    return {
        "prediction": "distance ∝ η¹ (halve η and μ, double the steps: the distance halves)",
        "measurement": _order_measurement(p, se, rows),
        "tolerance": f"|order − 1| ≤ {ORDER_TOL:g} (T8: order 1 up to the O(η) correction at "
        "the largest η; an optimizer that does not converge to the flow has order ≈ 0)",
        "verdict": verdict(ok),
        "figure": "optimizers.png",
    }


def momentum_order_claim(order: pd.DataFrame) -> Claim:
    """T7, T8: from ``compare``'s ``order`` table, decoupled momentum against the momentum
    flow (μ halved with η) is first order in η to ``ORDER_TOL``."""
    return Claim(
        experiment=NAME,
        name="optimizers.momentum_order",
        source="T7, T8",
        statement="Momentum with decoupled decay (M ← (1−μ)M + μg; θ ← θ − η(M + λθ)) is the "
        "explicit Euler step (dt = 1) of T7's momentum flow dM/dt = μ(∇L − M), dθ/dt = "
        "−η(M + λθ): with μ/η fixed, at a fixed horizon ηt the distance is first order in η.",
        **_order_fields(order, "momentum"),
    )


def momentum_coupled_order_claim(order: pd.DataFrame) -> Claim:
    """T8: from ``compare``'s ``order`` table, coupled momentum against the coupled
    momentum flow (μ halved with η) is first order in η to ``ORDER_TOL``."""
    return Claim(
        experiment=NAME,
        name="optimizers.momentum_coupled_order",
        source="T8",
        statement="Momentum with coupled decay, L2 in the loss (M ← (1−μ)M + μ(g + λθ); "
        "θ ← θ − ηM: the decay passes through the EMA), is the explicit Euler step of the "
        "coupled momentum flow dM/dt = μ(∇L + λθ − M), dθ/dt = −ηM: with μ/η fixed, at a "
        "fixed horizon ηt the distance is first order in η.",
        **_order_fields(order, "momentum_coupled"),
    )


def _per_schedule(steps: pd.DataFrame):
    return steps.groupby("dynamics.schedule", sort=False)


def _nanmax(x) -> float:
    x = np.asarray(x, np.float64)
    return float(np.nanmax(x)) if np.isfinite(x).any() else float("nan")


def scheduled_gd_step_claim(steps: pd.DataFrame) -> Claim:
    """T5, T11: from :func:`schedule_table`, T5 with η_k (optax's) holds at every step of
    every schedule to ``T5_TOL``."""
    parts, ok = [], len(steps) > 0
    for kind, g in _per_schedule(steps):
        dev = max(_nanmax(g["t5_deviation"]), _nanmax(g["t5_residual"]))
        ok = ok and dev <= T5_TOL and bool((g["status"] == "ok").all())
        parts.append(
            f"{kind} ({int(g['t'].max())} steps, warmup {g['dynamics.warmup'].iloc[0]:g}, "
            f"η_k {g['eta_k'].min():.3g}–{g['eta_k'].max():.3g}): max deviation {fmt(dev, 2)}"
        )
    shift = _nanmax(steps["shift"])
    return Claim(
        experiment=NAME,
        name="optimizers.scheduled_gd_step",
        source="T5, T11",
        statement="Under a learning-rate schedule the GD step from k to k + 1 uses η_k = η(k) "
        "(optax's count), and T5 holds with it at every step: D_(k+1) = (1 − η_kλ)²D_k + "
        "η_k²(BᵀGᵀGB − AᵀGGᵀA).",
        prediction="the measured ratio ‖D_(k+1)‖/‖D_k‖ and D_(k+1) itself equal T5's with "
        "η_k from optax's warmup_cosine_decay_schedule / linear_schedule",
        measurement="; ".join(parts) + f". A schedule one step off would change (1 − η_kλ)² "
        f"by up to {fmt(shift, 3)} per step",
        tolerance=f"|ratio − T5| ≤ {T5_TOL:g} and relative residual ≤ {T5_TOL:g} at every step, "
        "every run ok (an exact identity: float64 rounding, ε = 2.2e-16, amplified ≤ 10⁵-fold)",
        verdict=verdict(ok),
        figure="optimizers.png",
    )


def scheduled_gd_contraction_claim(steps: pd.DataFrame) -> Claim:
    """T11: from :func:`schedule_table`, ``log ‖D_k‖/‖D_0‖ − log Π_{j<k}(1 − η_jλ)²`` lies
    in the η² terms' bound at every step, and that bound is at most ``LEADING_SHARE`` of
    the exponent at the last step."""
    parts, ok = [], len(steps) > 0
    for kind, g in _per_schedule(steps):
        dep = (g["log_gap"] - g["log_product"]).to_numpy()
        low, high = g["bound_low"].to_numpy(), g["bound_high"].to_numpy()
        inside = bool(np.all((dep >= low - LOG_ROUNDING) & (dep <= high + LOG_ROUNDING)))
        last = g.iloc[-1]
        share = max(-last["bound_low"], last["bound_high"]) / abs(last["log_product"])
        ok = ok and inside and bool(share <= LEADING_SHARE)
        parts.append(
            f"{kind}: at k = {last['t']:g} log(‖D_k‖/‖D_0‖) = {last['log_gap']:.4f} against "
            f"log Π(1 − η_jλ)² = {last['log_product']:.4f}, departure {dep[-1]:+.4f} in "
            f"[{last['bound_low']:.4f}, {last['bound_high']:.4f}] "
            f"({'inside at every step' if inside else 'OUTSIDE at some step'}; the bound "
            f"{100 * share:.1f}% of the exponent); gradient flow's −2λ∫η = {last['gf_log']:.4f}"
        )
    return Claim(
        experiment=NAME,
        name="optimizers.scheduled_gd_contraction",
        source="T11",
        statement="Under a learning-rate schedule GD's balance gap decays by the product of "
        "(1 − η_kλ)² over its steps, to leading order: the rest is T5's η² terms.",
        prediction="log ‖D_k‖/‖D_0‖ = log Π_(j<k)(1 − η_jλ)² + a departure within "
        "[Σ log(1 − ρ_j), Σ log(1 + ρ_j)], ρ_j = η_j²‖BᵀGᵀGB − AᵀGGᵀA‖/((1 − η_jλ)²‖D_j‖) "
        "(theory.gd_scheduled_bracket)",
        measurement="; ".join(parts),
        tolerance=f"inside the bound at every step (± {LOG_ROUNDING:g} for rounding), and "
        f"the bound at the last step ≤ {LEADING_SHARE:g} of |log Π(1 − η_jλ)²| (leading order)",
        verdict=verdict(ok),
        figure="optimizers.png",
    )


def claims(tables: Mapping[str, pd.DataFrame]) -> list[Claim]:
    """The claims of :data:`CLAIMS` from the tables of :func:`run_tables`."""
    order, steps = tables["momentum_order"], tables["schedule_steps"]
    return [
        momentum_order_claim(order),
        momentum_coupled_order_claim(order),
        scheduled_gd_step_claim(steps),
        scheduled_gd_contraction_claim(steps),
    ]


# --- running ----------------------------------------------------------------------------


def run_experiment(ctx: Context) -> None:
    tables = run_tables(ctx.mode, out=ctx.runs(MOMENTUM_CONFIG))
    for name, df in tables.items():
        ctx.table(f"optimizers_{name}", df)
    plots.optimizers_figure(
        tables["momentum_order"], tables["schedule_steps"], ctx.figures / "optimizers.png"
    )
    ctx.claims.extend(claims(tables))
