"""The figure of ``rankflow reproduce``'s ``optimizers`` experiment: the momentum
optimizers against their flows, and GD under learning-rate schedules.

Built from tables only (the experiment's ``momentum_order`` and ``schedule_steps``
tables); time in optimizer steps; theory dashed beside measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .common import LABELS, finish_figure, positive

__all__ = ["optimizers_figure"]

MOMENTUM = {
    "momentum": ("momentum, decoupled decay, vs momentum flow", "C4", "o"),
    "momentum_coupled": ("momentum, coupled decay, vs coupled momentum flow", "C5", "s"),
}
SCHEDULES = {
    "warmup_cosine": ("warmup-cosine", "C1"),
    "linear": ("linear", "C2"),
    "wsd": ("warmup–stable–decay", "C4"),
    "wsd_cosine": ("warmup–stable–cosine decay", "C5"),
}


def _schedule(kind: str, i: int) -> tuple[str, str]:
    return SCHEDULES.get(kind, (kind, f"C{3 + i}"))


def _order_panel(ax, order: pd.DataFrame) -> None:
    """Distance at the horizon against η per optimizer, a slope-1 line through each
    smallest-η point dashed."""
    for kind, g in order.groupby("dynamics.kind", sort=False):
        label, colour, marker = MOMENTUM.get(kind, (kind, "C0", "o"))
        g = g.sort_values("dynamics.eta")
        eta, dist = g["dynamics.eta"].to_numpy(), positive(g["distance"])
        p = float(g["order"].iloc[0])
        ax.plot(eta, dist, marker=marker, color=colour, label=f"{label}: order {p:.2f}")
        ax.plot(eta, dist[0] * eta / eta[0], color=colour, ls="--", lw=1.1)
    ax.plot([], [], "k--", label="first order, ∝ η (theory)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Ticks at the learning rates run, plainly labelled.
    ax.xaxis.set_major_locator(FixedLocator(np.unique(order["dynamics.eta"])))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    horizon = order["horizon"].iloc[0] if len(order) else float("nan")
    ax.set(xlabel=LABELS["dynamics.eta"] + " (μ halved with it)",
           ylabel=r"$\|\theta_k-\theta(t{=}k)\|_F$ at the horizon")  # fmt: skip
    ax.set_title(f"(a) momentum optimizers against their flows, ηt = {horizon:g}",
                 fontsize="medium")  # fmt: skip
    # Below the axes: the lines cross the narrow panel from corner to corner.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16))


def _eta_panel(ax, steps: pd.DataFrame) -> None:
    for i, (kind, g) in enumerate(steps.groupby("dynamics.schedule", sort=False)):
        label, colour = _schedule(kind, i)
        ax.plot(g["t"], g["eta_k"], color=colour, marker=".", label=label)
    ax.set(xlabel=LABELS["t"], ylabel=r"learning rate $\eta_k$ of the step from k to k + 1")
    ax.set_title("(b) GD's schedules (optax's η_k)", fontsize="medium")
    ax.legend(fontsize="small")


def _decay_panel(ax, steps: pd.DataFrame) -> None:
    """log ‖D_k‖/‖D_0‖ minus log Π(1 − η_jλ)² (T11's product, 0 here), inside the band
    that T5's η² terms allow."""
    for i, (kind, g) in enumerate(steps.groupby("dynamics.schedule", sort=False)):
        label, colour = _schedule(kind, i)
        t = g["t"].to_numpy()
        ax.plot(t, g["log_gap"] - g["log_product"], color=colour, lw=2, label=f"GD, {label}")
        ax.fill_between(t, g["bound_low"], g["bound_high"], color=colour, alpha=0.15, lw=0)
    ax.axhline(0.0, color="k", ls="--", lw=1.2,
               label=r"$\log\prod_{j<k}(1-\eta_j\lambda)^2$ itself (theory)")  # fmt: skip
    ax.fill_between([], [], [], color="0.6", alpha=0.3, label="bound of T5's η² terms")
    final = steps.groupby("dynamics.schedule", sort=False).tail(1)
    exponent = float(final["log_product"].abs().min()) if len(final) else float("nan")
    ax.set(xlabel=LABELS["t"],
           ylabel=r"$\log\|D_k\|_F/\|D_0\|_F-\log\prod_{j<k}(1-\eta_j\lambda)^2$")  # fmt: skip
    ax.set_title(f"(c) the gap's decay off T11's product (whose log reaches −{exponent:.2f})",
                 fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small", loc="upper left")  # the lines fall to the right


def _residual_panel(ax, steps: pd.DataFrame, tol: float) -> None:
    for i, (kind, g) in enumerate(steps.groupby("dynamics.schedule", sort=False)):
        label, colour = _schedule(kind, i)
        ax.plot(g["t"], positive(g["t5_residual"]), color=colour, marker=".", ls="none",
                label=f"GD, {label}")  # fmt: skip
        ax.plot(g["t"], positive(g["shift"]), color=colour, ls=":", lw=1.2)
    ax.axhline(tol, color="k", ls="--", lw=1.2, label=f"tolerance {tol:g}")
    ax.plot([], [], color="0.4", ls=":", label="what η one step off changes in (1 − η_kλ)²")
    ax.set_yscale("log")
    ax.set(xlabel=LABELS["t"], ylabel=r"$\|D_{k+1}-\mathrm{T5}(D_k;\eta_k)\|_F/\|D_{k+1}\|_F$")
    ax.set_title("(d) T5 with η_k at every step", fontsize="medium")
    ax.legend(fontsize="small")


def optimizers_figure(
    order: pd.DataFrame,
    steps: pd.DataFrame,
    out_path: str | Path | None = None,
    tol: float = 1e-10,
) -> Figure:
    """(a) the momentum optimizers' distance to their flows at a fixed ηt against η
    (``compare``'s ``order`` table), first order dashed; (b) the schedules' η_k; (c)
    ``log ‖D_k‖/‖D_0‖ − log Π(1 − η_jλ)²`` of scheduled GD, inside the band T5's η² terms
    allow; (d) T5's relative residual with η_k at every step against the
    tolerance ``tol``, beside what a schedule one step off would change."""
    fig = Figure(figsize=(22, 4.8), layout="constrained")
    axes = fig.subplots(1, 4)
    _order_panel(axes[0], order)
    _eta_panel(axes[1], steps)
    _decay_panel(axes[2], steps)
    _residual_panel(axes[3], steps, tol)
    lam = steps["dynamics.lam"].iloc[0] if len(steps) else np.nan
    eta = steps["dynamics.eta"].iloc[0] if len(steps) else np.nan
    return finish_figure(
        fig,
        axes,
        "Momentum (decoupled and coupled) against the momentum flows; GD under schedules, "
        f"peak η = {eta:g}, λ = {lam:g} (float64)",
        out_path,
    )
