# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``custom`` problem: a user's loss ``L(W)`` (``problem.loss``; no data, no target),
and the check of its contract before anything compiles."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ...config.callables import load_callable
from ...config.fields import STR, ConfigError, Field
from .base import Data, Problem, check_nonnegative, normal, register_problem


@register_problem
class Custom(Problem):
    """A user's ``L(W)``, ``W`` of shape ``problem.m × problem.n``: ``problem.loss``
    (``'module:function'``, or a callable in the Python API). No data, no target."""

    name = "custom"
    description = "a user's L(W): problem.loss, 'module:function' (Python: the callable)"
    has_target = False
    fields = {
        "loss": Field(
            STR,
            None,
            "custom: 'module:function' giving L(W) (Python: the callable itself)",
            optional=True,
            callables=True,
        ),
    }

    @classmethod
    def validate(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        """A loss that loads, and an initialisation that needs no target."""
        check_nonnegative(cls.singular_values_of(p))
        if p["loss"] is None:
            raise ConfigError(
                "problem.loss: custom problems need a loss, 'module:function' "
                "(or a callable L(W) in the Python API)"
            )
        load_callable(p["loss"])
        if init["kind"] == "spectral":
            raise ConfigError(
                "init.kind: 'spectral' needs a target, which custom problems lack; "
                "use gaussian, balanced or imbalanced"
            )

    @classmethod
    def precheck(cls, p: Mapping[str, Any], x64: bool) -> None:
        """The loss evaluated once on a sample W (:func:`check_custom_loss`)."""
        check_custom_loss(p["loss"], p["m"], p["n"], x64)

    @classmethod
    def from_config(cls, p: Mapping[str, Any]) -> Problem:
        """With the loss loaded (``rank`` and ``singular_values`` are unused)."""
        return dataclasses.replace(super().from_config(p), custom_loss=load_callable(p["loss"]))

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        return {}

    def loss(self, W: Float[Array, "m n"], data: Data) -> Float[Array, ""]:
        return self.custom_loss(W)


def check_custom_loss(spec: str | Callable, m: int, n: int, x64: bool) -> None:
    """Check a custom loss's contract before anything compiles: it loads, takes one
    argument W (m×n), traces (under :func:`jax.eval_shape`, gradient included) and
    runs once on a sample W, returning a real scalar. Raises ConfigError naming
    ``problem.loss`` and what is wrong."""
    fn = load_callable(spec)
    name = spec if isinstance(spec, str) else getattr(fn, "__qualname__", repr(fn))
    what = f"problem.loss: {name!r}"
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        raise ConfigError(
            f"{what} must take one argument, W ({m}×{n}); it cannot be "
            f"called as L(W): {inspect.signature(fn)}"
        ) from None
    except ValueError:  # no signature to read (a builtin): the calls below tell
        pass
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        W = 0.1 * normal(jax.random.PRNGKey(0), (m, n), dtype)
        for how, call in (
            ("cannot be traced by JAX (is it jittable?)", lambda: jax.eval_shape(fn, W)),
            ("is not differentiable by JAX", lambda: jax.eval_shape(jax.grad(fn), W)),
            ("fails when run", lambda: fn(W)),
        ):
            try:
                out = call()
            except Exception as e:  # noqa: BLE001 - any failure of user code is reported
                first = (str(e).strip().splitlines() or [""])[0]
                raise ConfigError(
                    f"{what} {how} on a sample W ({m}×{n}): {type(e).__name__}: {first}"
                ) from None
            if how.startswith("cannot"):
                _check_scalar(what, out)


def _check_scalar(what: str, out) -> None:
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape is None or dtype is None:
        raise ConfigError(f"{what} must return a scalar array, got {type(out).__name__}")
    if shape != ():
        raise ConfigError(f"{what} must return a scalar, got an array of shape {shape}")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ConfigError(f"{what} must return a real floating-point scalar, got {dtype}")
