"""The theory beside the measurement: how fast each pair's balance gap should decay under
the user's optimizer, and how fast it did.

The gap ``D = AᵀA − BᵀB`` of a product trained with decoupled weight decay contracts, per
step, by (docs/theory.md):

- ``gd``/``sgd`` (T5): ``(1 − ηλ)²`` up to an O(η²) term; late, near a balanced minimum,
  the rate ``−log(contraction)`` lies in T5's bracket ``[−log(1−ηλ)², −log(1−2ηλ)]``
  (:func:`rankflow.theory.gd_rate_bracket`); minibatch noise adds a floor (T6, T10)
  below which the gap no longer decays;
- ``gradient_flow`` (T4): ``e^{−2ηλ}`` per unit of time;
- ``momentum`` (T7): the orbit rate of the decoupled momentum flow
  (:func:`rankflow.theory.momentum_orbit_rate`);
- a schedule (T11): ``Π_j (1 − η_jλ)²`` over the steps taken, so the measured decay is
  compared against the accumulated learning rate;
- ``adamw``: no prediction (Adam's update is not a gradient).

The measured rate is :func:`rankflow.theory.fit_rate` of each unit's ``balance_gap``
against the step, over the logged steps (or a window); it *agrees* when the predicted
bracket lies within three standard errors of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import theory
from ..numerics.schedules import SCHEDULES, Schedule
from ._pairs import TrackError

__all__ = ["KINDS", "Optimizer", "predicted_rates", "prediction_table"]

KINDS = ("sgd", "gd", "momentum", "gradient_flow", "adamw")
# A fitted rate agrees with the prediction within this many of its standard errors.
Z = 3.0


@dataclass(frozen=True)
class Optimizer:
    """The user's optimizer in a form the theory speaks of: ``kind`` (one of
    :data:`KINDS`), peak learning rate ``eta``, decoupled decay ``lam`` of the tracked
    pairs, momentum's EMA weight ``mu`` (``M ← (1−μ)M + μg``) and a ``schedule``
    (:class:`rankflow.numerics.schedules.Schedule`; None: constant).

    Examples:
        >>> from rankflow.track import Optimizer
        >>> Optimizer("sgd", eta=0.1, lam=0.01)
        Optimizer(kind='sgd', eta=0.1, lam=0.01, mu=None, schedule=None)
        >>> Optimizer("rmsprop", 0.1, 0.0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rankflow.track._pairs.TrackError: optimizer.kind: 'rmsprop' is not one of sgd, gd, ...
    """

    kind: str
    eta: float
    lam: float
    mu: float | None = None
    schedule: Schedule | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise TrackError(f"optimizer.kind: {self.kind!r} is not one of {', '.join(KINDS)}")
        if not (self.eta > 0 and self.lam >= 0):
            raise TrackError(
                f"optimizer: eta must be > 0 and lam ≥ 0, got eta={self.eta}, lam={self.lam}"
            )
        if self.kind == "momentum" and not (self.mu and 0 < self.mu <= 1):
            raise TrackError(f"optimizer.mu: momentum needs 0 < mu ≤ 1, got {self.mu}")
        if self.schedule is not None and self.schedule.kind not in SCHEDULES:
            raise TrackError(f"optimizer.schedule: kind must be one of {', '.join(SCHEDULES)}")


def predicted_rates(opt: Optimizer) -> tuple[float, float, str]:
    """``(low, high, source)``: the predicted per-step decay rate of ‖D‖ (a bracket;
    ``low == high`` for an exact law), NaN for AdamW; with a schedule, the rates at the
    peak learning rate (:func:`prediction_table` integrates the schedule).

    Examples:
        >>> from rankflow.track import Optimizer, predicted_rates
        >>> [round(x, 6) for x in predicted_rates(Optimizer("gd", 0.1, 0.5))[:2]]  # ηλ = 0.05
        [0.102587, 0.105361]
        >>> predicted_rates(Optimizer("adamw", 1e-3, 0.1))[2]
        'no prediction (AdamW: the update is not a gradient)'
    """
    eta, lam = float(opt.eta), float(opt.lam)
    if opt.kind == "adamw":
        return float("nan"), float("nan"), "no prediction (AdamW: the update is not a gradient)"
    base = 2 * eta * lam
    if lam == 0:
        return 0.0, 0.0, "T4/T5 without decay: D conserved (up to GD's O(η²) term)"
    if opt.kind == "gradient_flow":
        return base, base, "T4: 2ηλ"
    if opt.kind == "momentum":
        r = float(theory.momentum_orbit_rate(eta, lam, opt.mu)) * base
        return r, r, "T7: the decoupled momentum flow's orbit rate"
    low, high = (float(x) * base for x in theory.gd_rate_bracket(eta, lam))
    return low, high, "T5: [−log(1−ηλ)², −log(1−2ηλ)] per step"


def _clock(opt: Optimizer, steps: np.ndarray) -> np.ndarray:
    """The accumulated learning rate over the peak one, Σ_{j<k} η_j/η, at each step
    (the step itself without a schedule): T11's clock, in which the prediction is a
    constant rate."""
    if opt.schedule is None or opt.schedule.constant:
        return steps.astype(np.float64)
    # (1 − η_jλ)² accumulated, divided by the constant-η one-step factor: T11's clock
    contraction = theory.gd_scheduled_contraction(opt.eta, opt.lam, steps, opt.schedule)
    one = float(theory.gd_contraction(opt.eta, opt.lam))
    return np.log(contraction) / np.log(one)


def prediction_table(
    rows: pd.DataFrame, opt: Optimizer | None, *, t_min: float | None = None
) -> pd.DataFrame:
    """Per (layer, pair, head): the measured decay rate of ``balance_gap`` per step (a
    fit over the logged steps from ``t_min``; under a schedule, per step of the
    accumulated learning rate, T11) with its standard error, the predicted bracket and
    its source, and ``agrees``: the bracket within :data:`Z` standard errors of the
    measured rate (NaN without a prediction).

    Examples:
        A unit whose gap decays exactly as T5's leading term (1 − ηλ)^{2k}:

        >>> import numpy as np, pandas as pd
        >>> from rankflow.track import Optimizer, prediction_table
        >>> k = np.arange(0, 200, 20)
        >>> df = pd.DataFrame({"t": k, "layer": 0, "pair": "qk", "head": 0, "status": "ok",
        ...                    "balance_gap": (1 - 0.01) ** (2 * k)})
        >>> row = prediction_table(df, Optimizer("sgd", eta=0.1, lam=0.1)).iloc[0]
        >>> float(round(row["rate"], 6)), float(round(row["predicted_low"], 6)), bool(row["agrees"])
        (0.020101, 0.020101, True)
    """
    if opt is None:
        return pd.DataFrame()
    low, high, source = predicted_rates(opt)
    out = []
    ok = rows[rows["status"].astype(str) == "ok"]
    if t_min is not None:
        ok = ok[ok["t"] >= t_min]
    for (layer, pair, head), g in ok.groupby(["layer", "pair", "head"], sort=True):
        g = g.sort_values("t")
        clock = _clock(opt, g["t"].to_numpy())
        rate, se = theory.fit_rate(clock, g["balance_gap"].to_numpy())
        agrees = np.nan
        if np.isfinite(low) and np.isfinite(rate):
            tol = max(Z * (se if np.isfinite(se) else 0.0), 1e-9 * high)
            agrees = bool(low - tol <= rate <= high + tol)
        out.append(
            {
                "layer": layer,
                "pair": pair,
                "head": head,
                "steps": len(g),
                "rate": rate,
                "rate_se": se,
                "predicted_low": low,
                "predicted_high": high,
                "source": source,
                "agrees": agrees,
            }
        )
    return pd.DataFrame(out)
