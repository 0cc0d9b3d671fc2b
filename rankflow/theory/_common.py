# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""The setting of docs/theory.md and the helpers every theory module shares."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

Scalar = Float[ArrayLike, ""]


# --- helpers -----------------------------------------------------------------------------


def float_dtype(x: ArrayLike):
    """``x``'s dtype if it is floating, the default float dtype otherwise."""
    dtype = jnp.result_type(x)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def decay_factor(eta: Scalar, lam: Scalar, t: Float[ArrayLike, "*T"], dtype) -> Float[Array, "*T"]:
    """``e^{−2ηλt}``, the GF contraction of D after time t (any shape of t)."""
    eta, lam, t = (jnp.asarray(x, dtype) for x in (eta, lam, t))
    return jnp.exp(-2.0 * eta * lam * t)


def outer_scale(c: Float[Array, "*T"], X: Float[Array, "*S"]) -> Float[Array, "*T *S"]:
    """``c[..., None, …] * X`` without implicit rank promotion: shape ``c.shape + X.shape``.

    Lets every formula take a scalar time or an array of times.
    """
    return jnp.reshape(c, c.shape + (1,) * X.ndim) * jnp.reshape(X, (1,) * c.ndim + X.shape)


def frobenius(X: Array) -> Array:
    return jnp.sqrt(jnp.sum(X**2))


# --- the quantities of the setting --------------------------------------------------------


def balance(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, "r r"]:
    """The balance matrix ``D = AᵀA − BᵀB`` (r×r, symmetric).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance
      >>> A, B = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 1.0]])
      >>> balance(A, B).tolist()  # diag(1, 4) − [[1, 1], [1, 1]]
      [[0.0, -1.0], [-1.0, 3.0]]
      >>> float(jnp.trace(balance(A, B))) == float(jnp.sum(A**2) - jnp.sum(B**2))
      True
    """
    return A.T @ A - B.T @ B


def l2_penalty(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, ""]:
    """``½(‖A‖_F² + ‖B‖_F²)``: the weight-decay penalty, per unit λ.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import l2_penalty
      >>> float(l2_penalty(jnp.array([[3.0]]), jnp.array([[4.0]])))  # ½(9 + 16)
      12.5
    """
    return 0.5 * (jnp.sum(A**2) + jnp.sum(B**2))


def nuclear_norm(W: Float[Array, "m n"]) -> Float[Array, ""]:
    """``‖W‖_*``: the sum of the singular values of W.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import nuclear_norm
      >>> round(float(nuclear_norm(jnp.array([[3.0, 0.0], [0.0, -4.0]]))), 4)  # 3 + 4
      7.0
      >>> round(float(nuclear_norm(jnp.ones((2, 2)))), 4)  # rank one, σ₁ = 2
      2.0
    """
    return jnp.sum(jnp.linalg.svd(W, compute_uv=False))
