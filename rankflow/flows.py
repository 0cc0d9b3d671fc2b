"""Continuous dynamics: vector fields of the flows of THEORY.md, and diffrax solvers.

The state is ``θ = (A, B)``; ``args = (data, hyper)`` with ``hyper`` a dict of traced
scalars (``lam``, ``eta``, ``sigma``, ``mu``). Time is in optimizer steps: every field
carries η, so one explicit Euler step with dt = 1 is one step of the discrete optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from diffrax._local_interpolation import ThirdOrderHermitePolynomialInterpolation
from diffrax._solver.runge_kutta import AbstractERK, ButcherTableau

from .config import MOMENTUM_DYNAMICS
from .problems import Problem

__all__ = [
    "RK4",
    "AdditiveNoise",
    "drift_field",
    "factor_grads",
    "factors_of",
    "gradient_flow_field",
    "initial_state",
    "make_solver",
    "momentum_flow_field",
    "noise_term",
]


def factor_grads(problem: Problem, minibatch: bool = False) -> Callable:
    """``(A, B), data → (∇_A, ∇_B) = (G B, Gᵀ A)`` with ``G = ∇_W L(ABᵀ)``; with
    ``minibatch``, ``(A, B), data, idx →`` the same for the loss on data points ``idx``.

    The chain rule is written out rather than left to ``jax.grad`` of ``L(ABᵀ)``: autodiff
    emits ``Gᵀ A`` as a dot contracting ``G``'s first axis, which XLA:CPU runs as a plain
    single-threaded dot, while ``transpose(G) @ A`` keeps a canonical dot that goes to its
    fast batched matmul kernel (≈ 25% of a GD step at d = 32, 64 runs; benchmarks/)."""

    def chain(G, theta):
        A, B = theta
        return G @ B, jnp.swapaxes(G, -1, -2) @ A

    if minibatch:
        grad_w_batch = jax.grad(problem.batch_loss)

        def batch_grads(theta, data, idx):
            A, B = theta
            return chain(grad_w_batch(A @ B.T, data, idx), theta)

        return batch_grads

    grad_w = jax.grad(problem.loss)

    def grads(theta, data):
        A, B = theta
        return chain(grad_w(A @ B.T, data), theta)

    return grads


def _axpy(a, x, y):
    """``a·x + y`` leaf by leaf."""
    return jax.tree.map(lambda xi, yi: a * xi + yi, x, y)


def _scale(a, x):
    return jax.tree.map(lambda xi: a * xi, x)


def gradient_flow_field(problem: Problem) -> Callable:
    """GF (THEORY.md): ``dθ/dt = −η(∇L(θ) + λθ)``; also the drift of SGF."""
    grads = factor_grads(problem)

    def field(t, theta, args):
        data, hyper = args
        return _scale(-hyper["eta"], _axpy(hyper["lam"], theta, grads(theta, data)))

    return field


def momentum_flow_field(problem: Problem, coupled: bool = False) -> Callable:
    """Momentum flow on the state ``(θ, M)`` (THEORY.md), M(0) = 0 as for the optimizers.

    Decoupled: ``dM/dt = μ(∇L − M)``, ``dθ/dt = −η(M + λθ)`` (also the drift of the
    stochastic momentum flow). Coupled (L2 in the loss): ``dM/dt = μ(∇L + λθ − M)``,
    ``dθ/dt = −ηM``.
    """
    grads = factor_grads(problem)

    def field(t, state, args):
        data, hyper = args
        theta, M = state
        eta, lam, mu = hyper["eta"], hyper["lam"], hyper["mu"]
        g = grads(theta, data)
        if coupled:
            g = _axpy(lam, theta, g)
            dtheta = _scale(-eta, M)
        else:
            dtheta = _scale(-eta, _axpy(lam, theta, M))
        dM = _scale(mu, _axpy(-1.0, M, g))
        return dtheta, dM

    return field


def drift_field(kind: str, problem: Problem) -> Callable:
    """The (drift) vector field of a continuous ``dynamics.kind``."""
    if kind in ("gradient_flow", "stochastic_flow"):
        return gradient_flow_field(problem)
    if kind in ("momentum_flow", "stochastic_momentum_flow"):
        return momentum_flow_field(problem)
    if kind == "momentum_flow_coupled":
        return momentum_flow_field(problem, coupled=True)
    raise ValueError(f"dynamics.kind: no flow named {kind!r}")


def initial_state(kind: str, theta0):
    """The flow's state at t = 0: θ, or (θ, M = 0) for momentum flows."""
    if kind in MOMENTUM_DYNAMICS:
        return theta0, jax.tree.map(jnp.zeros_like, theta0)
    return theta0


def factors_of(kind: str, state):
    """The factors ``θ = (A, B)`` of a flow's state."""
    return state[0] if kind in MOMENTUM_DYNAMICS else state


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


def noise_term(kind: str, theta0, brownian_for: Callable) -> AdditiveNoise:
    """The diffusion term of an SDE ``dynamics.kind``, with Brownian motion made by
    ``brownian_for(shape)`` (shape: a pytree of ``jax.ShapeDtypeStruct``).

    SGF: ``ησ dW`` on θ. Stochastic momentum flow: ``μσ dW`` on M (the gradient noise
    enters the momentum, THEORY.md).
    """
    shape = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), theta0)
    if kind == "stochastic_flow":
        return AdditiveNoise(
            lambda t, y, args: args[1]["eta"] * args[1]["sigma"],
            brownian_for(shape),
            lambda noise: noise,
        )
    if kind == "stochastic_momentum_flow":
        return AdditiveNoise(
            lambda t, y, args: args[1]["mu"] * args[1]["sigma"],
            brownian_for(shape),
            lambda noise: (jax.tree.map(jnp.zeros_like, noise), noise),
        )
    raise ValueError(f"dynamics.kind: {kind!r} is not an SDE")


_rk4_tableau = ButcherTableau(
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.zeros(4),  # no embedded method: fixed steps only
    c=np.array([0.5, 0.5, 1.0]),
)


class RK4(AbstractERK):
    """The classical 4th-order Runge–Kutta method (fixed step; no error estimate)."""

    tableau: ClassVar[ButcherTableau] = _rk4_tableau
    interpolation_cls: ClassVar[Callable] = ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        del terms
        return 4


_SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "bosh3": diffrax.Bosh3,
    "euler": diffrax.Euler,
    "heun": diffrax.Heun,
    "midpoint": diffrax.Midpoint,
    "ralston": diffrax.Ralston,
    "rk4": RK4,
    "sea": diffrax.SEA,
    "shark": diffrax.ShARK,
    "sra1": diffrax.SRA1,
}

# Solvers that need space-time Lévy area from the Brownian path.
NEEDS_LEVY_AREA = ("sea", "shark", "sra1")


def make_solver(method: str) -> diffrax.AbstractSolver:
    """A diffrax solver by its config name (``solver.method``)."""
    return _SOLVERS[method]()
