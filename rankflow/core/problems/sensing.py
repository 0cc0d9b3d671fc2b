# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``sensing`` problem: ``L = (1/2N) Σ_k (⟨X_k, W⟩ − y_k)²`` (matrix sensing)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from . import base
from .base import Data, Keys, Minibatch, Problem, register_problem


@register_problem
class Sensing(Problem):
    """``L = (1/2N) Σ_k (⟨X_k, W⟩ − y_k)²`` over N measurements ``X_k`` (m×n, i.i.d.
    N(0, 1) entries), ``y_k = ⟨X_k, W*⟩ + noise·ε_k``."""

    name = "sensing"
    description = "(1/2N) Σ_k (⟨X_k, W⟩ − y_k)² over N Gaussian measurements X_k of W*"
    has_samples = True

    @classmethod
    def data_memory(cls, p: Mapping[str, Any], item: int) -> dict[Keys, int]:
        """The N×m×n measurements, drawn as normal variates."""
        m, n = cls.shape_of(p)
        return cls.data_part(base.drawn_bytes(p["samples"] * m * n, item))

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        target, kx, ke = base.random_target(self, key, dtype)
        N = self.samples
        X = base.normal(kx, (N, self.m, self.n), dtype)
        y = jnp.einsum("kij,ij->k", X, target) + noise * base.normal(ke, (N,), dtype)
        return {"target": target, "X": X, "y": y}

    def sample_losses(self, W: Float[Array, "m n"], data: Data) -> Float[Array, " N"]:
        return 0.5 * (jnp.einsum("kij,ij->k", data["X"], W) - data["y"]) ** 2

    def batch_loss(
        self, W: Float[Array, "m n"], data: Data, idx: Int[Array, " batch"] | Minibatch | None
    ) -> Float[Array, ""]:
        take = base.taker(idx)
        r = jnp.einsum("kij,ij->k", take(data["X"]), W) - take(data["y"])
        return 0.5 * base.batch_mean(r**2, idx)

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """``‖X_mat‖_2²/N`` with ``X_mat`` the N×(mn) matrix of measurements."""
        X = data["X"]
        N = X.shape[0]
        return jnp.linalg.norm(jnp.reshape(X, (N, -1)), 2) ** 2 / N
