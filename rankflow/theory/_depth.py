# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T12–T13: products of L factors, ``W = W_L ⋯ W_1``, with weight decay on every factor.

Convention: ``factors = (W_1, …, W_L)``, ``W_j`` of shape ``d_j × d_{j−1}``, so
``W = W_L ⋯ W_1`` is ``d_L × d_0`` (m × n). Depth 2 is rankflow's ``W = ABᵀ`` with
``(W_1, W_2) = (Bᵀ, A)``; then the one balance ``D_1 = W_2ᵀW_2 − W_1W_1ᵀ = AᵀA − BᵀB``
is T4's ``D`` (:func:`pair_to_factors`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._common import Scalar, decay_factor, float_dtype, outer_scale

Factors = Sequence[Float[Array, "d_j d_jm1"]]


def _check_depth(depth) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
        raise ValueError(f"depth: must be an integer ≥ 2, got {depth!r}")
    return depth


# --- the setting at depth L ---------------------------------------------------------------


def pair_to_factors(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> tuple[Array, Array]:
    """The depth-2 pair ``(A, B)`` as factors ``(W_1, W_2) = (Bᵀ, A)``, ``W_2W_1 = ABᵀ``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, depth_balances, pair_to_factors, product
      >>> A = jnp.array([[1.0, 0.5], [0.0, 1.0], [2.0, 0.0]])  # m = 3, r = 2
      >>> B = jnp.array([[0.3, -0.2], [0.1, 0.4]])  # n = 2
      >>> factors = pair_to_factors(A, B)  # (Bᵀ, A)
      >>> [W.shape for W in factors]
      [(2, 2), (3, 2)]
      >>> bool(jnp.allclose(product(factors), A @ B.T))
      True
      >>> bool(jnp.allclose(depth_balances(factors)[0], balance(A, B)))
      True
    """
    return B.T, A


def product(factors: Factors) -> Float[Array, "m n"]:
    """``W = W_L ⋯ W_1`` (``d_L × d_0``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import product
      >>> W1, W2, W3 = jnp.array([[1.0, 2.0]]), jnp.array([[3.0]]), jnp.array([[1.0], [-1.0]])
      >>> product([W1, W2, W3]).tolist()  # W_3 W_2 W_1, 2 × 2
      [[3.0, 6.0], [-3.0, -6.0]]
    """
    W = factors[0]
    for Wj in factors[1:]:
        W = Wj @ W
    return W


def depth_balances(factors: Factors) -> tuple[Float[Array, "d_j d_j"], ...]:
    """T12: ``(D_1, …, D_{L−1})`` with ``D_j = W_{j+1}ᵀW_{j+1} − W_jW_jᵀ`` (``d_j × d_j``,
    symmetric). At depth 2 the one entry is ``AᵀA − BᵀB``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import depth_balances
      >>> W1, W2, W3 = jnp.array([[1.0, 2.0]]), jnp.array([[3.0]]), jnp.array([[1.0], [-1.0]])
      >>> [D.tolist() for D in depth_balances([W1, W2, W3])]  # 9 − 5 and 2 − 9
      [[[4.0]], [[-7.0]]]
    """
    return tuple(
        factors[j + 1].T @ factors[j + 1] - factors[j] @ factors[j].T
        for j in range(len(factors) - 1)
    )


def depth_gradients(factors: Factors, G: Float[Array, "m n"]) -> tuple[Array, ...]:
    """The chain rule of the product: ``∇_j = (W_L⋯W_{j+1})ᵀ G (W_{j−1}⋯W_1)ᵀ`` for
    ``G = ∇_W L(W)``, one per factor, each of ``W_j``'s shape.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.theory import depth_gradients, product
      >>> factors = [jnp.array([[1.0, 2.0]]), jnp.array([[3.0]]), jnp.array([[1.0], [-1.0]])]
      >>> loss = lambda fs: 0.5 * jnp.sum((product(fs) - jnp.eye(2)) ** 2)  # G = W − I
      >>> grads = depth_gradients(factors, product(factors) - jnp.eye(2))
      >>> all(bool(jnp.allclose(g, a)) for g, a in zip(grads, jax.grad(loss)(factors)))
      True
    """
    L = len(factors)
    dtype = float_dtype(factors[0])
    # below[j] = W_{j−1}⋯W_1 (identity for j = 1); above[j] = W_L⋯W_{j+1}.
    below = [jnp.eye(factors[0].shape[1], dtype=dtype)]
    for Wj in factors[:-1]:
        below.append(Wj @ below[-1])
    above = [jnp.eye(factors[-1].shape[0], dtype=dtype)]
    for Wj in reversed(factors[1:]):
        above.append(above[-1] @ Wj)
    above = above[::-1]
    return tuple(above[j].T @ G @ below[j].T for j in range(L))


def depth_l2_penalty(factors: Factors) -> Float[Array, ""]:
    """``½Σ_j ‖W_j‖_F²``: the weight-decay penalty on every factor, per unit λ (the
    depth-L ``l2_penalty``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import depth_l2_penalty, l2_penalty, pair_to_factors
      >>> W1, W2, W3 = jnp.array([[1.0, 2.0]]), jnp.array([[3.0]]), jnp.array([[1.0], [-1.0]])
      >>> float(depth_l2_penalty([W1, W2, W3]))  # ½(5 + 9 + 2)
      8.0
      >>> A, B = jnp.array([[1.0, 0.5]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> bool(jnp.isclose(depth_l2_penalty(pair_to_factors(A, B)), l2_penalty(A, B)))
      True
    """
    return 0.5 * sum(jnp.sum(Wj**2) for Wj in factors)


def schatten_penalty(W: Float[Array, "m n"], depth: int) -> Float[Array, ""]:
    """T13: ``(L/2) Σ_i σ_i(W)^{2/L}``, the smallest ``½Σ‖W_j‖²`` over factorisations of
    W into L factors (wide enough). At L = 2 the nuclear norm ``‖W‖_*``. Singular
    values at rounding level (``≤ σ_1·max(m, n)·ε``) count as 0.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import nuclear_norm, schatten_penalty
      >>> W = jnp.diag(jnp.array([4.0, 1.0]))
      >>> round(float(schatten_penalty(W, 2)), 4), round(float(nuclear_norm(W)), 4)
      (5.0, 5.0)
      >>> round(float(schatten_penalty(W, 4)), 4)  # (4/2)(4^{1/2} + 1^{1/2})
      6.0
    """
    L = _check_depth(depth)
    s = jnp.linalg.svd(W, compute_uv=False)
    # σ^{2/L} is not Lipschitz at 0: a rounding-level σ ~ 1e-16 of an exactly
    # rank-deficient W would add ~1e-8 at L = 4. Singular values at or below numpy's
    # matrix_rank tolerance σ_1·max(m, n)·ε count as 0 (the guard also keeps the
    # gradient finite there).
    tol = s[0] * max(W.shape) * jnp.finfo(s.dtype).eps
    keep = s > tol
    return 0.5 * L * jnp.sum(jnp.where(keep, jnp.where(keep, s, 1.0) ** (2.0 / L), 0.0))


def depth_penalty_gap(factors: Factors) -> Float[Array, ""]:
    """T13: ``½Σ_j‖W_j‖_F² − (L/2)Σ_i σ_i(W)^{2/L} ≥ 0``, zero iff every ``D_j = 0``
    (the depth-L ``frob_minus_nuc``; T1 at L = 2).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balanced_factors, depth_penalty_gap
      >>> W1, W2, W3 = balanced_factors(jnp.diag(jnp.array([8.0, 1.0])), (2, 2))  # L = 3
      >>> abs(float(depth_penalty_gap((W1, W2, W3)))) < 1e-5  # ½Σ‖W_j‖² = (3/2)Σσ^{2/3} = 7.5
      True
      >>> round(float(depth_penalty_gap((2 * W1, W2, W3 / 2))), 4)  # same W: ½(4 + 1 + ¼)·5 − 7.5
      5.625
    """
    return depth_l2_penalty(factors) - schatten_penalty(product(factors), len(factors))


def balanced_factors(
    W: Float[Array, "m n"], widths: Sequence[int], key: PRNGKeyArray | None = None
) -> tuple[Array, ...]:
    """T13: factors of ``W`` (``m × n``) with every ``D_j = 0``, inner widths
    ``widths = (d_1, …, d_{L−1})``.

    From the SVD ``W = U S Vᵀ`` with its ``k = min(m, n, widths)`` largest singular
    values: ``W_1 = Q_1 S^{1/L} Vᵀ``, ``W_j = Q_j S^{1/L} Q_{j−1}ᵀ``, ``W_L = U S^{1/L}
    Q_{L−1}ᵀ`` with ``Q_j`` (``d_j × k``) orthonormal columns: the first k unit vectors,
    or Haar-random ones drawn from ``key``. The product is W when ``rank W ≤ k``
    (otherwise its best rank-k approximation).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balanced_factors, depth_balances, product
      >>> W = jnp.array([[3.0, 1.0], [1.0, 3.0]])
      >>> factors = balanced_factors(W, (2, 2))  # L = 3
      >>> [Wj.shape for Wj in factors], bool(jnp.allclose(product(factors), W, atol=1e-5))
      ([(2, 2), (2, 2), (2, 2)], True)
      >>> all(bool(jnp.allclose(D, 0.0, atol=1e-5)) for D in depth_balances(factors))
      True
    """
    m, n = W.shape
    dtype = float_dtype(W)
    k = min(m, n, *widths)
    U, S, Vt = jnp.linalg.svd(W, full_matrices=False)
    root = S[:k] ** (1.0 / (len(widths) + 1))
    Qs = []
    for i, d in enumerate(widths):
        if key is None:
            Qs.append(jnp.eye(d, k, dtype=dtype))
        else:
            Q, _ = jnp.linalg.qr(jax.random.normal(jax.random.fold_in(key, i), (d, k), dtype))
            Qs.append(Q)
    lefts = Qs + [U[:, :k]]
    rights = [Vt[:k].T] + Qs
    return tuple((Ql * root[None, :]) @ Qr.T for Ql, Qr in zip(lefts, rights))


# --- T12: the pairwise balances under GF and GD --------------------------------------------


def gf_depth_balance(
    D0s: Sequence[Float[Array, "d d"]], eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"]
) -> tuple[Float[Array, "*T d d"], ...]:
    """T12: ``D_j(t) = e^{−2ηλt} D_j(0)`` for every adjacent pair under gradient flow with
    decay on every factor, for any loss of the product. ``t`` in steps, any shape; each
    entry has shape ``t.shape + D_j.shape``. Every pair decays at the same rate
    :func:`gf_balance_rate` ``= 2ηλ``, whatever L.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import depth_balances, gf_depth_balance
      >>> W1, W2, W3 = jnp.array([[1.0, 2.0]]), jnp.array([[3.0]]), jnp.array([[1.0], [-1.0]])
      >>> D0s = depth_balances([W1, W2, W3])  # [[4]] and [[−7]]
      >>> [round(float(D[0, 0]), 4) for D in gf_depth_balance(D0s, 0.5, 0.1, 10.0)]  # times e^{−1}
      [1.4715, -2.5752]
    """
    D0s = [jnp.asarray(D0) for D0 in D0s]
    return tuple(outer_scale(decay_factor(eta, lam, t, D0.dtype), D0) for D0 in D0s)


def gd_depth_balance_step(
    factors: Factors, grads: Sequence[Array], eta: Scalar, lam: Scalar
) -> tuple[Float[Array, "d_j d_j"], ...]:
    """T12: every pair's balance after one GD step ``W_j ← W_j − η(∇_j + λW_j)``, exactly.

    ``D_j′ = (1−ηλ)² D_j + η² (∇_{j+1}ᵀ∇_{j+1} − ∇_j∇_jᵀ)`` with ``∇_j = ∇_{W_j}L`` the
    data-loss gradients (:func:`depth_gradients`); the cross terms cancel because
    ``W_{j+1}ᵀ∇_{j+1} = ∇_jW_jᵀ`` for any loss of the product.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import depth_balances, depth_gradients, gd_depth_balance_step
      >>> from rankflow.theory import product
      >>> fs = [jnp.array([[1.0, 0.5]]), jnp.array([[0.8]]), jnp.array([[0.6], [-0.4]])]
      >>> grads = depth_gradients(fs, product(fs) - jnp.eye(2))  # L = ½‖W − I‖²
      >>> stepped = [W - 0.1 * (g + 0.5 * W) for W, g in zip(fs, grads)]  # GD, η = 0.1, λ = 0.5
      >>> after = gd_depth_balance_step(fs, grads, 0.1, 0.5)
      >>> all(bool(jnp.allclose(a, b, atol=1e-6)) for a, b in zip(depth_balances(stepped), after))
      True
    """
    dtype = float_dtype(factors[0])
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    c = (1.0 - eta * lam) ** 2
    return tuple(
        c * D + eta**2 * (grads[j + 1].T @ grads[j + 1] - grads[j] @ grads[j].T)
        for j, D in enumerate(depth_balances(factors))
    )


# --- T13: the scalar problem min_{w≥0} ½(w − s)² + (λL/2) w^{2/L} ---------------------------


def schatten_scalar_objective(w: ArrayLike, s: Scalar, lam: Scalar, depth: int) -> Array:
    """T13: ``½(w − s)² + (λL/2) w^{2/L}`` (w ≥ 0), the diagonal problem's loss plus
    penalty per singular value at balance (``L = ½‖W − diag(s)‖²``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balanced_factors, depth_l2_penalty, product
      >>> from rankflow.theory import schatten_scalar_objective
      >>> s, w, lam = jnp.array([2.0, 0.5]), jnp.array([1.5, 0.3]), 0.1
      >>> factors = balanced_factors(jnp.diag(w), (2, 2))  # W = diag(w) at balance, L = 3
      >>> loss = 0.5 * jnp.sum((product(factors) - jnp.diag(s)) ** 2)  # ½‖W − diag(s)‖²
      >>> total = loss + lam * depth_l2_penalty(factors)
      >>> bool(jnp.isclose(total, schatten_scalar_objective(w, s, lam, 3).sum(), atol=1e-5))
      True
    """
    L = _check_depth(depth)
    w = jnp.asarray(w, float_dtype(w))
    s, lam = jnp.asarray(s, w.dtype), jnp.asarray(lam, w.dtype)
    return 0.5 * (w - s) ** 2 + 0.5 * lam * L * w ** (2.0 / L)


def schatten_scalar_stationarity(w: ArrayLike, s: Scalar, lam: Scalar, depth: int) -> Array:
    """T13: ``w − s + λ w^{2/L−1}``, the derivative of :func:`schatten_scalar_objective`
    for w > 0; a nonzero stationary singular value makes it 0 (w = 0 is the other
    stationary point, a local minimum for L ≥ 3).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.theory import schatten_scalar_objective, schatten_scalar_stationarity
      >>> grad = jax.grad(schatten_scalar_objective)(1.5, 2.0, 0.1, 3)
      >>> bool(jnp.isclose(grad, schatten_scalar_stationarity(1.5, 2.0, 0.1, 3)))
      True
    """
    L = _check_depth(depth)
    w = jnp.asarray(w, float_dtype(w))
    s, lam = jnp.asarray(s, w.dtype), jnp.asarray(lam, w.dtype)
    return w - s + lam * w ** (2.0 / L - 1.0)


class ScalarThreshold(NamedTuple):
    """What :func:`schatten_threshold` returns.

    Examples:
      >>> from rankflow.theory import schatten_threshold
      >>> threshold = schatten_threshold(0.5, 2)  # L = 2: soft-thresholding at λ, no jump
      >>> round(float(threshold.s), 4), round(float(threshold.w), 4)
      (0.5, 0.0)
    """

    s: Array  # s*(λ, L): the global minimiser is 0 below it, nonzero above
    w: Array  # the nonzero global minimiser at s = s* (the size of the jump; 0 at L = 2)


def schatten_threshold(lam: Scalar, depth: int) -> ScalarThreshold:
    """T13: the jump threshold of the scalar problem.

    For L ≥ 3, at s = s* the nonzero root and 0 tie: from ``f(w) = f(0)`` and ``f′(w) =
    0``, ``w* = (λ(L−2))^{L/(2(L−1))}`` and ``s* = w* + λ w*^{2/L−1}``. The minimiser jumps
    from 0 to w* there. At L = 2, soft-thresholding: ``s* = λ``, ``w* = 0``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import schatten_scalar_objective, schatten_threshold
      >>> s_star, w_star = schatten_threshold(0.1, 3)
      >>> round(float(s_star), 4), round(float(w_star), 4)
      (0.3557, 0.1778)
      >>> f = lambda w: schatten_scalar_objective(w, s_star, 0.1, 3)
      >>> bool(jnp.isclose(f(w_star), f(0.0)))  # 0 and w* tie at s = s*
      True
    """
    L = _check_depth(depth)
    lam = jnp.asarray(lam, float_dtype(lam))
    if L == 2:
        return ScalarThreshold(lam, jnp.zeros_like(lam))
    w = (lam * (L - 2)) ** (L / (2.0 * (L - 1)))
    safe = jnp.where(w > 0, w, 1.0)
    s = jnp.where(w > 0, w + lam * safe ** (2.0 / L - 1.0), 0.0)
    return ScalarThreshold(s, w)


def schatten_scalar_minimiser(
    s: Float[ArrayLike, "*S"], lam: Scalar, depth: int, *, iterations: int = 60
) -> Float[Array, "*S"]:
    """T13: the global minimiser over w ≥ 0 of ``½(w − s)² + (λL/2) w^{2/L}``, elementwise.

    0 for ``s ≤ s*`` (:func:`schatten_threshold`; at s = s* both 0 and w* are minimisers
    and 0 is returned); above, the largest root of ``w + λw^{2/L−1} = s``. That function
    is convex and increasing right of its minimum, and s lies right of the root, so
    Newton from w = s decreases monotonically to it (``iterations`` steps, static). At
    L = 2 this is soft-thresholding, ``max(s − λ, 0)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import schatten_scalar_minimiser, schatten_scalar_objective
      >>> round(float(schatten_scalar_minimiser(0.6, 0.1, 2)), 4)  # L = 2: soft-thresholding
      0.5
      >>> grid = jnp.linspace(0.0, 2.0, 20001)  # L = 3: the global minimiser, on a grid
      >>> best = grid[jnp.argmin(schatten_scalar_objective(grid, 1.0, 0.1, 3))]
      >>> bool(jnp.abs(best - schatten_scalar_minimiser(1.0, 0.1, 3)) < 1e-3)
      True
    """
    L = _check_depth(depth)
    s = jnp.asarray(s, float_dtype(s))
    lam = jnp.asarray(lam, s.dtype)
    if L == 2:
        return jnp.maximum(s - lam, 0.0)
    p = 2.0 / L - 1.0
    s_star = schatten_threshold(lam, L).s
    w0 = jnp.maximum(s, s_star)  # ≥ the root wherever it is used, and positive

    def newton(_, w):
        w_new = w - (w + lam * w**p - s) / (1.0 + p * lam * w ** (p - 1.0))
        # Rounding can step a hair left of the root; the root never drops below w*.
        return jnp.maximum(w_new, schatten_threshold(lam, L).w)

    w = jax.lax.fori_loop(0, iterations, newton, w0)
    return jnp.where(s > s_star, w, 0.0)
