# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T4 and T5 under a learning-rate schedule η(t) = η·s(t) (:mod:`rankflow.numerics.schedules`),
and the balance of a pair whose factors have their own learning-rate multipliers.

T4 scheduled: ``dD/dt = −2η(t)λ D``, so ``D(t) = e^{−2λ∫₀ᵗη(s)ds} D(0)`` for any loss.
T5 scheduled: the step from k to k + 1 uses ``η_k = η(k)``, and T5 holds with η_k:
``D_{k+1} = (1 − η_kλ)² D_k + η_k²(BᵀGᵀGB − AᵀGGᵀA)`` (:func:`gd_balance_step` with
``eta = η_k``); the leading factor over k steps is ``Π_{j<k} (1 − η_jλ)²``.

Multipliers c_A, c_B (the whole step of A, decay included, times c_A: PyTorch's
per-group learning rate): ``dA/dt = −c_A η(GB + λA)``, ``dB/dt = −c_B η(GᵀA + λB)``.
Then ``E = AᵀA/c_A − BᵀB/c_B`` has ``dE/dt = −2ηλ(AᵀA − BᵀB)`` exactly (the cross terms
``AᵀGB + BᵀGᵀA`` cancel): E is conserved at λ = 0 whatever c_A, c_B, and for
c_A = c_B = c, ``D`` decays at ``e^{−2cλ∫η}``; for c_A ≠ c_B and λ > 0 neither E nor D
obeys a closed law.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ..numerics.schedules import Schedule, eta_at, eta_integral
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
    n = int(k.max(initial=0))
    etas = np.broadcast_to(eta_at(np.arange(n, dtype=np.float64), float(eta), schedule), (n,))
    logs = np.concatenate([[0.0], np.cumsum(2.0 * np.log(np.abs(1.0 - etas * float(lam))))])
    return np.exp(logs[k])


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
