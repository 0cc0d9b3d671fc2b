"""``rankflow compare`` of SGD against its stochastic modified equation (docs/theory.md, T10;
Li, Tai & E): the weak error at a fixed horizon in ηt is first order in η, and the
plausible wrong SMEs (noise coefficient √η with time in steps; batch scaling Σ/b² or
no 1/b) fail. Also the gradient-noise pair (T9) and the input ``compare`` refuses.

The reproduce claims ``noise.sme_weak_order`` and ``noise.sme_step_noise``
(:mod:`rankflow.reproduce.noise_sme`) and their mutants: the SME's spread without its
square root, sampled with replacement, and with the batch off by one (b ± 1), put into
rankflow's source, each make ``noise.sme_step_noise`` fail (the first also
``noise.sme_weak_order``), on data of :func:`~rankflow.reproduce.noise_sme.sme_tables` run
in-process after the patch."""

import math
import sys

import numpy as np
import pandas as pd
import pytest

import rankflow.core.dynamics.vector_fields
import rankflow.core.program
from rankflow import theory
from rankflow.compare import COLUMNS, compare, weak_order
from rankflow.config.fields import ConfigError
from rankflow.core import config as config_lib
from rankflow.engine import programs
from rankflow.reproduce import noise_sme
from rankflow.reproduce._common import config_path

# Sensing 5×5, batch 4 of 64 samples: noise that matters; ηt = 0.48 (12 steps at
# η = 0.04, 96 at η/8). tr D is the observable with the best signal: its SME has no dW
# term (T10, pathwise), so its spread over paths is small.
SME = {
    "x64": True,
    "seed": 0,
    "problem": {"kind": "sensing", "m": 5, "n": 5, "rank": 2, "samples": 64, "noise": 0.1},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"kind": "sgd", "eta": 0.04, "lam": 0.1, "batch": 4},
    "save": {"t1": 12, "num": 4},
}
OPTIONS = {"compare.paths": 64, "compare.halvings": 3}
# The claims of `rankflow reproduce` that these tables feed (their mutants are below).
MUTANT_CLAIMS = ("noise.sme_weak_order", "noise.sme_step_noise")


@pytest.fixture(scope="module")
def sme_tables():
    return compare(SME, overrides=OPTIONS)


@pytest.mark.slow
def test_T10_sgd_against_its_sme_weak_order_one(sme_tables):
    weak = sme_tables["weak"]
    trace = weak[weak["observable"] == "balance_trace"]
    assert np.allclose(trace["horizon"], 0.48)
    assert list(trace["steps"]) == [12, 24, 48, 96]
    # Every η resolves the error above its Monte Carlo standard error (z grows as η
    # shrinks: SGD's spread of tr D at fixed ηt falls faster than the error).
    assert np.all(np.abs(trace["z"]) > 2.5), trace[["dynamics.eta", "error", "error_se"]]
    p, se = weak_order(weak, "balance_trace")
    assert 0.8 <= p <= 1.2 and se < 0.15, (p, se)
    assert trace["order"].iloc[0] == p and trace["order_stderr"].iloc[0] == se


def test_sme_tables_columns_and_paths(sme_tables):
    for name in ("trajectory", "moments", "weak"):
        assert list(sme_tables[name].columns) == list(COLUMNS[name])
    assert "sde" not in sme_tables and "order" not in sme_tables
    mo = sme_tables["moments"]
    assert set(mo["paths"]) == {64}  # the paths at the config's η only
    start = mo[mo["t"] == 0]
    assert np.all(start["std"] < 1e-12)  # one start, shared by both sides
    later = mo[(mo["t"] > 0) & (mo["observable"] == "loss")]
    assert np.all(later["std"] > 0)
    assert sme_tables["trajectory"]["measure"].iloc[0] == "mean over 64 paths"
    s = sme_tables["weak"].iloc[0]
    assert (s["flow.kind"], s["dynamics.noise"], s["dynamics.batch"]) == (
        "stochastic_flow",
        "minibatch",
        4,
    )
    assert (s["solver.method"], s["solver.dt"]) == ("euler", 0.1)


def _weak_table(eta, error, error_se, observable="balance_trace"):
    return pd.DataFrame(
        {
            "observable": observable,
            "dynamics.eta": eta,
            "error": error,
            "error_se": error_se,
        }
    )


def test_weak_order_is_a_function_of_the_table():
    eta = 0.04 / 2.0 ** np.arange(4)
    p, se = weak_order(_weak_table(eta, 0.3 * eta, 1e-4 * eta), "balance_trace")
    assert p == pytest.approx(1.0, abs=1e-12) and se < 1e-3
    p2, _ = weak_order(_weak_table(eta, -(eta**2), 1e-6 * eta), "balance_trace")
    assert p2 == pytest.approx(2.0, abs=1e-12)  # |error|: the sign does not matter
    # Points that scatter about the line by more than their errors widen the SE.
    noisy = 0.3 * eta * np.array([1.0, 1.3, 0.8, 1.2])
    _, se_tight = weak_order(_weak_table(eta, noisy, 1e-5 * eta), "balance_trace")
    assert se_tight > 0.05
    assert all(map(math.isnan, weak_order(_weak_table(eta[:1], eta[:1], eta[:1]), "x")))


# --- the wrong SMEs (mutants) ---------------------------------------------------------


def _mutant_weak(monkeypatch, patch) -> pd.DataFrame:
    """The weak table of :data:`SME` with the flow built under ``patch(monkeypatch)``;
    a fresh program cache, so that the mutant's flow is compiled, not reused."""
    monkeypatch.setattr(programs, "PROGRAMS", {})
    patch(monkeypatch)
    return compare(SME, overrides=OPTIONS)["weak"]


def _sqrt_eta_noise(monkeypatch):
    """The SME with noise coefficient √η instead of η, time in steps: the physical-time
    SME ``√η Σ^{1/2} dW_{ηt}`` copied into step time (where it is ``η Σ^{1/2} dW_t``)."""
    original = rankflow.core.program.noise_term

    def noise_term(kind, theta0, brownian_for, model="parameter", problem=None, batch=None,
                   schedule=None):  # fmt: skip
        term = original(kind, theta0, brownian_for, model, problem, batch, schedule)
        return rankflow.core.dynamics.vector_fields.FactorNoise(
            term.model,
            lambda t, args: -(args[1]["eta"] ** 0.5),
            term.control,
            term.theta_of,
            term.embed,
            term.sample_losses,
            term.spread,
        )

    monkeypatch.setattr(rankflow.core.program, "noise_term", noise_term)


def _patch_spread(monkeypatch, spread) -> None:
    """``minibatch_spread`` replaced by ``spread(right, samples, batch)`` wherever rankflow
    reads it: ``core.dynamics.vector_fields`` (the SME's ``noise_term`` looks it up there
    at each build) and every module that imported it by name (``reproduce.noise``, for its
    figure's σ)."""
    right = rankflow.core.dynamics.vector_fields.minibatch_spread
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if name.startswith("rankflow") and getattr(mod, "minibatch_spread", None) is right:
            monkeypatch.setattr(mod, "minibatch_spread", lambda N, b: spread(right, N, b))


def _spread_times(factor):
    def patch(monkeypatch):
        _patch_spread(monkeypatch, lambda right, N, b: right(N, b) * factor(b))

    return patch


@pytest.mark.slow
def test_T10_mutant_sqrt_eta_noise_has_no_weak_order(sme_tables, monkeypatch):
    weak = _mutant_weak(monkeypatch, _sqrt_eta_noise)
    ok = sme_tables["weak"]
    assert not np.allclose(weak["flow.mean"], ok["flow.mean"])  # the mutant ran
    p, se = weak_order(weak, "balance_trace")
    # Its noise does not vanish as η → 0 at fixed ηt: the error stops shrinking.
    assert p < 0.5, (p, se)
    p_ok, se_ok = weak_order(ok, "balance_trace")
    assert (p_ok - p) > 5 * math.hypot(se, se_ok)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, factor", [("Σ/b²", lambda b: b**-0.5), ("no 1/b", lambda b: b**0.5)]
)
def test_T10_mutant_batch_scaling_is_many_se_off(sme_tables, monkeypatch, name, factor):
    weak = _mutant_weak(monkeypatch, _spread_times(factor))
    ok = sme_tables["weak"]
    assert not np.allclose(weak["flow.mean"], ok["flow.mean"]), name  # the mutant ran
    wt, okt = (w[w["observable"] == "balance_trace"].iloc[0] for w in (weak, ok))
    assert wt["dynamics.eta"] == okt["dynamics.eta"] == 0.04
    gap = abs(wt["error"]) - abs(okt["error"])
    assert gap > 10 * math.hypot(wt["error_se"], okt["error_se"]), (name, wt, okt)


@pytest.mark.slow
def test_T9_sgd_gaussian_gradient_noise_against_its_sde():
    cfg = {**SME, "dynamics": {"kind": "sgd_gaussian", "eta": 0.04, "lam": 0.1}}
    cfg["dynamics"] |= {"sigma": 0.5, "noise": "gradient"}
    tables = compare(cfg, overrides=OPTIONS)
    weak = tables["weak"]
    assert weak["flow.kind"].iloc[0] == "stochastic_flow"
    assert weak["dynamics.noise"].iloc[0] == "gradient"
    p, se = weak_order(weak, "balance_trace")
    assert 0.7 <= p <= 1.3, (p, se)


@pytest.mark.slow
def test_sme_flow_dt_error_is_small_against_the_gap(sme_tables):
    """The SME's own Euler–Maruyama error: halving dt moves the flow's mean of tr D by
    far less than the SGD–SME gap (both O(η))."""
    half = compare(SME, overrides=OPTIONS | {"solver.dt": 0.05})["weak"]
    ok = sme_tables["weak"]
    sel = ok["observable"] == "balance_trace"
    shift = np.abs(half.loc[sel, "flow.mean"].to_numpy() - ok.loc[sel, "flow.mean"].to_numpy())
    assert np.all(shift < 0.3 * np.abs(ok.loc[sel, "error"].to_numpy())), shift


# --- the reproduce claims noise.sme_weak_order and noise.sme_step_noise, their mutants -------


def test_reproduce_noise_sme_config_is_this_one():
    """The claims' positive controls below run on the experiment's own quick config."""
    cfg = config_lib.load_config(config_path("noise_sme"))
    assert cfg["compare"] == {"paths": OPTIONS["compare.paths"], "halvings": 3}
    for section in ("problem", "model", "init", "dynamics", "save"):
        assert cfg[section] == SME[section], section
    assert (cfg["seed"], cfg["x64"]) == (SME["seed"], SME["x64"])


def _weak_claim(tables):
    errors = noise_sme.sme_error_table(tables["weak"], tables["moments"])
    return noise_sme.sme_weak_order_claim(tables["weak"], errors)


def test_claim_sme_weak_order_passes_on_the_sme(sme_tables):
    claim = _weak_claim(sme_tables)
    assert claim.verdict == "pass", claim.measurement
    errors = noise_sme.sme_error_table(sme_tables["weak"], sme_tables["moments"])
    # The noiseless flow (T4's closed form) is ~7× further from SGD than the SME is.
    assert np.all(errors["flow_error"].abs() > 5 * errors["sme_error"].abs()), errors


@pytest.mark.parametrize("wrong", [2.0, 0.5])
def test_mutant_claim_sme_weak_order_wrong_theory(sme_tables, monkeypatch, wrong):
    """A wrong theory of the SME's accuracy — second order (the second-order SME's), or
    order ½ (a strong order) — fails on the same data."""
    monkeypatch.setattr(noise_sme, "WEAK_ORDER", wrong)
    claim = _weak_claim(sme_tables)
    assert claim.verdict == "fail", claim.measurement


def test_mutant_claim_sme_weak_order_noiseless_flow(sme_tables):
    """SGD against the noiseless flow (the SME's means replaced by T4's closed form, which
    the flow side would measure): weak order 1 too, but no gain over itself, so it fails."""
    weak, moments = sme_tables["weak"].copy(), sme_tables["moments"]
    errors = noise_sme.sme_error_table(weak, moments)
    trace = (weak["observable"] == "balance_trace").to_numpy()
    flow = errors.set_index("dynamics.eta")["flow_trace"]
    weak.loc[trace, "flow.mean"] = weak.loc[trace, "dynamics.eta"].map(flow).to_numpy()
    weak.loc[trace, "error"] = weak.loc[trace, "optimizer.mean"] - weak.loc[trace, "flow.mean"]
    weak.loc[trace, "error_se"] = weak.loc[trace, "optimizer.se"]
    p, se = weak_order(weak, "balance_trace")
    assert abs(p - 1.0) < 0.1, (p, se)  # first order: the old claim passed it
    claim = noise_sme.sme_weak_order_claim(weak, noise_sme.sme_error_table(weak, moments))
    assert claim.verdict == "fail", claim.measurement


@pytest.mark.slow
def test_mutant_claim_sme_weak_order_sqrt_eta_noise(monkeypatch):
    """The wrong implementation (noise coefficient √η with time in steps) fails the claim."""
    monkeypatch.setattr(programs, "PROGRAMS", {})
    _sqrt_eta_noise(monkeypatch)
    claim = _weak_claim(compare(SME, overrides=OPTIONS))
    assert claim.verdict == "fail", claim.measurement


# The SME's spread s = √((N − b)/((N − 1)bN)) as the plausible bugs would write it.
WRONG_SPREADS = {
    "no square root": lambda right, N, b: right(N, b) ** 2,
    "with replacement": lambda right, N, b: (b * N) ** -0.5,
    "batch + 1": lambda right, N, b: right(N, b + 1),
    "batch − 1": lambda right, N, b: right(N, b - 1),
}


@pytest.fixture(scope="module")
def step_data():
    """One Euler–Maruyama step of the SME of the experiment's config, at its quick size:
    (A, B, dt, deltas, η, b)."""
    point = config_lib.resolve(SME)
    A, B, dt = noise_sme.sme_step_states(point, noise_sme.STEP_PATHS["quick"])
    _, deltas = noise_sme.sample_gradients(point, A[0, 0], B[0, 0])
    return A, B, dt, deltas, point["dynamics"]["eta"], point["dynamics"]["batch"]


@pytest.mark.slow
def test_claim_sme_step_noise_passes_on_the_sme(step_data):
    step = noise_sme.sme_step_table(*step_data)
    claim = noise_sme.sme_step_noise_claim(step)
    assert claim.verdict == "pass", claim.measurement
    assert set(step["paths"]) == {noise_sme.STEP_PATHS["quick"]} and len(step) == 18
    # Measured (seed 0, 32768 paths): max |z| 1.5; with replacement 14.0 SE off, b ± 1 58, 95.
    assert step["z_replace"].abs().max() > noise_sme.STEP_Z_WRONG + 1, step


@pytest.mark.slow
@pytest.mark.parametrize("wrong_replace, dbatch", [(True, 0), (False, 1), (False, -1)])
def test_mutant_claim_sme_step_noise_wrong_theory(step_data, monkeypatch, wrong_replace, dbatch):
    """A wrong theory — T10's term with replacement, or with the batch off by one — fails
    on the right SME's data."""
    right = theory.minibatch_noise_balance_drift

    def wrong(A, B, deltas, eta, lam, batch, replace=True):
        return right(A, B, deltas, eta, lam, batch + dbatch, replace=wrong_replace)

    monkeypatch.setattr(theory, "minibatch_noise_balance_drift", wrong)
    claim = noise_sme.sme_step_noise_claim(noise_sme.sme_step_table(*step_data))
    assert claim.verdict == "fail", claim.measurement


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WRONG_SPREADS))
def test_source_mutant_sme_spread_fails_sme_step_noise(monkeypatch, name):
    """The SME's spread written wrong in rankflow's source (``minibatch_spread``): the
    claim's data run in-process under the patch (a fresh program cache) and it fails."""
    monkeypatch.setattr(programs, "PROGRAMS", {})
    _patch_spread(monkeypatch, WRONG_SPREADS[name])
    point = config_lib.resolve(SME)
    A, B, dt = noise_sme.sme_step_states(point, noise_sme.STEP_PATHS["quick"])
    _, deltas = noise_sme.sample_gradients(point, A[0, 0], B[0, 0])
    d = point["dynamics"]
    step = noise_sme.sme_step_table(A, B, dt, deltas, d["eta"], d["batch"])
    claim = noise_sme.sme_step_noise_claim(step)
    assert claim.verdict == "fail", (name, claim.measurement)
    assert step["z"].abs().max() > 2 * noise_sme.STEP_Z_MAX, (name, claim.measurement)


@pytest.mark.slow
def test_source_mutant_sme_spread_without_square_root_fails_both_claims(monkeypatch):
    """The bug that passed the weak order alone (order 1.007 ± 0.013, error 7× larger):
    through :func:`noise_sme.sme_tables`, as ``reproduce`` runs it, both claims fail."""
    monkeypatch.setattr(programs, "PROGRAMS", {})
    _patch_spread(monkeypatch, WRONG_SPREADS["no square root"])
    tables = noise_sme.sme_tables(SME | {"compare": {"paths": 64, "halvings": 3}})
    weak = noise_sme.sme_weak_order_claim(tables["weak"], tables["errors"])
    assert weak.verdict == "fail", weak.measurement
    assert tables["errors"]["gain_z"].max() < 2, tables["errors"]  # the SME is the flow
    step = noise_sme.sme_step_noise_claim(tables["step"])
    assert step.verdict == "fail", step.measurement


# --- input compare refuses, before anything compiles ------------------------------------


@pytest.mark.parametrize(
    "change, field",
    [
        ({"problem": {"kind": "diagonal", "m": 5, "n": 5, "rank": 2}}, "dynamics.kind"),
        ({"dynamics": SME["dynamics"] | {"batch": 65}}, "dynamics.batch"),
        ({"dynamics": SME["dynamics"] | {"batch": 0}}, "dynamics.batch"),
        ({"dynamics": SME["dynamics"] | {"sigma": 0.1}}, "dynamics.sigma"),
        ({"solver": {"method": "heun"}}, "solver.method"),
        ({"solver": {"method": "shark"}}, "solver.method"),
        ({"solver": {"adaptive": True}}, "solver.adaptive"),
        (
            {"dynamics": {"kind": "sgd_gaussian", "eta": 0.04, "sigma": 0.5, "noise": "gradient"}}
            | {"solver": {"method": "midpoint"}},
            "solver.method",
        ),
    ],
)
def test_compare_refuses_bad_sme_input(change, field, monkeypatch):
    def no_program(*args, **kwargs):
        raise AssertionError("compiled before refusing")

    monkeypatch.setattr("rankflow.compare.run.program_for", no_program)
    with pytest.raises(ConfigError) as err:
        compare({**SME, **change}, overrides=OPTIONS)
    message = str(err.value)
    assert message.startswith(field) and "\n" not in message, message
