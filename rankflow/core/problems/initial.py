# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""Initialisations of the factors ``(A, B)`` of ``W = ABᵀ`` for a problem (``init.kind``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ...numerics import linalg
from .base import Data, Problem, normal


def _pad_columns(X: Array, r: int) -> Array:
    return jnp.pad(X[:, :r], ((0, 0), (0, max(0, r - X.shape[1]))))


def _balanced_from(W: Float[Array, "m n"], r: int):
    """Balanced factors of ``W``'s best rank-r part: ``A = U√S``, ``B = V√S``."""
    U, S, Vt = linalg.svd(W)
    root = jnp.sqrt(S)
    return _pad_columns(U * root[None, :], r), _pad_columns(Vt.T * root[None, :], r)


def init_factors(
    kind: str,
    key: PRNGKeyArray,
    problem: Problem,
    data: Data,
    r: int,
    scale: Float[Array, ""],
    imbalance: Float[Array, ""],
    dtype,
) -> tuple[Float[Array, "m r"], Float[Array, "n r"]]:
    """Initial factors ``(A, B)``.

    - ``gaussian``: i.i.d. N(0, scale²) entries.
    - ``balanced``: the balanced factorisation ``A = U√S``, ``B = V√S`` of the product
      of two such Gaussian factors, so ``AᵀA = BᵀB`` exactly (to rounding) and the
      product is random of rank ``min(m, n, r)``.
    - ``spectral``: ``A = U_r√scale``, ``B = V_r√scale`` from the target's SVD, so
      ``W(0) = scale·U_r V_rᵀ``.
    - ``imbalanced``: the balanced start rescaled to ``(cA, B/c)`` — same product — with
      ``c`` chosen so that ``‖AᵀA − BᵀB‖_F = imbalance`` exactly.
    - ``lora``: LoRA's start, A the Gaussian A of ``gaussian`` (N(0, scale²) entries, the
      same draw) and B = 0 exactly, so W(0) = 0 and ``D(0) = AᵀA``: the balance gap
      starts at ‖AᵀA‖_F. W = ABᵀ maps x ↦ A(Bᵀx), so B is the input side here, where
      LoRA's zero factor (its B in ΔW = BA) is the output side: the same start up to
      W ↦ Wᵀ. (A, 0) is no critical point: the B-gradient there is ∇L(0)ᵀA ≠ 0 in
      general (only λA acts on A), so GD and gradient flow leave it at once; only
      (0, 0), not used here, is the saddle that nothing leaves.
    """
    m, n = problem.shape
    ka, kb = jax.random.split(key)
    A0 = scale * normal(ka, (m, r), dtype)
    B0 = scale * normal(kb, (n, r), dtype)
    if kind == "gaussian":
        return A0, B0
    if kind == "lora":
        return A0, jnp.zeros_like(B0)
    if kind == "spectral":
        U, _, Vt = linalg.svd(data["target"])
        root = jnp.sqrt(scale)
        return _pad_columns(U * root, r), _pad_columns(Vt.T * root, r)
    A, B = _balanced_from(A0 @ B0.T, r)
    if kind == "balanced":
        return A, B
    if kind == "imbalanced":
        # D = (c² − c⁻²)·AᵀA for the balanced (A, B); solve c² − c⁻² = x for c² > 0.
        x = imbalance / jnp.linalg.norm(A.T @ A)
        c2 = 0.5 * (x + jnp.sqrt(x**2 + 4.0))
        c = jnp.sqrt(c2)
        return c * A, B / c
    raise ValueError(f"init.kind: unknown kind {kind!r}")
