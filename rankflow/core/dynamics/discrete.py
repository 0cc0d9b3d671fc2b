"""The discrete dynamics kinds: the optax optimizers of docs/theory.md's table, one
:class:`DiscreteKind` each. Their steps are :mod:`rankflow.core.optimizers`' (``gd``,
``sgd_gaussian``, ``momentum``, ``momentum_coupled``), optax's ``adamw`` and Adam with L2,
and the geometry-changing optimizers of optax 0.2.8 (``sign_sgd``, ``signum``, ``lion``,
``contrib.muon``, ``contrib.schedule_free_adamw``).

Decay means one thing in every kind: ``ηλ`` per step, ``η = dynamics.eta`` (scheduled or
not) and ``λ = dynamics.lam``. optax's ``weight_decay`` arguments of adamw, lion, muon and
schedule-free AdamW are multiplied by the learning rate (``add_decayed_weights`` before
``scale_by_learning_rate``), so they are given ``λ``; sign_sgd and signum have none, and
their kinds chain ``add_decayed_weights(λ)`` before the learning rate as adamw does.

A kind with decoupled decay also gives its update direction ``u`` alone
(:meth:`DiscreteKind.direction`), so that a step is ``θ ← θ − η_k(u + λθ)``: the attention
family builds its optimizers (sgd, momentum, adamw, sign_gd, signum, lion, muon; decay per
parameter group) from it, muon with its matrices named (``dimension_numbers``).
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
    "Lion",
    "Muon",
    "ScheduleFreeAdamW",
    "SignGD",
    "Signum",
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


@register_dynamics
class SignGD(DiscreteKind):
    """Sign descent (``optax.sign_sgd``), decoupled decay: ``θ ← θ − η_k(sign(∇L) + λθ)``
    (``add_decayed_weights(λ)`` chained before the learning rate, as in ``optax.adamw``;
    sign_sgd has no weight decay of its own). sign(0) = 0, so its zero-loss decay is GD's."""

    name = "sign_gd"
    no_balance_law = "sign descent: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.chain(
            optax.scale_by_sign(),
            optax.add_decayed_weights(hyper["lam"]),
            optax.scale_by_learning_rate(learning_rate),
        )

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.scale_by_sign()

    zero_loss_decay = staticmethod(laws.gd_decay)  # sign(0) = 0


@register_dynamics
class Signum(DiscreteKind):
    """Signum (``optax.signum``), decoupled decay: ``M ← (1−μ)M + μg``,
    ``θ ← θ − η_k(sign(M) + λθ)``. ``dynamics.mu`` is mapped honestly: optax's EMA
    ``M ← βM + (1−β)g`` (``optax.ema``, not debiased) is rankflow's momentum with
    ``β = 1 − μ`` (``momentum``'s, docs/theory.md), so the default μ = 0.1 is optax's
    β = 0.9. Decay as in :class:`SignGD` (signum has none of its own)."""

    name = "signum"
    momentum = True
    no_balance_law = "signum: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.chain(
            self.direction(hyper),
            optax.add_decayed_weights(hyper["lam"]),
            optax.scale_by_learning_rate(learning_rate),
        )

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.chain(optax.ema(1.0 - hyper["mu"], debias=False), optax.scale_by_sign())

    zero_loss_decay = staticmethod(laws.gd_decay)  # M stays 0, sign(0) = 0


@register_dynamics
class Lion(DiscreteKind):
    """Lion (``optax.lion``, ``weight_decay = λ``: optax multiplies it by the learning
    rate): ``θ ← θ − η_k(sign(β₁M + (1−β₁)g) + λθ)``, ``M ← β₂M + (1−β₂)g``, with optax's
    β₁ = 0.9, β₂ = 0.99. Its two rates have no single honest ``dynamics.mu``, so it reads
    none (``momentum = False``: the capability means that μ is read)."""

    name = "lion"
    no_balance_law = "Lion: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.lion(learning_rate=learning_rate, weight_decay=hyper["lam"])

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8):
        return optax.scale_by_lion()  # its own β₁, β₂ (b1, b2 are Adam's)

    zero_loss_decay = staticmethod(laws.gd_decay)  # M stays 0, sign(0) = 0


@register_dynamics
class Muon(DiscreteKind):
    """Muon (``optax.contrib.muon``, ``weight_decay = λ``, multiplied by the learning rate
    in optax): the Nesterov momentum of every 2-D factor (A, B; each W_j at depth L)
    orthogonalised by optax's Newton–Schulz iteration, ``θ ← θ − η_k(O + λθ)``. Its
    defaults (β = 0.95, 5 steps, Nesterov, bias-corrected) are optax's: its momentum is not
    rankflow's EMA, so ``dynamics.mu`` is not read. Non-2-D parameters (none in the core
    family) go to optax's AdamW branch, given ``adam_weight_decay = λ`` (also multiplied by
    the learning rate), so λ means the same on every leaf. The orthogonalisation of a zero
    matrix is 0 (it is divided by its norm + ε first), so its zero-loss decay is GD's."""

    name = "muon"
    no_balance_law = "Muon: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.contrib.muon(
            learning_rate=learning_rate,
            weight_decay=hyper["lam"],
            adam_weight_decay=hyper["lam"],
        )

    def direction(self, hyper, *, b1=0.9, b2=0.999, eps=1e-8, dimension_numbers=None):
        # optax's muon without decay at learning rate −1: scale_by_learning_rate(−1) is
        # the identity, leaving each leaf's direction (Muon's, or Adam's off 2-D leaves).
        # b1, b2 are its Adam branch's, eps its one ε (optax's defaults are these);
        # ``dimension_numbers`` (optax's muon_weight_dimension_numbers: a pytree of
        # MuonDimensionNumbers, None on Adam's leaves) replaces optax's "2-D is Muon" rule.
        return optax.contrib.muon(
            learning_rate=-1.0,
            eps=eps,
            adam_b1=b1,
            adam_b2=b2,
            muon_weight_dimension_numbers=dimension_numbers,
        )

    zero_loss_decay = staticmethod(laws.gd_decay)  # the orthogonalised 0 is 0


@register_dynamics
class ScheduleFreeAdamW(DiscreteKind):
    """Schedule-free AdamW (``optax.contrib.schedule_free_adamw``, ``weight_decay = λ``,
    multiplied by the learning rate in its base step): rankflow's θ is optax's params, the
    point ``y`` where gradients are taken; the base step ``z ← z − η_k(u + λy)`` (u: Adam's
    direction without momentum) decays at y, and ``y = b₁x + (1−b₁)z`` with x the running
    average of z. optax's defaults (b₁ = 0.9, b₂ = 0.999, weight_lr_power = 2); its b₁ is an
    interpolation, not an EMA of gradients, so ``dynamics.mu`` is not read. θ moves by
    the interpolation, not by ``−η(u + λθ)``, so it has no direction alone; its zero-loss
    decay is its own (:func:`~.laws.schedule_free_decay`), not GD's."""

    name = "schedule_free_adamw"
    no_balance_law = "schedule-free AdamW: the update is not a gradient"

    def optimizer(self, learning_rate, hyper, key):
        return optax.contrib.schedule_free_adamw(
            learning_rate=learning_rate, weight_decay=hyper["lam"]
        )

    zero_loss_decay = staticmethod(laws.schedule_free_decay)
