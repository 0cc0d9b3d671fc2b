"""Depth L ≥ 3 in the engine (``model.depth``; docs/theory.md, T12, T13): every adjacent
pair's balance under gradient flow (``D_j(t) = e^{−2ηλt}D_j(0)``, adaptive float64, to
1e-6) and GD (the exact one-step identity, to 1e-10) on every problem kind, checked
against :mod:`rankflow.theory`, each with its wrong versions (rate ηλ or 4ηλ, a
missing η² term), which must fail; the initialisations, the observables, one compilation
per depth and the config's errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import states

import rankflow
from rankflow import theory
from rankflow.core import config as C
from rankflow.core import problems
from rankflow.core.factors import chain, depth_observables, init_depth_factors, product
from rankflow.core.program import TRACE_COUNTS, params_of, program_for
from rankflow.engine.status import Status

ETA, LAM = 0.4, 0.1


def quartic(W):
    """A non-quadratic custom loss: the identities hold for any loss of the product."""
    return 0.25 * jnp.sum(W**4) + 0.5 * jnp.sum((W - 0.3) ** 2)


PROBLEMS = {
    "diagonal": {"kind": "diagonal", "singular_values": [1.0, 0.6, 0.3]},
    "sensing": {"kind": "sensing", "m": 4, "n": 3, "rank": 2, "samples": 30},
    "completion": {"kind": "completion", "m": 4, "n": 3, "rank": 2, "samples": 30},
    "regression": {"kind": "regression", "m": 4, "n": 3, "rank": 2, "samples": 30},
    "codiagonal": {
        "kind": "codiagonal",
        "m": 4,
        "n": 3,
        "rank": 2,
        "samples": 30,
        "input_variances": [1.5, 1.0, 0.5],
    },
    "custom": {"kind": "custom", "m": 4, "n": 3, "loss": quartic},
}


def test_every_registered_problem_kind_is_here():
    """The kinds above are the registry's, in its order: a kind registered in
    rankflow.core.problems and missing here fails (its identities are then untested)."""
    assert list(PROBLEMS) == list(problems.PROBLEMS)


def _states(cfg):
    """Every saved factor tuple of a single-point config (``save = "states"``): the
    point, its program and the factors ``(W_1, …, W_L)``, each ``(saves, d_j, d_{j−1})``."""
    point, program, out = states(cfg)
    assert (out["status"] == Status.ok).all()
    return point, program, tuple(W[0] for W in out["theta"])


def _config(kind: str, depth: int, dynamics: str, save: dict) -> dict:
    return {
        "x64": True,
        "problem": PROBLEMS[kind],
        "model": {"depth": depth, "r": [3, 4, 3][: depth - 1]},
        "init": {"kind": "imbalanced", "scale": 0.6, "imbalance": 0.5},
        "dynamics": {"kind": dynamics, "eta": ETA, "lam": LAM},
        "solver": {"rtol": 1e-11, "atol": 1e-13},
        "save": save,
    }


# --- T12 under gradient flow: D_j(t) = e^{−2ηλt} D_j(0), pair by pair ----------------------


def gf_decay_errors(kind: str, depth: int) -> dict[str, float]:
    """Largest relative error, over pairs and saves, of ``‖D_j(t)‖_F`` against
    ``e^{−ct}‖D_j(0)‖_F`` for the rate c = 2ηλ (T12) and the wrong rates ηλ, 4ηλ; and of
    the matrices ``D_j(t)`` against :func:`rankflow.theory.gf_depth_balance`."""
    ts = [0.0, 2.0, 5.0, 10.0]
    _, _, factors = _states(_config(kind, depth, "gradient_flow", {"ts": ts}))
    Ds = [np.stack(D) for D in zip(*(theory.depth_balances(f) for f in zip(*factors)))]
    ts = np.asarray(ts)
    gaps = np.stack([np.linalg.norm(D, axis=(1, 2)) for D in Ds])  # (pairs, saves)
    assert (gaps[:, 0] > 0.1).all()  # every pair starts imbalanced
    out = {}
    for name, rate in (("2ηλ", 2 * ETA * LAM), ("ηλ", ETA * LAM), ("4ηλ", 4 * ETA * LAM)):
        predicted = gaps[:, :1] * np.exp(-rate * ts)[None, :]
        out[name] = float(np.max(np.abs(gaps - predicted) / predicted))
    predicted = theory.gf_depth_balance([D[0] for D in Ds], ETA, LAM, ts)
    out["matrix"] = max(
        float(np.max(np.abs(D - np.asarray(P))) / np.max(np.abs(D[0])))
        for D, P in zip(Ds, predicted)
    )
    return out


def _check_gf(kind, depth):
    err = gf_decay_errors(kind, depth)
    assert err["2ηλ"] < 1e-6 and err["matrix"] < 1e-6, err
    # The wrong rates are far off: the check can fail.
    assert err["ηλ"] > 1e-2 and err["4ηλ"] > 1e-2, err


@pytest.mark.parametrize("kind, depth", [("diagonal", 3)])
def test_gf_pairwise_decay(kind, depth):
    _check_gf(kind, depth)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize("kind", list(PROBLEMS))
def test_gf_pairwise_decay_every_problem(kind, depth):
    _check_gf(kind, depth)


# --- T12 under GD: D_j′ = (1 − ηλ)² D_j + η² (∇_{j+1}ᵀ∇_{j+1} − ∇_j∇_jᵀ), exactly ------------


def gd_step_errors(kind: str, depth: int) -> dict[str, float]:
    """Largest relative error, over pairs, of one GD step's ``D_j′`` against T12's
    identity (:func:`rankflow.theory.gd_depth_balance_step`, with the chain rule's
    gradients :func:`rankflow.theory.depth_gradients`) and against its wrong versions:
    contraction (1 − ηλ) or (1 − 2ηλ)², the η² term missing or with η instead."""
    point, program, factors = _states(_config(kind, depth, "gd", {"ts": [0, 1]}))
    before = tuple(jnp.asarray(W[0]) for W in factors)
    after = theory.depth_balances(tuple(jnp.asarray(W[1]) for W in factors))
    data = program.data(params_of(point, 0))
    G = jax.grad(program.problem.loss)(theory.product(before), data)
    grads = theory.depth_gradients(before, G)
    Ds = theory.depth_balances(before)
    extra = [grads[j + 1].T @ grads[j + 1] - grads[j] @ grads[j].T for j in range(depth - 1)]
    a = ETA * LAM
    versions = {
        "T12": theory.gd_depth_balance_step(before, grads, ETA, LAM),
        "(1 − ηλ)": [(1 - a) * D + ETA**2 * E for D, E in zip(Ds, extra)],
        "(1 − 2ηλ)²": [(1 - 2 * a) ** 2 * D + ETA**2 * E for D, E in zip(Ds, extra)],
        "no η² term": [(1 - a) ** 2 * D for D in Ds],
        "η term": [(1 - a) ** 2 * D + ETA * E for D, E in zip(Ds, extra)],
    }
    return {
        name: max(float(jnp.max(jnp.abs(A - P)) / jnp.max(jnp.abs(A))) for A, P in zip(after, pred))
        for name, pred in versions.items()
    }


def _check_gd(kind, depth):
    err = gd_step_errors(kind, depth)
    assert err.pop("T12") < 1e-10, err
    assert min(err.values()) > 1e-4, err  # every wrong version fails


@pytest.mark.parametrize("kind, depth", [("diagonal", 4)])
def test_gd_pairwise_identity(kind, depth):
    _check_gd(kind, depth)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize("kind", list(PROBLEMS))
def test_gd_pairwise_identity_every_problem(kind, depth):
    _check_gd(kind, depth)


# --- the engine's pieces against rankflow.theory (no solve) ---------------------------------


def _start(kind: str, widths=(3, 2, 4), pairs=(1, 2, 3), imbalance=0.7, scale=0.5):
    key = jax.random.PRNGKey(3)
    U, _ = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(4), (5, 2)))
    V, _ = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(5), (4, 2)))
    target = U @ jnp.diag(jnp.asarray([1.0, 0.5])) @ V.T
    init = jax.jit(
        lambda key, target, scale, imbalance: init_depth_factors(
            kind, key, target, (5, 4), widths, scale, imbalance, pairs, jnp.float64
        )
    )
    return init(key, target, scale, imbalance), target


def test_balanced_start_has_every_pair_balanced():
    factors, _ = _start("balanced")
    assert len(factors) == 4
    assert [W.shape for W in factors] == [(3, 4), (2, 3), (4, 2), (5, 4)]
    for D in theory.depth_balances(factors):
        assert float(jnp.max(jnp.abs(D))) < 1e-12
    assert abs(float(theory.depth_penalty_gap(factors))) < 1e-12


@pytest.mark.parametrize("pairs", [(1, 2, 3), (2,), (1, 3)])
def test_imbalanced_start_has_the_named_gaps_and_the_balanced_product(pairs):
    factors, _ = _start("imbalanced", pairs=pairs)
    balanced, _ = _start("balanced")
    np.testing.assert_allclose(product(factors), product(balanced), rtol=0, atol=1e-12)
    gaps = [float(jnp.linalg.norm(D)) for D in theory.depth_balances(factors)]
    want = [0.7 if j in pairs else 0.0 for j in (1, 2, 3)]
    np.testing.assert_allclose(gaps, want, rtol=0, atol=1e-12)


def test_spectral_start_is_scale_times_the_targets_singular_vectors():
    factors, target = _start("spectral", widths=(3, 3), scale=0.5)
    U, _, Vt = np.linalg.svd(np.asarray(target))
    np.testing.assert_allclose(product(factors), 0.5 * U[:, :3] @ Vt[:3], atol=1e-12)
    for D in theory.depth_balances(factors):
        assert float(jnp.max(jnp.abs(D))) < 1e-12


def test_chain_rule_and_observables_match_theory():
    factors, _ = _start("gaussian")
    G = jax.random.normal(jax.random.PRNGKey(6), (5, 4), jnp.float64)
    for a, b in zip(chain(G, factors), theory.depth_gradients(factors, G), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    obs = depth_observables(factors, jnp.asarray(0.0), jnp.asarray(0.1), 1e-3)
    np.testing.assert_allclose(obs["l2_penalty"], theory.depth_l2_penalty(factors), rtol=1e-13)
    np.testing.assert_allclose(
        obs["schatten_penalty"], theory.schatten_penalty(product(factors), 4), rtol=1e-12
    )
    np.testing.assert_allclose(obs["schatten_gap"], theory.depth_penalty_gap(factors), rtol=1e-12)
    assert float(obs["schatten_gap"]) > 0.01  # a Gaussian start is not balanced
    for j, D in enumerate(theory.depth_balances(factors), start=1):
        np.testing.assert_allclose(obs[f"balance_gap_{j}"], jnp.linalg.norm(D), rtol=1e-13)
    assert obs["sv"].shape == (2,)  # min(m, n, widths) = 2


# --- the table and the compilations ----------------------------------------------------------


@pytest.mark.slow
def test_sweep_over_lambda_and_depth_compiles_once_per_depth():
    cfg = {
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
        "model": {"r": 3},
        "dynamics": {"kind": "gd", "eta": 0.1},
        "save": {"t1": 23, "num": 24},  # a structure no other test uses
        "sweep": {"model.depth": [2, 3, 4], "dynamics.lam": [0.0, 0.05, 0.1, 0.2]},
    }
    points = C.expand(C.resolve(cfg))
    keys = {program_for(p).key for p in points}
    assert len(keys) == 3 and all(TRACE_COUNTS[k] == 0 for k in keys)
    df = rankflow.run(cfg)
    assert all(TRACE_COUNTS[k] == 1 for k in keys)
    assert sorted(df["model.depth"].unique()) == [2, 3, 4]
    deep = df[df["model.depth"] == 4]
    assert deep[["balance_gap_1", "balance_gap_2", "balance_gap_3"]].notna().all().all()
    assert deep["schatten_gap"].min() >= -1e-6  # ½Σ‖W_j‖² ≥ (L/2)Σσ^{2/L}
    assert df[df["model.depth"] == 2]["balance_gap"].notna().all()


# --- the config's errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"model.depth": 1}, r"^model\.depth: must be ≥ 2"),
        ({"model.depth": 2.5}, r"^model\.depth: expected an integer"),
        ({"model.depth": 3, "model.r": [4, 4, 4]}, r"^model\.r: depth 3 has 2 inner widths"),
        ({"model.r": [4, 0], "model.depth": 3}, r"^model\.r: must be ≥ 1"),
        ({"model.r": []}, r"^model\.r: must be an integer ≥ 1 or a non-empty list"),
        (
            {"model.depth": 3, "init.kind": "imbalanced", "init.pairs": [3]},
            r"^init\.pairs: depth 3 has the adjacent pairs 1, 2",
        ),
        ({"init.kind": "imbalanced", "init.pairs": [2]}, r"^init\.pairs: depth 2 has"),
        ({"model.depth": 3, "init.pairs": [1]}, r"^init\.pairs: only for init\.kind"),
    ],
)
def test_bad_depth_config_names_the_field(overrides, match):
    with pytest.raises(C.ConfigError, match=match):
        C.resolve({"problem": {"kind": "sensing"}}, overrides)


def test_a_width_below_the_targets_rank_warns():
    cfg = {"problem": {"kind": "sensing", "rank": 3}, "model": {"depth": 3, "r": [4, 2]}}
    with pytest.warns(UserWarning, match=r"^model\.r: an inner width 2 < the target's rank 3"):
        C.resolve(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C.resolve(cfg | {"model": {"depth": 3, "r": 3}})


def test_compare_refuses_depth_above_two():
    from rankflow.compare import compare

    with pytest.raises(C.ConfigError, match=r"^model\.depth: compare measures"):
        compare({"dynamics": {"kind": "gd"}, "model": {"depth": 3}})
