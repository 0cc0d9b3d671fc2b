"""The core family's vocabulary: the kinds of problem, initialisation and dynamics, the
solvers and noise models each dynamics takes, and the values a point derives from its
given ones (pure functions; :mod:`rankflow.core.config` validates and writes them in).

Which solvers a dynamics takes is read from diffrax's types
(:mod:`rankflow.numerics.solve`'s capabilities of the solvers in its ``SOLVERS``), not
from lists of names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..numerics import solve as solve_lib
from ..numerics.schedules import SCHEDULES, WSD_SCHEDULES
from .dynamics import NOISE_MODELS as NOISE_MODELS  # the noise models, for the config
from .dynamics import KindMap, KindNames

# The problem kinds are the registry PROBLEMS (read live: a kind registered after import
# is one too); diagonal's default singular values are its class's.
from .problems import DIAGONAL_DEFAULT, PROBLEMS  # noqa: F401  (re-exported)

# --- the vocabulary -------------------------------------------------------------------

INIT_KINDS = ("gaussian", "spectral", "balanced", "imbalanced", "lora")
# The dynamics of docs/theory.md: continuous flows (diffrax) and discrete optimizers (optax),
# one registered kind each (rankflow.core.dynamics). Every list below is read from the
# registry whenever used, so a kind registered later is in it.
CONTINUOUS_DYNAMICS = KindNames(lambda k: k.continuous)
DISCRETE_DYNAMICS = KindNames(lambda k: not k.continuous)
DYNAMICS_KINDS = KindNames(lambda k: True)
SDE_DYNAMICS = KindNames(lambda k: k.sde)
# Dynamics whose noise is the Gaussian σ of docs/theory.md (sgd's comes from minibatches).
SIGMA_DYNAMICS = KindNames(lambda k: k.takes_sigma)
# The σ kinds first, then the others (sgd).
STOCHASTIC_DYNAMICS = KindNames(lambda k: k.stochastic, order=lambda k: not k.takes_sigma)
# The noise models each stochastic dynamics can run (the first is its default).
NOISE_MODELS_OF = KindMap(STOCHASTIC_DYNAMICS, lambda k: k.noise_models)
MOMENTUM_DYNAMICS = KindNames(lambda k: k.momentum)
# The flow each optimizer discretises (dt = 1), for `rankflow compare`; sgd's is its
# stochastic modified equation (stochastic_flow with noise = minibatch, docs/theory.md, T10).
# In the order of the flows, the Gaussian kind before the minibatch one.
FLOW_OF = KindMap(
    KindNames(
        lambda k: k.flow is not None,
        order=lambda k: (DYNAMICS_KINDS.index(k.flow), k.minibatches),
    ),
    lambda k: k.flow,
)
# Every solver's config name (solver.method): the keys of rankflow.numerics.solve.SOLVERS.
METHODS = tuple(solve_lib.SOLVERS)
# A sweep's minibatch sizes share one sgd program while its largest is at most this many
# times its smallest (:func:`batch_pads`): every run draws the group's largest batch and
# uses its own first b points, so a run of the smallest size costs up to this factor more
# per step than unpadded, in exchange for one compilation instead of one per size.
BATCH_PAD_RATIO = 8
# Steps of discrete dynamics are counted in int32 by the compiled loop.
MAX_STEPS = 2**31 - 1


# --- derived values ----------------------------------------------------------------------
# Each is a pure function of a point's given values; `validate` checks what they give and
# `derive` writes them in.


def noise_model(dynamics: Mapping[str, Any]) -> str | None:
    """The noise model of stochastic dynamics: given, or the kind's default (parameter;
    minibatch for sgd); None for deterministic dynamics."""
    if dynamics["kind"] not in NOISE_MODELS_OF:
        return None
    return dynamics["noise"] or NOISE_MODELS_OF[dynamics["kind"]][0]


def batch_traced(dynamics: Mapping[str, Any]) -> bool:
    """Whether ``dynamics.batch`` is a traced input of the program: for every dynamics but
    the minibatch SME (an SDE with ``noise = "minibatch"``), whose noise scale
    ``s = √((N − b)/((N − 1) b N))`` (T10) is a constant of its program. sgd reads it as
    the number of the drawn points it uses (:func:`batch_pads`); other dynamics ignore it."""
    return not (dynamics["kind"] in SDE_DYNAMICS and noise_model(dynamics) == "minibatch")


def batch_pads(batches, ratio: float = BATCH_PAD_RATIO) -> dict[int, int]:
    """The size each of a sweep's minibatch sizes ``batches`` is drawn at: the sizes, in
    increasing order, grouped so that a group's largest is at most ``ratio`` times its
    smallest (each group opens at the smallest size not yet grouped); each size is drawn
    at its group's largest. ``{4, 8, 16, 32}`` → all at 32 (one program);
    ``{1, 4, 16, 64}`` → 1, 4 at 4 and 16, 64 at 64 (two)."""
    out: dict[int, int] = {}
    sizes = sorted(set(int(b) for b in batches))
    while sizes:
        group = [b for b in sizes if b <= ratio * sizes[0]]
        out |= {b: group[-1] for b in group}
        sizes = sizes[len(group) :]
    return out


def multiplicative_noise(dynamics: Mapping[str, Any]) -> bool:
    """Whether an SDE's noise depends on the state (gradient and minibatch noise), so
    that Itô and Stratonovich solutions differ and only :func:`ito_methods` apply."""
    return dynamics["kind"] in SDE_DYNAMICS and noise_model(dynamics) != "parameter"


# --- the solvers, by what diffrax says they can do -----------------------------------------


def ode_methods() -> tuple[str, ...]:
    """The solvers of ODEs (one term; every solver but the stochastic Runge–Kutta ones)."""
    return solve_lib.methods(solve_lib.solves_odes)


def sde_methods() -> tuple[str, ...]:
    """The solvers of SDEs: those diffrax marks as converging to the Itô or the
    Stratonovich solution (the two agree for the additive noise of ``parameter``)."""
    return solve_lib.methods(solve_lib.solves_sdes)


def ito_methods() -> tuple[str, ...]:
    """The solvers that converge to the Itô solution (Euler–Maruyama), the only ones for
    multiplicative noise: Heun, midpoint and Ralston converge to the Stratonovich one;
    SEA, ShARK and SRA1 assume additive noise."""
    return solve_lib.methods(solve_lib.is_ito)


def solver_methods(dynamics: Mapping[str, Any]) -> tuple[str, ...]:
    """The solvers of these continuous dynamics: SDE solvers for SDEs (Itô ones for
    multiplicative noise), ODE solvers otherwise."""
    if dynamics["kind"] not in SDE_DYNAMICS:
        return ode_methods()
    return ito_methods() if multiplicative_noise(dynamics) else sde_methods()


def adaptive_methods(dynamics: Mapping[str, Any]) -> tuple[str, ...]:
    """The solvers that can step adaptively for these (continuous) dynamics: those of
    :func:`solver_methods` with an error estimate."""
    estimated = solve_lib.methods(solve_lib.has_error_estimate)
    return tuple(m for m in solver_methods(dynamics) if m in estimated)


def adaptive_by_default_methods() -> tuple[str, ...]:
    """The ODE solvers that step adaptively unless told otherwise (:func:`solver_adaptive`)."""
    return solve_lib.methods(solve_lib.adaptive_by_default)


def solver_method(dynamics: Mapping[str, Any], solver: Mapping[str, Any]) -> str | None:
    """The solver of continuous dynamics: given, or shark for additive-noise SDEs,
    Euler–Maruyama for multiplicative ones and tsit5 for ODEs (None for discrete
    dynamics)."""
    if dynamics["kind"] not in CONTINUOUS_DYNAMICS:
        return solver["method"]
    if solver["method"] is not None:
        return solver["method"]
    if multiplicative_noise(dynamics):
        return "euler"
    return "shark" if dynamics["kind"] in SDE_DYNAMICS else "tsit5"


def solver_adaptive(dynamics: Mapping[str, Any], solver: Mapping[str, Any]) -> bool:
    """Whether the solve steps adaptively: given, or by default for ODEs whose solver has
    an error estimate of order ≥ 3 (:func:`rankflow.numerics.solve.adaptive_by_default`:
    tsit5, dopri5, dopri8, bosh3); never for SDEs or discrete dynamics by default."""
    if solver["adaptive"] is not None:
        return solver["adaptive"]
    if dynamics["kind"] not in CONTINUOUS_DYNAMICS or dynamics["kind"] in SDE_DYNAMICS:
        return False
    return solve_lib.adaptive_by_default(solver_method(dynamics, solver))


def save_times(cfg: Mapping[str, Any]) -> list[float]:
    """The save times of a config, in steps: ``save.ts``, or ``save.num`` evenly spaced
    from 0 to ``save.t1``."""
    sv = cfg["save"]
    if sv["ts"] is not None:
        return [float(t) for t in sv["ts"]]
    t1, num = sv["t1"], sv["num"]
    return [t1 * i / (num - 1) for i in range(num)]


def save_count(cfg: Mapping[str, Any]) -> int:
    """How many save times :func:`save_times` gives, without making them (O(1))."""
    sv = cfg["save"]
    return len(sv["ts"]) if sv["ts"] is not None else sv["num"]


def last_save_time(cfg: Mapping[str, Any]) -> float:
    """The last of :func:`save_times`, without making them (O(1))."""
    sv = cfg["save"]
    if sv["ts"] is not None:
        return float(sv["ts"][-1])
    t1, num = sv["t1"], sv["num"]
    return t1 * (num - 1) / (num - 1)


def schedule_error(
    section: str,
    schedule: str,
    warmup,
    final_fraction,
    t1: float,
    run: str,
    decay_steps=None,
) -> str | None:
    """The one-line error of a schedule's keys in config section ``section`` (``dynamics``
    or ``train``) for a run ending at ``t1`` (named by the key ``run``), or None."""
    if schedule == "constant":
        keys = (("warmup", warmup), ("final_fraction", final_fraction))
        for key, value in keys + (("decay_steps", decay_steps),):
            if value is not None:
                others = ", ".join(s for s in SCHEDULES if s != "constant")
                return (
                    f"{section}.{key}: a constant schedule has no {key}; set "
                    f"{section}.schedule to one of {others}, or drop {section}.{key}"
                )
        return None
    if decay_steps is not None and schedule not in WSD_SCHEDULES:
        return (
            f"{section}.decay_steps: only the wsd schedules ({', '.join(WSD_SCHEDULES)}) "
            f"have a decay tail, {section}.schedule is {schedule}; drop {section}.decay_steps"
        )
    if warmup is not None and not 0 <= warmup <= t1:
        return (
            f"{section}.warmup: must be in [0, {run} = {t1:g}] steps (warmup cannot exceed "
            f"the run), got {warmup:g}"
        )
    if final_fraction is not None and not 0 <= final_fraction <= 1:
        return (
            f"{section}.final_fraction: must be in [0, 1] (η at the end over the peak η), "
            f"got {final_fraction:g}"
        )
    room = t1 - (warmup or 0.0)
    if decay_steps is not None and not 0 < decay_steps <= room:
        return (
            f"{section}.decay_steps: must be in (0, {run} − {section}.warmup = {room:g}] "
            f"steps (the decay tail follows the warmup), got {decay_steps:g}"
        )
    if schedule in WSD_SCHEDULES and decay_steps is None and room <= 0:
        return (
            f"{section}.warmup: a {schedule} schedule needs room for its decay tail, so "
            f"the warmup must be below {run} = {t1:g} steps, got {warmup:g}"
        )
    return None
