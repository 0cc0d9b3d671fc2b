"""The observables of docs/theory.md, computed inside jit from the factors (A, B).

Names are the results-table columns. Singular values of ``W = ABᵀ`` come from the
r×r core ``R_A R_Bᵀ`` of the thin QR factors when ``r < min(m, n)`` (exact by orthogonal
invariance, and cheap), from ``W`` itself otherwise.

On CPU the decompositions of a vmapped batch run one matrix after another
(:func:`rankflow.numerics.linalg.one_at_a_time`: batched LAPACK kernels side by side deadlock
XLA:CPU's thread pool).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from ..numerics.linalg import eigvalsh, one_at_a_time

__all__ = [
    "OBSERVABLES",
    "num_singular_values",
    "observables",
    "singular_values",
]

Scalar = Float[Array, ""]  # a 0-d array: a loss, λ

# Scalar columns, in table order; ``sv_1 … sv_k`` follow them.
OBSERVABLES = (
    "loss",
    "l2_loss",
    "star_loss",
    "l2_penalty",
    "nuclear_norm",
    "frob_minus_nuc",
    "balance_gap",
    "balance_trace",
    "balance_nuclear",
    "balance_gap_rel",
    "effective_rank",
    "stable_rank",
    "rank",
)


def num_singular_values(m: int, n: int, r: int) -> int:
    """How many singular values ``W = ABᵀ`` (m×n, inner dimension r) can have."""
    return min(m, n, r)


@one_at_a_time
def singular_values(A: Float[Array, "m r"], B: Float[Array, "n r"]) -> Float[Array, " k"]:
    """Singular values of ``ABᵀ``, descending, ``k = min(m, n, r)`` of them."""
    m, r = A.shape
    n = B.shape[0]
    if r < min(m, n):
        Ra = jnp.linalg.qr(A, mode="r")
        Rb = jnp.linalg.qr(B, mode="r")
        return jnp.linalg.svd(Ra @ Rb.T, compute_uv=False)
    return jnp.linalg.svd(A @ B.T, compute_uv=False)[: num_singular_values(m, n, r)]


def observables(
    A: Float[Array, "m r"], B: Float[Array, "n r"], loss: Scalar, lam: Scalar, rank_tol: float
) -> dict[str, Array]:
    """Every column of docs/theory.md's observables table, plus ``balance_nuclear``
    (``‖AᵀA − BᵀB‖_*``, so that the T2 bound ``½·balance_nuclear`` can be drawn) and
    ``balance_gap_rel`` (``‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + ‖BᵀB‖_F)``, the scale-free gap:
    shrinking A and B together leaves it unchanged, so it tells balancing from shrinkage;
    0 when both Grams vanish; the same column as ``rankflow inspect``'s).

    ``loss`` is the data loss ``L(ABᵀ)``, computed by the caller's problem.
    Returns scalars, and the singular values under ``"sv"`` (shape ``(k,)``).
    """
    s = singular_values(A, B)
    l2_penalty = 0.5 * (jnp.sum(A**2) + jnp.sum(B**2))
    nuclear = jnp.sum(s)
    gram_a, gram_b = A.T @ A, B.T @ B
    D = gram_a - gram_b
    gap = jnp.sqrt(jnp.sum(D**2))
    scale = 0.5 * (jnp.sqrt(jnp.sum(gram_a**2)) + jnp.sqrt(jnp.sum(gram_b**2)))
    return {
        **loss_columns(loss, lam, l2_penalty, nuclear),
        "frob_minus_nuc": l2_penalty - nuclear,
        "balance_gap": gap,
        "balance_trace": jnp.sum(A**2) - jnp.sum(B**2),
        "balance_nuclear": jnp.sum(jnp.abs(eigvalsh(D))),
        "balance_gap_rel": jnp.where(scale > 0, gap / jnp.where(scale > 0, scale, 1.0), 0.0),
        **rank_columns(s, rank_tol),
    }


def loss_columns(
    loss: Scalar, lam: Scalar, l2_penalty: Scalar, nuclear: Scalar
) -> dict[str, Array]:
    """The loss columns of every depth: ``loss`` (the data loss), ``l2_loss`` = loss +
    λ·l2_penalty (the objective), ``star_loss`` = loss + λ·‖W‖_* (the nuclear-norm
    objective), ``l2_penalty`` = ½Σ‖W_j‖_F² and ``nuclear_norm`` = ‖W‖_*."""
    return {
        "loss": loss,
        "l2_loss": loss + lam * l2_penalty,
        "star_loss": loss + lam * nuclear,
        "l2_penalty": l2_penalty,
        "nuclear_norm": nuclear,
    }


def _stable_rank(s: Float[Array, " k"], top: Scalar) -> Scalar:
    """Σs²/s_1², 0 for a zero matrix. Where s_1² underflows (a float32 product decayed
    to ~1e-20: attention heads at λ = 10 did) the ratio is taken of s/s_1 instead; it
    was 0/0 = NaN there, and NaN marks a run diverged. Elsewhere the expression is the
    one the golden tables were captured with, bit for bit."""
    safe = jnp.where(top > 0, top, 1.0)
    tiny = safe**2 < jnp.finfo(s.dtype).tiny  # subnormal or flushed to 0
    ratio = jnp.where(tiny, jnp.sum((s / safe) ** 2), jnp.sum(s**2) / jnp.where(tiny, 1.0, safe**2))
    return jnp.where(top > 0, ratio, 0.0)


def rank_columns(s: Float[Array, " k"], rank_tol: float) -> dict[str, Array]:
    """The columns of a spectrum ``s`` (descending) alone, at every depth:
    ``effective_rank`` = exp(entropy of s/Σs), ``stable_rank`` = Σs²/s_1², ``rank`` = the
    number of s_i > rank_tol·s_1, and ``sv`` = s. A zero matrix has all three ranks 0."""
    nuclear, top = jnp.sum(s), s[0]
    p = s / jnp.where(nuclear > 0, nuclear, 1.0)
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return {
        "effective_rank": jnp.where(nuclear > 0, jnp.exp(entropy), 0.0),
        "stable_rank": _stable_rank(s, top),
        "rank": jnp.sum(s > rank_tol * top).astype(s.dtype),
        "sv": s,
    }
