# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""Products of L factors in the engine: ``W = W_L ⋯ W_1`` with weight decay on every
factor (docs/theory.md, T12, T13; ``model.depth``).

The state of a run is a tuple of factors. At depth 2 it stays the pair ``(A, B)`` with
``W = ABᵀ`` (rankflow's convention since the start, and the code path whose tables are
pinned by tests/claims/test_golden.py); at depth L ≥ 3 it is ``(W_1, …, W_L)``, ``W_j`` of
shape ``d_j × d_{j−1}`` (``d_0 = n``, ``d_L = m``), as in :mod:`rankflow.theory`.
The two are told apart by the length of the tuple: :func:`product` and :func:`chain`
are the only places that read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ..numerics import linalg
from ..theory import depth_balances
from ..theory import product as factors_product
from .observables import loss_columns, rank_columns

__all__ = [
    "chain",
    "depth_observable_names",
    "depth_observables",
    "inner_widths",
    "init_depth_factors",
    "product",
    "shape_of",
]


def inner_widths(model: Mapping[str, Any]) -> tuple[int, ...]:
    """``(d_1, …, d_{L−1})`` of a point's ``model`` section: ``model.r`` for every inner
    width, or its list of L − 1 widths."""
    r, depth = model["r"], model.get("depth", 2)
    if isinstance(r, list | tuple):
        return tuple(int(d) for d in r)
    return (int(r),) * (depth - 1)


def product(theta) -> Float[Array, "m n"]:
    """W of a state's factors: ``ABᵀ`` for the depth-2 pair, ``W_L ⋯ W_1`` beyond."""
    if len(theta) == 2:
        A, B = theta
        return A @ B.T
    return factors_product(theta)


def shape_of(theta) -> tuple[int, int]:
    """``(m, n)`` of the product of a state's factors."""
    if len(theta) == 2:
        return theta[0].shape[0], theta[1].shape[0]
    return theta[-1].shape[0], theta[0].shape[1]


def chain(G: Float[Array, "m n"], theta):
    """The factor gradients of a W-space gradient ``G`` by the chain rule: ``(G B, GᵀA)``
    for the pair (written out: see :func:`rankflow.core.dynamics.vector_fields.factor_grads`), and
    ``∇_j = (W_L⋯W_{j+1})ᵀ G (W_{j−1}⋯W_1)ᵀ`` beyond (the pullback of :func:`product`)."""
    if len(theta) == 2:
        A, B = theta
        return G @ B, jnp.swapaxes(G, -1, -2) @ A
    _, pullback = jax.vjp(product, tuple(theta))
    return pullback(G)[0]


# --- initialisation ----------------------------------------------------------------------


def _normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype) -> Array:
    # As rankflow.core.problems draws: in float32, cast, so x64 changes precision only.
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def _balanced(U, root, Vt, widths: Sequence[int], dtype) -> tuple[Array, ...]:
    """Factors ``W_1 = Q_1 R Vᵀ``, ``W_j = Q_j R Q_{j−1}ᵀ``, ``W_L = U R Q_{L−1}ᵀ``
    (``R = diag(root)``, ``Q_j`` the first k unit vectors of ``R^{d_j}``): every
    ``D_j = 0`` exactly, product ``U R^L Vᵀ``."""
    k = root.shape[0]
    Qs = [jnp.eye(d, k, dtype=dtype) for d in widths]
    lefts = Qs + [U[:, :k]]
    rights = [Vt[:k].T] + Qs
    return tuple((Ql * root[None, :]) @ Qr.T for Ql, Qr in zip(lefts, rights, strict=True))


def _imbalance_scales(x, pairs: Sequence[int], depth: int):
    """``c_1, …, c_L`` with ``Π c_j = 1`` and ``c_{j+1}² − c_j² = x`` for the pairs j in
    ``pairs`` (0 for the others): scaling balanced factors by them makes
    ``D_j = (c_{j+1}² − c_j²) P`` with P the common balanced Gram. With ``c_j² = a +
    x·n_j`` (n_j the named pairs below j), ``a`` is the root of the increasing
    ``Σ_j log(a + x n_j) = 0``: concave in a, so Newton from a point left of the root
    (``a_0 = (1 + x n_L)^{−(L−1)}``, where the sum is ≤ 0) rises monotonically to it."""
    counts = jnp.asarray([sum(1 for p in pairs if p < j) for j in range(1, depth + 1)], x.dtype)
    offsets = x * counts

    def newton(_, a):
        g = jnp.sum(jnp.log(a + offsets))
        dg = jnp.sum(1.0 / (a + offsets))
        return a - g / dg

    a0 = (1.0 + offsets[-1]) ** (-(depth - 1.0))
    a = jax.lax.fori_loop(0, 60, newton, a0)
    return jnp.sqrt(a + offsets)


def init_depth_factors(
    kind: str,
    key: PRNGKeyArray,
    target: Array | None,
    shape: tuple[int, int],
    widths: Sequence[int],
    scale: Float[Array, ""],
    imbalance: Float[Array, ""],
    pairs: Sequence[int],
    dtype,
) -> tuple[Array, ...]:
    """Initial factors ``(W_1, …, W_L)`` of depth ``L = len(widths) + 1`` ≥ 3.

    - ``gaussian``: i.i.d. N(0, scale²) entries.
    - ``balanced``: balanced factors (every ``D_j = 0``, to rounding) of the product of
      such Gaussian factors' best rank-k part, ``k = min(m, n, widths)``.
    - ``spectral``: balanced factors of ``W(0) = scale·U_k V_kᵀ`` from the target's SVD.
    - ``imbalanced``: the balanced start with ``W_j`` scaled by ``c_j`` (``Π c_j = 1``:
      the same product) so that ``‖D_j‖_F = imbalance`` exactly for the pairs j in
      ``pairs`` and ``D_j = 0`` for the others.
    - ``lora``: the Gaussian factors with the input-side factor W_1 = 0 exactly (W_2 …
      W_L Gaussian), so W(0) = 0 and ``D_1(0) = W_2ᵀW_2``: depth 2's A Gaussian and
      B = W_1ᵀ = 0 (D_1 = W_2ᵀW_2 − W_1W_1ᵀ = AᵀA − BᵀB there). One zero factor only:
      W_1's gradient (W_L⋯W_2)ᵀ∇L(0) is nonzero in general, so the dynamics leave the
      start (two zero factors would be a saddle that gradient steps never leave).
    """
    m, n = shape
    dims = (n, *widths, m)
    depth = len(dims) - 1
    keys = jax.random.split(key, depth)
    gauss = tuple(scale * _normal(keys[j], (dims[j + 1], dims[j]), dtype) for j in range(depth))
    if kind == "gaussian":
        return gauss
    if kind == "lora":
        return (jnp.zeros_like(gauss[0]), *gauss[1:])
    k = min(m, n, *widths)
    if kind == "spectral":
        U, _, Vt = linalg.svd(target)
        root = jnp.full((k,), scale, dtype) ** (1.0 / depth)
        return _balanced(U, root, Vt, widths, dtype)
    U, S, Vt = linalg.svd(product(gauss))
    factors = _balanced(U, S[:k] ** (1.0 / depth), Vt, widths, dtype)
    if kind == "balanced":
        return factors
    if kind == "imbalanced":
        gram = factors[0] @ factors[0].T  # every balanced Gram has this spectrum
        x = imbalance / jnp.linalg.norm(gram)
        c = _imbalance_scales(x, pairs, depth)
        return tuple(c[j] * Wj for j, Wj in enumerate(factors))
    raise ValueError(f"init.kind: unknown kind {kind!r}")


# --- observables -------------------------------------------------------------------------


def depth_observable_names(depth: int) -> tuple[str, ...]:
    """The scalar columns of a depth-``depth`` (≥ 3) table, in order; ``sv_1 …`` follow."""
    gaps = tuple(f"balance_gap_{j}" for j in range(1, depth))
    return (
        "loss",
        "l2_loss",
        "schatten_loss",
        "star_loss",
        "l2_penalty",
        "schatten_penalty",
        "schatten_gap",
        "nuclear_norm",
        *gaps,
        "effective_rank",
        "stable_rank",
        "rank",
    )


def depth_observables(
    factors: Sequence[Array], loss: Float[Array, ""], lam: Float[Array, ""], rank_tol: float
) -> dict[str, Array]:
    """The depth-L columns (:func:`depth_observable_names`) of factors ``(W_1, …, W_L)``:
    ``l2_penalty`` = ½Σ‖W_j‖_F², ``schatten_penalty`` = (L/2)Σσ_i^{2/L} (T13; singular
    values at rounding level, ≤ σ_1·max(m, n)·ε, count as 0), ``schatten_gap`` their
    difference (≥ 0, zero iff balanced), ``l2_loss`` = loss + λ·l2_penalty (the
    objective), ``schatten_loss`` = loss + λ·schatten_penalty (its value at balance),
    ``balance_gap_j`` = ‖W_{j+1}ᵀW_{j+1} − W_jW_jᵀ‖_F, and the W-only columns as at
    depth 2. The singular values ``sv`` are the ``min(m, n, widths)`` largest."""
    depth = len(factors)
    W = product(factors)
    k = min(*W.shape, *(Wj.shape[0] for Wj in factors[:-1]))
    s = linalg.svdvals(W)[:k]
    top = s[0]
    l2_penalty = 0.5 * sum(jnp.sum(Wj**2) for Wj in factors)
    keep = s > top * max(W.shape) * jnp.finfo(s.dtype).eps
    schatten = 0.5 * depth * jnp.sum(jnp.where(keep, jnp.where(keep, s, 1.0) ** (2.0 / depth), 0.0))
    out = loss_columns(loss, lam, l2_penalty, jnp.sum(s)) | {
        "schatten_loss": loss + lam * schatten,
        "schatten_penalty": schatten,
        "schatten_gap": l2_penalty - schatten,
    }
    for j, D in enumerate(depth_balances(factors), 1):
        out[f"balance_gap_{j}"] = jnp.sqrt(jnp.sum(D**2))
    return out | rank_columns(s, rank_tol)
