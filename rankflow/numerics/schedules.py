"""Learning-rate schedules η(t) = η·s(t), the same for every optimizer and flow of both
families (``dynamics.schedule``, ``dynamics.warmup``, ``dynamics.final_fraction``,
``dynamics.decay_steps``), and
their integrals ∫₀ᵗ η(s) ds, the clock of T4 under a schedule.

Time is in steps. The step from k to k + 1 uses η(k) (optax's step count starts at 0),
so the first step of a schedule with warmup w > 0 has η = 0; a flow uses η(t)
continuously. ``t1`` is the run's last save time (core: ``save.t1``; attention:
``save.t1``); after it the schedule stays at its final value.

- ``constant``: s(t) = 1.
- ``warmup_cosine``: s(t) = t/w on [0, w], then f + (1 − f)·½(1 + cos(π(t − w)/(t1 − w)))
  (optax's ``warmup_cosine_decay_schedule(0, η, w, t1, fη)``: its decay_steps include
  the warmup).
- ``linear``: s(t) = t/w on [0, w], then 1 − (1 − f)(t − w)/(t1 − w) (optax's
  ``linear_schedule(0, η, w)`` joined at w to ``linear_schedule(η, fη, t1 − w)``).
- ``wsd`` (warmup–stable–decay): s(t) = t/w on [0, w], 1 on [w, t1 − d], then with
  u = (t − t1 + d)/d the straight line 1 − (1 − f)u down to f at t1 (optax's
  ``join_schedules([linear_schedule(0, η, w), constant_schedule(η),
  linear_schedule(η, fη, d)], [w, t1 − d])``).
- ``wsd_cosine``: the same with the cosine tail f + (1 − f)·½(1 + cos πu)
  (``cosine_decay_schedule(η, d, alpha=f)`` as the third part).

The decay tail of the wsd schedules is ``dynamics.decay_steps`` = d steps, in
(0, t1 − w]; left out, the last 20% of the run (:data:`WSD_DECAY_FRACTION`), or all of
it after warmup when the warmup leaves less. It is counted in steps, as the warmup is,
so that a run's two phase lengths read alike (and a longer run at the same d keeps the
same tail); the tail's shape is the schedule's name rather than a further key, so the
wsd schedules add one key, not two, and each value of ``dynamics.schedule`` is one
curve. d = t1 − w is ``linear`` (or ``warmup_cosine``) again.

The shape (kind, w, f, t1) is static; only the peak η is traced, so a sweep over η
compiles once. (optax's ``warmup_cosine_decay_schedule`` compares the peak with 0 in
Python and so cannot take a traced peak: the factor is written here in ``jax.numpy``
and tested against optax at concrete values.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float

from ..config.fields import NUM, STR, Field, choice

Scalar = Float[Array, ""]

# Learning-rate schedules η(t) = η·s(t) of every optimizer and flow.
SCHEDULES = ("constant", "warmup_cosine", "linear", "wsd", "wsd_cosine")
# The warmup–stable–decay schedules, whose decay is their last dynamics.decay_steps steps.
WSD_SCHEDULES = ("wsd", "wsd_cosine")
# A wsd schedule's decay tail where dynamics.decay_steps is left out: this fraction of t1.
WSD_DECAY_FRACTION = 0.2
# A config section's schedule where it leaves the keys out (warmup and final_fraction
# are None there, read as these by schedule_of): the one place of the defaults.
SCHEDULE_DEFAULTS = {"schedule": "constant", "warmup": 0.0, "final_fraction": 0.0}

__all__ = [
    "SCHEDULES",
    "SCHEDULE_DEFAULTS",
    "WSD_DECAY_FRACTION",
    "WSD_SCHEDULES",
    "Schedule",
    "eta_at",
    "eta_integral",
    "kinks",
    "learning_rate",
    "schedule_columns",
    "schedule_factor",
    "schedule_fields",
    "schedule_integral",
    "schedule_of",
    "unit_clock",
]


class Schedule(NamedTuple):
    """A schedule's static shape: ``kind`` (one of :data:`SCHEDULES`), warmup ``w``
    (steps), final fraction ``f`` (η at t1 over the peak η), the run's end ``t1`` and,
    for the wsd schedules, the decay tail ``d`` (steps; 0 and unused for the others)."""

    kind: str = "constant"
    warmup: float = 0.0
    final_fraction: float = 1.0
    t1: float = 1.0
    decay: float = 0.0  # the wsd schedules' tail d (steps)

    @property
    def decay_start(self) -> float:
        """Where the decay begins: t1 − d for the wsd schedules, the end of warmup else."""
        return self.t1 - self.decay if self.wsd else self.warmup

    @property
    def constant(self) -> bool:
        return self.kind == "constant"

    @property
    def wsd(self) -> bool:
        return self.kind in WSD_SCHEDULES


def wsd_decay_default(t1: float, warmup: float) -> float:
    """A wsd schedule's decay tail when ``decay_steps`` is left out: the last
    :data:`WSD_DECAY_FRACTION` of the run, or all of it after warmup if that is less."""
    return min(WSD_DECAY_FRACTION * t1, t1 - warmup)


def schedule_of(
    section: Mapping[str, Any],
    t1: float,
    final_fraction_default: float = SCHEDULE_DEFAULTS["final_fraction"],
) -> Schedule:
    """The :class:`Schedule` of a config section holding ``schedule``, ``warmup``,
    ``final_fraction`` and ``decay_steps`` (None: :data:`SCHEDULE_DEFAULTS`' warmup,
    ``final_fraction_default``, :func:`wsd_decay_default`), ending at ``t1``."""
    w, f = section["warmup"], section["final_fraction"]
    w = float(SCHEDULE_DEFAULTS["warmup"] if w is None else w)
    decay = 0.0
    if section["schedule"] in WSD_SCHEDULES:
        d = section.get("decay_steps")
        decay = float(wsd_decay_default(float(t1), w) if d is None else d)
    return Schedule(
        section["schedule"],
        w,
        float(final_fraction_default if f is None else f),
        float(t1),
        decay,
    )


def schedule_fields(t1: str) -> dict[str, Field]:
    """The learning-rate schedule's keys of every family's config (``dynamics.schedule``,
    ``.warmup``, ``.final_fraction``, ``.decay_steps``), defaults from
    :data:`SCHEDULE_DEFAULTS` (warmup, final_fraction and decay_steps None in the config,
    read as those by :func:`schedule_of`); ``t1`` names the key of the run's final time."""
    d = SCHEDULE_DEFAULTS
    return {
        "schedule": Field(
            STR,
            d["schedule"],
            "learning-rate schedule η(t) = η·s(t) of optimizers and flows alike: constant, "
            f"warmup_cosine (linear warmup from 0, then cosine to final_fraction·η at {t1}), "
            "linear (the same warmup, then a straight line), wsd (warmup, constant η, then a "
            "straight line over the last decay_steps steps), wsd_cosine (the same with a "
            "cosine tail); step k uses η(k)",
            choice(SCHEDULES),
        ),
        "warmup": Field(
            NUM,
            None,
            f"warmup steps w of a schedule (default {d['warmup']:g}), in [0, {t1}]",
            optional=True,
        ),
        "final_fraction": Field(
            NUM,
            None,
            f"a schedule's η at {t1} over the peak η, in [0, 1] (default {d['final_fraction']:g})",
            optional=True,
        ),
        "decay_steps": Field(
            NUM,
            None,
            f"steps d of a wsd schedule's decay tail, in (0, {t1} − warmup] (default "
            f"{WSD_DECAY_FRACTION:g}·{t1}, or all after warmup if that is less)",
            optional=True,
        ),
    }


def _decay_phase(t, sch: Schedule):
    """``u = (t − w)/(t1 − w)`` clipped to [0, 1] (u = 1 when nothing follows warmup)."""
    span = sch.t1 - sch.warmup
    if span <= 0:
        return jnp.ones_like(t)
    return jnp.clip((t - sch.warmup) / span, 0.0, 1.0)


def schedule_factor(t, sch: Schedule):
    """s(t) = η(t)/η, any shape of ``t`` (float)."""
    t = jnp.asarray(t)
    if sch.constant:
        return jnp.ones_like(t)
    f = sch.final_fraction
    if sch.wsd:
        return _wsd_factor(t, sch)
    u = _decay_phase(t, sch)
    if sch.kind == "warmup_cosine":
        after = f + (1.0 - f) * 0.5 * (1.0 + jnp.cos(math.pi * u))
    elif sch.kind == "linear":
        after = 1.0 - (1.0 - f) * u
    else:
        raise ValueError(f"dynamics.schedule: no schedule named {sch.kind!r}")
    if sch.warmup <= 0:
        return after
    return jnp.where(t < sch.warmup, jnp.clip(t, 0.0, None) / sch.warmup, after)


def _wsd_tail(u, sch: Schedule):
    """The decay tail of a wsd schedule at phase u ∈ [0, 1], and its integral over [0, u]
    per unit of u."""
    f = sch.final_fraction
    if sch.kind == "wsd_cosine":
        value = f + (1.0 - f) * 0.5 * (1.0 + jnp.cos(math.pi * u))
        area = f * u + (1.0 - f) * 0.5 * (u + jnp.sin(math.pi * u) / math.pi)
    else:
        value = 1.0 - (1.0 - f) * u
        area = u - 0.5 * (1.0 - f) * u**2
    return value, area


def _wsd_phase(t, sch: Schedule):
    """``u = (t − t1 + d)/d`` clipped to [0, 1] (a step from 0 to 1 at t1 when d = 0)."""
    if sch.decay <= 0:
        return jnp.where(t < sch.t1, 0.0, 1.0)
    return jnp.clip((t - sch.decay_start) / sch.decay, 0.0, 1.0)


def _wsd_factor(t, sch: Schedule):
    """s(t) of a wsd schedule: warmup t/w, then exactly 1 until t1 − d, then the tail."""
    value, _ = _wsd_tail(_wsd_phase(t, sch), sch)
    after = jnp.where(t < sch.decay_start, 1.0, value)
    if sch.warmup <= 0:
        return after
    return jnp.where(t < sch.warmup, jnp.clip(t, 0.0, None) / sch.warmup, after)


def _wsd_integral(t, sch: Schedule):
    """∫₀ᵗ s of a wsd schedule: t²/(2w) in warmup, then w/2 + (t − w) until t1 − d, then
    w/2 + (t1 − d − w) + d·(area of the tail up to u), then f per step after t1."""
    w, f, s0 = sch.warmup, sch.final_fraction, sch.decay_start
    _, area = _wsd_tail(_wsd_phase(t, sch), sch)
    after = (
        w / 2.0
        + jnp.clip(t - w, 0.0, s0 - w)
        + sch.decay * area
        + jnp.clip(t - sch.t1, 0.0, None) * f
    )
    if w <= 0:
        return after
    return jnp.where(t < w, jnp.clip(t, 0.0, None) ** 2 / (2.0 * w), after)


def eta_at(t, eta, sch: Schedule | None):
    """η(t) = η·s(t): the learning rate at time ``t`` (steps). ``eta`` itself (the same
    array, untouched) for a constant schedule or None."""
    if sch is None or sch.constant:
        return eta
    return eta * schedule_factor(t, sch).astype(jnp.result_type(eta))


def schedule_integral(t, sch: Schedule):
    """∫₀ᵗ s(τ) dτ in closed form (t ≥ 0, any shape), in steps:

    - constant: t;
    - warmup (t ≤ w): t²/(2w);
    - after it, with T = t1 − w and u = min(t − w, T)/T: w/2 + (t − w − min(t − w, T))·f
      plus, warmup_cosine: T·(f u + (1 − f)(u + sin(πu)/π)/2); linear: T·(u − (1 − f)u²/2);
    - wsd, wsd_cosine: w/2 + min(t − w, t1 − d − w) (the stable phase) plus the same tail
      terms with T = d and u = clip(t − t1 + d, 0, d)/d, plus (t − t1)·f after t1.
    """
    t = jnp.asarray(t)
    if sch.constant:
        return t
    if sch.wsd:
        return _wsd_integral(t, sch)
    w, f = sch.warmup, sch.final_fraction
    span = sch.t1 - w
    warm = w / 2.0 + jnp.zeros_like(t)
    if span > 0:
        tau = jnp.clip(t - w, 0.0, span)
        u = tau / span
        if sch.kind == "warmup_cosine":
            mid = span * (f * u + (1.0 - f) * 0.5 * (u + jnp.sin(math.pi * u) / math.pi))
        else:
            mid = span * (u - 0.5 * (1.0 - f) * u**2)
        tail = jnp.clip(t - sch.t1, 0.0, None) * f
    else:  # warmup fills the run: the decay phase is over at once
        mid = jnp.zeros_like(t)
        tail = jnp.clip(t - w, 0.0, None) * f
    after = warm + mid + tail
    if w <= 0:
        return after
    return jnp.where(t < w, jnp.clip(t, 0.0, None) ** 2 / (2.0 * w), after)


def eta_integral(t, eta, sch: Schedule | None):
    """∫₀ᵗ η(s) ds = η·∫₀ᵗ s: the learning-rate clock of T4 under a schedule (ηt when
    constant)."""
    if sch is None or sch.constant:
        return eta * jnp.asarray(t)
    return eta * schedule_integral(t, sch)


def kinks(sch: Schedule | None) -> list[float]:
    """The times in (0, t1) where η(t) has a kink (the end of warmup; for the wsd
    schedules also the start of the decay, t1 − d): an adaptive solver steps onto them
    (diffrax's ``jump_ts``) so that its error estimate stays valid."""
    if sch is None or sch.constant:
        return []
    if sch.wsd:
        return sorted({float(x) for x in (sch.warmup, sch.decay_start) if 0 < x < sch.t1})
    if not 0 < sch.warmup < sch.t1:
        return []
    return [sch.warmup]


def schedule_columns(section: str, values: Mapping[str, Any], t1: float = 0.0) -> dict[str, Any]:
    """The results columns of a run's schedule: none for a constant one (so that its
    tables stay as they were); else ``<section>.schedule``, ``.warmup`` and
    ``.final_fraction`` with their defaults filled in, and for the wsd schedules
    ``.decay_steps`` too (its default needs the run's end ``t1``); with them the tables
    hold ``lr_clock``, :func:`unit_clock` times η."""
    if values["schedule"] == "constant":
        return {}
    sch = schedule_of(values, t1)
    cols = {
        f"{section}.schedule": sch.kind,
        f"{section}.warmup": sch.warmup,
        f"{section}.final_fraction": sch.final_fraction,
    }
    if sch.wsd:
        cols[f"{section}.decay_steps"] = sch.decay
    return cols


def unit_clock(t, sch: Schedule | None, discrete: bool):
    """The accumulated learning rate per unit peak η at the saved times ``t`` (numpy):
    ``∫₀ᵗ s`` for a flow, ``Σ_{j<t} s(j)`` for an optimizer (step j uses η(j); ``t``
    whole numbers). Times η, the clock of T4 (exactly) and of T5's leading term
    ``Π(1 − η_jλ)² = e^{−2λΣη_j}(1 + O(η²λ²))``."""
    import numpy as np

    t = np.asarray(t, np.float64)
    if sch is None or sch.constant:
        return t
    if not discrete:
        return np.asarray(schedule_integral(t, sch), np.float64)
    n = int(np.rint(t.max(initial=0)))
    steps = np.asarray(schedule_factor(np.arange(n, dtype=np.float64), sch), np.float64)
    return np.concatenate([[0.0], np.cumsum(steps)])[np.rint(t).astype(np.int64)]


def learning_rate(
    eta: Scalar, schedule: Schedule | None = None
) -> Scalar | Callable[[Array], Scalar]:
    """The learning rate as optax takes it (``learning_rate`` of its optimizers and of
    ``optax.scale_by_learning_rate``): ``eta`` itself for a constant schedule (or None),
    else the schedule function ``k ↦ η(k)`` of optax's step count k (0 at the first step),
    in η's dtype. Built once from the traced peak η and the static shape ``schedule``."""
    if schedule is None or schedule.constant:
        return eta
    return lambda k: eta_at(jnp.asarray(k, jnp.result_type(eta)), eta, schedule)
