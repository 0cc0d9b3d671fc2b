"""Where a gap follows its predicted law: the fit's window, found from local slopes.

The rate of ``y(t)`` over a few saves at a time (the *local rate*: the least-squares
slope of ``−log y`` over :func:`local_span` consecutive saves) is compared with the
prediction's bracket ``[low, high]``:

- the window *starts* at the first local rate at most ``high·(1 + START_SLACK)``: an
  initial transient decaying faster than the law (GD's first steps from a random start)
  is left out, a slower start is not (it is fitted, as a departure from the law); when no
  local rate is, it starts at the first save (a wrong law is fitted, not hidden);
- it *ends* where the gap leaves the law: the first local rate below ``low·(1 − DELTA)``
  that is followed by :data:`HYSTERESIS` more below it, and after which the median local
  rate stays below (a noisy save does not end it); or where the gap reaches the dtype's
  rounding level, ``ROUNDING·eps·scale`` with ``scale = ‖A‖² + ‖B‖²``; after a break the
  window ends at the first local fit off the law (outside the bracket by more than
  ``START_SLACK``, or ``EXACT_SLACK`` for an exact law, and ``Z_LAW`` of its standard
  errors) that stays off for :data:`HYSTERESIS` more, so the gradual departure before
  the break (a solver's error floor, a change of regime) is not fitted as the law;
- the end is named (:data:`REGIMES`): ``rounding``; ``floor`` (what follows decays at
  less than ``FLOOR·low``: the gap stopped decaying); ``slower
  phase`` (it decays, clearly slower than the law); ``end of run`` (no break). The
  phase after the break is told by its median local rate over its later half.

A gap that never follows the law from its start has no break: the window is the whole
run, and the fit over it says how far it is from the law.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import theory

__all__ = ["DELTA", "FLOOR", "HYSTERESIS", "REGIMES", "ROUNDING", "Window", "find_window"]

REGIMES = ("rounding", "floor", "slower phase", "end of run")
DELTA = 0.2  # a local rate this far (relative) outside the bracket is off the law
HYSTERESIS = 2  # off-law local rates after the first one that a break needs
FLOOR = 0.05  # a later phase slower than FLOOR·low is a floor, not a slower phase
ROUNDING = 100.0  # gap ≤ ROUNDING·eps·(‖A‖² + ‖B‖²): at the dtype's rounding level
START_SLACK = 2e-3  # relative: a local rate above high·(1 + this) is a faster transient
EXACT_SLACK = 1e-4  # relative: a local rate this far from an exact law is off it
Z_LAW = 4.0  # standard errors of a local rate within which it is on the law


@dataclass(frozen=True)
class Window:
    """Indices ``[start, stop)`` of the saves that follow the law, ``end`` the regime that
    ends it (one of :data:`REGIMES`), and ``tail``: ``[stop, tail_stop)`` the saves of the
    phase that follows (empty without one).

    Examples:
        A gap on GD's leading law (rate 0.02 per step) that stops at a floor at t = 200:

        >>> import numpy as np
        >>> from rankflow.fitting import find_window, predict
        >>> t = np.arange(0.0, 400.0, 5.0)
        >>> gap = np.maximum(np.exp(-0.020101 * t), np.exp(-0.020101 * 200))
        >>> p = predict("gd", 0.1, 0.1)
        >>> w = find_window(t, gap, p.low, p.high, noisy=False)
        >>> w.start, w.end, bool(150 <= t[w.stop - 1] <= 200)
        (0, 'floor', True)
    """

    start: int
    stop: int
    end: str
    tail_stop: int


def local_span(n: int) -> int:
    """Saves per local rate: 3 for short runs, up to 8 for long ones (n // 20)."""
    return int(min(8, max(3, n // 20)))


def local_rates(t: np.ndarray, y: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The rate ``−d log y/dt`` fitted over saves ``[i, i + span)`` for each ``i``, and its
    standard error (:func:`rankflow.theory.fit_rate` on each span).

    Examples:
        >>> import numpy as np
        >>> from rankflow.fitting import local_rates
        >>> t = np.arange(6.0)
        >>> rates, ses = local_rates(t, np.exp(-0.5 * t), span=3)
        >>> rates.round(12).tolist(), ses.shape
        ([0.5, 0.5, 0.5, 0.5], (4,))
    """
    fits = [theory.fit_rate(t[i : i + span], y[i : i + span]) for i in range(len(t) - span + 1)]
    rates, ses = np.array(fits, np.float64).reshape(-1, 2).T
    return rates, ses


def _on_law(rates, ses, low: float, high: float, noisy: bool) -> np.ndarray:
    """Local rates in ``[low, high]`` up to a relative slack (:data:`EXACT_SLACK` for an
    exact law, ``low == high``; :data:`START_SLACK` for a bracket) and, for noisy data or
    a bracket, :data:`Z_LAW` standard errors (a deterministic exact law gets none: its
    local fits' scatter is the departure, a solver's error floor)."""
    rel = EXACT_SLACK if high == low else START_SLACK
    z = Z_LAW if noisy or high > low else 0.0
    se = z * np.where(np.isfinite(ses), ses, 0.0)
    return (rates >= low * (1 - rel) - se) & (rates <= high * (1 + rel) + se)


def _law_ends(on: np.ndarray) -> int | None:
    """The first local fit off the law that :data:`HYSTERESIS` more off it follow."""
    for i in range(len(on)):
        if not on[i : i + HYSTERESIS + 1].any():
            return i
    return None


def _start(rates: np.ndarray, high: float) -> int:
    """The first local rate not above ``high·(1 + START_SLACK)``: a transient decaying
    faster than the law before it is left out (one slower than the law is not: it is a
    departure from the law, fitted); 0 when none is, so that a wrong law is fitted over
    the whole run."""
    first = np.flatnonzero(rates <= high * (1 + START_SLACK))
    return int(first[0]) if first.size else 0


def _break(rates: np.ndarray, low: float, start: int) -> int | None:
    """The first local rate from ``start`` below the law and staying below (hysteresis)."""
    below = rates < low * (1 - DELTA)
    for i in range(start + 1, len(rates)):
        if below[i : i + HYSTERESIS + 1].all() and np.median(rates[i:]) < low * (1 - DELTA):
            return i
    return None


def _tail_regime(rates: np.ndarray, low: float) -> str:
    """``floor`` when the median local rate over the later half of the phase after the
    break is below FLOOR·low (the gap stopped decaying), else ``slower phase``."""
    return "floor" if np.median(rates[len(rates) // 2 :]) < FLOOR * low else "slower phase"


def find_window(
    t: np.ndarray,
    y: np.ndarray,
    low: float,
    high: float,
    *,
    scale=None,
    eps: float = 0.0,
    from_start: bool = False,
    noisy: bool = True,
) -> Window:
    """The saves of ``y(t)`` (``t`` increasing, ``y > 0`` finite) that follow a decay law
    of per-``t`` rate in ``[low, high]`` (``low > 0``), and what ends them; ``scale``
    (per save, or one number) and ``eps`` the rounding level's ``‖A‖² + ‖B‖²`` and the
    dtype's machine epsilon (``eps = 0``: no rounding check); ``from_start``: the window
    starts at the first save (no transient left out: a user's ``t_min``); ``noisy``: the
    series has noise (minibatches, Brownian paths), so local fits within their standard
    errors of the law are on it.

    Examples:
        A law at rate 0.1 that reaches a floor at t = 50:

        >>> import numpy as np
        >>> from rankflow.fitting import find_window
        >>> t = np.arange(0.0, 150.0, 2.0)
        >>> w = find_window(t, np.maximum(np.exp(-0.1 * t), np.exp(-5.0)), 0.1, 0.1)
        >>> w.end, bool(40 <= t[w.stop - 1] <= 50)  # at most half a local fit before it
        ('floor', True)
    """
    t, y = np.asarray(t, np.float64), np.asarray(y, np.float64)
    n = len(t)
    stop, end = n, "end of run"
    if eps > 0 and scale is not None:
        level = ROUNDING * eps * np.broadcast_to(np.asarray(scale, np.float64), y.shape)
        at = np.flatnonzero(y <= level)
        if at.size and at[0] >= 2:
            stop, end = int(at[0]), "rounding"
    span = local_span(stop)
    if stop < span + 2 or not low > 0:
        return Window(0, stop, end, stop)
    rates, ses = local_rates(t[:stop], y[:stop], span)
    start = 0 if from_start else _start(rates, high)
    if not low * (1 - DELTA) <= rates[start] <= high * (1 + DELTA):
        return Window(start, stop, end, stop)  # never on the law: nothing to leave
    b = _break(rates, low, start)
    if b is None:
        return Window(start, stop, end, stop)
    # the law holds to the first local fit off it (to its SE and slack) that stays off:
    # the 20% fall that found the break comes after a gradual departure
    upto = b + HYSTERESIS + 1  # the break's own local fits are off the law
    first_off = _law_ends(_on_law(rates[start:upto], ses[start:upto], low, high, noisy))
    cut = max(start + first_off + 1 if first_off is not None else b + 1, start + 3)
    return Window(start, cut, _tail_regime(rates[b:], low), stop)
