"""The one diffrax set-up of rankflow: :func:`solve` builds the terms, Brownian path,
adjoint, step-size controller, blow-up event and saves for every continuous run of both
families, and solves fixed steps save interval by save interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from diffrax import AbstractERK, ButcherTableau, ThirdOrderHermitePolynomialInterpolation

__all__ = ["NEEDS_LEVY_AREA", "RK4", "Saved", "make_solver", "max_abs", "solve"]


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


class Saved(NamedTuple):
    """What a run saved: ``ys``, its observations stacked over the saves (leading axis:
    saves); ``reached``, bool (saves,), False at saves the run never got to; and
    ``max_steps_hit``, True (for the run, or per save) where it ran out of steps."""

    ys: Any
    reached: jax.Array
    max_steps_hit: jax.Array


def max_abs(tree) -> jax.Array:
    """The largest ``|entry|`` over every leaf of ``tree`` (NaN if an entry is NaN)."""
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree.leaves(tree)]))


def solve(
    field: Callable,
    y0,
    args,
    *,
    ts: np.ndarray | None = None,
    observe: Callable | None = None,
    method: str | diffrax.AbstractSolver = "tsit5",
    adaptive: bool = True,
    dt: float = 1.0,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 100_000,
    t0: float = 0.0,
    t1: float | None = None,
    noise: Callable | None = None,
    key=None,
    diverge_norm: float | None = None,
    watched: Callable | None = None,
    controller: Mapping[str, Any] | None = None,
    throw: bool = False,
    brownian_tol: float | None = None,
    jump_ts: tuple[float, ...] = (),
) -> Saved:
    """Solve ``dy = field(t, y, args) dt [+ noise]`` from ``y(t0) = y0`` and save
    ``observe(y)`` (default: ``y``) at the times ``ts`` (a static increasing array; default:
    ``t1`` only, ``t1`` defaulting to ``ts[-1]``).

    ``method``: a solver name (``solver.method``) or a diffrax solver. Adaptive solves use a
    PID controller (``rtol``, ``atol``, and ``controller``'s extra options, e.g. its
    ``norm``) and, with ``diverge_norm``, stop at the first step where
    ``max_abs(watched(y))`` exceeds it or is not finite (the saves after it are not
    reached). Fixed steps of ``dt`` are solved save interval by save interval, in a scan.
    ``max_steps`` bounds the steps of the whole run either way.

    ``noise(brownian_for)``: the diffusion term (as :func:`noise_term` makes it) for an
    SDE, with Brownian motion from ``key``: a ``VirtualBrownianTree`` for adaptive steps
    (consistent under refinement), an ``UnsafeBrownianPath`` with ``DirectAdjoint`` for
    fixed ones (one fresh draw per step: exact there, and ~20× cheaper; DESIGN.md's
    measured facts). Space-time Lévy area where the solver needs it. ``brownian_tol``:
    a ``VirtualBrownianTree`` of that tolerance for fixed steps too, so that solves with
    different ``dt`` (finer than the tolerance's scale) follow one Brownian path, as a
    strong-error measurement needs.

    ``jump_ts``: times where the field has a kink (a learning-rate schedule's end of
    warmup, :func:`rankflow.numerics.schedules.kinks`): adaptive steps land on them (diffrax's
    ``ClipStepSizeController``), so no step's error estimate straddles one.
    """
    solver = make_solver(method) if isinstance(method, str) else method
    t1 = float(ts[-1]) if t1 is None else t1
    terms, adjoint = _terms(field, noise, key, method, adaptive, dt, t0, t1, brownian_tol)
    observe = observe or (lambda y: y)
    setup = dict(terms=terms, solver=solver, adjoint=adjoint, args=args, throw=throw)
    if not adaptive:
        ts = np.asarray([t1] if ts is None else ts)
        return _solve_fixed(setup, y0, ts, t0, dt, max_steps, observe)
    event = None
    if diverge_norm is not None:
        watched = watched or (lambda y: y)
        event = diffrax.Event(lambda t, y, args, **kw: ~(max_abs(watched(y)) <= diverge_norm))
    fn = lambda t, y, args: observe(y)  # noqa: E731
    if ts is None:
        saveat = diffrax.SaveAt(t1=True, fn=fn)
    else:
        saveat = diffrax.SaveAt(ts=jnp.asarray(ts, jax.tree.leaves(y0)[0].dtype), fn=fn)
    sol = diffrax.diffeqsolve(
        t0=t0,
        t1=t1,
        # Adaptive solves pick their first step (a fixed first step can overshoot a fast
        # start into NaN, from which the controller never recovers).
        dt0=None,
        y0=y0,
        saveat=saveat,
        stepsize_controller=_controller(rtol, atol, controller, jump_ts),
        max_steps=max_steps,
        # Stop at a blow-up instead of shrinking dt until max_steps.
        event=event,
        **setup,
    )
    return Saved(sol.ys, jnp.isfinite(sol.ts), sol.result == diffrax.RESULTS.max_steps_reached)


def _controller(rtol, atol, options, jump_ts):
    """The adaptive step-size controller: a PID controller, clipped to land on
    ``jump_ts`` when there are any."""
    pid = diffrax.PIDController(rtol=rtol, atol=atol, **(options or {}))
    if not jump_ts:
        return pid
    return diffrax.ClipStepSizeController(pid, jump_ts=jnp.asarray(jump_ts))


def _terms(field, noise, key, method, adaptive: bool, dt, t0, t1, brownian_tol=None):
    """:func:`solve`'s terms and adjoint: the drift alone, or with ``noise`` driven by the
    Brownian path that suits the step-size control (see :func:`solve`)."""
    terms = diffrax.ODETerm(field)
    if noise is None:
        return terms, diffrax.RecursiveCheckpointAdjoint()
    levy = (
        diffrax.SpaceTimeLevyArea
        if isinstance(method, str) and method in NEEDS_LEVY_AREA
        else diffrax.BrownianIncrement
    )
    if adaptive or brownian_tol is not None:
        # Adaptive steps need a Brownian path consistent under refinement.
        def brownian_for(shape):
            tol = 1e-3 * min(dt, t1 - t0) if brownian_tol is None else brownian_tol
            return diffrax.VirtualBrownianTree(
                t0, t1, tol=tol, shape=shape, key=key, levy_area=levy
            )

        adjoint = diffrax.RecursiveCheckpointAdjoint()
    else:
        # Fixed steps: a fresh draw per step is exact and ~20× cheaper than a
        # VirtualBrownianTree (DESIGN.md's measured facts); nothing is differentiated.
        def brownian_for(shape):
            return diffrax.UnsafeBrownianPath(shape, key, levy_area=levy)

        adjoint = diffrax.DirectAdjoint()
    return diffrax.MultiTerm(terms, noise(brownian_for)), adjoint


def _solve_fixed(setup, y0, ts, t0: float, dt: float, max_steps: int, observe) -> Saved:
    """Fixed steps: one ``diffeqsolve`` per save interval, inside a ``lax.scan``.

    One solve over all the saves would check, at every step, whether a save time was
    passed (a nested loop) and keep the dense output needed to interpolate there: ~20%
    of an Euler step of a 64-run batch at d = 32 (benchmarks/fixed_step.py). Saves fall
    on steps here, so nothing is interpolated. A blow-up shows at the saves (NaN
    propagates); ``max_steps`` still bounds the steps of the run: saves beyond it are
    not reached and count as ``max_steps_hit``, as a single solve would stop there."""
    dtype = jax.tree.leaves(y0)[0].dtype
    steps = np.ceil(np.round(np.diff(np.concatenate([[t0], ts])) / dt, 9))
    per_interval = int(max(steps.max(), 1)) + 1  # + 1: a last step shortened by rounding

    def interval(y, bounds):
        sol = diffrax.diffeqsolve(
            t0=bounds[0],
            t1=bounds[1],
            dt0=dt,
            y0=y,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.ConstantStepSize(),
            max_steps=per_interval,
            **setup,
        )
        y = jax.tree.map(lambda x: x[0], sol.ys)
        return y, observe(y)

    starts = np.concatenate([[t0], ts[:-1]])
    if ts[0] == t0:  # the first save is the initial state; every later interval is non-empty
        first = observe(y0)
        bounds = (jnp.asarray(starts[1:], dtype), jnp.asarray(ts[1:], dtype))
        _, rest = jax.lax.scan(interval, y0, bounds)
        ys = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    else:
        bounds = (jnp.asarray(starts, dtype), jnp.asarray(ts, dtype))
        _, ys = jax.lax.scan(interval, y0, bounds)
    reached = jnp.asarray(np.cumsum(steps) <= max_steps)
    return Saved(ys, reached, ~reached)
