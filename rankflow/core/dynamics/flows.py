"""The continuous dynamics kinds: the flows of docs/theory.md, solved by diffrax
(:func:`rankflow.numerics.solve.solve`), time in optimizer steps. Each is one
:class:`FlowKind`; its vector field is :mod:`.vector_fields`'."""

from __future__ import annotations

from . import laws, vector_fields
from .kind import NOISE_MODELS, DynamicsKind, register_dynamics

__all__ = [
    "FlowKind",
    "GradientFlow",
    "MomentumFlow",
    "MomentumFlowCoupled",
    "SDEKind",
    "StochasticFlow",
    "StochasticMomentumFlow",
]


class FlowKind(DynamicsKind):
    """A continuous kind: implement :meth:`drift` (and the capabilities); an SDE's noise
    term is :func:`.vector_fields.noise_term` of its noise model."""

    continuous = True


class SDEKind(FlowKind):
    """An SDE's capabilities, to put before the flow whose drift it takes
    (``class StochasticFlow(SDEKind, GradientFlow)``): its noise term is
    :func:`.vector_fields.noise_term` of any noise model, of the Gaussian σ."""

    sde = stochastic = takes_sigma = True
    noise_models = NOISE_MODELS


@register_dynamics
class GradientFlow(FlowKind):
    """GF: ``dθ/dt = −η(t)(∇L(θ) + λθ)`` (T1, T4)."""

    name = "gradient_flow"

    def drift(self, problem, schedule=None):
        return vector_fields.gradient_flow_field(problem, schedule)

    def balance_law(self, eta, lam, *, mu=None, noise=None, sigma=0.0, shape=None):
        return laws.gf_law(eta, lam)

    zero_loss_decay = staticmethod(laws.gf_decay)


@register_dynamics
class StochasticFlow(SDEKind, GradientFlow):
    """SGF: GF's drift plus noise of its noise model (T6, T9, T10)."""

    name = "stochastic_flow"

    def balance_law(self, eta, lam, *, mu=None, noise=None, sigma=0.0, shape=None):
        if noise != "gradient":
            return laws.sgf_mean_law(eta, lam)
        return laws.gradient_noise_law(eta, lam, sigma, shape)


@register_dynamics
class MomentumFlow(FlowKind):
    """The decoupled momentum flow ``dM/dt = μ(∇L − M)``, ``dθ/dt = −η(M + λθ)`` (T7)."""

    name = "momentum_flow"
    momentum = True

    def drift(self, problem, schedule=None):
        return vector_fields.momentum_flow_field(problem, schedule=schedule)

    def balance_law(self, eta, lam, *, mu=None, noise=None, sigma=0.0, shape=None):
        return laws.momentum_law(eta, lam, mu)

    zero_loss_decay = staticmethod(laws.gf_decay)


@register_dynamics
class MomentumFlowCoupled(FlowKind):
    """The coupled momentum flow (L2 in the loss): ``dM/dt = μ(∇L + λθ − M)``,
    ``dθ/dt = −ηM``."""

    name = "momentum_flow_coupled"
    momentum = coupled = True
    no_balance_law = "coupled momentum flow: T7 gives no closed rate"

    def drift(self, problem, schedule=None):
        return vector_fields.momentum_flow_field(problem, coupled=True, schedule=schedule)

    zero_loss_decay = staticmethod(laws.coupled_momentum_flow_decay)


@register_dynamics
class StochasticMomentumFlow(SDEKind, MomentumFlow):
    """The decoupled momentum flow with noise on the momentum (T6, T7)."""

    name = "stochastic_momentum_flow"
    no_balance_law = "noisy momentum flow: no closed rate (T6/T7)"
    balance_law = DynamicsKind.balance_law  # its reason, not MomentumFlow's law
