"""Discrete training: the loss as a pure function of the parameters, optax steps, and
the scan that trains and saves every ``eval_every`` steps.

Time is in optimizer steps; step ``k`` draws its minibatch from ``fold_in(key, k)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import optax

from . import tasks as tasks_lib
from .model import Model
from .tasks import Task

__all__ = ["iterate", "loss_fn", "product_gradients", "train_step"]


def loss_fn(model: Model, task: Task) -> Callable:
    """``(params, batch, probes=None) ↦`` the task's data loss of the model."""

    def loss(params, batch, probes=None):
        return tasks_lib.loss(task, model.apply(params, batch["inputs"], probes), batch)

    return loss


def product_gradients(model: Model, task: Task, params, batch) -> dict[str, jax.Array]:
    """``G`` of THEORY.md per head: the gradient of the loss with respect to each head's
    product, ``{"qk": ∇_{W_Q^h W_K^hᵀ} L, "vo": ∇_{W_V^h W_O^h} L}``, each of shape
    (layers, H, D, D), from probes added to the products at zero."""
    loss = loss_fn(model, task)
    return jax.grad(lambda probes: loss(params, batch, probes))(model.zero_probes())


def train_step(loss: Callable, opt: optax.GradientTransformation) -> Callable:
    """``(params, opt_state, batch) ↦ (params, opt_state, loss)``: one optimizer step."""

    def step(params, opt_state, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def iterate(
    loss: Callable,
    opt: optax.GradientTransformation,
    sample: Callable,
    params0,
    key,
    *,
    every: int,
    saves: int,
    observe: Callable,
) -> Mapping[str, jax.Array]:
    """Train from ``params0`` for ``every·(saves − 1)`` steps with minibatches
    ``sample(fold_in(key, k))``; returns ``observe(params)`` at steps 0, every, 2·every, …
    stacked along a leading axis of length ``saves``."""
    step = train_step(loss, opt)

    def one(k, carry):
        params, opt_state = carry
        params, opt_state, _ = step(params, opt_state, sample(jax.random.fold_in(key, k)))
        return params, opt_state

    def interval(carry, i):
        # Save i follows steps every·(i−1) … every·i − 1 (none before save 0): one loop
        # body and one observe in the program, however many saves.
        start = jnp.maximum(i - 1, 0) * every
        carry = jax.lax.fori_loop(start, i * every, one, carry)
        return carry, observe(carry[0])

    carry = (params0, opt.init(params0))
    _, saved = jax.lax.scan(interval, carry, jnp.arange(saves, dtype=jnp.int32))
    return saved
