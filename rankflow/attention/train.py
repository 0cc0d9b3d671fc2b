"""Discrete training: the loss as a pure function of the parameters, optax steps, and
training that saves every ``eval_every`` steps (:func:`rankflow.core.optimizers.iterate`).

Time is in optimizer steps; step ``k`` draws its minibatch from ``fold_in(key, k)``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..core import optimizers
from ..numerics.solve import Saved
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
    """``G`` of docs/theory.md per head: the gradient of the loss with respect to each head's
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
    export_every: int = 0,
) -> Saved:
    """Train from ``params0`` for ``every·(saves − 1)`` steps with minibatches
    ``sample(fold_in(key, k))``; returns ``observe(params)`` at steps 0, every, 2·every, …
    stacked along a leading axis of length ``saves`` (with every save reached: see
    :func:`rankflow.core.optimizers.iterate`).

    With ``export_every`` (a multiple of ``every`` dividing ``every·(saves − 1)``) the
    observations also hold ``"params"``: the parameter pytree at steps 0,
    export_every, 2·export_every, …, stacked along a leading axis of that length."""
    grad = jax.grad(loss)

    def grads(params, k):
        return grad(params, sample(jax.random.fold_in(key, k)))

    if not export_every:
        return optimizers.iterate(opt, grads, params0, every * np.arange(saves), observe)
    return _iterate_exporting(opt, grads, params0, every, saves, export_every // every, observe)


def _iterate_exporting(opt, grads, params0, every: int, saves: int, per: int, observe) -> Saved:
    """:func:`iterate` as two nested scans, saves inside exports, so that only the
    exported parameters are stacked (memory: exports × parameters, not saves ×)."""

    step = optimizers.optimizer_step(opt, grads)

    def interval(carry, _):
        carry = jax.lax.scan(lambda c, _: (step(c), None), carry, length=every)[0]
        return carry, observe(carry[0])

    def export(carry, _):
        carry, obs = jax.lax.scan(interval, carry, length=per)
        return carry, (obs, carry[0])

    carry = (params0, opt.init(params0), jnp.asarray(0, jnp.int32))
    _, (obs, params) = jax.lax.scan(export, carry, length=(saves - 1) // per)
    flat = lambda x: jnp.reshape(x, (x.shape[0] * x.shape[1],) + x.shape[2:])
    first = lambda a, b: jnp.concatenate([a[None], b])
    ys = jax.tree.map(first, observe(params0), jax.tree.map(flat, obs))
    ys["params"] = jax.tree.map(first, params0, params)
    reached = jnp.ones(saves, bool)
    return Saved(ys, reached, ~reached)
