"""The rate of a gap over a window, against the theory: one row per fitted series.

:func:`fit_series` fits one series (a run's path-mean gap, one depth pair's, one head's)
over its window (:func:`rankflow.fitting.find_window`, or ``t_min``/``t_max``) with
:func:`rankflow.theory.fit_rate`, and gives the verdict against its
:class:`~rankflow.fitting.Prediction`: ``pass`` when the rate lies in
``[low − tol, high + tol]``, ``tol = Z·SE + slack·rate`` (:data:`Z` standard errors, and
a relative ``slack``: :data:`SLACK_SOLVED` for a law of a flow solved adaptively,
:data:`SLACK` otherwise), ``fail`` outside, ``none`` without a prediction or without a
finite standard error (a fit of two points never passes).
"""

from __future__ import annotations

import numpy as np

from .. import theory
from ._predict import Prediction
from ._window import find_window

__all__ = ["SLACK", "SLACK_SOLVED", "Z", "fit_series", "verdict"]

Z = 4.0  # standard errors of the fitted rate that the verdict allows
SLACK = 1e-9  # relative: rounding of an exact law in the fitted rate
SLACK_SOLVED = 1e-4  # relative: an exact law solved adaptively (rtol 1e-6 on the state)


def verdict(rate: float, se: float, pred: Prediction, *, z: float = Z, slack: float = SLACK):
    """``(verdict, tolerance)``: ``pass``/``fail``/``none`` and the tolerance it used, in
    words (see the module's docstring).

    Examples:
        >>> from rankflow.fitting import predict, verdict
        >>> p = predict("gd", 0.1, 0.1)
        >>> verdict(p.low, 1e-6, p)[0], verdict(0.5 * p.low, 1e-6, p)[0]
        ('pass', 'fail')
        >>> verdict(p.low, float("nan"), p)
        ('none', 'SE not finite (2 points): no verdict')
    """
    if not pred.available or not np.isfinite(rate):
        return "none", "no prediction"
    if not np.isfinite(se):
        return "none", "SE not finite (2 points): no verdict"
    lo = pred.low - z * se - slack * abs(pred.low)
    hi = pred.high + z * se + slack * abs(pred.high)
    text = f"[low, high] ± ({z:g}·SE + {slack:g}·rate)"
    return ("pass" if lo <= rate <= hi else "fail"), text


def _fit(t, y, lo: int, hi: int) -> tuple[float, float]:
    if hi - lo < 2:
        return float("nan"), float("nan")
    return theory.fit_rate(t[lo:hi], y[lo:hi])


def _within(t, t_min, t_max) -> tuple[int, int]:
    """The saves in ``[t_min, t_max]`` (None: unbounded), as an index range."""
    lo = 0 if t_min is None else int(np.searchsorted(t, t_min, side="left"))
    hi = len(t) if t_max is None else int(np.searchsorted(t, t_max, side="right"))
    return lo, hi


def _window(t, y, pred: Prediction, t_min, t_max, scale, eps, noisy) -> tuple[int, int, str, int]:
    """``(start, stop, end, tail_stop)``: the user's ``[t_min, t_max]``, its end found
    automatically when only ``t_min`` is set (and a prediction exists)."""
    lo, hi = _within(t, t_min, t_max)
    if t_max is not None or not pred.available or pred.low <= 0:
        return lo, hi, "t_max (set)" if t_max is not None else "end of run", hi
    sc = None if scale is None else scale[lo:hi]
    w = find_window(
        t[lo:hi], y[lo:hi], pred.low, pred.high, scale=sc, eps=eps,
        from_start=t_min is not None, noisy=noisy,
    )  # fmt: skip
    return lo + w.start, lo + w.stop, w.end, lo + w.tail_stop


def fit_series(
    t,
    y,
    pred: Prediction,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
    scale=None,
    eps: float = 0.0,
    z: float = Z,
    slack: float = SLACK,
    noisy: bool = True,
) -> dict:
    """The fit of one series ``y(t)`` (``t`` in the prediction's clock: steps, or T11's
    accumulated learning rate over the peak one) against ``pred``: a dict of the window
    (``t_min``, ``t_max``, ``points``, ``start``: ``transient skipped`` or ``first
    save``, ``end``: what ends it), ``rate``, ``rate_se``, ``verdict``, ``tolerance``
    and, after a break, the following phase's ``slow_rate``, ``slow_rate_se``,
    ``slow_t_min``, ``slow_t_max``. The window is found automatically unless
    ``t_min``/``t_max`` is given; ``scale``, ``eps``, ``noisy``: :func:`find_window`'s
    rounding level and whether the series has noise.

    Examples:
        >>> import numpy as np
        >>> from rankflow.fitting import fit_series, predict
        >>> k = np.arange(0.0, 400.0, 10.0)
        >>> row = fit_series(k, 0.99 ** (2 * k), predict("gd", 0.1, 0.1))
        >>> row["verdict"], row["end"], round(row["rate"], 6)
        ('pass', 'end of run', 0.020101)
    """
    t, y = np.asarray(t, np.float64), np.asarray(y, np.float64)
    keep = np.isfinite(t) & np.isfinite(y) & (y > 0)
    t, y = t[keep], y[keep]
    if scale is not None:
        scale = np.broadcast_to(np.asarray(scale, np.float64), keep.shape)[keep]
    lo, hi, end, tail = _window(t, y, pred, t_min, t_max, scale, eps, noisy)
    rate, se = _fit(t, y, lo, hi)
    slow, slow_se = _fit(t, y, hi, tail) if end in ("slower phase", "floor") else (np.nan,) * 2
    judged, tol = verdict(rate, se, pred, z=z, slack=slack)
    has_tail = end in ("slower phase", "floor") and tail > hi
    return {
        "points": hi - lo,
        "t_min": float(t[lo]) if hi > lo else np.nan,
        "t_max": float(t[hi - 1]) if hi > lo else np.nan,
        "start": "t_min (set)"
        if t_min is not None
        else ("transient skipped" if lo > 0 else "first save"),
        "end": end,
        "rate": rate,
        "rate_se": se,
        "verdict": judged,
        "tolerance": tol,
        "slow_rate": slow,
        "slow_rate_se": slow_se,
        "slow_t_min": float(t[hi]) if has_tail else np.nan,
        "slow_t_max": float(t[tail - 1]) if has_tail else np.nan,
    }
