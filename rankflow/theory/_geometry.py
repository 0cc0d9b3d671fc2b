# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T14: decoupled decay with a bounded update, ``X_{k+1} = (1 − ηλ)X_k − ηU_k``.

Sign descent and Lion bound ``U`` in the max norm (ρ = 1), Muon in the spectral norm
(ρ = what its Newton–Schulz iteration and shape scaling produce, measured by
:func:`muon_rho`; the scalar map's supremum :func:`newton_schulz_sup` bounds it for any
input). The balance of a pair under such updates: :func:`balance_step`.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._common import Scalar, balance, float_dtype

Norm = Literal["max", "spectral"]
FactorA, FactorB, Gram = Float[Array, "m r"], Float[Array, "n r"], Float[Array, "r r"]
# optax.contrib.muon's default ("standard") quintic Newton–Schulz coefficients.
MUON_NS_COEFFS = (3.4445, -4.7750, 2.0315)


def t14_bound(
    norm0: Float[ArrayLike, ""], rho: Scalar, eta: Scalar, lam: Scalar, k: Float[ArrayLike, "*K"]
) -> Float[Array, "*K"]:
    """T14: ``‖X_k‖ ≤ ρ/λ + (1 − ηλ)^k (‖X_0‖ − ρ/λ)`` for ``X_{k+1} = (1 − ηλ)X_k − ηU_k``
    with ``‖U_k‖ ≤ ρ`` (any norm; ``0 ≤ ηλ ≤ 1``). Shape ``k.shape``.

    By induction on ``e_k = ‖X_k‖ − ρ/λ``: the triangle inequality gives
    ``‖X_{k+1}‖ ≤ (1 − ηλ)‖X_k‖ + ηρ``, i.e. ``e_{k+1} ≤ (1 − ηλ)e_k``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import t14_bound
      >>> [round(float(b), 4) for b in t14_bound(3.0, 1.0, 0.05, 1.0, jnp.array([0, 1, 10**4]))]
      [3.0, 2.9, 1.0]
      >>> X, U = jnp.array([3.0]), jnp.array([-1.0])  # |U| = ρ = 1, pushing outward
      >>> float(0.95 * X[0] - 0.05 * U[0])  # one step meets the bound: 1 + 0.95 · 2
      2.9
    """
    norm0 = jnp.asarray(norm0, float_dtype(norm0))
    dtype = norm0.dtype
    rho, eta, lam, k = (jnp.asarray(x, dtype) for x in (rho, eta, lam, k))
    return rho / lam + (1.0 - eta * lam) ** k * (norm0 - rho / lam)


def update_norm(U: Float[Array, "m n"], norm: Norm) -> Float[Array, ""]:
    """The radius of an update in the norm of T14: ``"max"`` is ``max |U_ij|`` (sign
    descent, Lion), ``"spectral"`` the largest singular value (Muon).

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import update_norm
      >>> U = jnp.array([[1.0, -1.0], [1.0, 1.0]])  # a sign update: orthogonal up to √2
      >>> float(update_norm(U, "max")), round(float(update_norm(U, "spectral")), 4)
      (1.0, 1.4142)
    """
    if norm == "max":
        return jnp.max(jnp.abs(U))
    if norm == "spectral":
        return jnp.linalg.norm(U, ord=2)
    raise ValueError(f"norm must be 'max' or 'spectral', not {norm!r}")


def newton_schulz_sup(
    coeffs: tuple[float, float, float] = MUON_NS_COEFFS,
    steps: int = 5,
    low: float = 0.0,
    grid: int = 200_001,
) -> float:
    """The supremum over ``σ ∈ [low, 1]`` of ``p^steps(σ)``, ``p(x) = a x + b x³ + c x⁵``.

    Newton–Schulz maps each singular value ``σ_i/‖X‖_F`` of its input (optax's default
    Frobenius preconditioning puts them in [0, 1]) to ``p^steps`` of it, so with
    ``low = 0`` this bounds the output's largest singular value for any input, and with
    ``low > 0`` for inputs whose nonzero singular values are all ``≥ low·‖X‖_F``. For
    optax's 5 steps the supremum 1.2024 sits at ``σ/‖X‖_F ≈ 0.004``; over
    ``[0.016, 1]`` it is 1.134357, the value :func:`muon_rho` measures on random inputs.
    Computed on a grid of ``grid`` points (numpy, float64).

    Examples:
      >>> from rankflow.theory import newton_schulz_sup
      >>> round(newton_schulz_sup(), 4), round(newton_schulz_sup(steps=1), 4)
      (1.2024, 1.2024)
      >>> round(newton_schulz_sup(low=0.02), 6)
      1.134357
    """
    a, b, c = coeffs
    x = np.linspace(low, 1.0, grid)
    for _ in range(steps):
        x = a * x + b * x**3 + c * x**5
    return float(x.max())


def muon_rho(
    shape: tuple[int, int], samples: int = 64, seed: int = 0, dtype=None, **muon_kwargs
) -> float:
    """Muon's ρ measured: the largest singular value, over ``samples`` Gaussian gradients
    of ``shape``, of ``optax.contrib.muon``'s update direction at its first step
    (Newton–Schulz and the shape scaling ``√max(1, fan_out/fan_in)``, fan_in = rows; no
    decay, learning rate 1), in ``dtype`` (default: the default float). ``muon_kwargs`` go
    to ``optax.contrib.muon``.

    Not 1: the quintic's singular values land in about [0.68, 1.134] for inputs without
    tiny singular values and up to 1.2024 in general (:func:`newton_schulz_sup`). A
    sample maximum, so it approaches 1.134357 from below (64 samples of 6×3: 1.13431). A
    measurement, not jittable.

    Examples:
      >>> from rankflow.theory import muon_rho, newton_schulz_sup
      >>> rho = muon_rho((6, 3), samples=16)  # a factor m × r, m ≥ r: shape scale 1
      >>> 1.05 < rho < newton_schulz_sup(), round(muon_rho((3, 6), samples=16) / rho, 2)
      (True, 1.41)
    """
    from optax.contrib import muon

    dtype = jnp.result_type(float) if dtype is None else dtype
    tx = muon(1.0, **muon_kwargs)
    keys = jax.random.split(jax.random.PRNGKey(seed), samples)

    def one(key):
        g = jax.random.normal(key, shape, dtype)
        u, _ = tx.update(g, tx.init(g), g)
        return jnp.linalg.norm(u, ord=2)

    return float(jnp.max(jax.vmap(one)(keys)))


def balance_step(
    A: FactorA, B: FactorB, U_A: FactorA, U_B: FactorB, eta: Scalar, lam: Scalar
) -> Gram:
    """T14: the balance after ``A′ = (1−ηλ)A − ηU_A``, ``B′ = (1−ηλ)B − ηU_B``, exactly:

    ``D′ = (1−ηλ)²D − η(1−ηλ)(AᵀU_A + U_AᵀA − BᵀU_B − U_BᵀB) + η²(U_AᵀU_A − U_BᵀU_B)``.

    For GD (``U_A = GB``, ``U_B = GᵀA``) the middle term is zero (``AᵀGB`` pairs with
    ``BᵀGᵀA``), which leaves T5; for sign descent, Lion or Muon it is not.

    Examples:
      >>> import jax.numpy as jnp
      >>> from rankflow.theory import balance, balance_step
      >>> A, B = jnp.array([[1.0, 0.5], [0.0, 1.0]]), jnp.array([[0.3, -0.2], [0.1, 0.4]])
      >>> U_A, U_B, eta, lam = jnp.sign(A - 0.2), jnp.sign(B), 0.1, 0.5  # sign-like updates
      >>> A1, B1 = (1 - eta * lam) * A - eta * U_A, (1 - eta * lam) * B - eta * U_B
      >>> bool(jnp.allclose(balance(A1, B1), balance_step(A, B, U_A, U_B, eta, lam)))
      True
    """
    dtype = float_dtype(A)
    eta, lam = jnp.asarray(eta, dtype), jnp.asarray(lam, dtype)
    c = 1.0 - eta * lam
    cross = A.T @ U_A - B.T @ U_B
    return c**2 * balance(A, B) - eta * c * (cross + cross.T) + eta**2 * balance(U_A, U_B)
