# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``diagonal`` problem: ``L = ½‖W − diag(s)‖_F²`` (square, no data points)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ...config.fields import ConfigError
from .base import Data, Problem, check_nonnegative, register_problem

# problem.singular_values of a diagonal problem when none are given.
DIAGONAL_DEFAULT = (0.2, 0.4, 0.6, 0.8, 1.0)


@register_problem
class Diagonal(Problem):
    """``L = ½‖W − S‖_F²`` with ``S = diag(s)``, ``s = problem.singular_values``: W is
    square, ``m = n = len(s)``, and the target's rank is the number of ``sᵢ ≠ 0``."""

    name = "diagonal"
    description = "½‖W − diag(s)‖_F², W square of side len(problem.singular_values)"
    shape_keys = ("problem.singular_values",)

    @classmethod
    def validate(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        sv = cls.singular_values_of(p)
        if len(sv) < 1:
            raise ConfigError("problem.singular_values: diagonal needs at least one value")
        check_nonnegative(sv)

    @classmethod
    def singular_values_of(cls, p: Mapping[str, Any]) -> list[float]:
        sv = p["singular_values"]
        return list(DIAGONAL_DEFAULT) if sv is None else sv

    @classmethod
    def shape_of(cls, p: Mapping[str, Any]) -> tuple[int, int]:
        side = len(cls.singular_values_of(p))
        return side, side

    @classmethod
    def target_rank_of(cls, p: Mapping[str, Any]) -> int:
        return sum(1 for v in cls.singular_values_of(p) if v != 0)

    @classmethod
    def derive(cls, p: dict[str, Any]) -> None:
        """The singular values (given or :data:`DIAGONAL_DEFAULT`) and ``m = n``."""
        p["singular_values"] = cls.singular_values_of(p)
        p["m"] = p["n"] = len(p["singular_values"])

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        s = jnp.asarray(self.singular_values, dtype)
        return {"target": jnp.diag(s)}

    def loss(self, W: Float[Array, "m n"], data: Data) -> Float[Array, ""]:
        return 0.5 * jnp.sum((W - data["target"]) ** 2)

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """1: the Hessian of ``½‖W − S‖_F²`` is the identity."""
        return jnp.asarray(1.0, jnp.result_type(data["target"]))
