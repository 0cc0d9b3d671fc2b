"""Continuous time on the transformer: full-batch gradient flow, solved by
:func:`rankflow.numerics.solve.solve` as
:func:`rankflow.numerics.solve.setup` builds it from the ``[solver]`` section.

The state is the whole parameter pytree; the field is docs/theory.md's
``dθ/dt = −η(∇L(θ) + λ_g θ)`` with ``λ_g`` the leaf's group decay (0 for groups outside
``train.decay``), on one fixed batch. Time is in optimizer steps (η inside the field),
so the flow at ``t = k`` is what GD approximates after ``k`` steps. T4 per head:
``D(t) = e^{−2ηλ t} D(0)`` for both pairs, whatever the rest of the model does, as long
as the head's factors enter the loss only through their product (no q/k/v biases).

Under a learning-rate schedule η is η(t) (:mod:`rankflow.numerics.schedules`) and T4 becomes
``D(t) = e^{−2λ∫₀ᵗη} D(0)``. Learning-rate multipliers scale the field of their
parameters, ``dθ/dt = −c η(t)(∇L + λ_g θ)`` (the limit of the scaled optimizer step);
a pair whose factors have c_A ≠ c_B no longer balances at a closed rate
(:func:`rankflow.theory.scaled_balance_rate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from ..numerics.schedules import Schedule, eta_at, kinks
from ..numerics.solve import Saved, setup, solve

__all__ = ["gradient_flow_field", "integrate"]


def gradient_flow_field(loss: Callable, schedule: Schedule | None = None) -> Callable:
    """``(t, θ, (batch, η, λ[, c])) ↦ −c η(t)(∇L(θ; batch) + λθ)``, λ and the
    multipliers c per-leaf pytrees (c = 1 when not given), η(t) of ``schedule``."""
    grad = jax.grad(loss)

    def field(t, params, args):
        batch, eta, lam_tree = args[:3]
        eta = eta_at(t, eta, schedule)
        g = grad(params, batch)
        if len(args) == 3:
            return jax.tree.map(lambda gi, li, pi: -eta * (gi + li * pi), g, lam_tree, params)
        return jax.tree.map(
            lambda gi, li, pi, ci: -(ci * eta) * (gi + li * pi), g, lam_tree, params, args[3]
        )

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
    solver: Mapping[str, Any] | None = None,
    schedule: Schedule | None = None,
    lr_tree=None,
) -> Saved:
    """Solve the flow from ``params0`` on ``batch`` with an adaptive solver and return
    ``(observe(θ(t)) stacked over ts, reached, max_steps_hit)``; ``reached`` is False
    at saves the solver did not get to: it ran out of steps, or (with
    ``solver["diverge_norm"]``) stopped where a parameter entry went beyond it or
    non-finite. ``solver``: the ``[solver]`` section (``method``, ``rtol``, ``atol``, the
    PID controller's ``pcoeff``, ...; :func:`rankflow.numerics.solve.setup`'s defaults
    where left out); ``schedule``: η(t); ``lr_tree``: per-leaf learning-rate multipliers
    (None: 1)."""
    args = (batch, eta, lam_tree) if lr_tree is None else (batch, eta, lam_tree, lr_tree)
    adaptive = {**(solver or {}), "adaptive": True}
    return solve(
        gradient_flow_field(loss, schedule),
        params0,
        args,
        setup(adaptive, ts, jump_ts=kinks(schedule)),
        observe=observe,
    )
