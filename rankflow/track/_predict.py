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
- ``adamw``, ``sign_gd``, ``signum``, ``lion``, ``muon`` (decoupled decay, ``ηλ`` per
  step as ``optax.adamw``'s lr-multiplied weight_decay): no prediction (the update is
  not a gradient).

The measured rate is :func:`rankflow.fitting.fit_series` of each unit's ``balance_gap``
against the step, over the window where it follows the law (found automatically, so that
a noise floor is left out; or ``t_min``/``t_max``); it *agrees* when the predicted
bracket lies within three standard errors of it. Predictions, windows and verdicts are
:mod:`rankflow.fitting`'s, the one implementation that ``rankflow fit`` uses too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import fitting
from ..numerics.schedules import SCHEDULES, Schedule
from ._pairs import TrackError

__all__ = ["KINDS", "Optimizer", "predicted_rates", "prediction_table"]

# The geometry kinds (the core family's, decay ηλ per step like adamw's): no prediction.
KINDS = ("sgd", "gd", "momentum", "gradient_flow", "adamw", "sign_gd", "signum", "lion", "muon")
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


def _prediction(opt: Optimizer) -> fitting.Prediction:
    return fitting.predict(opt.kind, opt.eta, opt.lam, mu=opt.mu)


def predicted_rates(opt: Optimizer) -> tuple[float, float, str]:
    """``(low, high, source)``: the predicted per-step decay rate of ‖D‖ (a bracket;
    ``low == high`` for an exact law), NaN for AdamW; with a schedule, the rates at the
    peak learning rate (:func:`prediction_table` integrates the schedule). From
    :func:`rankflow.fitting.predict`, the one source of predictions.

    Examples:
        >>> from rankflow.track import Optimizer, predicted_rates
        >>> [round(x, 6) for x in predicted_rates(Optimizer("gd", 0.1, 0.5))[:2]]  # ηλ = 0.05
        [0.102587, 0.105361]
        >>> predicted_rates(Optimizer("adamw", 1e-3, 0.1))[2]
        'no prediction (AdamW: the update is not a gradient)'
    """
    p = _prediction(opt)
    return p.low, p.high, p.law


def prediction_table(
    rows: pd.DataFrame,
    opt: Optimizer | None,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
) -> pd.DataFrame:
    """Per (layer, pair, head): the measured decay rate of ``balance_gap`` per step (under
    a schedule, per step of T11's accumulated learning rate) with its standard error,
    fitted over the window where it follows the law — found automatically
    (:func:`rankflow.fitting.find_window`: a noise floor, the rounding level or a slower
    phase ends it; ``end`` names which) unless ``t_min``/``t_max`` set it — the
    predicted bracket and its source, and ``agrees``: the bracket within :data:`Z`
    standard errors of the measured rate (NaN without a prediction).

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
        >>> row["end"]
        'end of run'
    """
    if opt is None:
        return pd.DataFrame()
    pred = _prediction(opt)
    out = []
    ok = rows[rows["status"].astype(str) == "ok"]
    for (layer, pair, head), g in ok.groupby(["layer", "pair", "head"], sort=True):
        g = g.sort_values("t")
        clock = fitting.scheduled_clock(opt.eta, opt.lam, g["t"].to_numpy(), opt.schedule)
        fit = fitting.fit_series(
            clock, g["balance_gap"].to_numpy(), pred, t_min=t_min, t_max=t_max, z=Z
        )
        agrees = np.nan if fit["verdict"] == "none" else fit["verdict"] == "pass"
        out.append(
            {
                "layer": layer,
                "pair": pair,
                "head": head,
                "steps": fit["points"],
                "rate": fit["rate"],
                "rate_se": fit["rate_se"],
                "predicted_low": pred.low,
                "predicted_high": pred.high,
                "source": pred.law,
                "agrees": agrees,
                **{k: fit[k] for k in ("t_min", "t_max", "end", "slow_rate")},
            }
        )
    return pd.DataFrame(out)
