"""Mutants of the ``noise`` experiment's claims (issue #15: every verdict can fail).

Each claim is a pure function of the experiment's tables (``rankflow.reproduce.noise``).
Here each runs on data of the experiment's own configs at reduced size, under the right
implementation and theory (the positive control, which must pass), and under a plausible
wrong theory (monkeypatched into ``rankflow.theory``, which every claim calls) or a wrong
implementation (a gradient-noise model that adds parameter noise; SGD with full batches),
which must fail. The numbers quoted were measured on this data (float64, seed 0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rankflow import theory
from rankflow.core import config as config_lib
from rankflow.core import program as simulate
from rankflow.core.dynamics import vector_fields as flows_lib
from rankflow.engine import programs
from rankflow.reproduce import noise
from rankflow.reproduce._common import config_path

MUTANT_CLAIMS = ("noise.no_floor", "noise.sgd_step_mean", "noise.t9_pathwise")
# The experiment's configs at reduced size: 16 paths per flow.
FLOW = {"dynamics.paths": 16}


def _point(name: str, **over) -> dict:
    return config_lib.resolve(config_path(name), over)


def _flow_runs(model: str) -> pd.DataFrame:
    """``model`` noise at σ = CLAIM_SIGMA, dt and dt/4 (two compilations)."""
    point = _point("noise_models", **FLOW)
    dt = point["solver"]["dt"]
    frames = []
    for step in (dt, dt / noise.REFINE):
        v = config_lib.resolve(point, {"dynamics.noise": model, "solver.dt": step,
                                       "dynamics.sigma": noise.CLAIM_SIGMA})  # fmt: skip
        frames.append(noise.run_states(v, (noise.CLAIM_SIGMA,))[0])
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def gradient_runs():
    return _flow_runs("gradient")


@pytest.fixture(scope="module")
def parameter_runs():
    return _flow_runs("parameter")


@pytest.fixture(scope="module")
def sgd_runs():
    """Real SGD's one step on sensing and regression: (states, start, point) per problem."""
    out = {}
    for kind in ("sensing", "regression"):
        point = _point(f"noise_sgd_{kind}", **{"save.ts": [0, 1]})
        states, start = noise.run_states(point)
        out[kind] = (states, start, point)
    return out


def _check(claim, expect: str) -> None:
    assert claim.verdict == expect, f"{claim.name}: expected {expect}; {claim.measurement}"


# --- noise.no_floor --------------------------------------------------------------------------


def _as_gradient(parameter_runs: pd.DataFrame) -> pd.DataFrame:
    """Parameter-noise runs recorded as gradient noise: the data of a gradient-noise model
    that adds its noise to A and B (the same σ, η, λ, start and dt)."""
    return parameter_runs.assign(**{"dynamics.noise": "gradient"})


def no_floor(gradient_runs, parameter_runs):
    """Tolerances: parameter |z| ≤ 4 against T6; gradient ≥ 20× below T6's floor and
    shrinking by ≤ 0.707 when dt is quartered. Control (16 paths, dt = 0.2 and 0.05):
    parameter late RMS 0.647, 0.635 against T6's 0.650 (max |z| 0.35); gradient 0.0131,
    0.0062: 49× below the floor, ratio 0.47. Mutants: gradient noise that is parameter
    noise (relabelled runs): 1× below the floor, ratio 0.98; T6's floor without the factor
    r + 1 (``theory.sgf_floor`` replaced): max |z| 15.1; with λ in place of 2λ: 20.5."""
    right = pd.concat([gradient_runs, parameter_runs], ignore_index=True)
    _check(noise.no_floor_claim(noise.floor_table(right)), "pass")
    wrong = pd.concat([_as_gradient(parameter_runs), parameter_runs], ignore_index=True)
    table = noise.floor_table(wrong)
    _check(noise.no_floor_claim(table), "fail")
    grad = table[table["dynamics.noise"] == "gradient"]
    assert float((grad["floor_rms"] / grad["late_rms"]).max()) < noise.FLOOR_FACTOR / 3
    right_floor = theory.sgf_floor
    wrong_floors = {
        "(r + 1) missing": lambda eta, sigma, lam, r, m, n, size, trace: right_floor(
            eta, sigma, lam, 0, m, n, size, trace
        ),
        "λ for 2λ": lambda eta, sigma, lam, r, m, n, size, trace: right_floor(
            eta, sigma, lam / 2, r, m, n, size, trace
        ),
    }
    for name, wrong_floor in wrong_floors.items():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(theory, "sgf_floor", wrong_floor)
            table = noise.floor_table(right)
        _check(noise.no_floor_claim(table), "fail")
        par = table[table["dynamics.noise"] == "parameter"]
        z = ((par["late_ms"] - par["floor_ms"]) / par["late_ms_se"]).abs()
        assert float(z.max()) >= 3 * noise.Z_MAX, (name, float(z.max()))


# --- noise.sgd_step_mean ---------------------------------------------------------------------


def _step(sgd_runs) -> pd.DataFrame:
    return pd.concat([noise.one_step(s, start, p) for s, start, p in sgd_runs.values()])


def _scaled_noise(factor):
    """``theory.minibatch_step_mean`` whose noise term is multiplied by ``factor(b, N)``."""
    right = theory.minibatch_step_mean

    def wrong(A, B, gbar, deltas, eta, lam, batch, replace=True):
        base = theory.gd_balance_step(A, B, gbar, eta, lam)
        term = right(A, B, gbar, deltas, eta, lam, batch, replace=replace) - base
        return base + factor(batch, deltas.shape[0]) * term

    return wrong


def sgd_step_mean(sgd_runs):
    """Tolerance |z| ≤ 4 per entry on both problems, wrong scalings ≥ 10 SE off.
    Control (16384 paths): max |z| 1.72 (sensing, b = 8 of 40), 1.29 (regression, b = 5 of
    20); 1/b² ≥ 55.8 and no 1/b ≥ 282.6 SE off. Mutants (``theory.minibatch_step_mean``
    replaced): noise term × 1/b (1/b²), max |z| 68.6; × b (no 1/b), 564.4; with
    replacement ((N − b)/(N − 1) dropped), 19.4 — each ≥ 3 × 4. Real SGD with full batches
    against T10: ``test_mutant_noise_sgd_full_batches`` (slow)."""
    _check(noise.sgd_step_claim(_step(sgd_runs)), "pass")
    mutants = {
        "1/b²": _scaled_noise(lambda b, N: 1.0 / b),
        "no 1/b": _scaled_noise(lambda b, N: b),
        "with replacement": _scaled_noise(lambda b, N: (N - 1) / (N - b)),
    }
    for name, wrong in mutants.items():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(theory, "minibatch_step_mean", wrong)
            step = _step(sgd_runs)
        _check(noise.sgd_step_claim(step), "fail")
        assert float(step["z"].abs().max()) >= 3 * noise.Z_MAX, name


# --- noise.t9_pathwise -----------------------------------------------------------------------


def _t9(sigma_factor: float):
    """``theory.gradient_noise_balance`` with σ² scaled by ``sigma_factor``² (0: the
    η²σ²m term missing; 1/√2: halved)."""
    right = theory.gradient_noise_balance

    def wrong(D0, eta, lam, sigma, m, t):
        return right(D0, eta, lam, sigma * sigma_factor, m, t)

    return wrong


def t9_pathwise(gradient_runs):
    """Tolerance: order of the mean deviation in [0.4, 1.1]. Control (16 paths): mean
    deviation 0.039 (dt = 0.2), 0.018 (dt = 0.05), order 0.57. Mutants
    (``theory.gradient_noise_balance`` replaced): rate without η²σ²m, 0.109 and 0.099,
    order 0.07; η²σ²m halved, 0.063 and 0.049, order 0.17 — neither shrinks with dt."""
    _check(noise.t9_pathwise_claim(noise.pathwise_table(gradient_runs)), "pass")
    for factor in (0.0, 2**-0.5):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(theory, "gradient_noise_balance", _t9(factor))
            table = noise.pathwise_table(gradient_runs)
        _check(noise.t9_pathwise_claim(table), "fail")


MUTANTS = {
    "noise.no_floor": no_floor,
    "noise.sgd_step_mean": sgd_step_mean,
    "noise.t9_pathwise": t9_pathwise,
}
DATA = {
    "noise.no_floor": ("gradient_runs", "parameter_runs"),
    "noise.sgd_step_mean": ("sgd_runs",),
    "noise.t9_pathwise": ("gradient_runs",),
}


def test_mutant_claims_are_the_passable_claims():
    import test_compare_sme  # the SME claims' mutants run on noise_sme.sme_tables' data there

    assert MUTANT_CLAIMS + test_compare_sme.MUTANT_CLAIMS == noise.CLAIMS
    assert set(MUTANTS) == set(DATA) == set(MUTANT_CLAIMS)


# no_floor needs both noise models at two dts (~25 s), sgd_step_mean and t9_pathwise ~10–20 s
# each on 2 cores: all three in the slow run.
@pytest.mark.slow
@pytest.mark.parametrize("claim", MUTANT_CLAIMS)
def test_mutant_noise(claim, request):
    """The claim passes on the right small data and fails on each of its mutants (see the
    docstring of the function named after the claim)."""
    data = {name: request.getfixturevalue(name) for name in DATA[claim]}
    MUTANTS[claim](**data)


@pytest.mark.slow
def test_mutant_noise_sgd_full_batches(sgd_runs):
    """``noise.sgd_step_mean`` on real SGD runs with full batches (b = N: no noise)
    against T10 at the recorded b (two more compilations)."""
    full = {}
    for kind, (_, start, point) in sgd_runs.items():
        N = point["problem"]["samples"]
        big = config_lib.resolve(point, {"dynamics.batch": N})
        full[kind] = (noise.run_states(big)[0], start, point)
    step = _step(full)
    _check(noise.sgd_step_claim(step), "fail")
    assert float(step["z"].abs().max()) >= 3 * noise.Z_MAX


@pytest.mark.slow
def test_mutant_noise_gradient_model_adds_parameter_noise(gradient_runs, parameter_runs):
    """``noise.no_floor`` on real runs of a wrong implementation: ``noise_term`` builds the
    parameter-noise term where the gradient model is asked for (compiled afresh)."""
    right_term = flows_lib.noise_term

    def wrong_term(kind, theta0, brownian_for, model="parameter", problem=None, batch=None,
                   schedule=None):  # fmt: skip
        model = "parameter" if model == "gradient" else model
        return right_term(kind, theta0, brownian_for, model, problem, batch, schedule)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulate, "noise_term", wrong_term)
        mp.setattr(programs, "PROGRAMS", {})
        point = _point("noise_models", **FLOW)
        dt = point["solver"]["dt"]
        frames = [
            noise.run_states(config_lib.resolve(point, {
                "dynamics.noise": "gradient", "solver.dt": step,
                "dynamics.sigma": noise.CLAIM_SIGMA}), (noise.CLAIM_SIGMA,))[0]
            for step in (dt, dt / noise.REFINE)
        ]  # fmt: skip
    wrong = pd.concat(frames + [parameter_runs], ignore_index=True)
    _check(noise.no_floor_claim(noise.floor_table(wrong)), "fail")
    grad = noise.floor_table(wrong).query("`dynamics.noise` == 'gradient'")
    assert np.all(grad["floor_rms"] / grad["late_rms"] < noise.FLOOR_FACTOR / 3)
