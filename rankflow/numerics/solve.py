"""The one diffrax set-up of rankflow, in diffrax's own objects.

:func:`setup` turns a point's ``[solver]`` section (and the run's times, Brownian key and
blow-up watch) into a :class:`Setup`: the solver, step-size controller, save times,
adjoint, Brownian path, divergence event, first step and step budget that
``diffrax.diffeqsolve`` takes. :func:`solve` runs it for every continuous run of both
families (fixed steps save interval by save interval).

What a solver can do is read from diffrax's types, never from lists of names:
:func:`is_ito` (``AbstractItoSolver``), :func:`solves_sdes` (Itô or Stratonovich),
:func:`solves_odes` (one term), :func:`has_error_estimate` (an embedded error estimate),
:func:`levy_area` (``minimal_levy_area``). :data:`SOLVERS`, config name → solver class, is
the one list of names; the config's allowed values are :func:`methods` of it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from diffrax import AbstractERK, ButcherTableau, ThirdOrderHermitePolynomialInterpolation

from ..config.fields import NUM, Field, ge, gt

__all__ = [
    "DIVERGE_NORM",
    "PID_DEFAULTS",
    "RK4",
    "SECTION_DEFAULTS",
    "SOLVERS",
    "Saved",
    "Setup",
    "adaptive_by_default",
    "has_error_estimate",
    "is_ito",
    "levy_area",
    "make_solver",
    "max_abs",
    "methods",
    "setup",
    "solve",
    "solver_fields",
    "solves_odes",
    "solves_sdes",
]


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


# The solvers by their config name (``solver.method``): the one list of solver names.
SOLVERS: dict[str, type[diffrax.AbstractSolver]] = {
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

Solver = str | diffrax.AbstractSolver


def make_solver(method: Solver) -> diffrax.AbstractSolver:
    """A diffrax solver by its config name (``solver.method``); a solver as it is."""
    return SOLVERS[method]() if isinstance(method, str) else method


# --- what a solver can do, from diffrax's types ------------------------------------------


def is_ito(method: Solver) -> bool:
    """Whether the solver converges to the Itô solution of an SDE (``AbstractItoSolver``:
    Euler–Maruyama), as multiplicative noise needs."""
    return isinstance(make_solver(method), diffrax.AbstractItoSolver)


def solves_sdes(method: Solver) -> bool:
    """Whether the solver solves SDEs: diffrax says which solution it converges to (Itô
    or Stratonovich; the two agree for additive noise)."""
    solver = make_solver(method)
    return isinstance(solver, (diffrax.AbstractItoSolver, diffrax.AbstractStratonovichSolver))


def solves_odes(method: Solver) -> bool:
    """Whether the solver takes an ODE's single term (stochastic Runge–Kutta methods take
    a drift and a diffusion together: a ``MultiTerm``)."""
    structure = make_solver(method).term_structure
    return isinstance(structure, type) and issubclass(structure, diffrax.AbstractTerm)


def has_error_estimate(method: Solver) -> bool:
    """Whether the solver estimates its local error, so that an adaptive step-size
    controller can drive it: its tableau's embedded ``b_error`` is given and non-zero (the
    Runge–Kutta and stochastic Runge–Kutta tableaus; :class:`RK4`'s is zero), or, for a
    solver without a tableau, it is an ``AbstractAdaptiveSolver``."""
    solver = make_solver(method)
    tableau = getattr(solver, "tableau", None)
    if tableau is None:
        return isinstance(solver, diffrax.AbstractAdaptiveSolver)
    b_error = getattr(tableau, "b_error", None)
    return b_error is not None and any(np.any(np.asarray(b) != 0) for b in jax.tree.leaves(b_error))


# Adaptive steps by default for ODE solvers whose error estimate comes from a pair of at
# least this order (tsit5, dopri5, dopri8, bosh3); the second-order pairs (heun, midpoint,
# ralston: a first-order estimate) step a fixed dt unless asked.
ADAPTIVE_DEFAULT_ORDER = 3


def adaptive_by_default(method: Solver) -> bool:
    """Whether an ODE solve with this solver steps adaptively unless told otherwise: an
    ODE solver with an error estimate of order ≥ :data:`ADAPTIVE_DEFAULT_ORDER`."""
    solver = make_solver(method)
    if not (solves_odes(solver) and has_error_estimate(solver)):
        return False
    return (solver.order(diffrax.ODETerm(_identity)) or 0) >= ADAPTIVE_DEFAULT_ORDER


def levy_area(method: Solver) -> type[diffrax.AbstractBrownianIncrement]:
    """The Brownian increment the solver needs from its path (its ``minimal_levy_area``):
    space-time Lévy area for SEA, ShARK and SRA1, the increment alone otherwise."""
    need = getattr(make_solver(method), "minimal_levy_area", diffrax.AbstractBrownianIncrement)
    for increment in (
        diffrax.BrownianIncrement,
        diffrax.SpaceTimeLevyArea,
        diffrax.SpaceTimeTimeLevyArea,
    ):
        if issubclass(increment, need):
            return increment
    raise ValueError(f"no Brownian increment provides {need.__name__}")


@functools.cache
def methods(*capabilities: Callable[[Solver], bool]) -> tuple[str, ...]:
    """The names in :data:`SOLVERS` (in its order) whose solver has every one of
    ``capabilities`` (functions of a solver, as :func:`is_ito`). Cached: asking builds
    every solver, and config validation asks for every point of a sweep."""
    return tuple(name for name in SOLVERS if all(can(name) for can in capabilities))


def _identity(t, y, args):
    del t, args
    return y


# --- the set-up --------------------------------------------------------------------------


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


@dataclass(frozen=True, eq=False)
class Setup:
    """The diffrax objects of one solve, as :func:`setup` builds them; :func:`solve` hands
    them to ``diffrax.diffeqsolve``."""

    solver: diffrax.AbstractSolver
    t0: float
    t1: float
    ts: np.ndarray | None  # save times (static, increasing); None: t1 only
    dt0: float | None  # the fixed step; None: adaptive (the controller picks the first)
    controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint
    # shape → the Brownian path of an SDE's diffusion; None for an ODE.
    brownian: Callable[[tuple[int, ...]], diffrax.AbstractBrownianPath] | None
    event: diffrax.Event | None  # stops an adaptive solve at a blow-up
    max_steps: int  # bounds the steps of the whole run
    throw: bool = False

    @property
    def adaptive(self) -> bool:
        return self.dt0 is None

    def terms(self, drift: Callable, diffusion: Callable | None = None) -> diffrax.AbstractTerm:
        """The terms of ``dy = drift(t, y, args) dt [+ diffusion]``: ``diffusion`` is a
        function of the Brownian path's factory (``brownian(shape)``) returning the
        diffusion term, as :func:`rankflow.core.dynamics.vector_fields.noise_term` makes it."""
        ode = diffrax.ODETerm(drift)
        if diffusion is None:
            return ode
        if self.brownian is None:
            raise ValueError("an SDE's set-up needs the Brownian motion's key")
        return diffrax.MultiTerm(ode, diffusion(self.brownian))


# The [solver] keys setup reads, and their values where a section leaves them out: the
# one place of the solver's defaults, which the families' config schemas take (their
# solver sections, and :func:`solver_fields`).
SECTION_DEFAULTS: dict[str, Any] = {
    "method": "tsit5",
    "adaptive": True,
    "dt": 1.0,
    "rtol": 1e-6,
    "atol": 1e-8,
    "max_steps": 100_000,
    "diverge_norm": None,
}
# The families' default solver.diverge_norm: a run with an entry beyond it is diverged
# (setup alone, without the key, watches nothing).
DIVERGE_NORM = 1e6
# The coefficients of adaptive solves' PID step-size controller (solver.pcoeff, .icoeff,
# .dcoeff; diffrax's PIDController): diffrax's integral-only default.
PID_DEFAULTS = {"pcoeff": 0.0, "icoeff": 1.0, "dcoeff": 0.0}
# Section keys named like diffrax's PID controller's fields (rtol, atol, pcoeff, icoeff,
# dcoeff, norm, …) go to it.
PID_FIELDS = frozenset(f.name for f in dataclasses.fields(diffrax.PIDController))


def solver_fields(scope: str) -> dict[str, Field]:
    """The adaptive solver's keys of every family's ``solver`` section: tolerances and the
    PID step-size controller (diffrax's ``PIDController``), defaults from
    :data:`SECTION_DEFAULTS` and :data:`PID_DEFAULTS`; ``scope`` says which runs they
    apply to."""
    d, pid = SECTION_DEFAULTS, PID_DEFAULTS
    return {
        "rtol": Field(NUM, d["rtol"], f"{scope}: relative tolerance", gt(0)),
        "atol": Field(NUM, d["atol"], f"{scope}: absolute tolerance", gt(0)),
        "pcoeff": Field(NUM, pid["pcoeff"], f"{scope}: PID step-size controller's P", ge(0)),
        "icoeff": Field(NUM, pid["icoeff"], f"{scope}: its I coefficient", gt(0)),
        "dcoeff": Field(NUM, pid["dcoeff"], f"{scope}: its D coefficient", ge(0)),
    }


def setup(
    solver: Mapping[str, Any],
    ts: np.ndarray | None = None,
    *,
    t0: float = 0.0,
    t1: float | None = None,
    key: jax.Array | None = None,
    watched: Callable | None = None,
    jump_ts: Sequence[float] = (),
    brownian_tol: float | None = None,
    throw: bool = False,
) -> Setup:
    """The diffrax objects of a solve from ``t0`` to ``t1`` (default: ``ts[-1]``) saving
    at ``ts`` (static, increasing; default: ``t1`` only), as the ``[solver]`` section
    ``solver`` says (keys :data:`SECTION_DEFAULTS`; ``method`` a name of :data:`SOLVERS`
    or a diffrax solver; the keys named like ``diffrax.PIDController``'s fields go to it).

    Adaptive solves (``adaptive``) use a PID controller, clipped to land on ``jump_ts``
    (times where the field has a kink, as a learning-rate schedule's end of warmup,
    :func:`rankflow.numerics.schedules.kinks`: no step's error estimate straddles one);
    they pick their own first step (a fixed first step can overshoot a fast start into NaN,
    from which the controller never recovers) and, with ``diverge_norm``, stop at the
    first step where ``max_abs(watched(y))`` exceeds it or is not finite instead of
    shrinking the step until ``max_steps``. Fixed steps are of ``dt``.

    ``key``: the Brownian motion of an SDE (None: an ODE): a ``VirtualBrownianTree`` for
    adaptive steps (consistent under refinement), an ``UnsafeBrownianPath`` with
    ``DirectAdjoint`` for fixed ones (one fresh draw per step: exact there, and as fast as a
    hand-written scan, where the tree is ~20× slower), carrying the Lévy area the solver needs
    (:func:`levy_area`). ``brownian_tol``: a ``VirtualBrownianTree`` of that tolerance for
    fixed steps too, so that solves with different ``dt`` (finer than the tolerance's
    scale) follow one Brownian path, as a strong-error measurement needs.
    """
    s = {**SECTION_DEFAULTS, **solver}
    diffrax_solver = make_solver(s["method"])
    t1 = float(ts[-1]) if t1 is None else t1
    adaptive, dt = s["adaptive"], s["dt"]
    brownian, adjoint = None, diffrax.RecursiveCheckpointAdjoint()
    if key is not None:
        tol = brownian_tol
        if adaptive and tol is None:
            tol = 1e-3 * min(dt, t1 - t0)
        brownian, adjoint = _brownian(key, levy_area(diffrax_solver), t0, t1, tol)
    controller, event = diffrax.ConstantStepSize(), None
    if adaptive:
        pid = diffrax.PIDController(**{k: v for k, v in s.items() if k in PID_FIELDS})
        controller = pid
        if jump_ts:
            controller = diffrax.ClipStepSizeController(pid, jump_ts=jnp.asarray(jump_ts))
        if s["diverge_norm"] is not None:
            watched, norm = watched or (lambda y: y), s["diverge_norm"]
            event = diffrax.Event(lambda t, y, args, **kw: ~(max_abs(watched(y)) <= norm))
    return Setup(
        solver=diffrax_solver,
        t0=t0,
        t1=t1,
        ts=None if ts is None else np.asarray(ts),
        dt0=None if adaptive else dt,
        controller=controller,
        adjoint=adjoint,
        brownian=brownian,
        event=event,
        max_steps=s["max_steps"],
        throw=throw,
    )


def _brownian(key, levy, t0: float, t1: float, tol: float | None):
    """The Brownian path factory (shape → path) and adjoint of an SDE: a
    ``VirtualBrownianTree`` of tolerance ``tol`` (consistent under refinement, as adaptive
    steps need), or, without ``tol``, an ``UnsafeBrownianPath`` with ``DirectAdjoint``:
    for fixed steps a fresh draw per step is exact and ~20× cheaper than the tree (measured
    against a hand-written scan); nothing is differentiated."""
    if tol is not None:

        def tree(shape):
            return diffrax.VirtualBrownianTree(
                t0, t1, tol=tol, shape=shape, key=key, levy_area=levy
            )

        return tree, diffrax.RecursiveCheckpointAdjoint()

    def path(shape):
        return diffrax.UnsafeBrownianPath(shape, key, levy_area=levy)

    return path, diffrax.DirectAdjoint()


def solve(
    terms: diffrax.AbstractTerm | Callable,
    y0,
    args,
    setup: Setup,
    *,
    observe: Callable | None = None,
) -> Saved:
    """Solve ``terms`` (a diffrax term, as :meth:`Setup.terms` makes; or an ODE's vector
    field ``(t, y, args) ↦ dy/dt``) from ``y(t0) = y0`` as ``setup`` says, and save
    ``observe(y)`` (default: ``y``) at its save times.

    Adaptive solves save through ``SaveAt(ts, fn=observe)``; the saves after a blow-up
    (``setup.event``) or after ``max_steps`` are not reached. Fixed steps are solved save
    interval by save interval, in a scan (:func:`_solve_fixed`)."""
    if not isinstance(terms, diffrax.AbstractTerm):
        terms = diffrax.ODETerm(terms)
    observe = observe or (lambda y: y)
    common = dict(
        terms=terms, solver=setup.solver, adjoint=setup.adjoint, args=args, throw=setup.throw
    )
    if not setup.adaptive:
        ts = np.asarray([setup.t1] if setup.ts is None else setup.ts)
        return _solve_fixed(common, y0, ts, setup, observe)
    fn = lambda t, y, args: observe(y)  # noqa: E731
    if setup.ts is None:
        saveat = diffrax.SaveAt(t1=True, fn=fn)
    else:
        saveat = diffrax.SaveAt(ts=jnp.asarray(setup.ts, jax.tree.leaves(y0)[0].dtype), fn=fn)
    sol = diffrax.diffeqsolve(
        t0=setup.t0,
        t1=setup.t1,
        dt0=setup.dt0,
        y0=y0,
        saveat=saveat,
        stepsize_controller=setup.controller,
        max_steps=setup.max_steps,
        event=setup.event,
        **common,
    )
    return Saved(sol.ys, jnp.isfinite(sol.ts), sol.result == diffrax.RESULTS.max_steps_reached)


def _solve_fixed(common, y0, ts: np.ndarray, setup: Setup, observe: Callable) -> Saved:
    """Fixed steps: one ``diffeqsolve`` per save interval, inside a ``lax.scan``.

    One solve over all the saves would check, at every step, whether a save time was
    passed (a nested loop) and keep the dense output needed to interpolate there: ~20%
    of an Euler step of a 64-run batch at d = 32 (benchmarks/fixed_step.py). Saves fall
    on steps here, so nothing is interpolated. A blow-up shows at the saves (NaN
    propagates); ``max_steps`` still bounds the steps of the run: saves beyond it are
    not reached and count as ``max_steps_hit``, as a single solve would stop there."""
    t0, dt = setup.t0, setup.dt0
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
            stepsize_controller=setup.controller,
            max_steps=per_interval,
            **common,
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
    reached = jnp.asarray(np.cumsum(steps) <= setup.max_steps)
    return Saved(ys, reached, ~reached)
