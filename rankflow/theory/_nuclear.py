# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T1–T3: the L2 penalty against the nuclear norm, and the nuclear-norm problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._common import Scalar, balance, float_dtype, frobenius, l2_penalty, nuclear_norm


class Problem(Protocol):
    """What T3's functions read of a problem (:class:`rankflow.core.problems.Problem` is
    one): its ``kind``, the shape ``(m, n)`` of W, its loss ``L(W, data)`` and the
    Lipschitz constant of its gradient."""

    kind: str
    shape: tuple[int, int]

    def loss(self, W: Float[Array, "m n"], data: dict[str, Array]) -> Scalar: ...

    def lipschitz_constant(self, data: dict[str, Array]) -> Float[Array, ""]: ...


# --- T1, T2: L2 penalty versus nuclear norm ------------------------------------------------


def t1_gap(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """T1 (Proposition 3.1): ``½(‖A‖_F² + ‖B‖_F²) − ‖ABᵀ‖_*``.

    Non-negative, and zero exactly when ``AᵀA = BᵀB``. Equals ``(L_L2 − L_*)/λ``, the
    ``frob_minus_nuc`` column.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import t1_gap
      >>> A, B = jnp.ones((1, 1)), jnp.ones((1, 1))  # balanced: AᵀA = BᵀB
      >>> round(float(t1_gap(A, B)), 4), round(float(t1_gap(2 * A, B / 2)), 4)  # ½(4 + ¼) − 1
      (0.0, 1.125)
    """
    return l2_penalty(A, B) - nuclear_norm(A @ B.T)


def t2_bound(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """T2: ``½‖AᵀA − BᵀB‖_*``, an upper bound of :func:`t1_gap`.

    Attained (ratio 1) when ``B = 0``, when ``A = 0``, or more generally when the row
    spaces of A and B are orthogonal (then ``ABᵀ = 0``); on the rescaled balanced pairs
    ``(cA, B/c)`` the ratio is exactly ``|c² − 1|/(c² + 1)``. Near balance the gap is of
    second order in D while the bound is of first order, so the ratio tends to 0.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import t1_gap, t2_bound
      >>> A, B = 2 * jnp.ones((1, 1)), jnp.ones((1, 1)) / 2  # (cA, B/c), c = 2, of a balanced pair
      >>> round(float(t1_gap(A, B)), 4), round(float(t2_bound(A, B)), 4)
      (1.125, 1.875)
      >>> round(float(t1_gap(A, B) / t2_bound(A, B)), 4)  # |c² − 1|/(c² + 1)
      0.6
    """
    return 0.5 * jnp.sum(jnp.abs(jnp.linalg.eigvalsh(balance(A, B))))


# --- T3: the nuclear-norm problem ---------------------------------------------------------


def svt(W: Float[Array, "m n"], c: Scalar) -> Float[Array, "m n"]:
    """T3: singular-value soft-thresholding ``SVT_c(W) = U max(S − c, 0) Vᵀ``.

    The proximal operator of ``c‖·‖_*``: every singular value shrinks by ``c ≥ 0`` and
    those ``≤ c`` vanish.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import svt
      >>> W = jnp.array([[3.0, 0.0], [0.0, 1.0]])
      >>> S = jnp.linalg.svd(svt(W, 2.0), compute_uv=False)  # σ = 3, 1 less 2, floored at 0
      >>> [round(float(s), 4) for s in S]
      [1.0, 0.0]
    """
    U, S, Vt = jnp.linalg.svd(W, full_matrices=False)
    S = jnp.maximum(S - jnp.asarray(c, S.dtype), 0.0)
    return (U * S[None, :]) @ Vt


class ProxGradientResult(NamedTuple):
    """What :func:`prox_gradient` returns.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import prox_gradient
      >>> result = prox_gradient(lambda W: W, jnp.ones((2, 2)), 0.5, 1.0)  # L = ½‖W‖², min at 0
      >>> result._fields
      ('W', 'iterations', 'converged')
      >>> bool((result.W == 0).all()), int(result.iterations), bool(result.converged)
      (True, 2, True)
    """

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

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import prox_gradient, svt
      >>> Y = jnp.array([[2.0, 1.0], [0.0, 0.5]])
      >>> result = prox_gradient(lambda W: W - Y, jnp.zeros((2, 2)), 0.5, 1.0)  # L = ½‖W − Y‖²
      >>> bool(result.converged), int(result.iterations)
      (True, 2)
      >>> bool(jnp.allclose(result.W, svt(Y, 0.5), atol=1e-6))  # the minimiser is SVT_λ(Y)
      True
    """
    dtype = float_dtype(W0)
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
        size = jnp.maximum(frobenius(W_new), frobenius(W))
        diff = frobenius(W_new - W)
        # Both iterates zero: a fixed point of the prox map, hence converged.
        change = jnp.where(size > 0, diff / jnp.where(size > 0, size, one), 0.0)
        return k + 1, W_new, Y_new, t_new, change

    init = (jnp.asarray(0), W0, W0, one, jnp.asarray(jnp.inf, dtype))
    k, W, _, _, change = jax.lax.while_loop(cond, body, init)
    return ProxGradientResult(W, k, change <= tol)


def lipschitz_constant(problem: Problem, data: dict[str, Array]) -> Float[Array, ""]:
    """T3: the Lipschitz constant of ``∇L`` for a :class:`rankflow.core.problems.Problem`:
    its kind's ``lipschitz_constant(data)``.

    The largest eigenvalue of the (constant) Hessian of the quadratic loss:
    ``diagonal``: 1; ``sensing``: ``‖X_mat‖_2²/N`` with ``X_mat`` the N×(mn) matrix of
    measurements; ``completion``: ``mn/N`` times the largest number of times one entry
    was observed; ``regression``: ``‖X‖_2²/N`` (1 up to rounding, X being whitened).
    ``custom`` losses have no known constant (a ``ValueError``), nor has a kind that
    declares none.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.core.problems import Problem
      >>> from rankflow.theory import lipschitz_constant
      >>> problem = Problem("completion", 2, 2, 1, 3, (1.0,))  # entry (0, 0) observed twice
      >>> data = {"rows": jnp.array([0, 0, 1]), "cols": jnp.array([0, 0, 1]), "y": jnp.ones(3)}
      >>> round(float(lipschitz_constant(problem, data)), 4)  # (mn/N)·2
      2.6667
      >>> H = jax.jit(jax.hessian(problem.loss))(jnp.zeros((2, 2)), data).reshape(4, 4)
      >>> round(float(jnp.linalg.eigvalsh(H).max()), 4)
      2.6667
    """
    return problem.lipschitz_constant(data)


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

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.core.problems import Problem
      >>> from rankflow.theory import nuclear_minimiser
      >>> problem = Problem("diagonal", 2, 2, 2, 0, (1.0, 0.25))  # L = ½‖W − diag(1, ¼)‖²
      >>> result = nuclear_minimiser(problem, {"target": jnp.diag(jnp.array([1.0, 0.25]))}, 0.5)
      >>> S = jnp.linalg.svd(result.W, compute_uv=False)  # 1 − λ, and ¼ < λ cut to 0
      >>> bool(result.converged), [round(float(s), 4) for s in S]
      (True, [0.5, 0.0])
    """
    if W0 is None:
        dtype = float_dtype(data["target"]) if "target" in data else jnp.result_type(float)
        W0 = jnp.zeros(problem.shape, dtype)
    if step is None:
        step = 1.0 / lipschitz_constant(problem, data)
    grad_fn = jax.grad(lambda W: problem.loss(W, data))
    return prox_gradient(
        grad_fn, W0, lam, step, max_iters=max_iters, tol=tol, accelerated=accelerated
    )


def quadratic_form(problem: Problem) -> Callable:
    """T3 (the ridge contrast): ``data ↦ (H, g)``, the constant Hessian and the gradient
    at 0 of a quadratic loss in ``vec W`` (float64), one compiled program per problem
    structure.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from rankflow.core.problems import Problem
      >>> from rankflow.theory import quadratic_form
      >>> problem = Problem("diagonal", 2, 2, 2, 0, (1.0, 0.25))  # L = ½‖W − diag(1, ¼)‖²
      >>> with jax.enable_x64(True):  # the form is float64
      ...     H, g = quadratic_form(problem)({"target": jnp.diag(jnp.array([1.0, 0.25]))})
      ...     print(H.dtype, bool((H == jnp.eye(4)).all()), g.tolist())  # H = I, g = ∇L(0)
      float64 True [-1.0, 0.0, 0.0, -0.25]
    """
    m, n = problem.shape

    def hg(data):
        w0 = jnp.zeros(m * n, jnp.float64)

        def loss(w):
            return problem.loss(jnp.reshape(w, (m, n)), data)

        return jax.hessian(loss)(w0), jax.grad(loss)(w0)

    return jax.jit(hg)


def ridge_minimisers(H: np.ndarray, g: np.ndarray, lams, shape) -> list[np.ndarray]:
    """T3 (the ridge contrast): argmin ``L(W) + (λ/2)‖W‖_F²`` for each λ, with
    ``L(w) = ½wᵀHw + gᵀw + c``: ``w = −(H + λI)⁻¹g`` from one eigendecomposition of H (at
    λ = 0 the least-squares solution, eigenvalues below 1e-12 of the largest left out).
    Plain L2 on an unfactorised W shrinks every direction by ``1/(h + λ)``: no singular
    value is thresholded to zero, unlike :func:`nuclear_minimiser`. Numpy.

    Examples:
      >>> import numpy as np
      >>> from rankflow.theory import ridge_minimisers
      >>> H, g = np.eye(2), -np.array([1.0, 0.25])  # L = ½‖w − (1, ¼)‖²
      >>> [w.tolist() for w in ridge_minimisers(H, g, [0.0, 1.0], (2,))]  # w/(1 + λ): none is 0
      [[1.0, 0.25], [0.5, 0.125]]
    """
    evals, Q = np.linalg.eigh(H)
    gq = Q.T @ g
    out = []
    for lam in lams:
        d = evals + lam
        inv = np.where(d > 1e-12 * evals.max(), 1.0 / np.where(d > 0, d, 1.0), 0.0)
        out.append(np.reshape(-(Q @ (inv * gq)), shape))
    return out
