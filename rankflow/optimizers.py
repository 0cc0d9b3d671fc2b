"""Discrete dynamics: optax optimizers matching THEORY.md's table exactly.

Built inside the traced program, so learning rate, weight decay, σ and μ are traced
values (one compilation serves a whole sweep of them). Note that
``optax.sgd(momentum=β)`` uses ``M ← βM + g`` (effective step η/(1−β)); the momentum
here is the EMA of THEORY.md, ``M ← (1−μ)M + μg``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import optax
from jaxtyping import Array, Float, PRNGKeyArray

__all__ = [
    "add_gaussian_noise",
    "gd",
    "make_optimizer",
    "momentum",
    "momentum_coupled",
    "sgd_gaussian",
]

Scalar = Float[Array, ""]


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


def gd(eta: Scalar, lam: Scalar) -> optax.GradientTransformation:
    """GD: ``θ ← θ − η(∇L + λθ)``, the explicit Euler step (dt = 1) of GF. Also SGD with
    minibatch gradients (``dynamics.kind = "sgd"``)."""
    return optax.chain(optax.add_decayed_weights(lam), optax.scale(-eta))


def sgd_gaussian(eta: Scalar, lam: Scalar, sigma: Scalar, key: PRNGKeyArray):
    """SGD with Gaussian noise: ``θ ← θ − η(∇L + ξ + λθ)``, ``ξ ~ N(0, σ²I)``: the
    Euler–Maruyama step (dt = 1) of SGF."""
    return optax.chain(
        add_gaussian_noise(sigma, key), optax.add_decayed_weights(lam), optax.scale(-eta)
    )


def momentum(eta: Scalar, lam: Scalar, mu: Scalar) -> optax.GradientTransformation:
    """Momentum, decoupled decay: ``M ← (1−μ)M + μg``; ``θ ← θ − η(M + λθ)``."""
    return optax.chain(
        optax.ema(1.0 - mu, debias=False), optax.add_decayed_weights(lam), optax.scale(-eta)
    )


def momentum_coupled(eta: Scalar, lam: Scalar, mu: Scalar) -> optax.GradientTransformation:
    """Momentum, coupled (L2 in the loss): ``M ← (1−μ)M + μ(g + λθ)``; ``θ ← θ − ηM``."""
    return optax.chain(
        optax.add_decayed_weights(lam), optax.ema(1.0 - mu, debias=False), optax.scale(-eta)
    )


def make_optimizer(
    kind: str, hyper: dict[str, Array], key: PRNGKeyArray
) -> optax.GradientTransformation:
    """The optimizer of ``dynamics.kind`` with traced hyperparameters ``hyper``
    (``eta``, ``lam``, ``sigma``, ``mu``) and noise key ``key``."""
    eta, lam, sigma, mu = hyper["eta"], hyper["lam"], hyper["sigma"], hyper["mu"]
    if kind in ("gd", "sgd"):
        return gd(eta, lam)
    if kind == "sgd_gaussian":
        return sgd_gaussian(eta, lam, sigma, key)
    if kind == "momentum":
        return momentum(eta, lam, mu)
    if kind == "momentum_coupled":
        return momentum_coupled(eta, lam, mu)
    if kind == "adamw":
        return optax.adamw(learning_rate=eta, weight_decay=lam)
    if kind == "adam_l2":
        # L2 in the loss: the decay passes through Adam's normalisation.
        return optax.chain(optax.add_decayed_weights(lam), optax.adam(learning_rate=eta))
    raise ValueError(f"dynamics.kind: no optimizer named {kind!r}")
