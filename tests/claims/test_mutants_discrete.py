"""Mutants of the ``discrete`` experiment's claims (issue #12: every verdict can fail).

Each claim that can pass is computed by a pure function of a table
(``rankflow.reproduce.discrete``). Here each one runs on small data made by the engine
(``rankflow.compare.compare``, ``rankflow.run``) under a plausible wrong implementation, or
under the right one with the ``rankflow.theory`` function on its path replaced by a wrong
theory, and must say ``fail`` — by at least 3× its tolerance, so that the data can tell
the theories apart. Beside each, the positive control: the same small data under the
right implementation and theory passes, so no claim can hide behind an always-failing
test. The values quoted in the docstrings were measured on this data (float64, seed 0).
"""

import math

import numpy as np
import optax
import pandas as pd
import pytest

from rankflow import compare as compare_lib
from rankflow import theory
from rankflow.compare import run as compare_run
from rankflow.core import optimizers
from rankflow.core import program as simulate
from rankflow.engine import programs
from rankflow.reproduce import discrete

MUTANT_CLAIMS = (
    "discrete.gd_order",
    "discrete.gd_contraction",
    "discrete.sgf_mean",
    "discrete.sgf_floor",
)

# GD against GF (T5, T8): sensing 6×4, r = 3; order over η = 0.1, 0.05, 0.025 at ηt = 10.
GD = {
    "seed": 0,
    "x64": True,
    "problem": {"kind": "sensing", "m": 6, "n": 4, "rank": 2, "samples": 60, "noise": 0.01},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
    "save": {"t1": 100, "num": 6},
    "compare": {"window_start": 50, "window": 10, "halvings": 2},
}
# SGD with Gaussian noise against the stochastic flow (T6 mean): m − n = 10 and n = 6, a
# small target so that the noise dominates tr D's spread, and 2ηλt = 4 at the last save;
# a wrong sign, factor or noisy factor then moves E[tr D] by many standard errors.
SGD = {
    "seed": 0,
    "x64": True,
    "problem": {
        "kind": "regression",
        "m": 16,
        "n": 6,
        "rank": 2,
        "singular_values": [0.3, 0.2],
        "samples": 50,
        "noise": 0.1,
    },
    "model": {"r": 6},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "sgd_gaussian", "eta": 0.1, "lam": 0.2, "sigma": 0.3},
    # ShARK is exact to high order for additive noise: dt = 0.25 steps is plenty here.
    "solver": {"dt": 0.25},
    "save": {"t1": 100, "num": 11},
    "compare": {"paths": 64},
}
# The stochastic flow's floor (T6) at m ≠ n and r = 1: the factor r + 1 doubles the first
# term and the (m − n) E tr D term is large. σ = 0.1: the first term dominates; σ = 0.5:
# the second is comparable. D is a scalar at r = 1, so ‖D‖² fluctuates a lot: 48 paths,
# dense saves and 2ηλ = 0.1 (correlation time ~10 steps) bring the SE of the ratio to ~3%.
FLOOR = {
    "seed": 0,
    "x64": True,
    "problem": {"kind": "sensing", "m": 12, "n": 4, "rank": 1, "samples": 100, "noise": 0.01},
    "model": {"r": 1},
    "init": {"kind": "balanced", "scale": 0.3},
    "dynamics": {"kind": "stochastic_flow", "eta": 0.2, "lam": 0.25, "paths": 48},
    "solver": {"method": "shark", "dt": 1.0},
    "save": {"t1": 1000, "num": 201},
    "sweep": {"dynamics.sigma": [0.1, 0.5]},
}


# --- data ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gd_tables():
    return compare_lib.compare(GD)


@pytest.fixture(scope="module")
def sgd_tables():
    return compare_lib.compare(SGD)


@pytest.fixture(scope="module")
def floor_runs():
    return discrete.floor_runs(FLOOR)


# Wrong GD steps, each against the right gradient flow (a wrong implementation).
WRONG_GD = {
    # θ ← θ − η∇L: the (1 − ηλ)² of T5 becomes 1, and GD follows the flow at λ = 0.
    "no decay": lambda eta, lam: optimizers.gd(eta, 0.0 * lam),
    # θ ← θ − η∇L − λθ: the decay not multiplied by η (decoupled as in Loshchilov & Hutter,
    # where λ is not scaled by the learning rate): λ/η in the flow's units, so it does not
    # converge to the flow as η → 0.
    "decay λ, not ηλ": lambda eta, lam: optax.chain(
        optax.scale(-eta), optax.add_decayed_weights(-lam)
    ),
}


def _compare_with_gd(mp: pytest.MonkeyPatch, step) -> dict[str, pd.DataFrame]:
    def make_optimizer(kind, hyper, key):
        if kind == "gd":
            return step(hyper["eta"], hyper["lam"])
        return optimizers.make_optimizer(kind, hyper, key)

    mp.setattr(simulate, "make_optimizer", make_optimizer)
    # Compiled discrete programs hold the right optimizer: build them again (flows kept).
    kept = {k: p for k, p in programs.PROGRAMS.items() if p.continuous}
    mp.setattr(programs, "PROGRAMS", kept)
    return compare_lib.compare(GD)


@pytest.fixture(scope="module")
def gd_wrong(gd_tables):
    """``compare`` tables of each wrong GD of ``WRONG_GD`` (after the right one, whose
    compiled flow they reuse)."""
    out = {}
    for name, step in WRONG_GD.items():
        with pytest.MonkeyPatch.context() as mp:
            out[name] = _compare_with_gd(mp, step)
    return out


# --- per claim: the positive control, then the mutants ---------------------------------------


def _order(order: pd.DataFrame) -> float:
    return float(order["order"].iloc[0])


def gd_order(gd_tables, gd_wrong):
    """T8, tolerance |order − 1| ≤ 0.15. Control: order 0.989 (distances 0.0105, 0.0053,
    0.0027 at η = 0.1, 0.05, 0.025, ηt = 10). Mutants, real GD runs against the right
    flow, neither converging to it as η → 0: GD without decay, distance 0.170, 0.169,
    0.169, order 0.006 (|order − 1| = 0.99, 6.6× the tolerance); decay λ per step instead
    of ηλ, distance 0.79, 1.28, 1.65 (growing), order −0.53 (10× the tolerance)."""
    control = discrete.gd_order_claim(gd_tables["order"])
    assert control.verdict == "pass", control.measurement
    for name, tables in gd_wrong.items():
        claim = discrete.gd_order_claim(tables["order"])
        p = _order(tables["order"])
        assert claim.verdict == "fail", (name, claim.measurement)
        assert abs(p - 1) >= 3 * discrete.ORDER_TOL, (name, p)


def _t5_deviation(contraction: pd.DataFrame) -> float:
    return float(max(contraction["t5_deviation"].max(), contraction["t5_residual"].max()))


def _wrong_step(factor):
    """T5's step with ``factor(η, λ)`` in place of (1 − ηλ)²."""

    def step(A, B, G, eta, lam):
        GB, GtA = G @ B, G.T @ A
        return factor(eta, lam) * theory.balance(A, B) + eta**2 * (GB.T @ GB - GtA.T @ GtA)

    return step


def gd_contraction(gd_tables, gd_wrong):
    """T5, tolerance |ratio − T5| ≤ 1e-10 and residual ≤ 1e-10 (float64). Control: max
    1.6e-15. Mutants, the larger of the two measured: T5 without the (1 − ηλ)² factor
    (``theory.gd_balance_step`` replaced, the same GD), 1.0e-2; T5 with the flow's
    e^{−2ηλ} in its place, 2.5e-5; real GD runs against the right T5: without decay,
    1.0e-2; decay λ per step instead of ηλ, 9.7e-2 — all ≥ 2.5·10⁵× the tolerance."""
    control = discrete.gd_contraction_claim(gd_tables["contraction"])
    assert control.verdict == "pass", control.measurement
    wrong = {
        "no (1 − ηλ)²": _wrong_step(lambda eta, lam: 1.0),
        "e^{−2ηλ}": _wrong_step(lambda eta, lam: np.exp(-2 * eta * lam)),
    }
    tables = {f"GD, {name}": t["contraction"] for name, t in gd_wrong.items()}
    for name, step in wrong.items():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(theory, "gd_balance_step", step)
            tables[name] = compare_lib.compare(GD)["contraction"]
    for name, table in tables.items():
        claim = discrete.gd_contraction_claim(table)
        assert claim.verdict == "fail", (name, claim.measurement)
        assert _t5_deviation(table) >= 3 * discrete.T5_TOL, name


def _z_flow(sde: pd.DataFrame) -> float:
    z = sde.loc[sde["role"] == "flow", "z"].to_numpy()
    return float(np.nanmax(np.abs(z)))


def _t6(**change):
    """``theory.sgf_mean_balance_trace`` with some of its arguments changed."""
    right = theory.sgf_mean_balance_trace

    def t6(trace0, eta, lam, sigma, m, n, r, t):
        args = dict(trace0=trace0, eta=eta, lam=lam, sigma=sigma, m=m, n=n, r=r, t=t)
        return right(**(args | {k: f(args) for k, f in change.items()}))

    return t6


_FLOW_CONFIG = compare_run.flow_config


def _noisier_flow(cfg, solver_set):
    """The flow of a compare run with noise variance 2σ² (a wrong implementation; σ is a
    traced parameter, so the compiled flow is reused)."""
    flow = _FLOW_CONFIG(cfg, solver_set)
    flow["dynamics"]["sigma"] *= math.sqrt(2)
    return flow


def sgf_mean(sgd_tables):
    """T6 mean at m = 16, n = 6, r = 6, 64 paths, tolerance |z| ≤ 4 at every save.
    Control: max |z| 2.53. Mutants: T6 with the noise term's sign flipped (m and n
    swapped, ``theory.sgf_mean_balance_trace`` replaced), max |z| 61; T6 with the noise on
    A alone (n → 0 in the noise term), 17.4; the flow run with noise of variance 2σ²
    (a wrong implementation) against the right T6, 18.1 — each ≥ 4.3× the tolerance. And
    the SGD part of the verdict: SGD's own Gaussian noise of variance 2σ² (the flow right)
    exceeds its allowance (4 SE + 5% of T6) at least threefold."""
    control = discrete.sgf_mean_claim(sgd_tables["sde"])
    assert control.verdict == "pass", control.measurement
    mutants = {
        "sign flipped": ("theory", _t6(m=lambda a: a["n"], n=lambda a: a["m"])),
        "noise on A alone": ("theory", _t6(n=lambda a: 0)),
        "flow noise 2σ²": ("flow", _noisier_flow),
    }
    for name, (where, wrong) in mutants.items():
        with pytest.MonkeyPatch.context() as m:
            if where == "theory":
                m.setattr(theory, "sgf_mean_balance_trace", wrong)
            else:
                m.setattr(compare_run, "flow_config", wrong)
            sde = compare_lib.compare(SGD)["sde"]
        claim = discrete.sgf_mean_claim(sde)
        assert claim.verdict == "fail", (name, claim.measurement)
        assert _z_flow(sde) >= 3 * discrete.Z_MAX, (name, _z_flow(sde))
    # The SGD part of the verdict: SGD's Gaussian noise of variance 2σ² (the flow right).
    right_sgd = optimizers.sgd_gaussian
    programs.release()
    with pytest.MonkeyPatch.context() as m:
        noisier = lambda lr, lam, sigma, key: right_sgd(lr, lam, sigma * math.sqrt(2), key)  # noqa: E731
        m.setattr(optimizers, "sgd_gaussian", noisier)
        sde = compare_lib.compare(SGD)["sde"]
    programs.release()
    assert _z_flow(sde) <= discrete.Z_MAX
    excess, _ = discrete.sgd_excess(sde[sde["role"] == "optimizer"])
    assert excess >= 3, excess
    assert discrete.sgf_mean_claim(sde).verdict == "fail"
    assert discrete.sgd_excess(sgd_tables["sde"][sgd_tables["sde"]["role"] == "optimizer"])[0] <= 1


def _z_floor(floor: pd.DataFrame) -> float:
    return float(np.max(np.abs((floor["ratio"] - 1) / floor["ratio_se"])))


def _floor(**change):
    """``theory.sgf_floor`` with some of its arguments changed."""
    right = theory.sgf_floor

    def floor(eta, sigma, lam, r, m, n, size, trace):
        args = dict(eta=eta, sigma=sigma, lam=lam, r=r, m=m, n=n, size=size, trace=trace)
        return right(**(args | {k: f(args) for k, f in change.items()}))

    return floor


def sgf_floor(floor_runs):
    """T6 floor at m = 12, n = 4, r = 1, tolerance |ratio − 1| ≤ 4 SE at every point.
    Control: ratio 1.017 (σ = 0.1) and 1.013 (σ = 0.5), max |z| 0.72. Mutants
    (``theory.sgf_floor`` replaced, the same runs): the factor r + 1 → r, ratio 1.90 at
    σ = 0.1, max |z| 17.4; the m = n formula at m ≠ n (the (m − n) E tr D term dropped),
    ratio 2.70 at σ = 0.5, max |z| 23.4 — each ≥ 4.3× the tolerance."""
    control = discrete.sgf_floor_claim(discrete.floor_table(floor_runs))
    assert control.verdict == "pass", control.measurement
    mutants = {
        "r + 1 → r": _floor(r=lambda a: a["r"] - 1),
        "m = n formula": _floor(n=lambda a: a["m"]),
    }
    for name, wrong in mutants.items():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(theory, "sgf_floor", wrong)
            floor = discrete.floor_table(floor_runs)
        claim = discrete.sgf_floor_claim(floor)
        assert claim.verdict == "fail", (name, claim.measurement)
        assert _z_floor(floor) >= 3 * discrete.Z_MAX, (name, _z_floor(floor))


MUTANTS = {
    "discrete.gd_order": gd_order,
    "discrete.gd_contraction": gd_contraction,
    "discrete.sgf_mean": sgf_mean,
    "discrete.sgf_floor": sgf_floor,
}
# Which data each claim's mutants need (fixtures are requested lazily, by name).
DATA = {
    "discrete.gd_order": ("gd_tables", "gd_wrong"),
    "discrete.gd_contraction": ("gd_tables", "gd_wrong"),
    "discrete.sgf_mean": ("sgd_tables",),
    "discrete.sgf_floor": ("floor_runs",),
}


def test_mutant_claims_are_the_passable_claims():
    assert MUTANT_CLAIMS == discrete.CLAIMS
    assert set(MUTANTS) == set(DATA) == set(MUTANT_CLAIMS)


# ~10–40 s each on 2 cores: these three in the slow run.
SLOW_CLAIMS = ("discrete.gd_order", "discrete.sgf_floor", "discrete.sgf_mean")


@pytest.mark.parametrize(
    "claim",
    [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CLAIMS else c for c in MUTANT_CLAIMS],
)
def test_mutant_discrete(claim, request):
    """The claim passes on the right small data and fails, by ≥ 3× its tolerance, on each
    of its mutants (see the docstring of the function named after the claim)."""
    data = {name: request.getfixturevalue(name) for name in DATA[claim]}
    MUTANTS[claim](**data)
