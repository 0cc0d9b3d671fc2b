"""Continuous time on the transformer: full-batch gradient flow with diffrax.

The state is the whole parameter pytree; the field is THEORY.md's
``dθ/dt = −η(∇L(θ) + λ_g θ)`` with ``λ_g`` the leaf's group decay (0 for groups outside
``train.decay``), on one fixed batch. Time is in optimizer steps (η inside the field),
so the flow at ``t = k`` is what GD approximates after ``k`` steps. T4 per head:
``D(t) = e^{−2ηλ t} D(0)`` for both pairs, whatever the rest of the model does, as long
as the head's factors enter the loss only through their product (no q/k/v biases).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["gradient_flow_field", "integrate"]

_SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "bosh3": diffrax.Bosh3,
}


def gradient_flow_field(loss: Callable) -> Callable:
    """``(t, θ, (batch, η, λ)) ↦ −η(∇L(θ; batch) + λθ)``, λ a per-leaf pytree."""
    grad = jax.grad(loss)

    def field(t, params, args):
        batch, eta, lam_tree = args
        g = grad(params, batch)
        return jax.tree.map(lambda gi, li, pi: -eta * (gi + li * pi), g, lam_tree, params)

    return field


def integrate(
    loss: Callable,
    lam_tree,
    eta,
    params0,
    batch: Mapping[str, jax.Array],
    ts: np.ndarray,
    observe: Callable,
    *,
    method: str = "tsit5",
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 100_000,
):
    """Solve the flow from ``params0`` on ``batch`` with an adaptive solver and return
    ``(observe(θ(t)) stacked over ts, reached, max_steps_hit)``; ``reached`` is False
    at saves the solver did not get to (it stopped early)."""
    dtype = jax.tree.leaves(params0)[0].dtype
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(gradient_flow_field(loss)),
        _SOLVERS[method](),
        t0=0.0,
        t1=float(ts[-1]),
        dt0=None,
        y0=params0,
        args=(batch, eta, lam_tree),
        saveat=diffrax.SaveAt(ts=jnp.asarray(ts, dtype), fn=lambda t, y, args: observe(y)),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        adjoint=diffrax.RecursiveCheckpointAdjoint(),
        max_steps=max_steps,
        throw=False,
    )
    reached = jnp.isfinite(sol.ts)
    return sol.ys, reached, sol.result == diffrax.RESULTS.max_steps_reached
