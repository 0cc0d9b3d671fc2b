"""Mutants of the ``optimizers`` experiment's claims (issue #33, item 3): the discrete
momentum optimizers and GD under learning-rate schedules, which no other experiment runs.

Each claim is a pure function of a table (``rankflow.reproduce.optimizers``). Here the
tables are made by the experiment's own functions at its ``--quick`` size, once with
rankflow's source as it is (the positive control: every claim passes) and once per
mutant with rankflow's source or theory monkeypatched: the momentum chains of
``rankflow.core.optimizers`` (the EMA's coefficient swapped, the couplings exchanged, no
momentum), the learning rate of the optimizers (one step off, the schedule ignored), the
schedule itself (``rankflow.numerics.schedules.schedule_factor`` one step off), and the
predictions of ``rankflow.theory`` (the decay factor not squared, the peak η in place of
η_k, η_(k+1) at step k). Each mutant must fail its claim by at least 3× the tolerance
(orders, T5's deviation) or by more than the width of the bound (the product). The
values quoted were measured on this data (float64, seed 0).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest

from rankflow import theory
from rankflow.core import optimizers
from rankflow.engine import programs
from rankflow.numerics import schedules
from rankflow.reproduce import optimizers as experiment

MUTANT_CLAIMS = (
    "optimizers.momentum_order",
    "optimizers.momentum_coupled_order",
    "optimizers.scheduled_gd_step",
    "optimizers.scheduled_gd_contraction",
)


def _check(claim, name: str, expect: str) -> None:
    assert claim.name == name
    assert claim.verdict == expect, f"{name}: expected {expect}; {claim.measurement}"


# --- momentum -------------------------------------------------------------------------------

RIGHT_MOMENTUM, RIGHT_COUPLED = optimizers.momentum, optimizers.momentum_coupled


def _ema_swapped(coupled: bool):
    """``optax.ema(μ)`` where ``ema(1 − μ)`` is meant: M ← μM + (1 − μ)g."""

    def make(lr, lam, mu):
        ema = optax.ema(mu, debias=False)
        decay = optax.add_decayed_weights(lam)
        chain = (decay, ema) if coupled else (ema, decay)
        return optax.chain(*chain, optax.scale_by_learning_rate(lr))

    return make


MOMENTUM_MUTANTS = {
    "EMA coefficient swapped, ema(μ)": {
        "momentum": _ema_swapped(False),
        "momentum_coupled": _ema_swapped(True),
    },
    "couplings exchanged": {"momentum": RIGHT_COUPLED, "momentum_coupled": RIGHT_MOMENTUM},
    "no momentum, μ = 1": {
        "momentum": lambda lr, lam, mu: RIGHT_MOMENTUM(lr, lam, 1.0),
        "momentum_coupled": lambda lr, lam, mu: RIGHT_COUPLED(lr, lam, 1.0),
    },
}


@pytest.fixture(scope="module")
def momentum_orders():
    """``compare``'s order table under the right source and under each mutant of
    ``MOMENTUM_MUTANTS`` (after the right one, whose compiled flows they reuse)."""
    programs.release()
    out = {"right": experiment.momentum_tables("quick")["order"]}
    for name, patch in MOMENTUM_MUTANTS.items():
        with pytest.MonkeyPatch.context() as mp:
            for attr, make in patch.items():
                mp.setattr(optimizers, attr, make)
            # Compiled optimizers hold the right chains: build them again (flows kept).
            kept = {k: p for k, p in programs.PROGRAMS.items() if p.continuous}
            mp.setattr(programs, "PROGRAMS", kept)
            out[name] = experiment.momentum_tables("quick")["order"]
    return out


def _order(order: pd.DataFrame, kind: str) -> float:
    return float(order.loc[order["dynamics.kind"] == kind, "order"].iloc[0])


ORDER_CLAIMS = {
    "optimizers.momentum_order": (experiment.momentum_order_claim, "momentum"),
    "optimizers.momentum_coupled_order": (experiment.momentum_coupled_order_claim,
                                          "momentum_coupled"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORDER_CLAIMS))
def test_mutant_momentum_order(momentum_orders, name):
    """T7/T8, tolerance |order − 1| ≤ 0.15, diagonal toy, η = 0.1 … 0.0125 with μ = η,
    λ = 0.2, ηt = 10. Control: order 0.996 (decoupled) and 0.946 (coupled). Mutants, real
    runs of a wrong chain against the right flow, none converging to it: the EMA's
    coefficient swapped, order −0.017 / −0.014 (distance 0.21–0.24 at every η); the
    couplings exchanged, −0.009 / −0.054 (0.11–0.13); no momentum (μ = 1), −0.013 / −0.011
    — each ≥ 6.3× the tolerance from 1."""
    claim_of, kind = ORDER_CLAIMS[name]
    _check(claim_of(momentum_orders["right"]), name, "pass")
    for mutant in MOMENTUM_MUTANTS:
        order = momentum_orders[mutant]
        _check(claim_of(order), name, "fail")
        assert abs(_order(order, kind) - 1) >= 3 * experiment.ORDER_TOL, (mutant, order)


# --- schedules ------------------------------------------------------------------------------

RIGHT_FACTOR = schedules.schedule_factor


def _lr_one_step_off(eta, schedule=None):
    """η(k + 1) at step k: ``optimizers.learning_rate`` with the schedule one step ahead."""
    if schedule is None or schedule.constant:
        return eta
    return lambda k: schedules.eta_at(jnp.asarray(k + 1, jnp.result_type(eta)), eta, schedule)


# Wrong sources, each run through the experiment's own functions.
SCHEDULE_SOURCES = {
    "optimizer η(k + 1) at step k": (optimizers, "learning_rate", _lr_one_step_off),
    "schedule_factor one step off": (
        schedules,
        "schedule_factor",
        lambda t, sch: RIGHT_FACTOR(t + 1.0, sch),
    ),
    "schedule ignored, the peak η": (optimizers, "learning_rate", lambda eta, schedule=None: eta),
}


@pytest.fixture(scope="module")
def schedule_steps():
    """The experiment's schedule table under the right source (programs built afresh and
    kept: the theory's mutants reuse them)."""
    programs.release()
    return experiment.schedule_table("quick")


@pytest.fixture(scope="module")
def schedule_wrong():
    """The schedule table under each wrong source of ``SCHEDULE_SOURCES``."""
    out = {}
    for name, (module, attr, wrong) in SCHEDULE_SOURCES.items():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(module, attr, wrong)
            mp.setattr(programs, "PROGRAMS", {})  # compiled programs hold the right source
            out[name] = experiment.schedule_table("quick")
    return out


def _t5_deviation(steps: pd.DataFrame) -> float:
    return float(np.nanmax(steps[["t5_deviation", "t5_residual"]].to_numpy()))


def _outside(steps: pd.DataFrame) -> tuple[float, float]:
    """How far the departure from the product leaves its bound (max over steps), and the
    bound's widest width."""
    dep = steps["log_gap"] - steps["log_product"]
    miss = np.maximum(steps["bound_low"] - dep, dep - steps["bound_high"])
    return float(miss.max()), float((steps["bound_high"] - steps["bound_low"]).max())


RIGHT_ETAS = theory.gd_scheduled_etas


def _etas_one_step_off(eta, k, schedule):
    """η_(k+1) predicted for step k."""
    return RIGHT_ETAS(eta, np.asarray(k) + 1, schedule)


def _etas_peak(eta, k, schedule):
    """The peak η predicted for every step."""
    return RIGHT_ETAS(eta, k, None)


def test_mutant_scheduled_gd_step_theory(schedule_steps):
    """T5/T11, tolerance 1e-10 at every step. Control: max deviation 5.1e-15 (warmup-cosine
    and linear, 60 steps each). Wrong predictions on the same runs: η_(k+1) at step k,
    1.6e-2; the peak η throughout, 2.2e-1 — ≥ 10⁸× the tolerance."""
    name = "optimizers.scheduled_gd_step"
    _check(experiment.scheduled_gd_step_claim(schedule_steps), name, "pass")
    for wrong in (_etas_one_step_off, _etas_peak):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(theory, "gd_scheduled_etas", wrong)
            steps = experiment.schedule_table("quick")
        _check(experiment.scheduled_gd_step_claim(steps), name, "fail")
        assert _t5_deviation(steps) >= 3 * experiment.T5_TOL, wrong.__name__


RIGHT_CONTRACTION = theory.gd_scheduled_contraction


def _not_squared(eta, lam, k, schedule):
    """Π(1 − η_jλ), the decay factor not squared."""
    return np.sqrt(RIGHT_CONTRACTION(eta, lam, k, schedule))


def _peak_contraction(eta, lam, k, schedule):
    """Π(1 − ηλ)², the peak η in place of η_j."""
    return RIGHT_CONTRACTION(eta, lam, k, None)


def test_mutant_scheduled_gd_contraction_theory(schedule_steps):
    """T11, the departure from Π(1 − η_jλ)² inside the η² terms' bound at every step, the
    bound ≤ 10% of the exponent. Control: departure −0.118 in [−0.131, 0.131] at k = 60
    (warmup-cosine; linear −0.114 in [−0.127, 0.126]), the bound 4.0% of the exponent 3.31.
    Wrong products on the same runs: (1 − η_kλ) not squared, outside by 1.64; the peak η
    at every step, by 2.61 — each ≥ 6× the bound's widest width (0.26)."""
    name = "optimizers.scheduled_gd_contraction"
    _check(experiment.scheduled_gd_contraction_claim(schedule_steps), name, "pass")
    for wrong in (_not_squared, _peak_contraction):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(theory, "gd_scheduled_contraction", wrong)
            steps = experiment.schedule_table("quick")
        _check(experiment.scheduled_gd_contraction_claim(steps), name, "fail")
        miss, width = _outside(steps)
        assert miss >= width, (wrong.__name__, miss, width)


@pytest.mark.slow
def test_mutant_scheduled_gd_source(schedule_steps, schedule_wrong):
    """Wrong sources, real runs: the optimizer's η(k + 1) at step k and schedule_factor
    one step off each miss T5 with optax's η_k by 1.5e-2 (≥ 10⁸× the tolerance; they also
    leave the product's bound, by 0.12 against its width 0.21, a margin not relied on);
    the schedule ignored (the peak η at every step) misses T5 by 2.8e-1 and leaves the
    product's bound by 3.1, 25× its width (0.13)."""
    step, contraction = "optimizers.scheduled_gd_step", "optimizers.scheduled_gd_contraction"
    for name, steps in schedule_wrong.items():
        _check(experiment.scheduled_gd_step_claim(steps), step, "fail")
        assert _t5_deviation(steps) >= 3 * experiment.T5_TOL, name
    wrong = schedule_wrong["schedule ignored, the peak η"]
    _check(experiment.scheduled_gd_contraction_claim(wrong), contraction, "fail")
    miss, width = _outside(wrong)
    assert miss >= width, (miss, width)


def test_mutant_claims_are_the_passable_claims():
    assert MUTANT_CLAIMS == experiment.CLAIMS
