"""A comparison over a ``[sweep]``: every point's tables joined into one table each, with
the point and its swept values as columns, and the ``sweep`` table of one row per point
(the numbers a reader of a λ × η sweep looks for: the distance, GD's contraction against
T5 and (1 − ηλ)², the order in η and its standard error, the SDE's z-scores)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..core import config as config_lib
from ..core.program import STATUS

__all__ = ["SWEEP_COLUMNS", "at_point", "join", "swept_columns", "sweep_table"]

# The ``sweep`` table: ``point`` and one ``sweep.KEY`` column per swept key come first;
# the columns of the tables a point has follow (an absent table's columns are absent).
SWEEP_COLUMNS: dict[str, tuple[str, ...]] = {
    "trajectory": (
        "dynamics.kind",
        "flow.kind",
        "dynamics.eta",
        "dynamics.lam",
        "dynamics.sigma",
        "dynamics.mu",
        "status",  # worst status of either side over the saves and paths
        "distance_max",  # largest trajectory distance over the saves
        "distance_final",  # at the last save
        "relative_distance_final",
    ),
    "contraction": (
        "ratio_min",  # measured ‖D_(k+1)‖/‖D_k‖ over the window
        "ratio_max",
        "t5_deviation_max",  # max |measured − T5's one-step prediction|
        "gd_contraction",  # (1 − ηλ)²
        "gf_contraction",  # e^(−2ηλ)
    ),
    "order": ("horizon", "order", "order_stderr"),  # T8: distance ≈ C ηᵖ at fixed ηt
    "sde": ("optimizer.z_max", "flow.z_max"),  # max |z| against T6 over the saves
    "weak": ("horizon", "weak_order.loss", "weak_order.loss_stderr"),  # and per observable
}


def _value(v: Any) -> Any:
    """A swept value as a table cell: scalars as they are, lists as their text."""
    return str(v) if isinstance(v, (list, tuple, dict)) else v


def swept_columns(cfg: Mapping[str, Any], swept: Sequence[str]) -> dict[str, Any]:
    """``sweep.KEY`` → the point's value of each swept key."""
    flat = config_lib.flatten(cfg)
    return {f"sweep.{key}": _value(flat[key]) for key in swept}


def at_point(cfg: Mapping[str, Any], swept: Sequence[str]) -> str:
    """`` at KEY=VALUE, …`` naming a point in an error; empty without a sweep."""
    if not swept:
        return ""
    flat = config_lib.flatten(cfg)
    return " at " + ", ".join(f"{key}={flat[key]!r}" for key in swept)


def join(
    per_point: Sequence[Mapping[str, pd.DataFrame]],
    cfgs: Sequence[Mapping[str, Any]],
    swept: Sequence[str],
) -> dict[str, pd.DataFrame]:
    """Each table of every point, concatenated in the sweep's order, after the columns
    ``point`` and ``sweep.KEY``; and the ``sweep`` table (:func:`sweep_table`)."""
    names = list(dict.fromkeys(name for tables in per_point for name in tables))
    joined = {}
    for name in names:
        parts = []
        for i, (tables, cfg) in enumerate(zip(per_point, cfgs, strict=True)):
            if name not in tables:
                continue
            df = tables[name]
            front = pd.DataFrame(
                {"point": [i] * len(df)}
                | {k: [v] * len(df) for k, v in swept_columns(cfg, swept).items()}
            )
            parts.append(pd.concat([front, df.reset_index(drop=True)], axis=1))
        joined[name] = pd.concat(parts, ignore_index=True)
    joined["sweep"] = sweep_table(per_point, cfgs, swept)
    return joined


def _worst(statuses) -> str:
    return STATUS[max(STATUS.index(s) for s in statuses)]


def _point_row(tables: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    """The ``sweep`` table's measured columns of one point."""
    traj = tables["trajectory"]
    first = traj.iloc[0]
    row: dict[str, Any] = {k: first[k] for k in SWEEP_COLUMNS["trajectory"][:6]}
    row["status"] = _worst([*traj["optimizer.status"], *traj["flow.status"]])
    row["distance_max"] = float(traj["distance"].max())
    row["distance_final"] = float(traj["distance"].iloc[-1])
    row["relative_distance_final"] = float(traj["relative_distance"].iloc[-1])
    if "contraction" in tables:
        c = tables["contraction"]
        row |= {
            "ratio_min": float(c["ratio"].min()),
            "ratio_max": float(c["ratio"].max()),
            "t5_deviation_max": float(c["t5_deviation"].max()),
            "gd_contraction": float(c["gd_contraction"].iloc[0]),
            "gf_contraction": float(c["gf_contraction"].iloc[0]),
        }
    if "order" in tables:
        o = tables["order"]
        row |= {
            "horizon": float(o["horizon"].iloc[0]),
            "order": float(o["order"].iloc[0]),
            "order_stderr": float(o["order_stderr"].iloc[0]),
        }
    if "sde" in tables:
        sd = tables["sde"]
        for role in ("optimizer", "flow"):
            z = sd.loc[sd["role"] == role, "z"].abs()
            row[f"{role}.z_max"] = float(z.max()) if z.notna().any() else np.nan
    if "weak" in tables:
        w = tables["weak"]
        row["horizon"] = float(w["horizon"].iloc[0])
        for obs, part in w.groupby("observable", sort=False):
            row[f"weak_order.{obs}"] = float(part["order"].iloc[0])
            row[f"weak_order.{obs}_stderr"] = float(part["order_stderr"].iloc[0])
    return row


def sweep_table(
    per_point: Sequence[Mapping[str, pd.DataFrame]],
    cfgs: Sequence[Mapping[str, Any]],
    swept: Sequence[str],
) -> pd.DataFrame:
    """One row per point: ``point``, ``sweep.KEY`` and the columns of
    :data:`SWEEP_COLUMNS` of the tables the point has."""
    rows = [
        {"point": i} | swept_columns(cfg, swept) | _point_row(tables)
        for i, (tables, cfg) in enumerate(zip(per_point, cfgs, strict=True))
    ]
    return pd.DataFrame(rows)
