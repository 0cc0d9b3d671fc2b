"""LoRA-style initialisation (issue #43 item 4), ``init.kind = "lora"``: A the Gaussian
A of ``gaussian`` and B = 0 exactly, so W(0) = 0 and the balance gap starts at
‖AᵀA‖_F (at depth L: W_1 = 0, the others Gaussian). From it the gap follows T4 under
gradient flow (e^{−2ηλt}, the wrong e^{−ηλt} far off) and T5 at every GD step, and GD
leaves the start at once: (A, 0) is no critical point, the first step gives
B = −η∇L(0)ᵀA ≠ 0 (only the decay acts on A)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankflow import theory
from rankflow.core import config as C
from rankflow.core.factors import init_depth_factors
from rankflow.core.problems import init_factors, make_problem
from rankflow.core.program import params_of
from rankflow.engine.status import Status
from tests.helpers import states

ETA, LAM, T1 = 0.5, 0.05, 40
SENSING = {"kind": "sensing", "m": 6, "n": 5, "rank": 2, "samples": 40, "noise": 0.05}


def _cfg(kind: str, **save):
    cfg = {
        "x64": True,
        "problem": SENSING,
        "model": {"r": 3},
        "init": {"kind": "lora", "scale": 0.5},
        "dynamics": {"kind": kind, "eta": ETA, "lam": LAM},
        "save": {"t1": T1, **save},
    }
    if kind == "gradient_flow":
        cfg["solver"] = {"rtol": 1e-12, "atol": 1e-14}
    return cfg


def _run(kind: str, **save):
    point, prog, out = states(_cfg(kind, **save))
    assert (out["status"] == Status.ok).all()
    A, B = (np.asarray(x[0]) for x in out["theta"])
    return point, prog, A, B


def _gap(A, B):
    return np.linalg.norm(
        np.einsum("tmi,tmj->tij", A, A) - np.einsum("tmi,tmj->tij", B, B), axis=(1, 2)
    )


def test_lora_start_is_gaussian_A_and_zero_B():
    cfg = C.resolve({"x64": True, "problem": SENSING, "model": {"r": 3}})
    problem = make_problem(cfg)
    with jax.enable_x64(True):
        key = jax.random.PRNGKey(4)
        data = problem.make_data(key, jnp.float64(0.05), jnp.float64)
        A, B = init_factors("lora", key, problem, data, 3, 0.5, 0.0, jnp.float64)
        A_g, _ = init_factors("gaussian", key, problem, data, 3, 0.5, 0.0, jnp.float64)
    assert A.shape == (6, 3) and B.shape == (5, 3)
    assert (np.asarray(B) == 0).all()  # exactly
    np.testing.assert_array_equal(A, A_g)  # gaussian's A, the same draw
    gap = float(jnp.linalg.norm(theory.balance(A, B)))
    assert gap == pytest.approx(float(jnp.linalg.norm(A.T @ A)), rel=1e-12)
    assert np.asarray(A @ B.T).max() == 0.0 == np.asarray(A @ B.T).min()  # W(0) = 0


def test_lora_start_at_depth_zeroes_W1_only():
    """Depth 3: W_1 = 0 exactly (depth 2's B = W_1ᵀ), W_2, W_3 gaussian's, so D_1(0) =
    W_2ᵀW_2 and D_2(0) is the Gaussian factors' own."""
    with jax.enable_x64(True):
        key = jax.random.PRNGKey(1)
        args = (key, None, (6, 5), (3, 4), 0.5, 0.0, (1, 2), jnp.float64)
        lora = init_depth_factors("lora", *args)
        gauss = init_depth_factors("gaussian", *args)
    assert [W.shape for W in lora] == [(3, 5), (4, 3), (6, 4)]
    assert (np.asarray(lora[0]) == 0).all()
    for W, G in zip(lora[1:], gauss[1:]):
        np.testing.assert_array_equal(W, G)
    D1 = lora[1].T @ lora[1] - lora[0] @ lora[0].T
    np.testing.assert_allclose(D1, lora[1].T @ lora[1], rtol=0, atol=0)


def test_T4_from_the_lora_start_under_gradient_flow():
    _, prog, A, B = _run("gradient_flow", num=11)
    ts, gap = prog.ts, _gap(A, B)
    assert (B[0] == 0).all()
    assert gap[0] == pytest.approx(np.linalg.norm(A[0].T @ A[0]), rel=1e-12)
    pred = gap[0] * np.exp(-2 * ETA * LAM * ts)
    assert np.max(np.abs(gap / pred - 1)) <= 1e-9
    wrong = gap[0] * np.exp(-ETA * LAM * ts)  # e^{−ηλt}: half the rate
    assert np.max(np.abs(gap / wrong - 1)) > 0.1
    assert np.abs(B[-1]).max() > 1e-2  # B grew from 0: the flow left the start


def test_T5_from_the_lora_start_every_gd_step():
    """T5 at every step, and the first step exactly: A ← (1 − ηλ)A, B ← −η∇L(0)ᵀA."""
    point, prog, A, B = _run("gd", num=T1 + 1)
    data = prog.data(params_of(point, 0))
    loss = prog.problem.loss

    @jax.jit
    def miss(A0, B0, A1, B1):
        G = jax.grad(loss)(A0 @ B0.T, data)
        D1 = theory.balance(A1, B1)
        return jnp.linalg.norm(theory.gd_balance_step(A0, B0, G, ETA, LAM) - D1) / jnp.linalg.norm(
            D1
        )

    assert float(jnp.max(jax.vmap(miss)(A[:-1], B[:-1], A[1:], B[1:]))) <= 1e-10
    G0 = np.asarray(jax.grad(loss)(jnp.zeros((6, 5)), data))  # ∇L at W = 0
    assert np.abs(G0.T @ A[0]).max() > 1e-2  # so (A, 0) is no critical point
    np.testing.assert_allclose(B[1], -ETA * G0.T @ A[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(A[1], (1 - ETA * LAM) * A[0], rtol=1e-12, atol=1e-14)
    # GD moves off W = 0: the data loss falls below its value at the start.
    W = np.einsum("tmi,tni->tmn", A, B)
    losses = np.asarray(jax.vmap(lambda w: loss(w, data))(jnp.asarray(W)))
    assert losses[-1] < 0.5 * losses[0]
    # The leading factor of T5, (1 − ηλ)^{2k}, against GF's e^{−2ηλk}: the gap follows the
    # former to O(η²) per step, not e^{−ηλk}.
    gap = _gap(A, B)
    ks = np.arange(T1 + 1)
    assert np.max(np.abs(gap / (gap[0] * np.exp(-ETA * LAM * ks)) - 1)) > 0.1
