"""Discrete dynamics: optax optimizers matching THEORY.md's table exactly.

Built inside the traced program, so learning rate and weight decay are traced values
(one compilation serves a whole sweep of them).
"""

from __future__ import annotations

import optax
from jaxtyping import Array, Float

__all__ = ["gd"]


def gd(eta: Float[Array, ""], lam: Float[Array, ""]) -> optax.GradientTransformation:
    """GD (THEORY.md): ``θ ← θ − η(∇L + λθ)``, the explicit Euler step (dt = 1) of GF."""
    return optax.chain(optax.add_decayed_weights(lam), optax.scale(-eta))


def make_optimizer(kind: str, hyper: dict[str, Array]) -> optax.GradientTransformation:
    """The optimizer of ``dynamics.kind`` with traced hyperparameters ``hyper``."""
    if kind == "gd":
        return gd(hyper["eta"], hyper["lam"])
    raise ValueError(f"dynamics.kind: no optimizer named {kind!r}")
