"""Judging a comparison's orders in η (docs/theory.md, T8, T10): the order between each
pair of consecutive learning rates, the fitted order against the scheme's expected one
within the tolerance ``rankflow reproduce`` uses, and a verdict with a computed reading.

Pairs and their expected order p (:data:`RULES`):

- ``order`` table (gd against gradient flow; momentum and momentum_coupled against
  their flows with μ halved along with η): the distance ‖θ_K − θ(K)‖_F at a fixed
  horizon ηt, p = 1 (T8: one step is explicit Euler at dt = 1 step), to
  :data:`ORDER_TOL`, the tolerance of reproduce's ``discrete.gd_order`` and
  ``optimizers.momentum_order`` / ``momentum_coupled_order``;
- ``weak`` table (sgd, and sgd_gaussian with noise = gradient, against their SMEs): the
  weak error of each observable's mean, p = 1 (T10; Li, Tai & E), to :data:`WEAK_TOL`, the
  tolerance of reproduce's ``noise.sme_weak_order``;
- sgd_gaussian with parameter noise against the stochastic flow (``sde`` table, T6) has
  no order in η: no verdict here (its z-scores are in the summary).

The verdict of a fit (:func:`order_verdict`): ``inconclusive`` when its standard error
is not finite (two rates, or fewer than two usable ones) or exceeds the tolerance (the
fit cannot tell p from p ± tol); otherwise ``pass`` when |order − p| ≤ tol, ``fail``
when not. Reproduce's claims use the same pass rule (with their own further checks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .tables import COLUMNS, SETTING

__all__ = [
    "ORDER_TOL",
    "RULES",
    "WEAK_TOL",
    "halving_orders",
    "judge",
    "order_verdict",
    "reading",
]

# T8: the fitted order is 1 up to the O(η) relative correction at the largest η (0.04 at
# η = 0.1 on sims/reproduce/discrete_gd.toml); a non-convergent scheme has order 0, a
# second-order one 2, so the nearest wrong order misses this tolerance by ≥ 0.85.
# rankflow.reproduce (discrete, optimizers) reads this constant.
ORDER_TOL = 0.15
# T10: SGD's weak error against its SME is first order in η; fitted over a few η with
# Monte Carlo error, the order is judged within 0.2 (and its SE must be ≤ 0.2): a noise
# of the wrong size in η (√η with time in steps) gives order ≈ 0, 5 times this away.
# rankflow.reproduce.noise_sme reads this constant.
WEAK_TOL = 0.2

# table → (what is fitted, expected order p, tolerance, theory): the rule of each pair.
RULES: dict[str, tuple[str, float, float, str]] = {
    "order": ("distance", 1.0, ORDER_TOL, "T8"),
    "weak": ("|weak error|", 1.0, WEAK_TOL, "T10"),
}


def halving_orders(
    etas: np.ndarray, errors: np.ndarray, ses: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The local order between consecutive learning rates (T8, T10):
    ``log(e_j/e_{j+1}) / log(η_j/η_{j+1})``, which is ``log2(e_j/e_{j+1})`` for halvings,
    and its standard error from ``ses`` (the errors' SEs, delta method:
    √((s_j/e_j)² + (s_{j+1}/e_{j+1})²) / |log(η_j/η_{j+1})|; NaN without ``ses``).

    Args:
      etas, errors: ``(k,)`` learning rates and the error at each (``|e|`` is used);
        a non-finite or zero error gives NaN for the pairs it is in.
      ses: ``(k,)`` standard errors of ``errors``, or None (deterministic errors).

    Returns:
      ``(orders, stderrs)``, each ``(k − 1,)``.

    Examples:
      >>> import numpy as np
      >>> from rankflow.compare.verdict import halving_orders
      >>> eta = 0.1 / 2.0 ** np.arange(4)
      >>> orders, _ = halving_orders(eta, 3.0 * eta**2)  # a second-order scheme
      >>> orders.tolist()
      [2.0, 2.0, 2.0]
    """
    eta = np.asarray(etas, np.float64)
    err = np.abs(np.asarray(errors, np.float64))
    err = np.where(np.isfinite(err) & (err > 0), err, np.nan)
    step = np.log(eta[:-1] / eta[1:])
    orders = np.log(err[:-1] / err[1:]) / step
    if ses is None:
        return orders, np.full(len(orders), np.nan)
    rel = np.asarray(ses, np.float64) / err
    return orders, np.sqrt(rel[:-1] ** 2 + rel[1:] ** 2) / np.abs(step)


def order_verdict(order: float, stderr: float, expected: float, tol: float) -> str:
    """``pass`` / ``fail`` / ``inconclusive`` of a fitted order against ``expected``:
    inconclusive when ``stderr`` is not finite or exceeds ``tol`` (the fit cannot tell
    ``expected`` from ``expected ± tol``), else pass iff ``|order − expected| ≤ tol``."""
    if not (math.isfinite(order) and math.isfinite(stderr)) or stderr > tol:
        return "inconclusive"
    return "pass" if abs(order - expected) <= tol else "fail"


def reading(
    verdict: str, stderr: float, last: float, last_se: float, expected: float, tol: float
) -> str:
    """A sentence computed from a fit's verdict, its SE and the last halving's order
    ``last`` (± ``last_se``, NaN for deterministic errors): why it is inconclusive, or
    whether the two smallest learning rates agree with the fit — a failing fit whose
    last halving is within ``tol`` of ``expected`` is not yet asymptotic at the largest
    η. A last halving whose SE exceeds ``tol`` is not read. Empty when there is nothing
    to add."""
    if verdict == "inconclusive":
        if not math.isfinite(stderr):
            return "no standard error (fewer than 3 usable rates): raise compare.halvings"
        return f"SE {stderr:.3f} > tolerance {tol:g}: the fit cannot resolve the order"
    if not math.isfinite(last) or last_se > tol:
        return ""
    near = abs(last - expected) <= tol
    if verdict == "fail" and near:
        return (
            f"not yet asymptotic: the last halving's order {last:.3f} is within {tol:g} of "
            f"{expected:g}, the fit over all η is not"
        )
    if verdict == "pass" and not near:
        return f"the last halving's order {last:.3f} is not within {tol:g} of {expected:g}"
    return ""


def _judged(etas, errors, ses, fit: tuple[float, float], table: str) -> tuple[dict, dict]:
    """The ``halvings`` columns and the ``verdict`` row (less the setting) of one fit."""
    _, expected, tol, _ = RULES[table]
    orders, stderrs = halving_orders(etas, errors, ses)
    order, se = fit
    verdict = order_verdict(order, se, expected, tol)
    last, last_se = (float(orders[-1]), float(stderrs[-1])) if len(orders) else (math.nan,) * 2
    err = np.abs(np.asarray(errors, np.float64))
    halvings = {
        "halving": np.arange(len(orders)),
        "dynamics.eta": np.asarray(etas[:-1], np.float64),
        "eta_next": np.asarray(etas[1:], np.float64),
        "error": err[:-1],
        "error_next": err[1:],
        "halving_order": orders,
        "halving_order_stderr": stderrs,
    }
    row = {
        "rates": int(np.sum(np.isfinite(err) & (err > 0))),
        "order": order,
        "order_stderr": se,
        "expected_order": expected,
        "tolerance": tol,
        "verdict": verdict,
        "last_halving_order": last,
        "reading": reading(verdict, se, last, last_se, expected, tol),
    }
    return halvings, row


def _fits(table: str, df: pd.DataFrame):
    """``(observable, rows sorted by decreasing η, errors, SEs or None, (order, SE))`` of
    each fit in one point's ``order`` or ``weak`` table (its own fitted columns)."""
    groups = [("distance", df)] if table == "order" else df.groupby("observable", sort=False)
    for obs, part in groups:
        part = part.sort_values("dynamics.eta", ascending=False, kind="stable")
        errors = part["distance" if table == "order" else "error"].to_numpy(np.float64)
        ses = None if table == "order" else part["error_se"].to_numpy(np.float64)
        fit = (float(part["order"].iloc[0]), float(part["order_stderr"].iloc[0]))
        yield obs, part, errors, ses, fit


def _judge_point(table: str, df: pd.DataFrame, front: list[str]):
    """The ``halvings`` and ``verdict`` frames of one point's ``table``; ``front``: the
    columns (``point``, ``sweep.KEY``) copied from its first row."""
    halving_frames, rows = [], []
    for obs, part, errors, ses, fit in _fits(table, df):
        halvings, row = _judged(part["dynamics.eta"].to_numpy(), errors, ses, fit, table)
        first = part.iloc[0]
        lead = {c: first[c] for c in front + list(SETTING)} | {"table": table}
        lead |= {"observable": obs}
        n = len(halvings["halving"])
        halving_frames.append(pd.DataFrame({k: [v] * n for k, v in lead.items()} | halvings))
        rows.append(lead | {"horizon": float(first["horizon"])} | row)
    return halving_frames, rows


def judge(tables: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The ``halvings`` and ``verdict`` tables (``COLUMNS`` of :mod:`.tables`) of a comparison's
    ``order`` and ``weak`` tables, per point of a sweep (after the columns ``point`` and
    ``sweep.KEY``); a function of the tables only. Empty dict when neither table is
    there (sgd_gaussian with parameter noise: T6, no order).

    Examples:
      Distances of a first-order scheme not yet asymptotic at the largest η (its first
      halving's order is log2 3):

      >>> import pandas as pd
      >>> from rankflow import theory
      >>> from rankflow.compare.tables import SETTING
      >>> eta, dist = [0.1, 0.05, 0.025, 0.0125], [0.30, 0.10, 0.05, 0.025]
      >>> p, se = theory.convergence_order(eta, dist)
      >>> order = pd.DataFrame({k: 0.0 for k in SETTING} | {"dynamics.eta": eta,
      ...     "horizon": 10.0, "distance": dist, "order": p, "order_stderr": se})
      >>> judged = judge({"order": order})
      >>> judged["halvings"]["halving_order"].round(3).tolist()
      [1.585, 1.0, 1.0]
      >>> v = judged["verdict"].iloc[0]
      >>> print(f"{v['order']:.3f} ± {v['order_stderr']:.3f}: {v['verdict']}")
      1.175 ± 0.101: fail
      >>> v["reading"]  # doctest: +NORMALIZE_WHITESPACE
      "not yet asymptotic: the last halving's order 1.000 is within 0.15 of 1, the fit
      over all η is not"
    """
    out: dict[str, list] = {"halvings": [], "verdict": []}
    front: list[str] = []
    for table in (t for t in RULES if t in tables):
        df = tables[table]
        front = [c for c in df.columns if c == "point" or c.startswith("sweep.")]
        points = df.groupby("point", sort=False) if "point" in df else [(0, df)]
        for _, part in points:
            halving_frames, rows = _judge_point(table, part, front)
            out["halvings"] += halving_frames
            out["verdict"] += [pd.DataFrame([r]) for r in rows]
    if not out["verdict"]:
        return {}
    return {
        name: pd.concat(frames, ignore_index=True)[front + list(COLUMNS[name])]
        for name, frames in out.items()
    }
