# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T9–T10: the balance D = AᵀA − BᵀB under SGD's own noise, which enters through the
gradient of W (``G + ξ``, so the factors see ``ξB`` and ``ξᵀA``), not the parameters.

Unlike T6's parameter noise, this noise leaves D without a martingale part: the dW
terms cancel in D exactly as the loss terms do in T4, and only the Itô correction
(the quadratic variation of ``ξB`` and ``ξᵀA``) survives. For m = n that correction is
``−η²σ²m D``: gradient noise speeds balancing and leaves no floor.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._balance import gd_balance_step, gd_contraction
from ._common import Scalar, balance, float_dtype, outer_scale

# --- T9: isotropic gradient-space noise ---------------------------------------------------


def _isotropic_noise_term(A, B, sigma, dtype):
    """``σ²(m BᵀB − n AᵀA)`` (r×r): ``E[BᵀξᵀξB − AᵀξξᵀA]`` for ξ with i.i.d. N(0, σ²)
    entries, since ``E[ξᵀξ] = mσ² I_n`` and ``E[ξξᵀ] = nσ² I_m``."""
    m, n = A.shape[0], B.shape[0]
    sigma = jnp.asarray(sigma, dtype)
    return sigma**2 * (m * (B.T @ B) - n * (A.T @ A))


def gradient_noise_balance_drift(
    A: Float[Array, "m r"], B: Float[Array, "n r"], eta: Scalar, lam: Scalar, sigma: Scalar
) -> Float[Array, "r r"]:
    """T9: the pathwise drift ``dD/dt`` of D under gradient-space noise, for any loss.

    For ``dA = −η(GB + λA)dt − ησ dΞ B``, ``dB = −η(GᵀA + λB)dt − ησ dΞᵀA`` (Ξ an m×n
    Brownian matrix with independent entries), Itô's formula gives
    ``dD = [−2ηλD + η²σ²(m BᵀB − n AᵀA)] dt`` with no dΞ term: both the G terms and the
    dΞ terms cancel between AᵀA and BᵀB, so G is not an argument. ``A`` is m×r, ``B``
    n×r; the result r×r. Contrast T6's parameter noise, whose Itô term is
    ``η²σ²(m − n) I_r`` and whose dW terms do not cancel.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, gradient_noise_balance_drift
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> drift = gradient_noise_balance_drift(A, B, 0.1, 0.5, 0.2)  # m = n = 2
      >>> rate = 2 * 0.1 * 0.5 + 0.1**2 * 0.2**2 * 2  # 2ηλ + η²σ²m
      >>> bool(jnp.allclose(drift, -rate * balance(A, B), atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    return -2.0 * eta * lam * balance(A, B) + eta**2 * _isotropic_noise_term(A, B, sigma, dtype)


def gradient_noise_balance(
    D0: Float[Array, "r r"],
    eta: Scalar,
    lam: Scalar,
    sigma: Scalar,
    m: int,
    t: Float[ArrayLike, "*T"],
) -> Float[Array, "*T r r"]:
    """T9 at m = n: ``D(t) = e^{−(2ηλ + η²σ²m)t} D(0)`` on every path, for any loss.

    At m = n the drift is ``−(2ηλ + η²σ²m) D`` (``m BᵀB − n AᵀA = −mD``), a closed linear
    equation, so D is deterministic although A and B are not. ``m`` is the common size
    of W (m×m); ``t`` in steps, any shape (result ``t.shape + (r, r)``); equal to
    :func:`gf_balance` at σ = 0.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gf_balance, gradient_noise_balance
      >>> D0 = jnp.array([[1.0, 0.5], [0.5, -2.0]])
      >>> D = gradient_noise_balance(D0, 0.1, 0.5, 0.2, 2, 10.0)  # m = 2
      >>> round(float(D[0, 0]), 4)  # e^{−(0.1 + 0.0008)·10}
      0.3649
      >>> noiseless = gradient_noise_balance(D0, 0.1, 0.5, 0.0, 2, 10.0)
      >>> bool(jnp.allclose(noiseless, gf_balance(D0, 0.1, 0.5, 10.0)))  # σ = 0: T4
      True
    """
    D0 = jnp.asarray(D0)
    dtype = D0.dtype
    eta, lam, sigma, t = (jnp.asarray(x, dtype) for x in (eta, lam, sigma, t))
    rate = 2.0 * eta * lam + eta**2 * sigma**2 * m
    return outer_scale(jnp.exp(-rate * t), D0)


def gradient_noise_step_mean(
    A: Float[Array, "m r"],
    B: Float[Array, "n r"],
    G: Float[Array, "m n"],
    eta: Scalar,
    lam: Scalar,
    sigma: Scalar,
) -> Float[Array, "r r"]:
    """T9, discrete: ``E_ξ[D']`` after one step ``θ ← θ − η(∇_θ + λθ)`` with the noisy
    gradient ``G + ξ``, ξ an m×n matrix of i.i.d. N(0, σ²) entries.

    T5 with ``G + ξ`` is exact for every ξ; its mean over ξ is
    ``(1−ηλ)²D + η²(BᵀGᵀGB − AᵀGGᵀA) + η²σ²(m BᵀB − n AᵀA)`` (the terms linear in ξ have
    mean zero). ``A`` m×r, ``B`` n×r, ``G = ∇_W L(ABᵀ)`` m×n; the result r×r.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gd_balance_step, gradient_noise_step_mean
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> G, sigma = A @ B.T - jnp.eye(2), 0.2
      >>> e = jnp.eye(4).reshape(4, 2, 2)  # the m×n unit matrices e_ij
      >>> xis = [s * sigma * 2.0 * e[k] for k in range(4) for s in (1, -1)]  # ±σ√(mn)·e_ij
      >>> steps = [gd_balance_step(A, B, G + xi, 0.1, 0.5) for xi in xis]  # T5 with G + ξ
      >>> mean = gradient_noise_step_mean(A, B, G, 0.1, 0.5, sigma)  # ξ's moments as N(0, σ²)
      >>> bool(jnp.allclose(sum(steps) / 8, mean, atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    eta_ = jnp.asarray(eta, dtype)
    noise = eta_**2 * _isotropic_noise_term(A, B, sigma, dtype)
    return gd_balance_step(A, B, G, eta, lam) + noise


# --- T10: minibatch noise -----------------------------------------------------------------


def without_replacement_factor(N: int | ArrayLike, batch: int | ArrayLike):
    """T10: ``(N − b)/(N − 1)``, the factor by which sampling a batch of b of the N
    samples *without* replacement scales the covariance ``Σ/b`` of the batch-mean
    gradient (the finite-population correction; Σ the population covariance, with 1/N).

    1 at b = 1 (one sample either way), 0 at b = N (the full batch, no noise).
    Needs N ≥ 2 and 1 ≤ b ≤ N. Plain arithmetic: Python numbers give a float, arrays an
    array.

    Examples:
      >>> from itertools import combinations
      >>> import numpy as np
      >>> from rankflow.theory import without_replacement_factor
      >>> x, b = np.array([0.0, 1.0, 3.0, 4.0, 7.0]), 2  # N = 5 samples
      >>> means = [x[list(c)].mean() for c in combinations(range(5), b)]  # every batch of b
      >>> round(float(np.var(means) / (np.var(x) / b)), 6), without_replacement_factor(5, b)
      (0.75, 0.75)
    """
    return (N - batch) / (N - 1)


def _minibatch_noise_term(A, B, deltas, batch, replace, dtype):
    """``(1/(bN)) Σ_k (Bᵀδ_kᵀδ_kB − Aᵀδ_kδ_kᵀA)`` (r×r), times the without-replacement
    factor if ``replace`` is False: ``E[BᵀζᵀζB − AᵀζζᵀA]`` for ζ the batch-mean
    gradient's deviation from Ḡ (``Cov ζ = Σ/b``, Σ the per-sample covariance)."""
    N = deltas.shape[0]
    dB = jnp.einsum("kij,jr->kir", deltas, B)  # δ_k B, (N, m, r)
    dtA = jnp.einsum("kij,ir->kjr", deltas, A)  # δ_kᵀ A, (N, n, r)
    total = jnp.einsum("kir,kis->rs", dB, dB) - jnp.einsum("kjr,kjs->rs", dtA, dtA)
    scale = 1.0 / (jnp.asarray(batch, dtype) * N)
    if not replace:
        scale = scale * without_replacement_factor(N, jnp.asarray(batch, dtype))
    return scale * total


def minibatch_noise_balance_drift(
    A: Float[Array, "m r"],
    B: Float[Array, "n r"],
    deltas: Float[Array, "N m n"],
    eta: Scalar,
    lam: Scalar,
    batch: int | Scalar,
    replace: bool = True,
) -> Float[Array, "r r"]:
    """T10: the pathwise drift of D under the stochastic modified equation of minibatch
    SGD, ``−2ηλD + (η²/(bN)) Σ_k (Bᵀδ_kᵀδ_kB − Aᵀδ_kδ_kᵀA)``, for any loss.

    T9's SDE with ``dΞ = (bN)^{−1/2} Σ_k δ_k dβ_k``: per-sample gradients ``g_k`` (m×n,
    k = 1..N, the loss the mean of per-sample losses), ``deltas[k] = δ_k = g_k − Ḡ``,
    batch b drawn with replacement. ``replace=False`` (a Python bool) scales the noise
    term by :func:`without_replacement_factor`. The result r×r.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gradient_noise_balance_drift, minibatch_noise_balance_drift
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> e = jnp.eye(4).reshape(4, 2, 2)
      >>> deltas = 0.2 * 2.0 * jnp.concatenate([e, -e])  # ±σ√(mn)·e_ij: covariance σ²I, σ = 0.2
      >>> drift = minibatch_noise_balance_drift(A, B, deltas, 0.1, 0.5, batch=4)
      >>> t9 = gradient_noise_balance_drift(A, B, 0.1, 0.5, 0.2 / 2)  # T9 with σ/√b
      >>> bool(jnp.allclose(drift, t9, atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    noise = _minibatch_noise_term(A, B, deltas, batch, replace, dtype)
    return -2.0 * eta * lam * balance(A, B) + eta**2 * noise


def minibatch_step_mean(
    A: Float[Array, "m r"],
    B: Float[Array, "n r"],
    gbar: Float[Array, "m n"],
    deltas: Float[Array, "N m n"],
    eta: Scalar,
    lam: Scalar,
    batch: int | Scalar,
    replace: bool = True,
) -> Float[Array, "r r"]:
    """T10, discrete: ``E[D']`` over the batch after one minibatch SGD step
    ``θ ← θ − η(∇_θ L_batch + λθ)`` from ``(A, B)``, exactly.

    T5 with the batch-mean gradient ``G_b = Ḡ + ζ`` is exact for every batch; with
    ``E ζ = 0`` and ``Cov ζ = Σ/b`` its mean is
    ``(1−ηλ)²D + η²(BᵀḠᵀḠB − AᵀḠḠᵀA) + (η²/(bN)) Σ_k (Bᵀδ_kᵀδ_kB − Aᵀδ_kδ_kᵀA)``.
    ``gbar = Ḡ`` (m×n, the full-batch gradient), ``deltas[k] = g_k − Ḡ`` (N×m×n), batch
    b of the N samples drawn with replacement; ``replace=False`` (a Python bool) for
    sampling without replacement multiplies the noise term by
    :func:`without_replacement_factor` ``(N − b)/(N − 1)``. The result r×r.

    Examples:
      >>> from itertools import combinations
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import gd_balance_step, minibatch_step_mean
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> g = jnp.array([[[1.0, 0.0], [0.5, -1.0]], [[0.0, 2.0], [0.0, 1.0]],
      ...                [[-0.5, 0.0], [1.0, 0.0]]])  # per-sample gradients g_k, N = 3
      >>> batches = [jnp.array(c) for c in combinations(range(3), 2)]  # b = 2 of N = 3, no repeats
      >>> steps = [gd_balance_step(A, B, g[c].mean(0), 0.1, 0.5) for c in batches]  # T5, exact
      >>> gbar, deltas = g.mean(0), g - g.mean(0, keepdims=True)  # Ḡ and δ_k = g_k − Ḡ
      >>> mean = minibatch_step_mean(A, B, gbar, deltas, 0.1, 0.5, 2, replace=False)
      >>> bool(jnp.allclose(sum(steps) / 3, mean, atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    eta_ = jnp.asarray(eta, dtype)
    noise = eta_**2 * _minibatch_noise_term(A, B, deltas, batch, replace, dtype)
    return gd_balance_step(A, B, gbar, eta, lam) + noise


def minibatch_balance_floor(  # the arguments of minibatch_step_mean
    A: Float[Array, "m r"], B: Float[Array, "n r"], gbar: Float[Array, "m n"],
    deltas: Float[Array, "N m n"], eta: Scalar, lam: Scalar, batch: int | Scalar,
    replace: bool = True,
) -> Float[Array, "r r"]:  # fmt: skip
    """T10 floor: the stationary mean balance ``E[D]`` of minibatch SGD with decay λ > 0,
    evaluated at the state ``(A, B)``:
    ``D* = η (BᵀḠᵀḠB − AᵀḠḠᵀA + s² M) / (λ(2 − ηλ))``, ``M = Σ_k (Bᵀδ_kᵀδ_kB −
    Aᵀδ_kδ_kᵀA)``, ``s² = 1/(bN)`` (with replacement) or ``(N − b)/((N − 1) b N)``
    (``replace=False``, rankflow's ``sgd``).

    The fixed point of :func:`minibatch_step_mean`'s map ``D ↦ (1−ηλ)²D + η²(Q + s²M)``
    with its state terms ``Q``, ``M`` held: in a stationary state ``E[D_{k+1}] =
    E[D_k]``, so ``(1 − (1−ηλ)²) E[D] = η² E[Q + s²M]`` exactly, and the time average of
    this function over a stationary run is the time average of D (up to
    ``(D_T − D_0)/T`` and the martingale part's mean). It predicts the *mean* matrix,
    not ``E‖D‖_F`` (≥ ‖E D‖_F: D fluctuates about it). At a stationary point of the
    full-batch loss ``ḠB = −λA`` and ``ḠᵀA = −λB``, so ``Q = λ²D`` and
    ``D* = η s² M / (2λ(1 − ηλ))``; to leading order in η, ``η s² M/(2λ)``
    (docs/theory.md, T10 floor). Arguments as :func:`minibatch_step_mean`'s; the
    result r×r.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import minibatch_balance_floor, minibatch_step_mean
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> g = jnp.array([[[1.0, 0.0], [0.5, -1.0]], [[0.0, 2.0], [0.0, 1.0]],
      ...                [[-0.5, 0.0], [1.0, 0.0]]])  # per-sample gradients g_k, N = 3
      >>> gbar, deltas = g.mean(0), g - g.mean(0, keepdims=True)
      >>> floor = minibatch_balance_floor(A, B, gbar, deltas, 0.1, 0.5, 2, replace=False)
      >>> # D* is the fixed point of the one-step mean with the state's η² terms held:
      >>> step = minibatch_step_mean(A, B, gbar, deltas, 0.1, 0.5, 2, replace=False)
      >>> held = step - (1 - 0.05) ** 2 * (A.T @ A - B.T @ B)  # η²(Q + s²M)
      >>> bool(jnp.allclose((1 - 0.05) ** 2 * floor + held, floor, atol=1e-6))
      True
    """
    dtype = float_dtype(A)
    contraction = gd_contraction(jnp.asarray(eta, dtype), jnp.asarray(lam, dtype))
    step = minibatch_step_mean(A, B, gbar, deltas, eta, lam, batch, replace)
    return (step - contraction * balance(A, B)) / (1.0 - contraction)
