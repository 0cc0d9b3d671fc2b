# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``completion`` problem: ``L = (mn/2N) Σ_k (W[i_k, j_k] − y_k)²`` (matrix completion)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from . import base
from .base import Data, Keys, Minibatch, Problem, register_problem


@register_problem
class Completion(Problem):
    """``L = (mn/2N) Σ_k (W[i_k, j_k] − y_k)²`` over N entries drawn uniformly (with
    replacement), ``y_k = W*[i_k, j_k] + noise·ε_k``."""

    name = "completion"
    description = "(mn/2N) Σ_k (W[i_k, j_k] − y_k)² over N uniformly drawn entries of W*"
    has_samples = True

    @classmethod
    def data_memory(cls, p: Mapping[str, Any], item: int) -> dict[Keys, int]:
        """The N rows, columns and values observed."""
        return cls.data_part(3 * p["samples"] * item)

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        target, kx, ke = base.random_target(self, key, dtype)
        m, n, N = self.m, self.n, self.samples
        ki, kj = jax.random.split(kx)
        rows = jax.random.randint(ki, (N,), 0, m)
        cols = jax.random.randint(kj, (N,), 0, n)
        y = target[rows, cols] + noise * base.normal(ke, (N,), dtype)
        return {"target": target, "rows": rows, "cols": cols, "y": y}

    def sample_losses(self, W: Float[Array, "m n"], data: Data) -> Float[Array, " N"]:
        r = W[data["rows"], data["cols"]] - data["y"]
        return 0.5 * self.m * self.n * r**2

    def batch_loss(
        self, W: Float[Array, "m n"], data: Data, idx: Int[Array, " batch"] | Minibatch | None
    ) -> Float[Array, ""]:
        take = base.taker(idx)
        r = W[take(data["rows"]), take(data["cols"])] - take(data["y"])
        return 0.5 * self.m * self.n * base.batch_mean(r**2, idx)

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """``mn/N`` times the largest number of times one entry was observed."""
        m, n = self.shape
        rows, cols = data["rows"], data["cols"]
        dtype = jnp.result_type(data["y"])
        counts = jnp.zeros((m, n), dtype).at[rows, cols].add(1.0)
        return (m * n / rows.shape[0]) * jnp.max(counts)
