"""The figure of ``rankflow reproduce``'s ``noise`` experiment: the three noise models of
the stochastic flow and real minibatch SGD on one problem (docs/theory.md, T6, T9, T10).

It reads the experiment's tables only (``noise_bands``, ``noise_lines``, ``noise_floor``,
``noise_step``); every theory value in it was computed there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .common import LABELS, finish_figure, positive

__all__ = ["noise_models_figure"]

# model → (label, colour)
MODELS = {
    "parameter": ("stochastic flow, parameter noise (σ dW on A, B)", "C3"),
    "gradient": ("stochastic flow, gradient noise (σ dΞ on ∇_W L)", "C0"),
    "minibatch": ("stochastic flow, minibatch SME (Euler–Maruyama)", "C2"),
    "sgd": ("real minibatch SGD", "k"),
}
WRONG = {
    "z": ("T10 (without replacement)", "o", "k"),
    "z_b2": ("noise term × 1/b", "v", "C0"),
    "z_no_b": ("noise term × b (no 1/b)", "^", "C1"),
    "z_replace": ("with replacement", "x", "C3"),
}


def _bands_panel(ax, bands: pd.DataFrame, lines: pd.DataFrame, sigma: float) -> None:
    for model, (label, color) in MODELS.items():
        g = bands[bands["model"] == model].sort_values("t")
        ax.plot(g["t"], positive(g["mean"]), color=color, lw=2, label=label)
        ax.fill_between(g["t"], positive(g["q10"]), positive(g["q90"]), color=color, alpha=0.2)
    mine = lines[np.isclose(lines["sigma"], sigma)]
    styles = {"T6 floor": ("C3", "--", "T6's floor (RMS), parameter noise"),
              "T9": ("C0", "--", "T9: ‖D(0)‖ e^{−(2ηλ+η²σ²m)t}, gradient noise"),
              "no noise": ("0.5", ":", "no noise: e^{−2ηλt} (T4)")}  # fmt: skip
    for name, (color, ls, label) in styles.items():
        g = mine[mine["line"] == name]
        ax.plot(g["t"], positive(g["value"]), color=color, ls=ls, lw=1.3, label=label)
    ax.set_yscale("log")
    ax.set_ylim(bottom=1e-6)
    ax.set(xlabel=LABELS["t"], ylabel=r"$\|A^\top A-B^\top B\|_F$ (mean, 10–90% band)")
    ax.set_title(f"(a) σ = {sigma:.3g}: tr Cov matched to the minibatch noise's at the start;\n"
                 "the low plateaus are the discretisations' (Euler–Maruyama; SGD's steps)",
                 fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small")


def _floor_panel(ax, floor: pd.DataFrame, sigma: float) -> None:
    mine = floor[np.isclose(floor["dynamics.sigma"], sigma)]
    for model in ("parameter", "gradient"):
        g = mine[mine["dynamics.noise"] == model].sort_values("solver.dt")
        label, color = MODELS[model]
        ax.plot(g["solver.dt"], g["late_rms"], "o-", color=color, ms=8, label=label)
    par = mine[mine["dynamics.noise"] == "parameter"]
    ax.axhline(float(par["floor_rms"].mean()), color="C3", ls="--", lw=1.2,
               label="T6's floor (RMS)")  # fmt: skip
    grad = mine[mine["dynamics.noise"] == "gradient"].sort_values("solver.dt")
    if len(grad):
        dt = grad["solver.dt"].to_numpy()
        ref = grad["late_rms"].iloc[-1] * np.sqrt(dt / dt[-1])
        ax.plot(dt, ref, color="0.4", ls=":", label="∝ √dt (Euler–Maruyama's own floor)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="solver step dt (optimizer steps)",
           ylabel=r"late $\|D\|_F$ (RMS over the second half)")  # fmt: skip
    ax.set_title(f"(b) the claims' runs, σ = {sigma:g}: a floor, or none", fontsize="medium")
    ax.legend(fontsize="small")


def _step_panel(ax, step: pd.DataFrame) -> None:
    kinds = list(dict.fromkeys(step["problem.kind"]))
    ticks, names = [], []
    for k, kind in enumerate(kinds):
        g = step[step["problem.kind"] == kind].reset_index(drop=True)
        x = k * (len(g) + 2) + np.arange(len(g))
        ticks += list(x)
        names += [f"{kind[:4]} {e}" for e in g["entry"]]
        for col, (label, marker, color) in WRONG.items():
            ax.plot(x, g[col], marker, ms=7, mfc="none", color=color,
                    label=label if k == 0 else None)  # fmt: skip
    ax.axhspan(-4, 4, color="C2", alpha=0.15, label="|z| ≤ 4")
    ax.set_yscale("symlog", linthresh=4)
    # Ticks at the band's edges and the decades beyond, plainly labelled: the default
    # locator put 0 and ±10⁰ a few pixels apart inside the linear band.
    zs = [-(10.0**k) for k in range(5, 0, -1)] + [-4.0, 0.0, 4.0] + [10.0**k for k in range(1, 6)]
    ax.yaxis.set_major_locator(FixedLocator(zs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, names, rotation=90, fontsize="x-small")
    ax.set(ylabel="(mean of D′ − prediction) / SE, per entry of D′")
    ax.set_title("(c) one SGD step: T10 against wrong batch scalings", fontsize="medium")
    # Outside: the markers reach every height of the axes, the band every width.
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def noise_models_figure(
    bands: pd.DataFrame,
    lines: pd.DataFrame,
    floor: pd.DataFrame,
    step: pd.DataFrame,
    sigma_figure: float,
    sigma_claim: float,
    out_path: str | Path | None = None,
) -> Figure:
    """(a) ‖D‖_F against t for parameter, gradient and minibatch noise of the stochastic
    flow and real SGD (mean and 10–90% band over paths, log scale) with T6's floor, T9's
    rate and the noiseless e^{−2ηλt}; (b) the late ‖D‖ of parameter and gradient noise
    against the solver's dt, with T6's floor; (c) the z-scores of SGD's one-step D against
    T10 and against wrong batch scalings."""
    fig = Figure(figsize=(19, 5.5), layout="constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1, 1]})
    _bands_panel(axes[0], bands, lines, sigma_figure)
    _floor_panel(axes[1], floor, sigma_claim)
    _step_panel(axes[2], step)
    return finish_figure(
        fig, axes, "The noise of real SGD beside the stochastic flow's noise models: the balance "
        "gap against t, its late RMS against dt, one step against T10 (matrix sensing 6×6, "
        "float64)", out_path,
    )  # fmt: skip
