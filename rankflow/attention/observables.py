"""Per-head observables of both factor pairs, from :func:`rankflow.core.observables.observables`.

For layer l and head h (docs/theory.md, "Attention layers"):

- key-query (``pair = "qk"``): ``A = W_Q^h`` (D×d_h), ``B = W_K^h``, product
  ``W_Q^h W_K^hᵀ`` (D×D);
- value-output (``pair = "vo"``): ``A = W_V^h``, ``B = W_O^hᵀ``, product ``W_V^h W_O^h``.

Every column is the one of docs/theory.md's observables table for that pair; the loss
columns (``loss``, ``l2_loss``, ``star_loss``) are not per head and are left out (the
model's losses are in the ``loss`` table).

With ``save.cross_gaps``, :func:`cross_gap_rel` pairs every head's A with the B of every
head of its layer: the gap matrix of ``rankflow inspect``'s layer-stratified permutation
test, along training.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core.observables import OBSERVABLES, observables

__all__ = ["HEAD_COLUMNS", "PAIRS", "cross_gap_rel", "head_factors", "head_observables"]

PAIRS = ("qk", "vo")
# The per-head scalar columns, in table order; ``sv_1 … sv_{d_h}`` follow them.
HEAD_COLUMNS = tuple(c for c in OBSERVABLES if c not in ("loss", "l2_loss", "star_loss"))

Factors = dict[str, tuple[Float[Array, "*S D d_h"], Float[Array, "*S D d_h"]]]


def head_factors(params, layers: int) -> Factors:
    """``{"qk": (A, B), "vo": (A, B)}`` with ``A, B`` of shape (layers, H, D, d_h)."""
    attn = [params["blocks"][l]["attn"] for l in range(layers)]
    stack = lambda name: jnp.stack([a[name] for a in attn])
    return {
        "qk": (stack("W_Q"), stack("W_K")),
        "vo": (stack("W_V"), jnp.swapaxes(stack("W_O"), -1, -2)),
    }


def head_observables(factors: Factors, rank_tol: float) -> dict[str, Array]:
    """Every :data:`HEAD_COLUMNS` entry of every head, for factors with any leading
    shape ``S`` (e.g. runs × saves × layers × H): each column has shape ``S + (2,)``
    (the pairs in :data:`PAIRS` order, last), and ``"sv"`` ``S + (2, d_h)``.

    The heads are a ``vmap`` of the core's observables, whose decompositions run one
    matrix at a time on CPU (:func:`rankflow.numerics.linalg.one_at_a_time`: batched LAPACK
    calls side by side deadlock XLA:CPU's pool; a vmapped batch of 4,032 heads did).
    """
    A = jnp.stack([factors[pair][0] for pair in PAIRS], axis=-3)  # S + (2, D, d_h)
    B = jnp.stack([factors[pair][1] for pair in PAIRS], axis=-3)
    lead, (D, r) = A.shape[:-2], A.shape[-2:]
    zero = jnp.zeros((), A.dtype)
    flat = [jnp.reshape(x, (math.prod(lead), D, r)) for x in (A, B)]
    out = jax.vmap(lambda a, b: observables(a, b, zero, zero, rank_tol))(*flat)
    return {k: jnp.reshape(out[k], lead + out[k].shape[1:]) for k in HEAD_COLUMNS + ("sv",)}


def cross_gap_rel(factors: Factors) -> Float[Array, "*S H 2 H"]:
    """``gap[..., u, p, v] = ‖A_uᵀA_u − B_vᵀB_v‖_F / ½(‖A_uᵀA_u‖_F + ‖B_vᵀB_v‖_F)`` for
    head u's A and head v's B of pair p (:data:`PAIRS` order) of the same layer; 0 where
    both Grams vanish. Factors of shape ``S + (H, D, d_h)``; the diagonal ``u = v`` is
    ``balance_gap_rel``, and the matrix is ``rankflow.inspect.pairwise_gap_rel`` of the
    flattened Grams.

    The norm is taken of the Grams' difference, not of ``‖a‖² + ‖b‖² − 2⟨a, b⟩``, which
    cancels to rounding noise on nearly balanced heads. One head v at a time
    (``lax.map``), so the differences held are the size of the Grams, not H times it.
    """
    gram = lambda X: jnp.einsum("...ki,...kj->...ij", X, X)
    G_A = jnp.stack([gram(factors[pair][0]) for pair in PAIRS], axis=-3)  # S + (H, 2, r, r)
    G_B = jnp.stack([gram(factors[pair][1]) for pair in PAIRS], axis=-3)
    fro = lambda G: jnp.sqrt(jnp.sum(G**2, axis=(-2, -1)))
    norm_A = fro(G_A)  # S + (H, 2)

    def against(G_Bv):  # S + (2, r, r): head v's B Grams → gaps S + (H, 2) over u
        gap = fro(G_A - G_Bv[..., None, :, :, :])
        scale = 0.5 * (norm_A + fro(G_Bv)[..., None, :])
        return jnp.where(scale > 0, gap / jnp.where(scale > 0, scale, 1.0), 0.0)

    out = jax.lax.map(against, jnp.moveaxis(G_B, -4, 0))  # (H_v,) + S + (H_u, 2)
    return jnp.moveaxis(out, 0, -1)
