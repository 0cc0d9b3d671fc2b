"""Continuous dynamics: vector fields of the flows of THEORY.md, their noise terms, and
:func:`solve`, the one place that sets up diffrax (terms, Brownian path, adjoint,
step-size controller, blow-up event, saves) for every continuous run of rankflow.

The state is ``θ = (A, B)``; ``args = (data, hyper)`` with ``hyper`` a dict of traced
scalars (``lam``, ``eta``, ``sigma``, ``mu``). Time is in optimizer steps: every field
carries η, so one explicit Euler step with dt = 1 is one step of the discrete optimizer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from diffrax import AbstractERK, ButcherTableau, ThirdOrderHermitePolynomialInterpolation

from .depth import chain, product, shape_of
from .problems import Problem
from .schedules import Schedule, eta_at
from .vocabulary import MOMENTUM_DYNAMICS

__all__ = [
    "NEEDS_LEVY_AREA",
    "RK4",
    "AdditiveNoise",
    "FactorNoise",
    "Saved",
    "drift_field",
    "factor_grads",
    "factors_of",
    "gradient_flow_field",
    "initial_state",
    "make_solver",
    "max_abs",
    "minibatch_spread",
    "momentum_flow_field",
    "noise_term",
    "solve",
]


def factor_grads(problem: Problem, minibatch: bool = False, w_noise: bool = False) -> Callable:
    """``(A, B), data → (∇_A, ∇_B) = (G B, Gᵀ A)`` with ``G = ∇_W L(ABᵀ)`` (at depth
    L ≥ 3, ``(W_1, …, W_L), data →`` the chain rule's ``(∇_1, …, ∇_L)``:
    :func:`rankflow.depth.chain`); with
    ``minibatch``, ``(A, B), data, idx →`` the same for the loss on data points ``idx``;
    with ``w_noise``, ``(A, B), data, ξ →`` the same for the noisy gradient ``G + ξ``
    (gradient-space noise, THEORY.md T9).

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
    """GF (THEORY.md): ``dθ/dt = −η(t)(∇L(θ) + λθ)``, η(t) = η·s(t) the ``schedule``
    (:mod:`rankflow.schedules`; constant by default); also the drift of SGF."""
    grads = factor_grads(problem)

    def field(t, theta, args):
        data, hyper = args
        eta = eta_at(t, hyper["eta"], schedule)
        return _scale(-eta, _axpy(hyper["lam"], theta, grads(theta, data)))

    return field


def momentum_flow_field(
    problem: Problem, coupled: bool = False, schedule: Schedule | None = None
) -> Callable:
    """Momentum flow on the state ``(θ, M)`` (THEORY.md), M(0) = 0 as for the optimizers.

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
    ``schedule``."""
    if kind in ("gradient_flow", "stochastic_flow"):
        return gradient_flow_field(problem, schedule)
    if kind in ("momentum_flow", "stochastic_momentum_flow"):
        return momentum_flow_field(problem, schedule=schedule)
    if kind == "momentum_flow_coupled":
        return momentum_flow_field(problem, coupled=True, schedule=schedule)
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


class FactorNoise(diffrax.ControlTerm):
    """Noise that enters through the gradient of ``W = ABᵀ`` (THEORY.md T9, T10): a
    W-space increment ``dG`` reaches the factors by the chain rule as ``(dG B, dGᵀA)``
    (at depth L ≥ 3, :func:`rankflow.depth.chain`'s ``∇_j``),
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
    gradient noise enters the momentum, THEORY.md). ``gradient`` and ``minibatch``: a
    :class:`FactorNoise` on θ (``c = −ησ``, resp. −η) or on M (``μσ``, resp. μ);
    ``minibatch`` needs the ``problem`` (its per-sample losses) and ``batch``. The η of
    the noise on θ is η(t) of the ``schedule``, as in the drift.
    """
    if kind not in ("stochastic_flow", "stochastic_momentum_flow"):
        raise ValueError(f"dynamics.kind: {kind!r} is not an SDE")
    momentum = kind == "stochastic_momentum_flow"
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
    warmup, :func:`rankflow.schedules.kinks`): adaptive steps land on them (diffrax's
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
