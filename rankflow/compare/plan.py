"""What a comparison runs: whether an optimizer is compared with its stochastic modified
equation (:func:`sme_pair`), the whole steps each table reads and the runs of both
programs (:func:`compare_plan`), and a point saving at those steps (:func:`with_saves`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import config as config_lib
from ..core import vocabulary
from .options import Options

__all__ = ["ComparePlan", "compare_plan", "sme_pair", "with_saves"]


def sme_pair(cfg: Mapping[str, Any]) -> bool:
    """Whether the resolved optimizer config ``cfg`` is compared with its stochastic
    modified equation (``moments`` and ``weak`` tables): sgd (minibatch noise) and
    sgd_gaussian with ``noise = "gradient"``; sgd_gaussian with parameter noise keeps
    the T6 comparison (``sde`` table)."""
    d = cfg["dynamics"]
    return d["kind"] == "sgd" or (d["kind"] == "sgd_gaussian" and d["noise"] == "gradient")


@dataclass(frozen=True)
class ComparePlan:
    """The whole steps each table reads and the runs of both programs."""

    ts: list[int]  # the config's save times
    order_t1: int
    horizons: list[int]  # order / weak: the horizon of η/2^j (not for sgd_gaussian's T6)
    window: list[int]  # contraction: the steps of the window (gd)
    runs: list[dict[str, Any]]  # changes to the point's parameters, one per run
    paths: int  # stochastic pairs: paths per learning rate (the first at the config's η)


def compare_plan(cfg: Mapping[str, Any], options: Options) -> ComparePlan:
    """What a comparison of ``cfg`` runs: paths of sgd_gaussian (T6), η/2^j for the
    order, or the paths of each η/2^j for the weak order of an SME pair."""
    kind, d = cfg["dynamics"]["kind"], cfg["dynamics"]
    sme = sme_pair(cfg)
    stochastic = kind in ("sgd_gaussian", "sgd") and not sme
    ts = [int(round(t)) for t in vocabulary.save_times(cfg)]
    order_t1 = options.order_t1 if options.order_t1 is not None else int(round(ts[-1]))
    horizons = [] if stochastic else [order_t1 * 2**j for j in range(options.halvings + 1)]
    window = []
    if kind == "gd":
        window = list(range(options.window_start, options.window_start + options.window + 1))
    paths = d["paths"] if kind in ("sgd_gaussian", "sgd") else 1
    if sme:
        # The same path indices at each η/2^j: one program, P paths per learning rate.
        runs = [
            {"dynamics.eta": d["eta"] / 2**j, "path": p}
            for j in range(options.halvings + 1)
            for p in range(paths)
        ]
    elif stochastic:
        runs = [{"path": p} for p in range(d["paths"])]
    else:
        # Run j has η/2^j (and μ/2^j for momentum): the flow's path in ηt is unchanged.
        scale_mu = kind in vocabulary.MOMENTUM_DYNAMICS
        runs = [
            {
                "dynamics.eta": d["eta"] / 2**j,
                "dynamics.mu": d["mu"] / 2**j if scale_mu else d["mu"],
            }
            for j in range(options.halvings + 1)
        ]
    return ComparePlan(ts, order_t1, horizons, window, runs, paths)


def with_saves(cfg: Mapping[str, Any], ts: list[int]) -> dict[str, Any]:
    """The point of ``cfg`` saving at the whole steps ``ts`` (validated again)."""
    point = copy.deepcopy(dict(cfg))
    point["save"] = dict(point["save"], ts=[float(t) for t in ts])
    return config_lib.expand(config_lib.resolve(point))[0]
