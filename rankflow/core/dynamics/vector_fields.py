"""Continuous dynamics of the core family: the vector fields of the flows of docs/theory.md
and their noise terms, as diffrax terms (formerly core/fields.py); which flow uses which is
its :class:`~rankflow.core.dynamics.flows.FlowKind`'s. They are solved by
:func:`rankflow.numerics.solve.solve`, the one diffrax set-up of both families.

The state is ``θ = (A, B)``; ``args = (data, hyper)`` with ``hyper`` a dict of traced
scalars (``lam``, ``eta``, ``sigma``, ``mu``). Time is in optimizer steps: every field
carries η, so one explicit Euler step with dt = 1 is one step of the discrete optimizer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...numerics.schedules import Schedule, eta_at
from ..factors import chain, product, shape_of
from ..problems import Problem
from .kind import DYNAMICS, dynamics_of

__all__ = [
    "AdditiveNoise",
    "FactorNoise",
    "drift_field",
    "factor_grads",
    "factors_of",
    "gradient_flow_field",
    "initial_state",
    "minibatch_spread",
    "momentum_flow_field",
    "noise_term",
]


def factor_grads(problem: Problem, minibatch: bool = False, w_noise: bool = False) -> Callable:
    """``(A, B), data → (∇_A, ∇_B) = (G B, Gᵀ A)`` with ``G = ∇_W L(ABᵀ)`` (at depth
    L ≥ 3, ``(W_1, …, W_L), data →`` the chain rule's ``(∇_1, …, ∇_L)``:
    :func:`rankflow.core.factors.chain`); with
    ``minibatch``, ``(A, B), data, idx →`` the same for the loss on data points ``idx``;
    with ``w_noise``, ``(A, B), data, ξ →`` the same for the noisy gradient ``G + ξ``
    (gradient-space noise, docs/theory.md, T9).

    The chain rule is written out rather than left to ``jax.grad`` of ``L(ABᵀ)``: autodiff
    emits ``Gᵀ A`` as a dot contracting ``G``'s first axis, which XLA:CPU runs as a plain
    single-threaded dot, while ``transpose(G) @ A`` keeps a canonical dot that goes to its
    fast batched matmul kernel (≈ 25% of a GD step at d = 32, 64 runs; benchmarks/)."""

    if minibatch:
        grad_w_batch = jax.grad(problem.batch_loss)

        def batch_grads(theta, data, idx):
            return chain(grad_w_batch(product(theta), data, idx), theta)

        return batch_grads

    grad_w = jax.grad(problem.loss)
    if w_noise:

        def noisy_grads(theta, data, xi):
            return chain(grad_w(product(theta), data) + xi, theta)

        return noisy_grads

    def grads(theta, data):
        return chain(grad_w(product(theta), data), theta)

    return grads


def _axpy(a, x, y):
    """``a·x + y`` leaf by leaf."""
    return jax.tree.map(lambda xi, yi: a * xi + yi, x, y)


def _scale(a, x):
    return jax.tree.map(lambda xi: a * xi, x)


def gradient_flow_field(problem: Problem, schedule: Schedule | None = None) -> Callable:
    """GF (docs/theory.md): ``dθ/dt = −η(t)(∇L(θ) + λθ)``, η(t) = η·s(t) the ``schedule``
    (:mod:`rankflow.numerics.schedules`; constant by default); also the drift of SGF."""
    grads = factor_grads(problem)

    def field(t, theta, args):
        data, hyper = args
        eta = eta_at(t, hyper["eta"], schedule)
        return _scale(-eta, _axpy(hyper["lam"], theta, grads(theta, data)))

    return field


def momentum_flow_field(
    problem: Problem, coupled: bool = False, schedule: Schedule | None = None
) -> Callable:
    """Momentum flow on the state ``(θ, M)`` (docs/theory.md), M(0) = 0 as for the optimizers.

    Decoupled: ``dM/dt = μ(∇L − M)``, ``dθ/dt = −η(M + λθ)`` (also the drift of the
    stochastic momentum flow). Coupled (L2 in the loss): ``dM/dt = μ(∇L + λθ − M)``,
    ``dθ/dt = −ηM``. η is η(t) of the ``schedule``; μ is not scheduled.
    """
    grads = factor_grads(problem)

    def field(t, state, args):
        data, hyper = args
        theta, M = state
        eta, lam, mu = eta_at(t, hyper["eta"], schedule), hyper["lam"], hyper["mu"]
        g = grads(theta, data)
        if coupled:
            g = _axpy(lam, theta, g)
            dtheta = _scale(-eta, M)
        else:
            dtheta = _scale(-eta, _axpy(lam, theta, M))
        dM = _scale(mu, _axpy(-1.0, M, g))
        return dtheta, dM

    return field


def drift_field(kind: str, problem: Problem, schedule: Schedule | None = None) -> Callable:
    """The (drift) vector field of a continuous ``dynamics.kind``, η following
    ``schedule`` (its kind's :meth:`~rankflow.core.dynamics.kind.DynamicsKind.drift`)."""
    if kind not in DYNAMICS:
        raise ValueError(f"dynamics.kind: no flow named {kind!r}")
    return DYNAMICS[kind].drift(problem, schedule)


def initial_state(kind: str, theta0):
    """The flow's state at t = 0: θ, or (θ, M = 0) for momentum flows."""
    return dynamics_of(kind).initial_state(theta0)


def factors_of(kind: str, state):
    """The factors ``θ = (A, B)`` of a flow's state."""
    return dynamics_of(kind).factors(state)


class AdditiveNoise(diffrax.ControlTerm):
    """Additive noise ``c·dW`` on part of the state: ``vf`` returns the scalar ``c``,
    the Brownian control lives on the noisy part only (no draws wasted on the rest),
    and ``embed`` places ``c·dW`` into a state-shaped pytree (zeros elsewhere).

    Additive noise: Itô and Stratonovich coincide, so every SDE solver applies.
    """

    embed: Callable = eqx.field(static=True)

    def __init__(self, scale_fn, control, embed):
        super().__init__(scale_fn, control)
        self.embed = embed

    def prod(self, vf, control):
        return self.embed(jax.tree.map(lambda c: vf * c, control))


class FactorNoise(diffrax.ControlTerm):
    """Noise that enters through the gradient of ``W = ABᵀ`` (docs/theory.md, T9, T10): a
    W-space increment ``dG`` reaches the factors by the chain rule as ``(dG B, dGᵀA)``
    (at depth L ≥ 3, :func:`rankflow.core.factors.chain`'s ``∇_j``),
    times ``c`` (``vf``'s ``"c"``: −η(t)σ on θ, μσ on the momentum), placed into the state
    by ``embed``. The noise depends on the state (multiplicative), so Itô and
    Stratonovich solutions differ: Euler–Maruyama converges to the Itô one.

    ``gradient``: ``dG = dΞ``, an m×n Brownian matrix. ``minibatch``: the control is one
    Brownian motion per data point, ``dβ`` (N,), and
    ``dG = s Σ_k (g_k − Ḡ) dβ_k`` with ``g_k`` the per-sample gradients at the current W
    and ``s = √((N − b)/((N − 1) b N))``: the covariance ``(N − b)/(N − 1) · Σ/b`` of the
    mean gradient of b of the N points drawn without replacement, as ``sgd`` draws them
    (Σ the per-sample covariance, with 1/N). ``vf`` materialises the N deviations;
    ``vf_prod`` (what Euler–Maruyama calls) pulls ``dβ`` back through the per-sample
    losses instead: ``Σ_k (g_k − Ḡ) dβ_k = ∇_W Σ_k (dβ_k − mean dβ) ℓ_k(W)``, one
    vector–Jacobian product.
    """

    model: str = eqx.field(static=True)
    scale: Callable = eqx.field(static=True)
    theta_of: Callable = eqx.field(static=True)
    embed: Callable = eqx.field(static=True)
    sample_losses: Callable | None = eqx.field(static=True)
    spread: float = eqx.field(static=True)

    def __init__(self, model, scale_fn, control, theta_of, embed, sample_losses, spread):
        def vf(t, y, args):
            theta = tuple(theta_of(y))
            out = {"c": scale_fn(t, args), "theta": theta}
            if model == "minibatch":
                g = jax.jacrev(sample_losses)(product(theta), args[0])  # (N, m, n)
                out["deltas"] = spread * (g - jnp.mean(g, axis=0, keepdims=True))
            return out

        super().__init__(vf, control)
        self.model = model
        self.scale = scale_fn
        self.theta_of = theta_of
        self.embed = embed
        self.sample_losses = sample_losses
        self.spread = spread

    def _factors(self, c, theta, dG):
        return self.embed(tuple(c * g for g in chain(dG, theta)))

    def prod(self, vf, control):
        dG = control if self.model == "gradient" else jnp.tensordot(control, vf["deltas"], 1)
        return self._factors(vf["c"], vf["theta"], dG)

    def vf_prod(self, t, y, args, control):
        if self.model == "gradient":
            return self.prod(self.vf(t, y, args), control)
        data, _ = args
        theta = tuple(self.theta_of(y))
        _, pullback = jax.vjp(lambda w: self.sample_losses(w, data), product(theta))
        (dG,) = pullback(control - jnp.mean(control))
        return self._factors(self.scale(t, args), theta, self.spread * dG)


def minibatch_spread(samples: int, batch: int) -> float:
    """``s = √((N − b)/((N − 1) b N))``: the scale of :class:`FactorNoise`'s minibatch
    noise for b of N points drawn without replacement (0 at b = N, ``1/√N`` at b = 1)."""
    if samples == 1:
        return 0.0
    return float(np.sqrt((samples - batch) / ((samples - 1) * batch * samples)))


def noise_term(
    kind: str,
    theta0,
    brownian_for: Callable,
    model: str = "parameter",
    problem: Problem | None = None,
    batch: int | None = None,
    schedule: Schedule | None = None,
) -> diffrax.AbstractTerm:
    """The diffusion term of an SDE ``dynamics.kind`` with noise model ``model``
    (``dynamics.noise``), with Brownian motion made by ``brownian_for(shape)`` (shape: a
    pytree of ``jax.ShapeDtypeStruct``).

    ``parameter``: SGF ``ησ dW`` on θ; the stochastic momentum flow ``μσ dW`` on M (the
    gradient noise enters the momentum, docs/theory.md). ``gradient`` and ``minibatch``: a
    :class:`FactorNoise` on θ (``c = −ησ``, resp. −η) or on M (``μσ``, resp. μ);
    ``minibatch`` needs the ``problem`` (its per-sample losses) and ``batch``. The η of
    the noise on θ is η(t) of the ``schedule``, as in the drift.
    """
    if not dynamics_of(kind).sde:
        raise ValueError(f"dynamics.kind: {kind!r} is not an SDE")
    momentum = dynamics_of(kind).momentum
    if momentum:
        embed = lambda noise: (jax.tree.map(jnp.zeros_like, noise), noise)  # noqa: E731
    else:
        embed = lambda noise: noise  # noqa: E731
    if model == "parameter":
        shape = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), theta0)
        if momentum:
            scale = lambda t, y, args: args[1]["mu"] * args[1]["sigma"]  # noqa: E731
        else:
            scale = lambda t, y, args: eta_at(t, args[1]["eta"], schedule) * args[1]["sigma"]  # noqa: E731
        return AdditiveNoise(scale, brownian_for(shape), embed)
    size = shape_of(theta0) if model == "gradient" else (problem.samples,)
    control = brownian_for(jax.ShapeDtypeStruct(size, theta0[0].dtype))
    sigma = (lambda h: h["sigma"]) if model == "gradient" else (lambda h: 1.0)
    if momentum:
        scale = lambda t, args: args[1]["mu"] * sigma(args[1])  # noqa: E731
    else:
        scale = lambda t, args: -eta_at(t, args[1]["eta"], schedule) * sigma(args[1])  # noqa: E731
    sample_losses = problem.sample_losses if model == "minibatch" else None
    spread = minibatch_spread(problem.samples, batch) if model == "minibatch" else 1.0
    return FactorNoise(
        model, scale, control, functools.partial(factors_of, kind), embed, sample_losses, spread
    )
