"""The discrete dynamics kinds: the optax optimizers of docs/theory.md's table, one
:class:`DiscreteKind` each. Their steps are :mod:`rankflow.core.optimizers`' (``gd``,
``sgd_gaussian``, ``momentum``, ``momentum_coupled``), optax's ``adamw`` and Adam with L2.

A kind with decoupled decay also gives its update direction ``u`` alone
(:meth:`DiscreteKind.direction`), so that a step is ``θ ← θ − η_k(u + λθ)``: the attention
family builds its optimizers (sgd, momentum, adamw, decay per parameter group) from it.
"""

from __future__ import annotations

import optax

from .. import optimizers
from . import laws
from .kind import DynamicsKind, register_dynamics

__all__ = [
    "AdamL2",
    "AdamW",
    "DiscreteKind",
    "GD",
    "Momentum",
    "MomentumCoupled",
    "SGD",
    "SGDGaussian",
]


class DiscreteKind(DynamicsKind):
    """A discrete kind: implement :meth:`optimizer` (and, with decoupled decay,
    :meth:`direction`) and set the capabilities. Its gradients are the full loss's, a
    minibatch's (``minibatches``) or, with ``noise = "gradient"``, the noisy ``G + σξ``
    fed to the step of its ``noiseless`` kind (:meth:`rankflow.core.program.Program`)."""

    continuous = False


@register_dynamics
class GD(DiscreteKind):
    """GD: ``θ ← θ − η_k(∇L + λθ)``, GF's explicit Euler step (dt = 1; T5)."""

    name = "gd"
    flow = "gradient_flow"

    def optimizer(self, learning_rate, hyper, key):
        return optimizers.gd(learning_rate, hyper["lam"])

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.identity()

    def balance_law(self, eta, lam, *, mu=None, noise=None, sigma=0.0, shape=None):
        return laws.gd_law(eta, lam)

    zero_loss_decay = staticmethod(laws.gd_decay)


@register_dynamics
class SGD(GD):
    """Minibatch SGD: GD's step on the gradient of a fresh minibatch of ``dynamics.batch``
    data points, drawn without replacement, at every step; its SDE is the stochastic
    flow with ``noise = "minibatch"`` (T10)."""

    name = "sgd"
    stochastic = minibatches = True
    noise_models = ("minibatch",)
    flow = "stochastic_flow"


@register_dynamics
class SGDGaussian(GD):
    """SGD with Gaussian noise: ``θ ← θ − η_k(∇L + ξ + λθ)``, ``ξ ~ N(0, σ²I)`` on the
    factors' gradients (``noise = "parameter"``), or GD's step on ``G + σξ`` in W's space
    (``noise = "gradient"``): SGF's Euler–Maruyama step (dt = 1; T6, T9)."""

    name = "sgd_gaussian"
    stochastic = takes_sigma = True
    noise_models = ("parameter", "gradient")
    flow = "stochastic_flow"
    noiseless = "gd"

    def optimizer(self, learning_rate, hyper, key):
        return optimizers.sgd_gaussian(learning_rate, hyper["lam"], hyper["sigma"], key)

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return None  # its noise is drawn inside the step (no direction alone)


@register_dynamics
class Momentum(DiscreteKind):
    """Momentum, decoupled decay: ``M ← (1−μ)M + μg``; ``θ ← θ − η_k(M + λθ)`` (T7)."""

    name = "momentum"
    momentum = True
    flow = "momentum_flow"

    def optimizer(self, learning_rate, hyper, key):
        return optimizers.momentum(learning_rate, hyper["lam"], hyper["mu"])

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.ema(1.0 - hyper["mu"], debias=False)

    def balance_law(self, eta, lam, *, mu=None, noise=None, sigma=0.0, shape=None):
        return laws.momentum_law(eta, lam, mu)

    zero_loss_decay = staticmethod(laws.gd_decay)  # M stays 0 on zero gradients


@register_dynamics
class MomentumCoupled(DiscreteKind):
    """Momentum, coupled (L2 in the loss): ``M ← (1−μ)M + μ(g + λθ)``; ``θ ← θ − η_k M``."""

    name = "momentum_coupled"
    momentum = coupled = True
    flow = "momentum_flow_coupled"
    no_balance_law = "coupled momentum: T7 gives no closed rate"

    def optimizer(self, learning_rate, hyper, key):
        return optimizers.momentum_coupled(learning_rate, hyper["lam"], hyper["mu"])

    zero_loss_decay = staticmethod(laws.coupled_momentum_decay)


@register_dynamics
class AdamW(DiscreteKind):
    """AdamW (``optax.adamw``): Adam's direction ``u``, then ``θ ← θ − η_k(u + λθ)``."""

    name = "adamw"
    no_balance_law = "AdamW: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.adamw(learning_rate=learning_rate, weight_decay=hyper["lam"])

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    zero_loss_decay = staticmethod(laws.gd_decay)  # Adam's direction is 0 on zero gradients


@register_dynamics
class AdamL2(DiscreteKind):
    """Adam with L2 in the loss: the decay ``λθ`` passes through Adam's normalisation
    (``add_decayed_weights`` before ``optax.adam``), so it has no closed decay."""

    name = "adam_l2"
    coupled = True
    no_balance_law = "Adam with L2: the update is not a gradient"
    no_closed_decay = "Adam normalises the decay λθ entrywise: θ(t) is no multiple of θ(0)"

    def optimizer(self, learning_rate, hyper, key):
        return optax.chain(
            optax.add_decayed_weights(hyper["lam"]), optax.adam(learning_rate=learning_rate)
        )
