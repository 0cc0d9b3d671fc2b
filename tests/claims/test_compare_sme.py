"""``rankflow compare`` of SGD against its stochastic modified equation (docs/theory.md, T10;
Li, Tai & E): the weak error at a fixed horizon in ηt is first order in η, and the
plausible wrong SMEs (noise coefficient √η with time in steps; batch scaling Σ/b² or
no 1/b) fail. Also the gradient-noise pair (T9) and the input ``compare`` refuses."""

import math

import numpy as np
import pandas as pd
import pytest

import rankflow.core.fields
import rankflow.core.program
from rankflow.compare import COLUMNS, compare, weak_order
from rankflow.config.fields import ConfigError
from rankflow.core import config as config_lib
from rankflow.engine import programs
from rankflow.reproduce import noise as reproduce_noise
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
# The claim of `rankflow reproduce` that these tables feed (its mutants are below).
MUTANT_CLAIMS = ("noise.sme_weak_order",)


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
        return rankflow.core.fields.FactorNoise(
            term.model,
            lambda t, args: -(args[1]["eta"] ** 0.5),
            term.control,
            term.theta_of,
            term.embed,
            term.sample_losses,
            term.spread,
        )

    monkeypatch.setattr(rankflow.core.program, "noise_term", noise_term)


def _spread_times(factor):
    def patch(monkeypatch):
        original = rankflow.core.fields.minibatch_spread
        monkeypatch.setattr(
            rankflow.core.fields,
            "minibatch_spread",
            lambda samples, batch: original(samples, batch) * factor(batch),
        )

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


# --- the reproduce claim noise.sme_weak_order and its mutants ---------------------------------


def test_reproduce_noise_sme_config_is_this_one():
    """The claim's positive control below runs on the experiment's own quick config."""
    cfg = config_lib.load_config(config_path("noise_sme"))
    assert cfg["compare"] == {"paths": OPTIONS["compare.paths"], "halvings": 3}
    for section in ("problem", "model", "init", "dynamics", "save"):
        assert cfg[section] == SME[section], section
    assert (cfg["seed"], cfg["x64"]) == (SME["seed"], SME["x64"])


def test_claim_sme_weak_order_passes_on_the_sme(sme_tables):
    claim = reproduce_noise.sme_weak_order_claim(sme_tables["weak"])
    assert claim.verdict == "pass", claim.measurement


@pytest.mark.parametrize("wrong", [2.0, 0.5])
def test_mutant_claim_sme_weak_order_wrong_theory(sme_tables, monkeypatch, wrong):
    """A wrong theory of the SME's accuracy — second order (the second-order SME's), or
    order ½ (a strong order) — fails on the same data."""
    monkeypatch.setattr(reproduce_noise, "WEAK_ORDER", wrong)
    claim = reproduce_noise.sme_weak_order_claim(sme_tables["weak"])
    assert claim.verdict == "fail", claim.measurement


@pytest.mark.slow
def test_mutant_claim_sme_weak_order_sqrt_eta_noise(monkeypatch):
    """The wrong implementation (noise coefficient √η with time in steps) fails the claim."""
    weak = _mutant_weak(monkeypatch, _sqrt_eta_noise)
    claim = reproduce_noise.sme_weak_order_claim(weak)
    assert claim.verdict == "fail", claim.measurement


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
