"""Continuous dynamics: vector fields of the flows of THEORY.md, and diffrax solvers.

The state is ``θ = (A, B)``; ``args = (data, hyper)`` with ``hyper`` a dict of traced
scalars (``lam``, ``eta``, ``sigma``, ``mu``). Time is in optimizer steps: every field
carries η, so one explicit Euler step with dt = 1 is one step of the discrete optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import jax
import numpy as np
from diffrax._local_interpolation import ThirdOrderHermitePolynomialInterpolation
from diffrax._solver.runge_kutta import AbstractERK, ButcherTableau

from .problems import Problem

__all__ = ["RK4", "factor_grads", "gradient_flow_field", "make_solver"]


def factor_grads(problem: Problem) -> Callable:
    """``(A, B), data → (∇_A, ∇_B) = (G B, Gᵀ A)`` with ``G = ∇_W L(ABᵀ)``."""

    def data_loss(theta, data):
        A, B = theta
        return problem.loss(A @ B.T, data)

    return jax.grad(data_loss)


def gradient_flow_field(problem: Problem) -> Callable:
    """GF (THEORY.md): ``dθ/dt = −η(∇L(θ) + λθ)``."""
    grads = factor_grads(problem)

    def field(t, theta, args):
        data, hyper = args
        g = grads(theta, data)
        return jax.tree.map(lambda gi, th: -hyper["eta"] * (gi + hyper["lam"] * th), g, theta)

    return field


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
}


def make_solver(method: str) -> diffrax.AbstractSolver:
    """A diffrax solver by its config name (``solver.method``)."""
    return _SOLVERS[method]()
