# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""The exact predictions of THEORY.md, one place per result.

Everything here is a pure, jittable function of ``jax.numpy`` arrays that keeps the
dtype of its main array argument (scalars ``eta``, ``lam``, ``t`` … are cast to it),
except the rate fitting of T8, which is numpy post-processing of results tables.
Time ``t`` is in optimizer steps: every flow carries the learning rate η inside, so one
GD step is one Euler step of size 1 (THEORY.md, "Setting and conventions").

Where each item of THEORY.md lives:

- setting: :func:`balance` (``D = AᵀA − BᵀB``), :func:`l2_penalty`
  (``½(‖A‖_F² + ‖B‖_F²)``), :func:`nuclear_norm` (``‖W‖_*``).
- T1, ``½(‖A‖² + ‖B‖²) − ‖ABᵀ‖_* ≥ 0``, zero iff balanced: :func:`t1_gap`.
- T2, ``t1_gap ≤ ½‖AᵀA − BᵀB‖_*``: :func:`t2_bound`.
- T3, the minimiser of ``L(W) + λ‖W‖_*`` for convex L: :func:`svt`,
  :func:`prox_gradient`, :func:`nuclear_minimiser`, :func:`lipschitz_constant`.
- T4, GF: ``D(t) = e^{−2ηλt} D(0)`` and ``L_L2 − L_* ≤ (λ/2)e^{−2ηλt}‖D(0)‖_*``:
  :func:`gf_balance`, :func:`gf_balance_gap`, :func:`gf_loss_gap_bound`,
  :func:`gf_contraction`, :func:`gf_balance_rate`.
- T5, GD: ``D_{k+1} = (1−ηλ)² D_k + η²(BᵀGᵀGB − AᵀGGᵀA)``: :func:`gd_balance_step`,
  :func:`gd_contraction`, :func:`gd_balance_rate`; the late rate near a balanced
  minimum: :func:`gd_rate_bracket`.
- T6, SGF: ``E[D(t)]`` in closed form: :func:`sgf_mean_balance`,
  :func:`sgf_mean_balance_trace`; the stationary ``E‖D‖_F²``: :func:`sgf_floor`.
- T7, decoupled momentum flow, ``dD/dt`` and ``dE/dt``: :func:`momentum_balance_rates`;
  the late rate near a balanced minimum: :func:`momentum_orbit_rate`.
- T8, rates and orders measured from simulations: :func:`fit_rate`,
  :func:`convergence_order`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

if TYPE_CHECKING:
    from .problems import Problem

__all__ = [
    "MomentumBalanceRates",
    "ProxGradientResult",
    "balance",
    "convergence_order",
    "fit_rate",
    "gd_balance_rate",
    "gd_balance_step",
    "gd_contraction",
    "gd_rate_bracket",
    "gf_balance",
    "gf_balance_gap",
    "gf_balance_rate",
    "gf_contraction",
    "gf_loss_gap_bound",
    "l2_penalty",
    "lipschitz_constant",
    "momentum_balance_rates",
    "momentum_orbit_rate",
    "nuclear_minimiser",
    "nuclear_norm",
    "prox_gradient",
    "sgf_mean_balance",
    "sgf_floor",
    "sgf_mean_balance_trace",
    "svt",
    "t1_gap",
    "t2_bound",
]

Scalar = Float[ArrayLike, ""]


# --- helpers -----------------------------------------------------------------------------


def _float_dtype(x: ArrayLike):
    """``x``'s dtype if it is floating, the default float dtype otherwise."""
    dtype = jnp.result_type(x)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _decay(eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"], dtype) -> Float[Array, "*T"]:
    """``e^{−2ηλt}``, the GF contraction of D after time t (any shape of t)."""
    eta, lam, t = (jnp.asarray(x, dtype) for x in (eta, lam, t))
    return jnp.exp(-2.0 * eta * lam * t)


def _outer_scale(c: Float[Array, "*T"], X: Float[Array, "*S"]) -> Float[Array, "*T *S"]:
    """``c[..., None, …] * X`` without implicit rank promotion: shape ``c.shape + X.shape``.

    Lets every formula take a scalar time or an array of times.
    """
    return jnp.reshape(c, c.shape + (1,) * X.ndim) * jnp.reshape(X, (1,) * c.ndim + X.shape)


def _frobenius(X: Array) -> Array:
    return jnp.sqrt(jnp.sum(X**2))


# --- the quantities of the setting --------------------------------------------------------


def balance(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, "r r"]:
    """The balance matrix ``D = AᵀA − BᵀB`` (r×r, symmetric)."""
    return A.T @ A - B.T @ B


def l2_penalty(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """``½(‖A‖_F² + ‖B‖_F²)``: the weight-decay penalty, per unit λ."""
    return 0.5 * (jnp.sum(A**2) + jnp.sum(B**2))


def nuclear_norm(W: Float[Array, "m n"]) -> Float[Array, ""]:
    """``‖W‖_*``: the sum of the singular values of W."""
    return jnp.sum(jnp.linalg.svd(W, compute_uv=False))


# --- T1, T2: L2 penalty versus nuclear norm ------------------------------------------------


def t1_gap(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """T1 (Proposition 3.1): ``½(‖A‖_F² + ‖B‖_F²) − ‖ABᵀ‖_*``.

    Non-negative, and zero exactly when ``AᵀA = BᵀB``. Equals ``(L_L2 − L_*)/λ``, the
    ``frob_minus_nuc`` column.
    """
    return l2_penalty(A, B) - nuclear_norm(A @ B.T)


def t2_bound(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """T2: ``½‖AᵀA − BᵀB‖_*``, an upper bound of :func:`t1_gap`.

    Attained (ratio 1) when ``B = 0``, when ``A = 0``, or more generally when the row
    spaces of A and B are orthogonal (then ``ABᵀ = 0``); on the rescaled balanced pairs
    ``(cA, B/c)`` the ratio is exactly ``|c² − 1|/(c² + 1)``. Near balance the gap is of
    second order in D while the bound is of first order, so the ratio tends to 0.
    """
    return 0.5 * jnp.sum(jnp.abs(jnp.linalg.eigvalsh(balance(A, B))))


# --- T3: the nuclear-norm problem ---------------------------------------------------------


def svt(W: Float[Array, "m n"], c: Scalar) -> Float[Array, "m n"]:
    """T3: singular-value soft-thresholding ``SVT_c(W) = U max(S − c, 0) Vᵀ``.

    The proximal operator of ``c‖·‖_*``: every singular value shrinks by ``c ≥ 0`` and
    those ``≤ c`` vanish.
    """
    U, S, Vt = jnp.linalg.svd(W, full_matrices=False)
    S = jnp.maximum(S - jnp.asarray(c, S.dtype), 0.0)
    return (U * S[None, :]) @ Vt


class ProxGradientResult(NamedTuple):
    """What :func:`prox_gradient` returns."""

    W: Float[Array, "m n"]  # the minimiser (the last iterate)
    iterations: Int[Array, ""]  # proximal steps taken
    converged: Bool[Array, ""]  # the relative change fell below tol before max_iters


def prox_gradient(
    grad_fn: Callable[[Float[Array, "m n"]], Float[Array, "m n"]],
    W0: Float[Array, "m n"],
    lam: Scalar,
    step: Scalar,
    *,
    max_iters: int = 10_000,
    tol: float = 1e-12,
    accelerated: bool = True,
) -> ProxGradientResult:
    """T3: minimise ``L(W) + λ‖W‖_*`` for convex, smooth L by proximal gradient.

    Iterates ``W ← SVT_{τλ}(Y − τ∇L(Y))`` (τ = ``step``, at most 1/Lipschitz(∇L)), with
    ``Y = W`` (ISTA) or, when ``accelerated``, Y the FISTA extrapolation of the last two
    iterates, restarted whenever the step goes against the momentum (adaptive restart,
    O'Donoghue & Candès 2015), which keeps linear convergence on strongly convex L.
    Stops when ``‖W_{k+1} − W_k‖_F ≤ tol · max(‖W_{k+1}‖_F, ‖W_k‖_F)`` or after
    ``max_iters`` steps, inside one ``jax.lax.while_loop`` (jittable; ``grad_fn``,
    ``max_iters``, ``tol`` and ``accelerated`` are static).

    Args:
      grad_fn: ``W ↦ ∇L(W)``, shape (m, n) to (m, n).
      W0: starting point, shape (m, n); its dtype is kept.
      lam: λ ≥ 0, the weight of the nuclear norm.
      step: τ > 0.
    Returns:
      A :class:`ProxGradientResult` ``(W, iterations, converged)``.
    """
    dtype = _float_dtype(W0)
    W0 = jnp.asarray(W0, dtype)
    lam = jnp.asarray(lam, dtype)
    step = jnp.asarray(step, dtype)
    one = jnp.asarray(1.0, dtype)

    def cond(state):
        k, _, _, _, change = state
        return (k < max_iters) & (change > tol)

    def body(state):
        k, W, Y, t, _ = state
        W_new = svt(Y - step * grad_fn(Y), step * lam)
        if accelerated:
            restart = jnp.vdot(Y - W_new, W_new - W) > 0
            t = jnp.where(restart, one, t)
            t_new = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t**2))
            Y_new = W_new + ((t - 1.0) / t_new) * (W_new - W)
        else:
            t_new, Y_new = t, W_new
        size = jnp.maximum(_frobenius(W_new), _frobenius(W))
        diff = _frobenius(W_new - W)
        # Both iterates zero: a fixed point of the prox map, hence converged.
        change = jnp.where(size > 0, diff / jnp.where(size > 0, size, one), 0.0)
        return k + 1, W_new, Y_new, t_new, change

    init = (jnp.asarray(0), W0, W0, one, jnp.asarray(jnp.inf, dtype))
    k, W, _, _, change = jax.lax.while_loop(cond, body, init)
    return ProxGradientResult(W, k, change <= tol)


def lipschitz_constant(problem: Problem, data: dict[str, Array]) -> Float[Array, ""]:
    """T3: the Lipschitz constant of ``∇L`` for a :class:`rankflow.problems.Problem`.

    The largest eigenvalue of the (constant) Hessian of the quadratic loss:
    ``diagonal``: 1; ``sensing``: ``‖X_mat‖_2²/N`` with ``X_mat`` the N×(mn) matrix of
    measurements; ``completion``: ``mn/N`` times the largest number of times one entry
    was observed; ``regression``: ``‖X‖_2²/N`` (1 up to rounding, X being whitened).
    ``custom`` losses have no known constant (a ``ValueError``).
    """
    kind = problem.kind
    if kind == "diagonal":
        return jnp.asarray(1.0, _float_dtype(data["target"]))
    if kind == "sensing":
        X = data["X"]
        N = X.shape[0]
        return jnp.linalg.norm(jnp.reshape(X, (N, -1)), 2) ** 2 / N
    if kind == "completion":
        m, n = problem.shape
        rows, cols = data["rows"], data["cols"]
        dtype = _float_dtype(data["y"])
        counts = jnp.zeros((m, n), dtype).at[rows, cols].add(1.0)
        return (m * n / rows.shape[0]) * jnp.max(counts)
    if kind == "regression":
        X = data["X"]
        return jnp.linalg.norm(X, 2) ** 2 / X.shape[1]
    raise ValueError(f"lipschitz_constant: no known constant for problem kind {kind!r}")


def nuclear_minimiser(
    problem: Problem,
    data: dict[str, Array],
    lam: Scalar,
    *,
    W0: Float[Array, "m n"] | None = None,
    step: Scalar | None = None,
    max_iters: int = 10_000,
    tol: float = 1e-12,
    accelerated: bool = True,
) -> ProxGradientResult:
    """T3: the minimiser of ``L_*(W) = problem.loss(W, data) + λ‖W‖_*``.

    :func:`prox_gradient` with ``∇L`` from ``jax.grad(problem.loss)``, started at
    ``W0`` (default zero) with step ``1/lipschitz_constant(problem, data)`` unless
    ``step`` is given (it must be, for ``custom`` losses). For a convex L (every kind
    but possibly ``custom``) this is the unique minimiser when L is strongly convex.

    Returns:
      A :class:`ProxGradientResult` ``(W, iterations, converged)``; ``W`` is (m, n).
    """
    if W0 is None:
        dtype = _float_dtype(data["target"]) if "target" in data else jnp.result_type(float)
        W0 = jnp.zeros(problem.shape, dtype)
    if step is None:
        step = 1.0 / lipschitz_constant(problem, data)
    grad_fn = jax.grad(lambda W: problem.loss(W, data))
    return prox_gradient(
        grad_fn, W0, lam, step, max_iters=max_iters, tol=tol, accelerated=accelerated
    )


# --- T4: gradient flow -------------------------------------------------------------------


def gf_balance(
    D0: Float[Array, "r r"], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T r r"]:
    """T4: ``D(t) = e^{−2ηλt} D(0)`` under gradient flow, for any loss.

    ``t`` in steps, scalar or any shape (the result has shape ``t.shape + (r, r)``).
    """
    D0 = jnp.asarray(D0)
    return _outer_scale(_decay(eta, lam, t, D0.dtype), D0)


def gf_balance_gap(
    gap0: Float[ArrayLike, "*S"], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T *S"]:
    """T4: ``‖D(t)‖ = e^{−2ηλt}‖D(0)‖`` (any norm of D, e.g. ``balance_gap``, or
    ``balance_trace``). Shape ``t.shape + gap0.shape``."""
    gap0 = jnp.asarray(gap0, _float_dtype(gap0))
    return _outer_scale(_decay(eta, lam, t, gap0.dtype), gap0)


def gf_loss_gap_bound(
    D0_nuclear: Float[ArrayLike, ""], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> Float[Array, "*T"]:
    """T4 with T2: ``0 ≤ L_L2 − L_* ≤ (λ/2) e^{−2ηλt} ‖D(0)‖_*`` under gradient flow.

    ``D0_nuclear`` is ``‖D(0)‖_*`` (the ``balance_nuclear`` column at t = 0); the
    result is in loss units (λ included), shape ``t.shape``.
    """
    D0_nuclear = jnp.asarray(D0_nuclear, _float_dtype(D0_nuclear))
    dtype = D0_nuclear.dtype
    return 0.5 * jnp.asarray(lam, dtype) * _decay(eta, lam, t, dtype) * D0_nuclear


def gf_contraction(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T4: ``e^{−2ηλ}``, the factor by which GF contracts D in one step of time."""
    return jnp.exp(-2.0 * jnp.asarray(eta) * jnp.asarray(lam))


def gf_balance_rate(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T4: ``2ηλ``, the exponential rate (per step) at which ``‖D‖`` decays under GF.

    Compare with :func:`fit_rate` of a ``balance_gap`` column.
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
    """
    dtype = _float_dtype(A)
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    GB = G @ B
    GtA = G.T @ A
    return (1.0 - eta * lam) ** 2 * balance(A, B) + eta**2 * (GB.T @ GB - GtA.T @ GtA)


def gd_contraction(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T5: ``(1 − ηλ)²``, the per-step contraction of D under GD up to the O(η²) term;
    ``gf_contraction(eta, lam) + O(η²)``."""
    return (1.0 - jnp.asarray(eta) * jnp.asarray(lam)) ** 2


def gd_balance_rate(eta: Scalar, lam: Scalar) -> Float[Array, ""]:
    """T5: ``−log (1 − ηλ)²``, the per-step exponential rate of the leading term of T5
    (``2ηλ + O((ηλ)²)``); infinite at ``ηλ = 1``."""
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
    """
    D0 = jnp.asarray(D0)
    dtype = D0.dtype
    eta_, sigma_ = jnp.asarray(eta, dtype), jnp.asarray(sigma, dtype)
    drive = eta_**2 * sigma_**2 * jnp.asarray(m - n, dtype)
    floor = drive * _sgf_drift_integral(eta, lam, t, dtype)
    identity = jnp.eye(D0.shape[-1], dtype=dtype)
    return gf_balance(D0, eta, lam, t) + _outer_scale(floor, identity)


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
    ``e^{−2ηλt} tr D(0) + r (ησ²(m−n)/(2λ)) (1 − e^{−2ηλt})``; shape ``t.shape``."""
    trace0 = jnp.asarray(trace0, _float_dtype(trace0))
    dtype = trace0.dtype
    eta_, sigma_ = jnp.asarray(eta, dtype), jnp.asarray(sigma, dtype)
    drive = eta_**2 * sigma_**2 * jnp.asarray((m - n) * r, dtype)
    return _decay(eta, lam, t, dtype) * trace0 + drive * _sgf_drift_integral(eta, lam, t, dtype)


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
    """
    eta, sigma, lam = (np.asarray(x, np.float64) for x in (eta, sigma, lam))
    size, trace = np.asarray(size, np.float64), np.asarray(trace, np.float64)
    return eta * sigma**2 * ((r + 1) * size + (m - n) * trace) / (2 * lam)


# --- T7: momentum flow, decoupled decay ---------------------------------------------------


class MomentumBalanceRates(NamedTuple):
    """The T7 quantities at one state of the decoupled momentum flow (all r×r)."""

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
    """
    dtype = _float_dtype(A)
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
    """
    x = np.asarray(eta, np.float64) * np.asarray(lam, np.float64) / np.asarray(mu, np.float64)
    disc = (1 + x) ** 2 - 8 * x
    return ((1 + x) - np.sqrt(np.maximum(disc, 0.0))) / (4 * x)


# --- T8: rates and orders from simulations (numpy post-processing) -------------------------


def _ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y against x and its standard error (NaN for 2 points)."""
    k = x.size
    if k < 2:
        raise ValueError(f"need at least 2 usable points to fit a slope, got {k}")
    xc = x - x.mean()
    sxx = float(np.sum(xc**2))
    if sxx == 0.0:
        raise ValueError("cannot fit a slope: all abscissae are equal")
    slope = float(np.sum(xc * (y - y.mean())) / sxx)
    if k == 2:
        return slope, float("nan")
    residuals = y - y.mean() - slope * xc
    return slope, float(np.sqrt(np.sum(residuals**2) / (k - 2) / sxx))


def fit_rate(
    t: ArrayLike,
    y: ArrayLike,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
) -> tuple[float, float]:
    """T8 (and T4–T7 measured): the exponential decay rate of ``y(t) ≈ e^{a − rate·t}``.

    Least squares of ``log y`` on ``t`` over the points with ``t_min ≤ t ≤ t_max`` and
    finite ``y > 0`` (others are dropped). ``t`` in steps, so the rate is per step
    (compare with :func:`gf_balance_rate`). Not jittable: numpy post-processing;
    accepts numpy or jax arrays.

    Returns:
      ``(rate, stderr)`` as Python floats; ``stderr`` is the standard error of the slope
      from the residuals (NaN with only two points).
    """
    t = np.asarray(t, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    if t.shape != y.shape:
        raise ValueError(f"fit_rate: t and y differ in size: {t.size} vs {y.size}")
    keep = np.isfinite(t) & np.isfinite(y) & (y > 0)
    if t_min is not None:
        keep &= t >= t_min
    if t_max is not None:
        keep &= t <= t_max
    slope, stderr = _ols_slope(t[keep], np.log(y[keep]))
    return -slope, stderr


def convergence_order(h: ArrayLike, err: ArrayLike) -> tuple[float, float]:
    """T8: the order p of ``err ≈ C hᵖ``: least-squares slope of ``log err`` on ``log h``.

    Points with non-finite or non-positive h or err are dropped. For GD against GF
    (T8), h is η (at a fixed horizon ηk) and p should be 1.

    Returns:
      ``(order, stderr)`` as Python floats (stderr NaN with only two points).
    """
    h = np.asarray(h, np.float64).ravel()
    err = np.asarray(err, np.float64).ravel()
    if h.shape != err.shape:
        raise ValueError(f"convergence_order: h and err differ in size: {h.size} vs {err.size}")
    keep = np.isfinite(h) & np.isfinite(err) & (h > 0) & (err > 0)
    return _ols_slope(np.log(h[keep]), np.log(err[keep]))
