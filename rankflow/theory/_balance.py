# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T4–T7: the balance D = AᵀA − BᵀB under gradient flow, GD, the stochastic flow and
the momentum flow."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._common import Scalar, balance, decay_factor, float_dtype, outer_scale

# --- T4: gradient flow -------------------------------------------------------------------


def gf_balance(
    D0: Float[Array, "r r"], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T r r"]:
    """T4: ``D(t) = e^{−2ηλt} D(0)`` under gradient flow, for any loss.

    ``t`` in steps, scalar or any shape (the result has shape ``t.shape + (r, r)``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gf_balance
      >>> D0 = jnp.array([[1.0, 0.5], [0.5, -2.0]])
      >>> D = gf_balance(D0, 0.5, 0.1, jnp.array([0.0, 10.0]))
      >>> D.shape, bool(jnp.allclose(D[0], D0))  # D(0) at t = 0
      ((2, 2, 2), True)
      >>> round(float(D[1, 0, 0] / D0[0, 0]), 4)  # e^{−2ηλt} = e^{−1} at t = 10
      0.3679
    """
    D0 = jnp.asarray(D0)
    return outer_scale(decay_factor(eta, lam, t, D0.dtype), D0)


def gf_balance_gap(
    gap0: Float[ArrayLike, "*S"], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T *S"]:
    """T4: ``‖D(t)‖ = e^{−2ηλt}‖D(0)‖`` (any norm of D, e.g. ``balance_gap``, or
    ``balance_trace``). Shape ``t.shape + gap0.shape``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gf_balance, gf_balance_gap
      >>> D0 = jnp.array([[3.0, 0.0], [0.0, -4.0]])  # ‖D(0)‖_F = 5
      >>> gap = gf_balance_gap(5.0, 0.5, 0.1, 10.0)
      >>> round(float(gap), 4)  # 5e^{−1}
      1.8394
      >>> bool(jnp.isclose(gap, jnp.linalg.norm(gf_balance(D0, 0.5, 0.1, 10.0))))
      True
    """
    gap0 = jnp.asarray(gap0, float_dtype(gap0))
    return outer_scale(decay_factor(eta, lam, t, gap0.dtype), gap0)


def gf_loss_gap_bound(
    D0_nuclear: Float[ArrayLike, ""], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T"]:
    """T4 with T2: ``0 ≤ L_L2 − L_* ≤ (λ/2) e^{−2ηλt} ‖D(0)‖_*`` under gradient flow.

    ``D0_nuclear`` is ``‖D(0)‖_*`` (the ``balance_nuclear`` column at t = 0); the
    result is in loss units (λ included), shape ``t.shape``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, gf_loss_gap_bound, nuclear_norm, t1_gap
      >>> A, B = 2 * jnp.ones((1, 1)), jnp.ones((1, 1)) / 2  # ‖D(0)‖_* = 4 − ¼
      >>> bound = gf_loss_gap_bound(nuclear_norm(balance(A, B)), 0.5, 0.1, jnp.array([0.0, 10.0]))
      >>> [round(float(b), 4) for b in bound]  # (λ/2)·3.75, then times e^{−1}
      [0.1875, 0.069]
      >>> bool(0.1 * t1_gap(A, B) <= bound[0])  # L_L2 − L_* = λ·t1_gap at t = 0
      True
    """
    D0_nuclear = jnp.asarray(D0_nuclear, float_dtype(D0_nuclear))
    dtype = D0_nuclear.dtype
    return 0.5 * jnp.asarray(lam, dtype) * decay_factor(eta, lam, t, dtype) * D0_nuclear


def gf_contraction(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T4: ``e^{−2ηλ}``, the factor by which GF contracts D in one step of time.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gd_contraction, gf_balance, gf_contraction
      >>> round(float(gf_contraction(0.1, 0.5)), 4), round(float(gd_contraction(0.1, 0.5)), 4)
      (0.9048, 0.9025)
      >>> D = gf_balance(jnp.ones((1, 1)), 0.1, 0.5, 1.0)  # D(1) from D(0) = 1
      >>> bool(jnp.isclose(D[0, 0], gf_contraction(0.1, 0.5)))
      True
    """
    return jnp.exp(-2.0 * jnp.asarray(eta) * jnp.asarray(lam))


def gf_balance_rate(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T4: ``2ηλ``, the exponential rate (per step) at which ``‖D‖`` decays under GF.

    Compare with :func:`fit_rate` of a ``balance_gap`` column.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gf_balance_rate, gf_contraction
      >>> round(float(gf_balance_rate(0.1, 0.5)), 4)  # 2ηλ
      0.1
      >>> round(float(-jnp.log(gf_contraction(0.1, 0.5))), 4)
      0.1
    """
    return 2.0 * jnp.asarray(eta) * jnp.asarray(lam)


# --- T5: gradient descent ----------------------------------------------------------------


def gd_balance_step(
    A: Float[Array, "m r"],
    B: Float[Array, "n r"],
    G: Float[Array, "m n"],
    eta: Scalar,
    lam: Scalar,
) -> Float[Array, "r r"]:
    """T5: the balance after one GD step ``θ ← θ − η(∇L + λθ)`` from ``(A, B)``, exactly.

    ``D_{k+1} = (1−ηλ)² D_k + η² (Bᵀ Gᵀ G B − Aᵀ G Gᵀ A)`` with ``G = ∇_W L(ABᵀ)``
    (m×n), ``D_k = AᵀA − BᵀB``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, gd_balance_step
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> G, eta, lam = A @ B.T - jnp.eye(2), 0.1, 0.5  # ∇_W of ½‖W − I‖²
      >>> A1, B1 = A - eta * (G @ B + lam * A), B - eta * (G.T @ A + lam * B)  # one GD step
      >>> bool(jnp.allclose(balance(A1, B1), gd_balance_step(A, B, G, eta, lam), atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    GB = G @ B
    GtA = G.T @ A
    return (1.0 - eta * lam) ** 2 * balance(A, B) + eta**2 * (GB.T @ GB - GtA.T @ GtA)


def gd_contraction(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T5: ``(1 − ηλ)²``, the per-step contraction of D under GD up to the O(η²) term;
    ``gf_contraction(eta, lam) + O(η²)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gd_balance_step, gd_contraction
      >>> round(float(gd_contraction(0.1, 0.5)), 4)  # (1 − 0.05)²
      0.9025
      >>> A, B, G = jnp.array([[2.0]]), jnp.array([[1.0]]), jnp.zeros((1, 1))  # D = 3, G = 0
      >>> round(float(gd_balance_step(A, B, G, 0.1, 0.5)[0, 0] / 3.0), 4)
      0.9025
    """
    return (1.0 - jnp.asarray(eta) * jnp.asarray(lam)) ** 2


def gd_balance_rate(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T5: ``−log (1 − ηλ)²``, the per-step exponential rate of the leading term of T5
    (``2ηλ + O((ηλ)²)``); infinite at ``ηλ = 1``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gd_balance_rate, gd_contraction
      >>> round(float(gd_balance_rate(0.1, 0.5)), 4)  # 2ηλ = 0.1 plus O((ηλ)²)
      0.1026
      >>> round(float(-jnp.log(gd_contraction(0.1, 0.5))), 4), float(gd_balance_rate(1.0, 1.0))
      (0.1026, inf)
    """
    return -2.0 * jnp.log(jnp.abs(1.0 - jnp.asarray(eta) * jnp.asarray(lam)))


def gd_rate_bracket(eta: ArrayLike, lam: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """T5 *(derived)*: the bracket of GD's late balancing rate, over ``2ηλ``.

    Near a balanced minimum the η² term of T5 is ``−η²g²D`` along each direction, with
    ``0 ≤ g² ≤ λ²`` (at a minimum ``GB = −λA`` and ``GᵀA = −λB``, so a direction moving
    along the symmetry orbit ``(AM, BM⁻ᵀ)`` has ``g = λ``; one with residual ``|g| < λ``
    less). The per-step contraction therefore lies between ``1 − 2ηλ`` and ``(1 − ηλ)²``,
    and the rate ``−log(contraction)`` between ``−log(1−ηλ)²`` and ``−log(1−2ηλ)``.

    Returns ``(low, high)``: both divided by ``2ηλ`` (numpy; both ``1 + O(ηλ)``, so the
    gradient-flow ratio 1 lies below ``low`` once ηλ is not small).

    Examples:
      >>> from rankflow.theory import gd_rate_bracket
      >>> low, high = gd_rate_bracket(0.1, 0.5)  # ηλ = 0.05
      >>> round(float(low), 6), round(float(high), 6)  # −log(1 − ηλ)², −log(1 − 2ηλ), over 2ηλ
      (1.025866, 1.053605)
    """
    x = np.asarray(eta, np.float64) * np.asarray(lam, np.float64)
    return -np.log((1.0 - x) ** 2) / (2 * x), -np.log(1.0 - 2 * x) / (2 * x)


# --- T6: stochastic gradient flow ---------------------------------------------------------


def _sgf_drift_integral(eta, lam, t, dtype):
    """``∫_0^t e^{−2ηλ(t−s)} ds = (1 − e^{−2ηλt})/(2ηλ)``, equal to t at λ = 0.

    Written as ``t·φ(2ηλt)`` with ``φ(x) = −expm1(−x)/x``; for ``|x| < 10⁻³`` its Taylor
    series ``1 − x/2 + x²/6 − x³/24`` instead, so that value and derivatives are right
    and NaN-free at and near λ = 0.
    """
    eta, lam, t = (jnp.asarray(x, dtype) for x in (eta, lam, t))
    x = 2.0 * eta * lam * t
    small = jnp.abs(x) < 1e-3
    safe_x = jnp.where(small, 1.0, x)
    series = 1.0 - x / 2.0 + x**2 / 6.0 - x**3 / 24.0
    phi = jnp.where(small, series, -jnp.expm1(-safe_x) / safe_x)
    return t * phi


def _sgf_noise_term(eta, lam, sigma, excess, t, dtype):
    """T6's noise term, ``η²σ²·excess·∫_0^t e^{−2ηλ(t−s)} ds`` (excess: m − n per diagonal
    entry of E[D], r(m − n) for its trace), in ``dtype``."""
    eta_, sigma_ = jnp.asarray(eta, dtype), jnp.asarray(sigma, dtype)
    drive = eta_**2 * sigma_**2 * jnp.asarray(excess, dtype)
    return drive * _sgf_drift_integral(eta, lam, t, dtype)


def sgf_mean_balance(
    D0: Float[Array, "r r"],
    eta: Scalar,
    lam: Scalar,
    sigma: Scalar,
    m: int,
    n: int,
    t: Float[ArrayLike, "*T"],
) -> Float[Array, "*T r r"]:
    """T6: ``E[D(t)]`` under the stochastic gradient flow ``dθ = −η(∇L + λθ)dt + ησ dW``.

    ``E[D(t)] = e^{−2ηλt} D(0) + (ησ²(m−n)/(2λ)) (1 − e^{−2ηλt}) I_r`` for any loss,
    with the limit ``D(0) + η²σ²(m−n) t I_r`` at λ = 0 (computed without NaN).
    ``A`` is m×r and ``B`` n×r; ``t`` in steps, any shape (result ``t.shape + (r, r)``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import sgf_mean_balance
      >>> D0 = jnp.array([[1.0, 0.0], [0.0, -1.0]])
      >>> mean = sgf_mean_balance(D0, 0.1, 0.5, 0.2, 3, 2, jnp.array([0.0, 1e4]))  # m = 3, n = 2
      >>> bool(jnp.allclose(mean[0], D0))  # t = 0: the start
      True
      >>> [round(float(x), 4) for x in jnp.diag(mean[1])]  # t → ∞: ησ²(m − n)/(2λ)·I
      [0.004, 0.004]
      >>> round(float(sgf_mean_balance(D0, 0.1, 0.0, 0.2, 3, 2, 10.0)[0, 0]), 4)  # λ = 0: η²σ²t
      1.004
    """
    D0 = jnp.asarray(D0)
    floor = _sgf_noise_term(eta, lam, sigma, m - n, t, D0.dtype)
    identity = jnp.eye(D0.shape[-1], dtype=D0.dtype)
    return gf_balance(D0, eta, lam, t) + outer_scale(floor, identity)


def sgf_mean_balance_trace(
    trace0: Float[ArrayLike, ""],
    eta: Scalar,
    lam: Scalar,
    sigma: Scalar,
    m: int,
    n: int,
    r: int,
    t: Float[ArrayLike, "*T"],
) -> Float[Array, "*T"]:
    """T6: ``E[tr D(t)] = E[‖A‖_F² − ‖B‖_F²]`` (the ``balance_trace`` column), i.e.
    ``e^{−2ηλt} tr D(0) + r (ησ²(m−n)/(2λ)) (1 − e^{−2ηλt})``; shape ``t.shape``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import sgf_mean_balance, sgf_mean_balance_trace
      >>> D0 = jnp.array([[2.0, 0.5], [0.5, 1.0]])  # tr D(0) = 3, r = 2
      >>> trace = sgf_mean_balance_trace(3.0, 0.1, 0.5, 0.2, 3, 2, 2, 5.0)
      >>> round(float(trace), 4)  # 3e^{−0.5} + 2·0.004·(1 − e^{−0.5})
      1.8227
      >>> bool(jnp.isclose(trace, jnp.trace(sgf_mean_balance(D0, 0.1, 0.5, 0.2, 3, 2, 5.0))))
      True
    """
    trace0 = jnp.asarray(trace0, float_dtype(trace0))
    dtype = trace0.dtype
    noise = _sgf_noise_term(eta, lam, sigma, (m - n) * r, t, dtype)
    return decay_factor(eta, lam, t, dtype) * trace0 + noise


def sgf_floor(
    eta: ArrayLike,
    sigma: ArrayLike,
    lam: ArrayLike,
    r: int,
    m: int,
    n: int,
    size: ArrayLike,
    trace: ArrayLike,
) -> np.ndarray:
    """T6 *(derived, Itô)*: the stationary ``E‖D‖_F²`` of the stochastic gradient flow
    (parameter noise), ``ησ²[(r+1)·size + (m − n)·trace]/(2λ)``.

    ``size`` is ``E[‖A‖_F² + ‖B‖_F²]`` and ``trace`` is ``E[tr D]`` at stationarity
    (both measured); for ``m = n`` the second term vanishes. From Itô's formula for
    ``‖D‖_F²``: ``d E‖D‖² = (−4ηλE‖D‖² + 2η²σ²[(r+1)E(‖A‖²+‖B‖²) + (m−n)E tr D])dt``.
    Numpy, any broadcastable shapes.

    Examples:
      >>> from rankflow.theory import sgf_floor
      >>> round(float(sgf_floor(0.1, 0.2, 0.5, r=2, m=3, n=3, size=2.0, trace=0.3)), 6)  # ησ²·3·2/1
      0.024
      >>> round(float(sgf_floor(0.1, 0.2, 0.5, r=2, m=4, n=3, size=2.0, trace=0.3)), 6)  # + ησ²·0.3
      0.0252
    """
    eta, sigma, lam = (np.asarray(x, np.float64) for x in (eta, sigma, lam))
    size, trace = np.asarray(size, np.float64), np.asarray(trace, np.float64)
    return eta * sigma**2 * ((r + 1) * size + (m - n) * trace) / (2 * lam)


# --- T7: momentum flow, decoupled decay ---------------------------------------------------


class MomentumBalanceRates(NamedTuple):
    """The T7 quantities at one state of the decoupled momentum flow (all r×r).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import momentum_balance_rates
      >>> A, B, M = jnp.array([[2.0]]), jnp.array([[1.0]]), jnp.zeros((1, 1))  # no momentum
      >>> rates = momentum_balance_rates(A, B, M, M, 0.1, 0.5, 0.9)
      >>> rates._fields
      ('D', 'E', 'F', 'dD_dt', 'dE_dt')
      >>> float(rates.D[0, 0]), float(rates.E[0, 0]), round(float(rates.dD_dt[0, 0]), 4)  # −2ηλD
      (3.0, 0.0, -0.3)
    """

    D: Float[Array, "r r"]  # AᵀA − BᵀB
    E: Float[Array, "r r"]  # M_AᵀA + AᵀM_A − M_BᵀB − BᵀM_B
    F: Float[Array, "r r"]  # M_AᵀM_A − M_BᵀM_B
    dD_dt: Float[Array, "r r"]  # −2ηλ D − η E
    dE_dt: Float[Array, "r r"]  # −(μ + ηλ) E − 2η F


def momentum_balance_rates(
    A: Float[Array, "m r"],
    B: Float[Array, "n r"],
    M_A: Float[Array, "m r"],
    M_B: Float[Array, "n r"],
    eta: Scalar,
    lam: Scalar,
    mu: Scalar,
) -> MomentumBalanceRates:
    """T7: D, E, F and their exact time derivatives (per step) under the decoupled
    momentum flow ``dM/dt = μ(∇L − M)``, ``dθ/dt = −η(M + λθ)``, for any loss.

    ``dD/dt = −2ηλ D − η E`` and ``dE/dt = −(μ + ηλ) E − 2η F`` (F has no closed
    equation). ``M_A``, ``M_B`` are the momenta of A and B.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.theory import balance, momentum_balance_rates
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> M_A, M_B = jnp.array([[0.2, -0.1], [0.0, 0.3]]), jnp.array([[-0.5, 0.1], [0.2, 0.2]])
      >>> eta, lam, mu = 0.1, 0.5, 0.9
      >>> rates = momentum_balance_rates(A, B, M_A, M_B, eta, lam, mu)
      >>> _, dD = jax.jvp(balance, (A, B), (-eta * (M_A + lam * A), -eta * (M_B + lam * B)))
      >>> bool(jnp.allclose(rates.dD_dt, dD, atol=1e-6))  # d/dt (AᵀA − BᵀB) along dθ = −η(M + λθ)
      True
    """
    dtype = float_dtype(A)
    eta, lam, mu = (jnp.asarray(x, dtype) for x in (eta, lam, mu))
    D = balance(A, B)
    MA_A = M_A.T @ A
    MB_B = M_B.T @ B
    E = MA_A + MA_A.T - MB_B - MB_B.T
    F = balance(M_A, M_B)
    dD_dt = -2.0 * eta * lam * D - eta * E
    dE_dt = -(mu + eta * lam) * E - 2.0 * eta * F
    return MomentumBalanceRates(D, E, F, dD_dt, dE_dt)


def momentum_orbit_rate(eta: ArrayLike, lam: ArrayLike, mu: ArrayLike) -> np.ndarray:
    """T7 *(derived)*: the late balancing rate of the decoupled momentum flow near a
    balanced minimum, over ``2ηλ``.

    Linearised along the symmetry orbit ``(AM, BM⁻ᵀ)`` (the only direction in which D
    moves at first order without changing W; there ``GB = −λA``), the orbit coordinate
    δ and its momentum m obey ``δ' = −η(m + λδ)``, ``m' = μ(λδ − m)``; D decays at the
    slow root of that 2×2 system, ``2ηλ·[(1+x) − √((1+x)² − 8x)]/(4x)`` with
    ``x = ηλ/μ``, i.e. ``2ηλ(1 + x + O(x²))`` (the real part where the roots are
    complex). Numpy, broadcasting.

    Examples:
      >>> from rankflow.theory import momentum_orbit_rate
      >>> round(float(momentum_orbit_rate(0.1, 0.5, 0.5)), 6)  # x = ηλ/μ = 0.1: 1 + x + O(x²)
      1.149219
      >>> round(float(momentum_orbit_rate(0.1, 0.5, 1e6)), 6)  # μ → ∞: gradient flow's 2ηλ
      1.0
    """
    x = np.asarray(eta, np.float64) * np.asarray(lam, np.float64) / np.asarray(mu, np.float64)
    disc = (1 + x) ** 2 - 8 * x
    return ((1 + x) - np.sqrt(np.maximum(disc, 0.0))) / (4 * x)
