"""Discrete dynamics: optax optimizers matching docs/theory.md's table exactly (the steps
of :mod:`rankflow.core.dynamics.discrete`'s kinds), and :func:`iterate`, the one loop that
runs an optimizer and saves observations.

Built inside the traced program, so learning rate, weight decay, σ and μ are traced
values (one compilation serves a whole sweep of them). A learning rate is a number or a
schedule function of the step, as in optax (``optax.scale_by_learning_rate``). Note that
``optax.sgd(momentum=β)`` uses ``M ← βM + g`` (effective step η/(1−β)); the momentum
here is the EMA of docs/theory.md, ``M ← (1−μ)M + μg``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from ..numerics.schedules import Schedule, learning_rate
from ..numerics.solve import Saved
from .dynamics.kind import DYNAMICS

__all__ = [
    "add_gaussian_noise",
    "gd",
    "iterate",
    "make_optimizer",
    "momentum",
    "momentum_coupled",
    "optimizer_step",
    "sgd_gaussian",
]

Scalar = Float[Array, ""]
# A learning rate as optax takes it: a number, or a function of the step count k ↦ η_k
# (rankflow.numerics.schedules.learning_rate).
LearningRate = Scalar | float | Callable[[Array], Scalar]


class GaussianNoiseState(NamedTuple):
    key: PRNGKeyArray


def add_gaussian_noise(sigma: Scalar, key: PRNGKeyArray) -> optax.GradientTransformation:
    """``g ← g + ξ``, ``ξ ~ N(0, σ²I)`` fresh at every step (the PRNG key is carried in
    the state). Unlike ``optax.add_noise``, the variance does not decay with the step."""

    def init_fn(params):
        del params
        return GaussianNoiseState(key)

    def update_fn(updates, state, params=None):
        del params
        key, sub = jax.random.split(state.key)
        leaves, treedef = jax.tree.flatten(updates)
        keys = jax.random.split(sub, len(leaves))
        noisy = [
            g + sigma * jax.random.normal(k, g.shape, g.dtype)
            for g, k in zip(leaves, keys, strict=True)
        ]
        return jax.tree.unflatten(treedef, noisy), GaussianNoiseState(key)

    return optax.GradientTransformation(init_fn, update_fn)


def gd(learning_rate: LearningRate, lam: Scalar) -> optax.GradientTransformation:
    """GD: ``θ ← θ − η_k(∇L + λθ)``, the explicit Euler step (dt = 1) of GF. Also SGD
    with minibatch gradients (``dynamics.kind = "sgd"``)."""
    return optax.chain(optax.add_decayed_weights(lam), optax.scale_by_learning_rate(learning_rate))


def sgd_gaussian(
    learning_rate: LearningRate, lam: Scalar, sigma: Scalar, key: PRNGKeyArray
) -> optax.GradientTransformation:
    """SGD with Gaussian noise: ``θ ← θ − η_k(∇L + ξ + λθ)``, ``ξ ~ N(0, σ²I)``: the
    Euler–Maruyama step (dt = 1) of SGF."""
    return optax.chain(
        add_gaussian_noise(sigma, key),
        optax.add_decayed_weights(lam),
        optax.scale_by_learning_rate(learning_rate),
    )


def momentum(learning_rate: LearningRate, lam: Scalar, mu: Scalar) -> optax.GradientTransformation:
    """Momentum, decoupled decay: ``M ← (1−μ)M + μg``; ``θ ← θ − η_k(M + λθ)``."""
    return optax.chain(
        optax.ema(1.0 - mu, debias=False),
        optax.add_decayed_weights(lam),
        optax.scale_by_learning_rate(learning_rate),
    )


def momentum_coupled(
    learning_rate: LearningRate, lam: Scalar, mu: Scalar
) -> optax.GradientTransformation:
    """Momentum, coupled (L2 in the loss): ``M ← (1−μ)M + μ(g + λθ)``; ``θ ← θ − η_k M``."""
    return optax.chain(
        optax.add_decayed_weights(lam),
        optax.ema(1.0 - mu, debias=False),
        optax.scale_by_learning_rate(learning_rate),
    )


def make_optimizer(
    kind: str, hyper: dict[str, Array], key: PRNGKeyArray, schedule: Schedule | None = None
) -> optax.GradientTransformation:
    """The optimizer of ``dynamics.kind`` with traced hyperparameters ``hyper``
    (``eta``, ``lam``, ``sigma``, ``mu``), noise key ``key`` and learning-rate
    ``schedule`` (the step from k to k + 1 uses η(k); constant by default): its learning
    rate is :func:`rankflow.numerics.schedules.learning_rate` of ``eta`` and ``schedule``,
    a number or a function of the step, as in optax. The step is the registered kind's
    (:meth:`rankflow.core.dynamics.kind.DynamicsKind.optimizer`; a ValueError for a
    kind that is none or no discrete one)."""
    if kind not in DYNAMICS:
        raise ValueError(f"dynamics.kind: no optimizer named {kind!r}")
    return DYNAMICS[kind].optimizer(learning_rate(hyper["eta"], schedule), hyper, key)


def optimizer_step(opt: optax.GradientTransformation, grads: Callable) -> Callable:
    """One step of ``opt`` as a function of ``carry = (params, opt_state, k)``, step
    ``k`` using the gradients ``grads(params, k)``; returns the next carry."""

    def step(carry):
        params, state, k = carry
        updates, state = opt.update(grads(params, k), state, params)
        return optax.apply_updates(params, updates), state, k + 1

    return step


def iterate(
    opt: optax.GradientTransformation,
    grads: Callable,
    params0,
    steps: np.ndarray,
    observe: Callable,
) -> Saved:
    """Run ``opt`` from ``params0``, step ``k`` (0, 1, …) using the gradients
    ``grads(params, k)``, and save ``observe(params)`` after ``steps[i]`` steps (a static,
    non-decreasing array of whole numbers). Every save is reached: a blow-up shows in
    the observations (NaN propagates), never stops the loop.

    One scan over the save intervals, whose body runs the interval's steps and then
    observes: memory O(saves), whatever the number of steps."""

    step = optimizer_step(opt, grads)

    def run(carry, n: int):
        return jax.lax.scan(lambda c, _: (step(c), None), carry, length=n)[0]

    gaps = np.diff(np.concatenate([[0], np.asarray(steps, np.int64)]))
    carry = (params0, opt.init(params0), jnp.asarray(0, jnp.int32))
    if len(gaps) > 1 and np.all(gaps[1:] == gaps[1]):
        # Evenly spaced saves: static inner scans, no dynamic trip count.
        carry = run(carry, int(gaps[0])) if gaps[0] else carry
        first = observe(carry[0])

        def interval(c, _):
            c = run(c, int(gaps[1]))
            return c, observe(c[0])

        _, rest = jax.lax.scan(interval, carry, length=len(gaps) - 1)
        ys = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    else:

        def advance(c, n):
            c = jax.lax.fori_loop(0, n, lambda _, cc: step(cc), c)
            return c, observe(c[0])

        _, ys = jax.lax.scan(advance, carry, jnp.asarray(gaps))
    reached = jnp.ones(len(gaps), bool)
    return Saved(ys, reached, ~reached)
