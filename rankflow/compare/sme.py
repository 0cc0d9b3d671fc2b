"""SGD against its stochastic modified equation (docs/theory.md, T9, T10): the ``moments``
and ``weak`` tables of a comparison of ``sgd`` (flow: ``stochastic_flow`` with
``noise = "minibatch"``) or of ``sgd_gaussian`` with ``noise = "gradient"`` (flow:
``stochastic_flow`` with ``noise = "gradient"``), and :func:`weak_order`, the weak
order fitted to a ``weak`` table.

Time t is in optimizer steps; ηt is the time of the SME in its usual (physical) units.
The SME in steps is ``dθ = −η∇f dt + η Σ^{1/2} dW_t`` (coefficient η, not √η: that is
``√η Σ^{1/2} dW`` in ηt). SGD approximates it at weak order 1 in η on a fixed horizon
in ηt (Li, Tai & E): halving η and doubling the steps should halve the difference of
the means. The flow is solved by Euler–Maruyama at a fixed dt (in steps), whose own
weak error, O(η·dt) at a fixed ηt, is part of what the ``weak`` table measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..core.program import Program, params_of
from ..engine.status import Status
from .tables import frame

__all__ = ["SME_OBSERVABLES", "moments_table", "side_observables", "weak_order", "weak_table"]

# The observables whose means over paths the SME tables compare (``rankflow.core.observables``
# names): the data loss, tr D and ‖D‖_F with D = AᵀA − BᵀB.
SME_OBSERVABLES = ("loss", "balance_trace", "balance_gap")


def side_observables(
    program: Program, point: Mapping[str, Any], states: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """:data:`SME_OBSERVABLES` of one side's runs as float64 ``(runs, saves)`` arrays,
    NaN wherever the run's status is not ok. ``loss`` is the problem's loss at
    ``W = ABᵀ`` in the run's precision (all runs share the data of ``point``'s seed)."""
    A, B = states["A"], states["B"]
    D = np.swapaxes(A, -1, -2) @ A - np.swapaxes(B, -1, -2) @ B
    with jax.enable_x64(point["x64"]):
        data = program.data(params_of(point, 0))
        W = jnp.asarray(states["A_raw"]) @ jnp.swapaxes(jnp.asarray(states["B_raw"]), -1, -2)
        loss_of = jax.vmap(jax.vmap(lambda w: program.problem.loss(w, data)))
        loss = np.asarray(loss_of(W), np.float64)
    bad = states["status"] != Status.ok
    out = {
        "loss": loss,
        "balance_trace": np.trace(D, axis1=-2, axis2=-1),
        "balance_gap": np.sqrt(np.sum(D**2, axis=(-2, -1))),
    }
    return {k: np.where(bad, np.nan, v) for k, v in out.items()}


def _stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """Over axis 0 (paths), ignoring NaN (runs not ok): finite paths, mean, std (ddof 1),
    Monte Carlo standard error std/√paths, 10% and 90% quantiles."""
    count = np.sum(np.isfinite(x), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(x, axis=0)
        std = np.nanstd(x, axis=0, ddof=1)
        return {
            "paths": count,
            "mean": mean,
            "std": std,
            "se": std / np.sqrt(count),
            "q10": np.nanquantile(x, 0.1, axis=0),
            "q90": np.nanquantile(x, 0.9, axis=0),
        }


def moments_table(setting, ts, opt_obs, flow_obs, i_opt, i_flow) -> pd.DataFrame:
    """The ``moments`` table: at the whole steps ``ts`` (positions ``i_opt``, ``i_flow``
    among each side's saves), the mean, std, Monte Carlo SE and 10–90% quantiles over
    paths of each of :data:`SME_OBSERVABLES`, for the optimizer and its flow (``*_obs``:
    :func:`side_observables` of the runs at the config's η)."""
    frames = []
    for role, obs, ii in (("optimizer", opt_obs, i_opt), ("flow", flow_obs, i_flow)):
        for name in SME_OBSERVABLES:
            stats = _stats(obs[name][:, ii])
            cols = {"t": np.asarray(ts, float), "role": [role] * len(ts)}
            cols |= {"observable": [name] * len(ts)} | stats
            frames.append(frame("moments", setting, cols))
    return pd.concat(frames, ignore_index=True)


def weak_table(setting, etas, horizons, paths, opt_obs, flow_obs, h_opt, h_flow) -> pd.DataFrame:
    """The ``weak`` table: for each learning rate ``etas[j]`` (runs ``j·paths`` to
    ``(j+1)·paths − 1`` of each side) at its horizon ``horizons[j]`` steps (positions
    ``h_opt[j]``, ``h_flow[j]``), the difference of the means over paths of each of
    :data:`SME_OBSERVABLES`, optimizer minus flow, with its Monte Carlo standard error
    √(Var₁/P₁ + Var₂/P₂), and the weak order fitted to all η (:func:`weak_order`)."""
    rows = []
    for name in SME_OBSERVABLES:
        for j, eta in enumerate(etas):
            runs = slice(j * paths, (j + 1) * paths)
            s_opt = _stats(opt_obs[name][runs, h_opt[j]])
            s_flow = _stats(flow_obs[name][runs, h_flow[j]])
            error = s_opt["mean"] - s_flow["mean"]
            error_se = math.sqrt(s_opt["se"] ** 2 + s_flow["se"] ** 2)
            rows.append(
                {
                    "observable": name,
                    "dynamics.eta": float(eta),
                    "steps": int(horizons[j]),
                    "horizon": float(eta) * horizons[j],
                    **{
                        f"{side}.{k}": (int if k == "paths" else float)(st[k])
                        for side, st in (("optimizer", s_opt), ("flow", s_flow))
                        for k in ("paths", "mean", "se")
                    },
                    "error": float(error),
                    "error_se": error_se,
                    "z": error / error_se if error_se > 0 else math.nan,
                }
            )
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    fits = {name: weak_order(pd.DataFrame(cols), name) for name in SME_OBSERVABLES}
    cols["order"] = [fits[name][0] for name in cols["observable"]]
    cols["order_stderr"] = [fits[name][1] for name in cols["observable"]]
    return frame("weak", setting, cols)  # cols' dynamics.eta replaces the setting's


def weak_order(table: pd.DataFrame, observable: str) -> tuple[float, float]:
    """The weak order p of ``|error| ≈ C ηᵖ`` for ``observable`` in a ``weak`` table
    (columns ``observable``, ``dynamics.eta``, ``error``, ``error_se``), and its
    standard error; a function of the table only.

    Weighted least squares of log|error| on log η, each point weighted by the inverse
    variance of its log, (error_se/error)² (the delta method). The standard error is
    that of the weights (Monte Carlo error only), scaled up by √(χ²/(k − 2)) when the
    points scatter about the line by more than their errors (k points; k = 2: the
    weights' standard error unscaled). Rows with a non-finite or zero error or standard
    error are dropped; fewer than two rows left give ``(nan, nan)``.

    Examples:
      Errors that halve (nearly) with η, each known to ±0.001:

      >>> import pandas as pd
      >>> from rankflow.compare import weak_order
      >>> table = pd.DataFrame({"observable": "loss", "dynamics.eta": [0.1, 0.05, 0.025],
      ...                       "error": [0.02, 0.0105, 0.005], "error_se": 0.001})
      >>> p, stderr = weak_order(table, "loss")
      >>> round(p, 2), round(stderr, 2)
      (0.97, 0.11)
      >>> weak_order(table, "balance_trace")  # no rows for it
      (nan, nan)
    """
    rows = table[table["observable"] == observable]
    eta = rows["dynamics.eta"].to_numpy(float)
    err = np.abs(rows["error"].to_numpy(float))
    se = rows["error_se"].to_numpy(float)
    keep = np.isfinite(eta) & np.isfinite(err) & np.isfinite(se) & (eta > 0) & (err > 0)
    keep &= se > 0
    if np.sum(keep) < 2 or np.ptp(eta[keep]) == 0:
        return math.nan, math.nan
    x, y = np.log(eta[keep]), np.log(err[keep])
    w = (err[keep] / se[keep]) ** 2
    xm, ym = np.sum(w * x) / np.sum(w), np.sum(w * y) / np.sum(w)
    sxx = float(np.sum(w * (x - xm) ** 2))
    slope = float(np.sum(w * (x - xm) * (y - ym)) / sxx)
    stderr = math.sqrt(1.0 / sxx)
    k = int(np.sum(keep))
    if k > 2:
        chi2 = float(np.sum(w * (y - ym - slope * (x - xm)) ** 2))
        stderr *= math.sqrt(max(1.0, chi2 / (k - 2)))
    return slope, stderr
