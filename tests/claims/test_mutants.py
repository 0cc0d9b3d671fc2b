"""Every claim of ``rankflow reproduce`` that can pass can also fail: its check, run on
data of a plausible wrong theory or wrong implementation (a *mutant*), gives ``fail``.

One mutant (or more) per claim, parametrized by claim name: ``pytest -k mutant`` runs them
all, and ``test_every_claim_that_can_pass_has_a_mutant`` lists the claims of every
experiment (``rankflow.reproduce.passable_claims``) against the mutants of
``tests/test_mutants*.py`` and ``tests/claims/test_pretrained_verdict.py``, so that a new claim
without a mutant shows. Beside each mutant a positive control: the same check on the
correct data (a small version of the experiment's config) passes, so that a check that
always fails cannot hide behind its mutant.

The data come from real runs of the engine at reduced sizes: the wrong implementations
are decay of the wrong size (λ/2 applied where λ is recorded: balancing at ηλ), decay not
applied, the exact gradient flow where GD ran, momentum without momentum (GF) or with
coupled decay, noise of the wrong variance, a decay mask that misses the attention
pairs; the wrong theories (T6's noise term with its sign flipped) are monkeypatched into
``rankflow.theory``, which every claim calls for its prediction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import theory
from rankflow.core import config as config_lib
from rankflow.reproduce import attention, balancing, passable_claims, rank, toy
from rankflow.reproduce._common import config_path

# attention.sgd_rate's mutants are in test_mutants_attention.py.
MUTANT_CLAIMS = toy.CLAIMS + balancing.CLAIMS + rank.CLAIMS + ("attention.rank",)
GF_SOLVER = {"solver.method": "tsit5", "solver.adaptive": True, "solver.rtol": 1e-10,
             "solver.atol": 1e-12}  # fmt: skip


def _run(name: str, **over) -> pd.DataFrame:
    return rankflow.run(config_lib.resolve(config_path(name), over))


def _relabel_lam(df: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Runs made at λ, recorded as factor·λ: an implementation that applies the wrong
    decay (factor 2: ``(λ/2)θ`` where λθ is meant, so D balances at ηλ, not 2ηλ)."""
    return df.assign(**{"dynamics.lam": df["dynamics.lam"] * factor})


def _check(claim, name: str, expect: str) -> None:
    assert claim.name == name
    assert claim.verdict == expect, f"{name}: expected {expect}; {claim.measurement}"


# --- toy ---------------------------------------------------------------------------------

TOY = {"sweep.dynamics.lam": [0.0, 0.15, 0.55, 0.95], "sweep.seed": [0]}


@pytest.fixture(scope="module")
def toy_runs():
    right = _run("toy", **TOY)
    half = _relabel_lam(_run("toy", **TOY | {"sweep.dynamics.lam": [0.0, 0.075, 0.275, 0.475]}), 2)
    flow = _run("toy", **TOY | {"dynamics.kind": "gradient_flow"} | GF_SOLVER)
    # Decay never applied: the λ = 0 run, recorded under every λ of the grid.
    zero = right[right["dynamics.lam"] == 0]
    lams = TOY["sweep.dynamics.lam"]
    undecayed = pd.concat(
        [zero.assign(**{"dynamics.lam": lam, "run_id": i}) for i, lam in enumerate(lams)],
        ignore_index=True,
    )
    return {"right": right, "half": half, "gf": flow, "undecayed": undecayed}


def _toy_claims(df: pd.DataFrame) -> dict:
    sv = toy.final_singular_values(df, [0.2, 0.4, 0.6, 0.8, 1.0])
    return {
        "toy.l2_meets_nuclear": toy.l2_meets_nuclear_claim(df),
        "toy.balancing_rate": toy.balancing_rate_claim(df, toy.rates(df)),
        "toy.soft_threshold": toy.soft_threshold_claim(sv),
    }


# claim → the mutants (keys of toy_runs) that must fail it
TOY_MUTANTS = {
    "toy.l2_meets_nuclear": ["undecayed"],
    "toy.balancing_rate": ["half", "gf"],
    "toy.soft_threshold": ["half"],
}


@pytest.mark.parametrize("name", toy.CLAIMS)
def test_mutant_toy(toy_runs, name):
    """λ/2 decay: the gap decays at ηλ (rate/(2ηλ) ≈ 0.5) and the spectrum is
    thresholded at λ/2 (off by ≥ 0.075); exact GF where GD ran: rate/(2ηλ) = 1, below
    GD's bracket by 7.5% at ηλ = 0.095; decay never applied: T1's gap stays ≈ 0.2 of the
    penalty."""
    _check(_toy_claims(toy_runs["right"])[name], name, "pass")
    for mutant in TOY_MUTANTS[name]:
        _check(_toy_claims(toy_runs[mutant])[name], name, "fail")


# --- balancing ---------------------------------------------------------------------------

GF = {"sweep.dynamics.lam": [0.05, 0.1], "sweep.dynamics.eta": [0.1, 0.2], "save.t1": 3000}
GD = {"sweep.dynamics.lam": [0.2], "sweep.dynamics.eta": [0.1, 0.5], "save.t1": 2000,
      "save.num": 401}  # fmt: skip
MOMENTUM = {"sweep.dynamics.lam": [0.1], "sweep.dynamics.mu": [0.3, 1.0], "save.t1": 2000,
            "save.num": 101}  # fmt: skip
SGF = {"sweep.dynamics.lam": [0.05], "sweep.dynamics.eta": [0.2], "save.t1": 1000,
       "save.num": 101}  # fmt: skip
ADAMW = {"sweep.dynamics.lam": [0.0, 0.3], "sweep.dynamics.eta": [0.03], "save.t1": 3000}


@pytest.fixture(scope="module")
def gf_runs():
    half = {"sweep.dynamics.lam": [v / 2 for v in GF["sweep.dynamics.lam"]]}
    return _run("balancing_gf", **GF), _relabel_lam(_run("balancing_gf", **GF | half), 2)


def test_mutant_balancing_gradient_flow(gf_runs):
    """λ/2 decay: rate/(2ηλ) = 0.5, against the tolerance 1e-6."""
    right, half = gf_runs
    name = "balancing.gradient_flow"
    _check(balancing.gradient_flow_claim(balancing.rates(right, "gradient_flow")), name, "pass")
    _check(balancing.gradient_flow_claim(balancing.rates(half, "gradient_flow")), name, "fail")


def test_mutant_balancing_gap_bound_decays(gf_runs):
    """λ/2 decay: D balances at ηλ, and L_L2 − L_* leaves the 2ηλ envelope by orders of
    magnitude above rounding (the imbalanced start has gap/bound ≈ 0.16 at t = 0)."""
    right, half = gf_runs
    name = "balancing.gap_bound_decays"
    _check(balancing.gap_bound_claim(balancing.gap_bound_table(right)), name, "pass")
    wrong = balancing.gap_bound_table(half)
    _check(balancing.gap_bound_claim(wrong), name, "fail")
    assert wrong["excess"].max() > 1e-4


def test_mutant_balancing_gap_bound_decays_faster(gf_runs):
    """The direction the bound cannot see: runs at λ recorded as λ/2 balance at 4ηλ_rec,
    twice the envelope's rate. The gap stays under the envelope (the one-sided bound
    passes), and the two-sided check of the envelope's T4 decay fails it (relative
    deviation of ‖D(t)‖_* up to ~0.25, against 1e-6)."""
    right, _ = gf_runs
    name = "balancing.gap_bound_decays"
    fast = balancing.gap_bound_table(_relabel_lam(right, 0.5))
    assert fast["excess"].max() <= balancing.ROUNDING  # the bound alone would pass
    tested = fast[fast["decay"] >= balancing.DECAY_MIN]
    assert tested["envelope_deviation"].max() > 1e4 * balancing.RATE_TOL
    _check(balancing.gap_bound_claim(fast), name, "fail")


def test_mutant_balancing_gd():
    """The exact gradient flow where GD ran: rate/(2ηλ) = 1, below GD's bracket (1.0259 at
    ηλ = 0.1, 1.005 at ηλ = 0.02) by far more than the fit's error."""
    name = "balancing.gd"
    right = balancing.rates(_run("balancing_gd", **GD), "gd")
    _check(balancing.gd_claim(right), name, "pass")
    flow = _run("balancing_gd", **GD | {"dynamics.kind": "gradient_flow"} | GF_SOLVER)
    _check(balancing.gd_claim(balancing.rates(flow, "gd")), name, "fail")


@pytest.mark.slow
def test_mutant_balancing_momentum_flow():
    """No momentum (μ → ∞: gradient flow) gives rate/(2ηλ) = 1 against the orbit's 1.037
    and 1.010; coupled decay gives about twice the orbit's excess (1.077, 1.021)."""
    name = "balancing.momentum_flow"
    right = balancing.rates(_run("balancing_momentum", **MOMENTUM), "momentum_flow")
    _check(balancing.momentum_claim(right), name, "pass")
    no_momentum = _run("balancing_momentum", **MOMENTUM | {"dynamics.kind": "gradient_flow"})
    coupled = _run("balancing_momentum", **MOMENTUM | {"dynamics.kind": "momentum_flow_coupled"})
    for wrong in (no_momentum, coupled):
        _check(balancing.momentum_claim(balancing.rates(wrong, "momentum_flow")), name, "fail")


@pytest.mark.slow
def test_mutant_balancing_stochastic_flow_mean(monkeypatch):
    """T6 at m = 12, n = 4: noise of twice the variance (σ√2 where σ is recorded) and T6
    with its noise term's sign flipped both miss the Monte Carlo mean by ≫ 4 SE."""
    name = "balancing.stochastic_flow_mean"
    cfg = config_lib.resolve(config_path("balancing_sgf"), SGF)
    m, n, paths = cfg["problem"]["m"], cfg["problem"]["n"], cfg["dynamics"]["paths"]
    right = rankflow.run(cfg)
    _check(balancing.sgf_mean_claim(balancing.sgf_z(right, m, n), paths, m, n), name, "pass")
    sigma = cfg["dynamics"]["sigma"]
    loud = _run("balancing_sgf", **SGF | {"dynamics.sigma": sigma * np.sqrt(2)})
    loud = loud.assign(**{"dynamics.sigma": sigma})
    _check(balancing.sgf_mean_claim(balancing.sgf_z(loud, m, n), paths, m, n), name, "fail")

    true_t6 = theory.sgf_mean_balance_trace

    def flipped(trace0, eta, lam, sigma, m, n, r, t):  # T6 with −(m − n)
        return true_t6(trace0, eta, lam, sigma, n, m, r, t)

    monkeypatch.setattr(theory, "sgf_mean_balance_trace", flipped)
    _check(balancing.sgf_mean_claim(balancing.sgf_z(right, m, n), paths, m, n), name, "fail")


def test_mutant_balancing_adamw():
    """Pure shrinkage: the λ = 0 factors scaled by e^{−ηλt} (D → c²D, no balancing) leave
    the scale-free gap exactly that of λ = 0: ratio 1 against the margin 0.75."""
    name = "balancing.adamw"
    right = _run("balancing_adamw", **ADAMW)
    _check(balancing.adamw_claim(balancing.adamw_table(right)), name, "pass")
    zero = right[right["dynamics.lam"] == 0]
    lam = max(ADAMW["sweep.dynamics.lam"])
    c2 = np.exp(-2 * zero["dynamics.eta"] * lam * zero["t"])
    shrunk = zero.assign(**{
        "dynamics.lam": lam,
        "run_id": zero["run_id"] + 1000,
        "balance_gap": zero["balance_gap"] * c2,
        "l2_penalty": zero["l2_penalty"] * c2,
    })  # fmt: skip
    wrong = balancing.adamw_table(pd.concat([zero, shrunk], ignore_index=True))
    _check(balancing.adamw_claim(wrong), name, "fail")
    np.testing.assert_allclose(wrong["over_lam0"], 1.0)


# --- rank --------------------------------------------------------------------------------

RANK = {"sweep.dynamics.lam": [0.2, 0.4], "sweep.seed": [0], "save.t1": 2000}


def test_mutant_rank_factorised_is_nuclear():
    """λ/2 decay: GD reaches the nuclear-norm minimiser of λ/2, whose singular values
    differ from those at λ by ≈ λ/2 (far above the 1e-3·σ_1 tolerance); plain L2 on W
    (the ridge solution where the factorised one is meant) keeps full rank."""
    name = "rank.factorised_is_nuclear"
    cfg = config_lib.resolve(config_path("rank_sensing"), RANK)
    right = rank.solutions(cfg, rankflow.run(cfg), "sensing")
    _check(rank.factorised_is_nuclear_claim(right), name, "pass")
    half = {"sweep.dynamics.lam": [v / 2 for v in RANK["sweep.dynamics.lam"]]}
    wrong = rank.solutions(cfg, _run("rank_sensing", **RANK | half), "sensing")
    _check(rank.factorised_is_nuclear_claim(wrong), name, "fail")
    ridge = right[right["solution"] == "unfactorised, plain L2"]
    plain = pd.concat(
        [right[right["solution"] != "factorised, weight decay"],
         ridge.assign(solution="factorised, weight decay")],
        ignore_index=True,
    )  # fmt: skip
    _check(rank.factorised_is_nuclear_claim(plain), name, "fail")


# --- attention ---------------------------------------------------------------------------

ATTENTION = {"save.t1": 200, "sweep.dynamics.lam": [0.0, 3.0], "sweep.seed": [0, 1]}


@pytest.mark.slow
def test_mutant_attention_rank():
    """A decay mask that misses the attention pairs (decay on the embeddings instead):
    the heads' effective rank no longer falls with λ (drop far below 25%, runs overlap)."""
    from rankflow.attention import resolve
    from rankflow.attention import run as train

    name = "attention.rank"
    right = train(resolve(config_path("attention_rank"), ATTENTION)).heads
    _check(attention.rank_claim(right), name, "pass")
    wrong = train(resolve(config_path("attention_rank"), ATTENTION | {"train.decay": ["embed"]}))
    _check(attention.rank_claim(wrong.heads), name, "fail")


# --- the registry ------------------------------------------------------------------------


def test_every_claim_that_can_pass_has_a_mutant():
    import test_compare_sme
    import test_mutants_attention
    import test_mutants_depth
    import test_mutants_discrete
    import test_mutants_geometry
    import test_mutants_noise
    import test_mutants_optimizers
    import test_mutants_reference
    import test_pretrained_verdict

    covered = (
        set(MUTANT_CLAIMS)
        | set(test_mutants_attention.MUTANT_CLAIMS)
        | set(test_mutants_depth.MUTANT_CLAIMS)
        | set(test_mutants_discrete.MUTANT_CLAIMS)
        | set(test_mutants_geometry.MUTANT_CLAIMS)
        | set(test_mutants_noise.MUTANT_CLAIMS)
        | set(test_mutants_optimizers.MUTANT_CLAIMS)
        | set(test_mutants_reference.MUTANT_CLAIMS)
        | set(test_compare_sme.MUTANT_CLAIMS)
        | set(test_pretrained_verdict.MUTANT_CLAIMS)
    )
    claims = passable_claims()
    assert len(claims) == len(set(claims))
    missing = sorted(set(claims) - covered)
    assert not missing, f"claims without a mutant: {missing}"
    assert not covered - set(claims), "mutants of claims that no experiment makes"
