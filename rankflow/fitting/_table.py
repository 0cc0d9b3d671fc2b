"""``rankflow.fit``: a results table (or directory) against the theory, one row per series.

A series is a run's path-mean gap (``column``, default ``balance_gap``), or at depth
L ≥ 3 each pair's ``balance_gap_j`` (T12), or per layer, pair and head where the table
has them (the tracker's, the attention family's). Each run's prediction comes from its
own ``dynamics.*`` columns (or the directory's ``config.json``), through
:func:`rankflow.fitting.predict`; under a learning-rate schedule the fit is against
T11's clock ``lr_clock/η`` (the accumulated learning rate over the peak one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config.fields import ConfigError
from ..numerics.schedules import Schedule
from ._fit import SLACK, SLACK_SOLVED, Z, fit_series
from ._floor import RunFloors
from ._predict import Prediction, predict

__all__ = ["UNIT_COLUMNS", "fit", "scheduled_clock"]

UNIT_COLUMNS = ("layer", "pair", "head")
CONTINUOUS = ("gradient_flow", "stochastic_flow", "momentum_flow")
NOISELESS = ("gradient_flow", "momentum_flow", "momentum_flow_coupled", "gd", "momentum")


def scheduled_clock(eta: float, lam: float, steps: np.ndarray, schedule: Schedule | None):
    """T11's clock at each step: ``log Π_{j<k}(1 − η_jλ)² / log (1 − ηλ)²`` (the step
    itself without a schedule), in which GD's leading law is the constant rate at η.

    Examples:
        >>> import numpy as np
        >>> from rankflow.fitting import scheduled_clock
        >>> scheduled_clock(0.1, 0.5, np.array([0, 10, 20]), None).tolist()  # constant η
        [0.0, 10.0, 20.0]
    """
    from .. import theory

    steps = np.asarray(steps)
    if schedule is None or schedule.constant:
        return steps.astype(np.float64)
    contraction = theory.gd_scheduled_contraction(eta, lam, steps, schedule)
    return np.log(contraction) / np.log(float(theory.gd_contraction(eta, lam)))


def _read(source, config) -> tuple[pd.DataFrame, dict]:
    """The table and its config (``config.json``'s ``config``, or the one given)."""
    if isinstance(source, pd.DataFrame):
        return source, dict(config or source.attrs.get("config", {}) or {})
    from ..engine import store

    path = Path(source)
    df = store.load(path)
    meta = path / store.CONFIG
    cfg = json.loads(meta.read_text()).get("config", {}) if meta.is_file() else {}
    return df, dict(config or cfg)


def _setting(first: Mapping, cfg: Mapping, key: str, default: Any = None) -> Any:
    """A run's setting ``section.key``: its column, else the config's value."""
    if key in first and not pd.isna(first[key]):
        return first[key]
    section, _, name = key.partition(".")
    value = cfg.get(section, {}).get(name) if isinstance(cfg.get(section), Mapping) else None
    return default if value is None else value


def _prediction(first: Mapping, cfg: Mapping) -> tuple[Prediction, str, float, float]:
    """The run's prediction, its dynamics kind, η and λ."""
    opt = cfg.get("optimizer") if cfg.get("family") == "track" else None
    if opt:  # a tracker's folder: its optimizer
        kind, eta, lam, mu = opt["kind"], opt["eta"], opt["lam"], opt.get("mu")
        noise, sigma, shape = None, 0.0, None
    else:
        kind = str(_setting(first, cfg, "dynamics.kind", "gradient_flow"))
        eta = float(_setting(first, cfg, "dynamics.eta", np.nan))
        lam = float(_setting(first, cfg, "dynamics.lam", np.nan))
        mu, sigma = _setting(first, cfg, "dynamics.mu"), _setting(first, cfg, "dynamics.sigma", 0)
        noise = _setting(first, cfg, "dynamics.noise")
        shape = (_setting(first, cfg, "problem.m"), _setting(first, cfg, "problem.n"))
    lam = _pair_lam(first, lam)
    if not (np.isfinite(eta) and np.isfinite(lam)):
        return predict("none", 1.0, 0.0), kind, eta, lam
    pred = predict(kind, eta, lam, mu=mu, noise=noise, sigma=float(sigma or 0), shape=shape)
    return pred, kind, eta, lam


def _pair_lam(first: Mapping, lam: float) -> float:
    """The attention family's λ of a head's pair: ``train.lam_<pair>`` where set, 0 for
    a pair outside ``train.decay`` (never decayed), else ``dynamics.lam``."""
    pair = first.get("pair")
    if pair is None:
        return lam
    own = first.get(f"train.lam_{pair}")
    if own is not None and not pd.isna(own):
        return float(own)
    decay = first.get("train.decay")
    if decay is not None and not pd.isna(decay) and str(pair) not in str(decay):
        return 0.0
    return lam


def _series_columns(df: pd.DataFrame, column: str) -> list[str]:
    if column in df.columns:
        return [column]
    depth = sorted(
        (c for c in df.columns if c.startswith("balance_gap_") and c[12:].isdigit()),
        key=lambda c: int(c[12:]),
    )
    if column == "balance_gap" and depth:
        return depth  # depth L ≥ 3: one series per pair (T12)
    raise ConfigError(
        f"column: no column {column!r} in the table; columns: {', '.join(df.columns)}"
    )


def _clock(run: pd.DataFrame, eta: float) -> np.ndarray:
    """Steps, or T11's clock ``lr_clock/η`` under a schedule."""
    t = run["t"].to_numpy(np.float64)
    if "lr_clock" in run.columns and run["lr_clock"].notna().all():
        return run["lr_clock"].to_numpy(np.float64) / eta
    return t


def _spare_rates(run: pd.DataFrame, cfg: Mapping, first: Mapping, row: dict) -> dict:
    """The fitted decay rates of the spare singular values sv_{k > rank} over the slower
    phase (min and max): what the slower phase follows (docs/theory.md, after T5)."""
    from .. import theory

    rank = _setting(first, cfg, "problem.rank")
    sv = [c for c in run.columns if c.startswith("sv_") and c[3:].isdigit()]
    spare = [c for c in sv if rank is not None and int(c[3:]) > int(rank)]
    if not spare or not np.isfinite(row["slow_t_min"]):
        return {"spare_rate_low": np.nan, "spare_rate_high": np.nan}
    t = run["t"].to_numpy(np.float64)
    sel = (t >= row["slow_t_min"]) & (t <= row["slow_t_max"])
    rates = []
    for c in spare:
        v = run[c].to_numpy(np.float64)[sel]
        if np.sum(np.isfinite(v) & (v > 0)) >= 3:
            rates.append(theory.fit_rate(t[sel], v)[0])
    if not rates:
        return {"spare_rate_low": np.nan, "spare_rate_high": np.nan}
    return {"spare_rate_low": min(rates), "spare_rate_high": max(rates)}


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"].astype(str) == "ok"]
    return df


def fit(
    source,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
    column: str = "balance_gap",
    config: Mapping | None = None,
    z: float = Z,
) -> pd.DataFrame:
    """The decay rate of ``column`` in every run (path-mean; per depth pair; per layer,
    pair and head) of ``source`` — a results directory, or a table as :func:`rankflow.run`
    and :func:`rankflow.load` return it (``config``: settings missing from its columns)
    — over the window where it follows the theory's law, against that law.

    One row per series: ``run_id`` (and ``layer``, ``pair``, ``head``, ``series``), the
    run's ``dynamics.kind``, ``dynamics.eta``, ``dynamics.lam``, the window (``t_min``,
    ``t_max``, ``points``, ``start``, ``end``: ``rounding``, ``floor``, ``slower phase``,
    ``end of run``, or ``t_max (set)``), ``rate`` and ``rate_se`` (per step), ``ratio``
    and ``ratio_se`` (over 2ηλ), the prediction (``predicted_low``, ``predicted_high``,
    ``source`` e.g. ``T5``, ``law``), ``verdict`` (pass/fail/none) and its
    ``tolerance``; after a break, the following phase's ``slow_rate``, ``slow_ratio``
    (its window ``slow_t_min``, ``slow_t_max``) and the fitted rates of the spare
    singular values over it (``spare_rate_low``, ``spare_rate_high``); for ``sgd`` with
    saved states, T10's floor (:func:`rankflow.fitting.minibatch_floor`):
    ``floor_predicted`` ‖mean D*‖_F, ``floor_measured`` ‖mean D‖_F over the same saves
    and paths, ``floor_ratio``, ``floor_se``, ``floor_t_min`` and ``floor_from`` (after
    a window ending at ``floor``, else the run's last half); NaN otherwise, the reason
    in ``floor_note``.

    ``t_min``/``t_max`` set the window (a ``t_min`` alone: its end still found); else it
    is found per series (:func:`rankflow.fitting.find_window`). Raises ``ConfigError``
    for a column not in the table or ``t_min ≥ t_max``.

    Examples:
        >>> import rankflow
        >>> df = rankflow.run({"x64": True, "problem": {"kind": "diagonal",
        ...     "singular_values": [1.0, 0.5]}, "model": {"r": 2},
        ...     "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1}, "save": {"t1": 300, "num": 31}})
        >>> row = rankflow.fit(df).iloc[0]
        >>> row["source"], row["verdict"], bool(1.0 <= row["ratio"] <= 1.02)
        ('T5', 'pass', True)
    """
    if t_min is not None and t_max is not None and not t_min < t_max:
        raise ConfigError(f"t_min: must be < t_max, got t_min={t_min}, t_max={t_max}")
    df, cfg = _read(source, config)
    columns = _series_columns(df, column)
    df = _ok(df)
    units = [c for c in UNIT_COLUMNS if c in df.columns]
    floors = RunFloors(source, cfg)
    runs = ["run_id"] if "run_id" in df.columns else []
    rows = []
    for key, run in df.groupby(runs + units, sort=True) if runs + units else [((), df)]:
        first = run.iloc[0].to_dict()
        pred, kind, eta, lam = _prediction(first, cfg)
        mean = run.groupby("t", sort=True).mean(numeric_only=True).reset_index()  # path-mean
        eps = float(np.finfo(np.float64 if run[columns[0]].dtype == np.float64 else np.float32).eps)
        scale = 2 * mean["l2_penalty"].to_numpy() if "l2_penalty" in mean.columns else None
        slack = SLACK_SOLVED if kind in CONTINUOUS else SLACK
        ident = dict(zip(runs + units, key if isinstance(key, tuple) else (key,), strict=True))
        for col in columns:
            row = fit_series(
                _clock(mean, eta), mean[col].to_numpy(), pred, t_min=t_min, t_max=t_max,
                scale=scale, eps=eps, z=z, slack=slack, noisy=kind not in NOISELESS,
            )  # fmt: skip
            rows.append(_row(ident, col, kind, eta, lam, pred, row, mean, cfg, first, floors))
    return pd.DataFrame(rows)


def _row(ident, col, kind, eta, lam, pred: Prediction, row, mean, cfg, first, floors) -> dict:
    t1 = float(mean["t"].max())
    base = 2 * eta * lam if lam > 0 else np.nan
    return {
        **ident,
        "series": col,
        "dynamics.kind": kind,
        "dynamics.eta": eta,
        "dynamics.lam": lam,
        **{k: row[k] for k in ("t_min", "t_max", "points", "start", "end", "rate", "rate_se")},
        "ratio": row["rate"] / base,
        "ratio_se": row["rate_se"] / base,
        "predicted_low": pred.low,
        "predicted_high": pred.high,
        "source": pred.source,
        "law": pred.law,
        "verdict": row["verdict"],
        "tolerance": row["tolerance"],
        "slow_rate": row["slow_rate"],
        "slow_rate_se": row["slow_rate_se"],
        "slow_ratio": row["slow_rate"] / base,
        "slow_t_min": row["slow_t_min"],
        "slow_t_max": row["slow_t_max"],
        **_spare_rates(mean, cfg, first, row),
        **floors.row(ident.get("run_id"), kind, lam, row["t_max"], row["end"], t1),
    }
