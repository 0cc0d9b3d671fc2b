# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T4 and T5 under a learning-rate schedule η(t) = η·s(t) (:mod:`rankflow.numerics.schedules`),
and the balance of a pair whose factors have their own learning-rate multipliers.

T4 scheduled: ``dD/dt = −2η(t)λ D``, so ``D(t) = e^{−2λ∫₀ᵗη(s)ds} D(0)`` for any loss.
T5 scheduled: the step from k to k + 1 uses ``η_k = η(k)`` (:func:`gd_scheduled_etas`,
from optax's own schedules), and T5 holds with η_k:
``D_{k+1} = (1 − η_kλ)² D_k + η_k²(BᵀGᵀGB − AᵀGGᵀA)`` (:func:`gd_balance_step` with
``eta = η_k``); the leading factor over k steps is ``Π_{j<k} (1 − η_jλ)²``, and the
η² terms bound how far the measured decay may stray from it
(:func:`gd_scheduled_bracket`).

Multipliers c_A, c_B (the whole step of A, decay included, times c_A: PyTorch's
per-group learning rate): ``dA/dt = −c_A η(GB + λA)``, ``dB/dt = −c_B η(GᵀA + λB)``.
Then ``E = AᵀA/c_A − BᵀB/c_B`` has ``dE/dt = −2ηλ(AᵀA − BᵀB)`` exactly (the cross terms
``AᵀGB + BᵀGᵀA`` cancel): E is conserved at λ = 0 whatever c_A, c_B, and for
c_A = c_B = c, ``D`` decays at ``e^{−2cλ∫η}``; for c_A ≠ c_B and λ > 0 neither E nor D
obeys a closed law.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float

from ..numerics.schedules import Schedule, eta_integral
from ._common import Scalar, float_dtype, outer_scale

# --- T4 under a schedule -------------------------------------------------------------------


def scheduled_balance_exponent(
    eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"], schedule: Schedule | None
) -> Float[Array, "*T"]:
    """T4 scheduled: ``2λ∫₀ᵗη(s)ds``, the exponent of GF's balance decay at ``t`` (steps;
    ``2ηλt`` for a constant schedule).

    Examples:
      >>> from rankflow.numerics.schedules import Schedule
      >>> from rankflow.theory import scheduled_balance_exponent
      >>> round(float(scheduled_balance_exponent(0.1, 0.5, 10.0, None)), 4)  # constant: 2ηλt
      1.0
      >>> warmup = Schedule("linear", warmup=10.0, final_fraction=1.0, t1=20.0)  # η(t) = ηt/10
      >>> round(float(scheduled_balance_exponent(0.1, 0.5, 10.0, warmup)), 4)  # ∫₀¹⁰ η = 10η/2
      0.5
    """
    t = jnp.asarray(t, float_dtype(t))
    return 2.0 * jnp.asarray(lam, t.dtype) * eta_integral(t, jnp.asarray(eta, t.dtype), schedule)


def gf_balance_scheduled(
    D0: Float[Array, "r r"],
    eta: Scalar,
    lam: Scalar,
    t: Float[ArrayLike, "*T"],
    schedule: Schedule | None,
) -> Float[Array, "*T r r"]:
    """T4 scheduled: ``D(t) = e^{−2λ∫₀ᵗη} D(0)`` under gradient flow, for any loss. The
    law is linear in D(0), so ``D0`` may be any norm of D(0) too (the ``balance_gap``
    column: ``‖D(t)‖ = e^{−2λ∫₀ᵗη}‖D(0)‖``); shape ``t.shape + D0.shape``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.numerics.schedules import Schedule
      >>> from rankflow.theory import gf_balance, gf_balance_scheduled
      >>> D0 = jnp.array([[1.0, 0.5], [0.5, -2.0]])
      >>> constant = gf_balance_scheduled(D0, 0.1, 0.5, 10.0, None)
      >>> bool(jnp.allclose(constant, gf_balance(D0, 0.1, 0.5, 10.0)))
      True
      >>> warmup = Schedule("linear", warmup=10.0, final_fraction=1.0, t1=20.0)  # η(t) = ηt/10
      >>> round(float(gf_balance_scheduled(2.0, 0.1, 0.5, 10.0, warmup)), 4)  # a norm: 2e^{−0.5}
      1.2131
    """
    D0 = jnp.asarray(D0)
    t = jnp.asarray(t, D0.dtype)
    return outer_scale(jnp.exp(-scheduled_balance_exponent(eta, lam, t, schedule)), D0)


# --- T5 under a schedule -------------------------------------------------------------------


def gd_scheduled_etas(eta: ArrayLike, k: ArrayLike, schedule: Schedule | None) -> np.ndarray:
    """T11: ``η_k = η(k)``, the learning rate of the GD step from k to k + 1 under
    ``schedule`` (numpy, float64; ``k`` whole numbers of any shape), computed by optax's
    own schedules, the definition that :mod:`rankflow.numerics.schedules` follows and
    independently of its formulas: warmup_cosine is
    ``optax.warmup_cosine_decay_schedule(0, η, w, t1, fη)``, linear is
    ``optax.linear_schedule(0, η, w)`` joined at w to ``linear_schedule(η, fη, t1 − w)``;
    after t1 both stay at fη, and without warmup the second part starts at once. wsd and
    wsd_cosine join the warmup, ``constant_schedule(η)`` and, at t1 − d, the tail
    ``linear_schedule(η, fη, d)`` or ``cosine_decay_schedule(η, d, alpha=f)``.

    Examples:
      >>> from rankflow.numerics.schedules import Schedule
      >>> from rankflow.theory import gd_scheduled_etas
      >>> warmup = Schedule("linear", warmup=10.0, final_fraction=0.5, t1=20.0)
      >>> gd_scheduled_etas(0.1, [0, 5, 10, 15, 20, 30], warmup).round(6).tolist()
      [0.0, 0.05, 0.1, 0.075, 0.05, 0.05]
      >>> cosine = Schedule("warmup_cosine", warmup=0.0, final_fraction=0.0, t1=10.0)
      >>> gd_scheduled_etas(0.1, [0, 5, 10], cosine).round(6).tolist()  # ½η(1 + cos(πk/10))
      [0.1, 0.05, 0.0]
      >>> wsd = Schedule("wsd", warmup=2.0, final_fraction=0.0, t1=10.0, decay=4.0)
      >>> gd_scheduled_etas(0.1, [0, 1, 2, 6, 8, 10], wsd).round(6).tolist()
      [0.0, 0.05, 0.1, 0.1, 0.05, 0.0]
    """
    k = np.asarray(k, np.int64)
    eta = float(eta)
    if schedule is None or schedule.constant:
        return np.full(k.shape, eta)
    w, f, t1 = schedule.warmup, schedule.final_fraction, schedule.t1
    if schedule.wsd:  # warmup, η until t1 − d, then the tail to fη over d steps
        d = schedule.decay
        tail = (
            optax.cosine_decay_schedule(eta, d, alpha=f)
            if schedule.kind == "wsd_cosine"
            else optax.linear_schedule(eta, f * eta, d)
        )
        parts = [optax.linear_schedule(0.0, eta, w)] if w > 0 else []
        parts += [optax.constant_schedule(eta), tail]
        bounds = ([w] if w > 0 else []) + [t1 - d]
        with jax.enable_x64(True):
            lr = optax.join_schedules(parts, bounds)
            return np.asarray(lr(jnp.asarray(k, jnp.float64)), np.float64)
    if t1 <= w:  # nothing follows the warmup: the final value from its end on
        after = optax.constant_schedule(f * eta)
    elif schedule.kind == "warmup_cosine":
        after = optax.cosine_decay_schedule(eta, t1 - w, alpha=f)
    elif schedule.kind == "linear":
        after = optax.linear_schedule(eta, f * eta, t1 - w)
    else:
        raise ValueError(f"dynamics.schedule: no schedule named {schedule.kind!r}")
    parts = [optax.linear_schedule(0.0, eta, w), after] if w > 0 else [after]
    with jax.enable_x64(True):
        lr = optax.join_schedules(parts, [w] if w > 0 else [])
        return np.asarray(lr(jnp.asarray(k, jnp.float64)), np.float64)


def gd_scheduled_contraction(
    eta: ArrayLike, lam: ArrayLike, k: ArrayLike, schedule: Schedule | None
) -> np.ndarray:
    """T5 scheduled: ``Π_{j<k} (1 − η_jλ)²``, η_j = η(j), the leading factor of D after
    k steps of GD (numpy, float64; ``k`` whole numbers of any shape).

    Examples:
      >>> from rankflow.numerics.schedules import Schedule
      >>> from rankflow.theory import gd_scheduled_contraction
      >>> [round(float(c), 6) for c in gd_scheduled_contraction(0.1, 0.5, [1, 2, 3], None)]
      [0.9025, 0.814506, 0.735092]
      >>> warmup = Schedule("linear", warmup=10.0, final_fraction=1.0, t1=20.0)  # η_j = ηj/10
      >>> [round(float(c), 6) for c in gd_scheduled_contraction(0.1, 0.5, [1, 2], warmup)]
      [1.0, 0.990025]
    """
    k = np.asarray(k, np.int64)
    etas = gd_scheduled_etas(eta, np.arange(int(k.max(initial=0))), schedule)
    logs = np.concatenate([[0.0], np.cumsum(2.0 * np.log(np.abs(1.0 - etas * float(lam))))])
    return np.exp(logs[k])


def gd_scheduled_bracket(
    A: Float[ArrayLike, "K m r"], B: Float[ArrayLike, "K n r"], G: Float[ArrayLike, "K m n"],
    etas: Float[ArrayLike, " K"], lam: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """T5 with η_k, over a run *(derived)*: how far T5's η² terms let the measured decay
    stray from T11's leading factor. For k = 0, …, K, bounds ``(low, high)`` on

    ``log(‖D_k‖_F/‖D_0‖_F) − log Π_{j<k} (1 − η_jλ)²``.

    Per step, ``D_{j+1} = c_j D_j + η_j² R_j`` with ``c_j = (1 − η_jλ)²`` and
    ``R_j = BᵀGᵀGB − AᵀGGᵀA`` (T5), so by the triangle inequality
    ``‖D_{j+1}‖/(c_j‖D_j‖) ∈ [1 − ρ_j, 1 + ρ_j]`` with ``ρ_j = η_j²‖R_j‖_F/(c_j‖D_j‖_F)``,
    and the sum of the logs over j < k bounds the departure: ``[Σ log(1 − ρ_j),
    Σ log(1 + ρ_j)]`` (−∞ below once some ρ_j ≥ 1). Numpy, float64.

    Args:
      A: the factor A before each step j = 0, …, K − 1, stacked along the first axis.
      B: the factor B before each step, stacked likewise.
      G: the loss gradient ``∇L(A_jB_jᵀ)`` before each step, stacked likewise.
      etas: ``η_j`` of each step (:func:`gd_scheduled_etas`).
      lam: the weight decay λ.

    Examples:
      >>> import numpy as np
      >>> from rankflow.theory import gd_scheduled_bracket
      >>> A, B = np.array([[[2.0]], [[1.8]]]), np.array([[[1.0]], [[0.9]]])  # K = 2 steps
      >>> low, high = gd_scheduled_bracket(A, B, np.zeros((2, 1, 1)), [0.1, 0.1], 0.5)
      >>> low.tolist(), high.tolist()  # G = 0: T5 is its leading factor exactly
      ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
      >>> A, B, G = np.array([[[2.0]]]), np.array([[[1.0]]]), np.array([[[0.5]]])  # K = 1
      >>> low, high = gd_scheduled_bracket(A, B, G, [0.1], 0.5)
      >>> A1, B1 = 0.95 * 2.0 - 0.1 * 0.5 * 1.0, 0.95 * 1.0 - 0.1 * 0.5 * 2.0  # one GD step
      >>> departure = np.log((A1**2 - B1**2) / 3.0) - np.log(0.95**2)  # D_0 = 3, ηλ = 0.05
      >>> round(float(low[1]), 6), round(float(departure), 6), round(float(high[1]), 6)
      (-0.002774, -0.002774, 0.002766)
    """
    A, B, G = (np.asarray(x, np.float64) for x in (A, B, G))
    etas = np.asarray(etas, np.float64)
    tr = lambda X: np.swapaxes(X, -1, -2)  # noqa: E731
    GB, GtA = G @ B, tr(G) @ A
    R = tr(GB) @ GB - tr(GtA) @ GtA
    D = tr(A) @ A - tr(B) @ B
    c = (1.0 - etas * float(lam)) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = etas**2 * np.linalg.norm(R, axis=(-2, -1)) / (c * np.linalg.norm(D, axis=(-2, -1)))
        low = np.log(np.clip(1.0 - rho, 0.0, None))
    zero = np.zeros(1)
    return np.concatenate([zero, np.cumsum(low)]), np.concatenate([zero, np.cumsum(np.log1p(rho))])


# --- per-factor learning-rate multipliers --------------------------------------------------


def scaled_balance(
    A: Float[Array, "m r"], B: Float[Array, "n r"], c_A: Scalar, c_B: Scalar
) -> Float[Array, "r r"]:
    """``E = AᵀA/c_A − BᵀB/c_B``: the balance in the metric of per-factor learning-rate
    multipliers (``D`` at c_A = c_B = 1).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, scaled_balance
      >>> A, B = jnp.array([[2.0]]), jnp.array([[1.0]])
      >>> scaled_balance(A, B, 4.0, 0.5).tolist()  # 4/4 − 1/0.5
      [[-1.0]]
      >>> bool(scaled_balance(A, B, 1.0, 1.0) == balance(A, B))
      True
    """
    dtype = float_dtype(A)
    return A.T @ A / jnp.asarray(c_A, dtype) - B.T @ B / jnp.asarray(c_B, dtype)


def scaled_balance_rate(
    A: Float[Array, "m r"], B: Float[Array, "n r"], eta: Scalar, lam: Scalar
) -> Float[Array, "r r"]:
    """``dE/dt = −2ηλ(AᵀA − BᵀB)`` along GF with multipliers c_A, c_B on A and B and
    decay λ (η = η(t) under a schedule), for any loss and any c_A, c_B.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.theory import scaled_balance, scaled_balance_rate
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> G, c_A, c_B, eta, lam = A @ B.T - jnp.eye(2), 2.0, 0.5, 0.1, 0.5  # L = ½‖W − I‖²
      >>> dA, dB = -c_A * eta * (G @ B + lam * A), -c_B * eta * (G.T @ A + lam * B)
      >>> _, dE = jax.jvp(lambda A, B: scaled_balance(A, B, c_A, c_B), (A, B), (dA, dB))
      >>> bool(jnp.allclose(dE, scaled_balance_rate(A, B, eta, lam), atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    return -2.0 * jnp.asarray(eta, dtype) * jnp.asarray(lam, dtype) * (A.T @ A - B.T @ B)
