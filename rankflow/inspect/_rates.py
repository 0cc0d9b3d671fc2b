"""The decay of a series' gaps: per unit and per layer, the rate per step of a gap
statistic fitted by least squares of its log against the step (T5/T11's and T4's
predictions fitted the same way at the same steps), beside its null twin's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["UNIT_KEYS", "fit_series"]

# The identity of one unit across checkpoints.
UNIT_KEYS = ["layer", "pair", "unit", "head", "group", "theory"]


def _rate(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """(rate, stderr, points used) of ``y ≈ e^{a − rate·x}`` (NaN with < 2 usable)."""
    from ..theory import fit_rate

    keep = np.isfinite(y) & (y > 0)
    if keep.sum() < 2:
        return float("nan"), float("nan"), int(keep.sum())
    rate, se = fit_rate(x[keep], y[keep])
    return rate, se, int(keep.sum())


def fit_series(
    heads: pd.DataFrame, statistic: str = "balance_gap_rel", exponents: Mapping | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rates per unit, rates per layer) of a stacked heads table (columns ``step``,
    :data:`UNIT_KEYS`, ``statistic`` and ``null_<statistic>``).

    Per unit: ``rate`` ± ``rate_se`` (per step) of ``statistic``, ``null_rate`` ±
    ``null_rate_se`` of its null twin, ``gap_first``/``gap_last``; with ``exponents``
    (:func:`predicted_exponents`): ``predicted_rate`` and ``predicted_rate_gf`` (the
    predictions fitted at the same steps) and ``rate_over_predicted``. Per (layer,
    pair) over the theory units: the median and quartiles of ``rate``, the median of
    ``null_rate``, and ``median_gap_rate`` fitted to the per-step median gap.

    Examples:
        One head whose gap falls by e^{−1} in 100 steps, its null pairing's by 10%:

        >>> import pandas as pd
        >>> from rankflow.inspect import fit_series
        >>> heads = pd.DataFrame({"step": [0, 100], "layer": 0, "pair": "qk", "unit": "head",
        ...                       "head": 0, "group": 0, "theory": True,
        ...                       "balance_gap_rel": [0.2, 0.2 * 0.36787944117144233],
        ...                       "null_balance_gap_rel": [0.5, 0.45]})
        >>> rates, layer_rates = fit_series(heads)
        >>> rates[["rate", "null_rate"]].round(6).values.tolist()
        [[0.01, 0.001054]]
        >>> layer_rates[["layer", "pair", "units", "rate_median"]].values.tolist()
        [[0, 'qk', 1, 0.01]]
    """
    steps = np.sort(heads["step"].unique()).astype(np.float64)
    pred = {}
    for key, name in (("gd", "predicted_rate"), ("gf", "predicted_rate_gf")):
        pred[name] = _rate(steps, np.exp(-exponents[key]))[0] if exponents else float("nan")
    rows = []
    for key, g in heads.groupby(UNIT_KEYS, sort=True):
        g = g.sort_values("step")
        x = g["step"].to_numpy(np.float64)
        rate, se, n = _rate(x, g[statistic].to_numpy(np.float64))
        null, null_se, _ = _rate(x, g["null_" + statistic].to_numpy(np.float64))
        rows.append(
            dict(zip(UNIT_KEYS, key), statistic=statistic, n_points=n,
                 step_first=int(x[0]), step_last=int(x[-1]),
                 gap_first=float(g[statistic].iloc[0]), gap_last=float(g[statistic].iloc[-1]),
                 rate=rate, rate_se=se, null_rate=null, null_rate_se=null_se, **pred,
                 rate_over_predicted=_ratio(rate, pred["predicted_rate"]))
        )  # fmt: skip
    rates = pd.DataFrame(rows)
    return rates, _layer_rates(heads, rates, statistic, pred)


def _ratio(a: float, b: float) -> float:
    """``a/b``, NaN where b is 0 (λ = 0 predicts no decay: no ratio to it)."""
    return a / b if b != 0 else float("nan")


def _layer_rates(heads, rates, statistic, pred) -> pd.DataFrame:
    """Per (layer, pair): distribution over the theory units of their fitted rates."""
    rows = []
    t = heads[heads["theory"]]
    for (layer, pair), r in rates[rates["theory"]].groupby(["layer", "pair"], sort=True):
        med = t[(t["layer"] == layer) & (t["pair"] == pair)].groupby("step")[statistic].median()
        mrate, mse, _ = _rate(med.index.to_numpy(np.float64), med.to_numpy(np.float64))
        q = r["rate"].quantile([0.25, 0.5, 0.75]).to_numpy()
        rows.append(
            dict(layer=layer, pair=pair, statistic=statistic, units=len(r),
                 rate_median=q[1], rate_q25=q[0], rate_q75=q[2],
                 null_rate_median=r["null_rate"].median(),
                 median_gap_rate=mrate, median_gap_rate_se=mse, **pred)
        )  # fmt: skip
    return pd.DataFrame(rows)
