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
        """The N rows, columns and values observed, and while they are drawn the PRNG's
        bits and conversions of the two index draws and the normal draw: ``N·(3·item +
        40)`` bytes (XLA:CPU's buffers for ``make_data``, measured: ``N·(3·item + 36.7)``
        at N = 4,000 in float32 and float64; tests/core/test_problem_contract.py)."""
        return cls.data_part(p["samples"] * (3 * item + 40))

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        target, kx, ke = base.random_target(self, key, dtype)
        m, n, N = self.m, self.n, self.samples
        ki, kj = jax.random.split(kx)
        # int32 draws whatever x64 says: under x64 randint's default int64 draws other
        # entries, so a run's precision would change its random problem (the contract's
        # float32-against-float64 check found it).
        rows = jax.random.randint(ki, (N,), 0, m, jnp.int32)
        cols = jax.random.randint(kj, (N,), 0, n, jnp.int32)
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
