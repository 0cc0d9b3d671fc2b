"""The ``codiagonal`` problem kind (docs/theory.md, T3′): regression whose input
covariance ``C = XXᵀ/N = V diag(c) Vᵀ`` shares its basis with ``S = YXᵀ/N``, and its
nuclear-norm minimiser in closed form, ``wᵢ = max(sᵢ − λ, 0)/cᵢ`` in the shared basis.

The closed form (:meth:`Codiagonal.minimiser`) is checked against two computations that
do not use it: proximal gradient with singular-value thresholding on ``jax.grad`` of the
loss (``theory.nuclear_minimiser``), and the factorised gradient flow of ``rankflow.run``
at λ > 0 (T1/T3: its limit minimises ``L + λ‖W‖_*``). The wrong version that divides
before thresholding, ``max(sᵢ/cᵢ − λ, 0)`` (= ``SVT_λ(S C⁺)``, the minimiser one would
get by treating the inputs as white), fails both checks by a wide margin. Float64
throughout (tests/conftest.py turns x64 on), but for the float32 run at the end.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
from rankflow import theory
from rankflow.config.fields import ConfigError
from rankflow.core.problems import Codiagonal, make_problem

LAM = 0.1

# (m, n, target singular values t, input variances c): c pairs with the target's right
# singular vectors first, so sᵢ = tᵢcᵢ. Every case has some active cᵢ ≠ 1 (where the
# wrong version differs) and one exercises each path of the closed form.
CASES = {
    "distinct": (4, 4, [1.0, 0.3], [0.25, 3.0, 1.0, 0.5]),
    # v₁ shares c = 0.25 with the unused v₃: one group, thresholded together.
    "equal_group": (4, 4, [1.0, 0.3], [0.25, 3.0, 0.25, 0.5]),
    "all_equal": (4, 4, [1.0, 0.3], [0.5, 0.5, 0.5, 0.5]),
    # An input direction never seen (c = 0) and sᵢ = 0.06 ≤ λ cut to 0 (w₂ = 0, the
    # wrong version keeps max(0.3 − λ, 0) = 0.2).
    "zero_and_cut": (4, 4, [1.0, 0.3], [2.0, 0.2, 0.0, 1.0]),
    # Variances 1e-13 apart: eigh mixes their eigenvectors (before the grouping by
    # closeness the closed form was off by ~1e-5 here).
    "near_equal": (4, 4, [1.0, 0.6], [0.5, 0.5 + 1e-13, 2.0, 0.25]),
    "wide": (3, 5, [1.0, 0.5], [3.0, 0.4, 1.0, 1.0, 0.7]),
    "tall": (6, 3, [1.0, 0.5], [0.3, 2.0, 1.5]),
}


def _config(m, n, t, c, *, noise=0.3, samples=50, **extra):
    problem = {"kind": "codiagonal", "m": m, "n": n, "rank": len(t), "samples": samples}
    problem.update(noise=noise, singular_values=t, input_variances=c)
    return {"x64": True, "problem": problem, **extra}


def _problem(case, noise=0.3, seed=0, dtype=jnp.float64):
    m, n, t, c = CASES[case]
    problem = make_problem(rankflow.resolve(_config(m, n, t, c, noise=noise)))
    data = problem.make_data(jax.random.PRNGKey(seed), jnp.asarray(noise, dtype), dtype)
    return problem, data


def _moments(data):
    X, Y = np.asarray(data["X"]), np.asarray(data["Y"])
    N = X.shape[1]
    return X @ X.T / N, Y @ X.T / N


def _objective(problem, data, W, lam=LAM):
    W = jnp.asarray(W)
    return float(problem.loss(W, data)) + lam * float(theory.nuclear_norm(W))


def divided_first(data, lam=LAM):
    """The wrong version: ``max(sᵢ/cᵢ − λ, 0)`` in the shared basis, ``SVT_λ(S C⁺)``
    (the target's singular values thresholded, as if the inputs were white)."""
    C, S = _moments(data)
    return np.asarray(theory.svt(jnp.asarray(S @ np.linalg.pinv(C, rcond=1e-10)), lam))


def predicted_singular_values(case, lam=LAM):
    """T3′ from the config alone: ``max(tᵢcᵢ − λ, 0)/cᵢ`` (0 where cᵢ = 0), and the
    wrong version's ``max(tᵢ − λ, 0)``, both in descending order."""
    m, n, t, c = CASES[case]
    right = [max(ti * ci - lam, 0.0) / ci if ci > 0 else 0.0 for ti, ci in zip(t, c)]
    wrong = [max(ti - lam, 0.0) if ci > 0 else 0.0 for ti, ci in zip(t, c)]
    return sorted(right, reverse=True), sorted(wrong, reverse=True)


# --- T3′: the closed form against proximal gradient ----------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_T3_codiagonal_closed_form_is_the_prox_gradient_minimiser(case):
    problem, data = _problem(case)
    W = np.asarray(jax.jit(problem.minimiser)(data, LAM))  # λ traced: jittable
    res = theory.nuclear_minimiser(problem, data, LAM, tol=1e-14, max_iters=50_000)
    assert bool(res.converged)
    # Proximal gradient stops at a relative change of 1e-14; at the conditioning of
    # these cases (max c / min c ≤ 12) that leaves ≤ 1e-12 (measured 5e-13).
    np.testing.assert_allclose(W, np.asarray(res.W), rtol=0, atol=1e-9)
    # The singular values are T3′'s numbers, computed from the config alone.
    right, wrong = predicted_singular_values(case)
    k = len(right)
    sv = np.linalg.svd(W, compute_uv=False)
    np.testing.assert_allclose(sv[:k], right, rtol=0, atol=1e-9)
    assert np.all(sv[k:] < 1e-12)
    # Dividing before thresholding is far off by both measures: ≥ 1e-2, 1e7 times the
    # tolerance, in W (spectral norm) and in its spectrum, and its objective is higher.
    W_wrong = divided_first(data)
    assert np.linalg.norm(W_wrong - np.asarray(res.W), 2) > 1e-2
    assert np.abs(np.array(wrong) - right).max() > 1e-2
    assert _objective(problem, data, W_wrong) > _objective(problem, data, W) + 1e-4


def test_T3_codiagonal_optimality_condition():
    """The closed form satisfies the subgradient condition of L + λ‖·‖_*: the residual
    ``S − W C = −∇L(W)`` is λ(U₊V₊ᵀ + Z) with Z ⟂ W's spaces and ‖Z‖₂ ≤ 1; the wrong
    version does not: its residual on W's spaces is ``λcᵢ uᵢvᵢᵀ``, not ``λ uᵢvᵢᵀ``."""
    problem, data = _problem("equal_group")
    C, S = _moments(data)
    for W, holds in (
        (np.asarray(problem.minimiser(data, LAM)), True),
        (divided_first(data), False),
    ):
        U, s, Vt = np.linalg.svd(W)
        k = int(np.sum(s > 1e-8 * s[0]))
        Uk, Vk = U[:, :k], Vt[:k].T
        Z = (S - W @ C) / LAM
        on = np.abs(Uk.T @ Z @ Vk - np.eye(k)).max()
        Pu, Pv = np.eye(W.shape[0]) - Uk @ Uk.T, np.eye(W.shape[1]) - Vk @ Vk.T
        off = max(np.abs(Pu @ Z @ Vk).max(), np.abs(Uk.T @ Z @ Pv).max())
        rest = np.linalg.norm(Pu @ Z @ Pv, 2)
        if holds:
            assert on < 1e-10 and off < 1e-10 and rest <= 1 + 1e-10
        else:
            assert on > 0.5  # max |cᵢ − 1| over the active directions: 2 at c = 3


# --- T3′: the closed form against the factorised flow --------------------------------------


def test_T3_codiagonal_gradient_flow_reaches_the_closed_form(tmp_path):
    """Gradient flow on the factors (r = n, two spare columns) from a small start at
    λ = 0.1 ends at the closed form. Tolerances: an adaptive solve at rtol 1e-11 (the
    measured deviation at t = 200 is 4e-13), and the spare columns decay at ≥ ηλ = 0.1
    per step, e^{-30} of 0.1 by t = 300."""
    m, n, t, c = CASES["equal_group"]
    cfg = _config(
        m,
        n,
        t,
        c,
        model={"r": n},
        init={"kind": "gaussian", "scale": 0.1},
        dynamics={"kind": "gradient_flow", "eta": 1.0, "lam": LAM},
        solver={"rtol": 1e-11, "atol": 1e-13},
        save={"ts": [0, 300], "states": True},
    )
    df = rankflow.run(cfg, out=tmp_path / "out")
    assert (df["status"] == "ok").all()
    run = rankflow.load_states(tmp_path / "out")[0]
    W_run = run.A[-1] @ run.B[-1].T

    problem = make_problem(rankflow.resolve(cfg))
    data_key = jax.random.fold_in(jax.random.PRNGKey(0), 0)  # the run's data (problem.seed 0)
    data = problem.make_data(data_key, jnp.float64(0.3), jnp.float64)
    W = np.asarray(problem.minimiser(data, LAM))
    f = _objective(problem, data, W)

    np.testing.assert_allclose(W_run, W, rtol=0, atol=1e-8)
    final = df.iloc[-1]
    assert final["star_loss"] == pytest.approx(f, rel=1e-10)
    assert final["l2_loss"] == pytest.approx(f, rel=1e-10)  # balanced: L_L2 = L_* (T1)
    assert final["rank"] == 2  # weight decay removed the spare columns
    assert df.iloc[0]["star_loss"] > f + 0.1  # it started far away
    # The wrong version is 0.3 from where the flow went (spectral norm: |wᵢ − wᵢ'| at
    # c = ¼; 0.13 in the largest entry), 1e7 times the tolerance, and
    # its objective is above the flow's by far more than the 1e-10 agreement.
    W_wrong = divided_first(data)
    assert np.linalg.norm(W_run - W_wrong, 2) > 0.2
    assert _objective(problem, data, W_wrong) > final["star_loss"] + 1e-3


# --- the data -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["distinct", "equal_group", "zero_and_cut", "wide", "tall"])
def test_codiagonal_data_share_the_basis_at_every_noise_level(case):
    m, n, t, c = CASES[case]
    S_clean = None
    for noise in (0.0, 0.3, 3.0):
        problem, data = _problem(case, noise=noise)
        C, S = _moments(data)
        np.testing.assert_allclose(np.linalg.eigvalsh(C), sorted(c), rtol=0, atol=1e-12)
        # Co-diagonal: SᵀS commutes with C, and S's right singular vectors are C's
        # eigenvectors, of eigenvalue cᵢ where sᵢ = tᵢcᵢ.
        assert np.abs(C @ S.T @ S - S.T @ S @ C).max() < 1e-12
        _, s, Vt = np.linalg.svd(S)
        pairs = []
        for si, v in zip(s[: len(t)], Vt[: len(t)]):
            ci = v @ C @ v
            assert np.abs(C @ v - ci * v).max() < 1e-10
            pairs.append((si, ci))
        expected = sorted(((ti * ci, ci) for ti, ci in zip(t, c)), reverse=True)
        np.testing.assert_allclose(pairs, expected, rtol=0, atol=1e-10)
        # The noise is there (it adds ½noise²‖E‖²/N to the loss at the target) but off
        # the inputs' row space: S is the noiseless one.
        at_target = float(problem.loss(data["target"], data))
        assert at_target > 0.1 * noise**2 if noise else at_target < 1e-25
        if S_clean is None:
            S_clean = S
        np.testing.assert_allclose(S, S_clean, rtol=0, atol=1e-12)
    # The check can fail: noise not projected off the inputs breaks the shared basis.
    rng = np.random.default_rng(0)
    X = np.asarray(data["X"])
    Y = np.asarray(data["Y"]) + 0.3 * rng.normal(size=data["Y"].shape)
    S_bad = Y @ X.T / X.shape[1]
    assert np.abs(C @ S_bad.T @ S_bad - S_bad.T @ S_bad @ C).max() > 1e-3


def test_codiagonal_lipschitz_constant_is_the_top_input_variance():
    """``max cᵢ``, the top eigenvalue of L's Hessian ``C ⊗ I_m`` (the step of the
    proximal gradient above)."""
    problem, data = _problem("wide")
    m, n = problem.shape
    H = jax.hessian(problem.loss)(jnp.zeros((m, n)), data).reshape(m * n, m * n)
    top = float(np.linalg.eigvalsh(np.asarray(H)).max())
    assert float(problem.lipschitz_constant(data)) == pytest.approx(top, rel=1e-12)
    assert top == pytest.approx(max(CASES["wide"][3]), rel=1e-12)


# --- the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"input_variances": [1.0, 2.0]}, "problem.input_variances: needs problem.n = 3"),
        ({"input_variances": [1.0, -0.5, 2.0]}, "problem.input_variances: must be finite"),
        ({"input_variances": [0.0, 0.0, 0.0]}, "problem.input_variances: needs one value > 0"),
        ({"input_variances": [1.0, float("inf"), 2.0]}, "problem.input_variances: expected"),
        ({"input_variances": "1 2 3"}, "problem.input_variances: expected a list"),
        ({"samples": 2}, "problem.samples: codiagonal needs samples ≥ problem.n = 3"),
        (
            {"kind": "regression", "input_variances": [1.0, 2.0, 3.0]},
            "problem.input_variances: only for problem.kind = 'codiagonal'",
        ),
    ],
)
def test_codiagonal_bad_input_variances_are_a_one_line_config_error(change, message):
    problem = {"kind": "codiagonal", "m": 3, "n": 3, "rank": 2, "samples": 10, **change}
    with pytest.raises(ConfigError) as err:
        rankflow.resolve({"problem": problem})
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_codiagonal_default_variances_and_direct_construction():
    cfg = rankflow.resolve({"problem": {"kind": "codiagonal", "m": 3, "n": 3, "samples": 5}})
    assert cfg["problem"]["input_variances"] == [2.0, 1.25, 0.5]
    assert make_problem(cfg).input_variances == (2.0, 1.25, 0.5)
    assert Codiagonal("codiagonal", 3, 3, 1, 5, (1.0,)).input_variances == (2.0, 1.25, 0.5)
    with pytest.raises(ConfigError, match="problem.input_variances"):
        Codiagonal("codiagonal", 3, 3, 1, 5, (1.0,), input_variances=(1.0, -1.0, 1.0))


# --- float32 ------------------------------------------------------------------------------


def test_T3_codiagonal_float32_run_and_closed_form():
    """A float32 GD run reaches the closed form to float32 accuracy, and the closed form
    of float32 data is float32 and agrees with float64's."""
    m, n, t, c = CASES["distinct"]
    cfg = _config(
        m,
        n,
        t,
        c,
        model={"r": n},
        dynamics={"kind": "gd", "eta": 0.5, "lam": LAM},
        save={"t1": 400, "num": 2},
    )
    cfg["x64"] = False
    df = rankflow.run(cfg)
    assert (df["status"] == "ok").all()
    right, wrong = predicted_singular_values("distinct")
    final = df.iloc[-1][[f"sv_{i}" for i in range(1, n + 1)]].to_numpy(float)
    np.testing.assert_allclose(final[:2], right, rtol=0, atol=1e-5)
    assert np.all(final[2:] < 1e-5)
    assert np.abs(final[:2] - wrong).max() > 1e-2

    problem, data32 = _problem("distinct", dtype=jnp.float32)
    _, data64 = _problem("distinct")
    W32 = problem.minimiser(data32, LAM)
    assert W32.dtype == jnp.float32
    W64 = np.asarray(problem.minimiser(data64, LAM))
    np.testing.assert_allclose(np.asarray(W32), W64, rtol=0, atol=1e-5)


# --- the guide ------------------------------------------------------------------------------


def test_the_guide_quotes_the_real_files():
    """Every code block of docs/guides/adding-a-kind.md that opens with a file's path
    (``# rankflow/…py``) is that file's text verbatim, at the block's indentation, so
    the walk-through cannot drift from the diff it describes."""
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "guides" / "adding-a-kind.md").read_text()
    blocks = re.findall(r"```python\n# (\S+\.py)\n(.*?)\n```", guide, flags=re.S)
    assert len(blocks) >= 10
    for path, text in blocks:
        assert text in (root / path).read_text(), f"{path}: not quoted verbatim:\n{text}"
    # The check can fail: a block changed by one character is not in the file.
    path, text = blocks[0]
    assert text.replace("frozen=True", "frozen=False") not in (root / path).read_text()
