# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``regression`` problem: ``L = (1/2N) ‖W X − Y‖_F²`` with whitened inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ...config.fields import ConfigError
from ...numerics import linalg
from . import base
from .base import Data, Keys, Minibatch, Problem, register_problem


@register_problem
class Regression(Problem):
    """``L = (1/2N) ‖W X − Y‖_F²`` with whitened inputs ``X X ᵀ/N = I`` (X is n×N) and
    ``Y = W* X + noise·E``."""

    name = "regression"
    description = "(1/2N) ‖W X − Y‖_F², whitened inputs X (n×N), Y = W* X + noise"
    has_samples = True

    @classmethod
    def validate(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        """Also: ``samples ≥ n`` (the inputs are whitened)."""
        super().validate(p, init)
        if p["samples"] < p["n"]:
            raise ConfigError(
                f"problem.samples: regression whitens its inputs and needs samples ≥ "
                f"problem.n = {p['n']}, got {p['samples']}"
            )

    @classmethod
    def data_memory(cls, p: Mapping[str, Any], item: int) -> dict[Keys, int]:
        """The n×N inputs and m×N outputs, drawn as normal variates."""
        m, n = cls.shape_of(p)
        return cls.data_part(base.drawn_bytes((m + n) * p["samples"], item))

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        target, kx, ke = base.random_target(self, key, dtype)
        m, n, N = self.m, self.n, self.samples
        X = base.normal(kx, (n, N), dtype)
        # Whiten: X ← √N (XXᵀ)^{-1/2} X, so that XXᵀ/N = I exactly (to rounding).
        evals, evecs = linalg.eigh(X @ X.T)
        X = jnp.sqrt(jnp.asarray(N, dtype)) * ((evecs / jnp.sqrt(evals)[None, :]) @ evecs.T) @ X
        Y = target @ X + noise * base.normal(ke, (m, N), dtype)
        return {"target": target, "X": X, "Y": Y}

    def sample_losses(self, W: Float[Array, "m n"], data: Data) -> Float[Array, " N"]:
        return 0.5 * jnp.sum((W @ data["X"] - data["Y"]) ** 2, axis=0)

    def batch_loss(
        self, W: Float[Array, "m n"], data: Data, idx: Int[Array, " batch"] | Minibatch | None
    ) -> Float[Array, ""]:
        take = base.taker(idx)
        R = W @ take(data["X"], 1) - take(data["Y"], 1)
        return 0.5 * base.batch_mean(jnp.sum(R**2, axis=0), idx)

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """``‖X‖_2²/N`` (1 up to rounding, X being whitened)."""
        X = data["X"]
        return jnp.linalg.norm(X, 2) ** 2 / X.shape[1]
