"""The figure of ``rankflow reproduce``'s balancing claims (T4/T5 and their neighbours):
the balance gap's decay rate per dynamics against theory's, momentum, the loss gap,
every dynamics side by side, AdamW and the stochastic flow's mean trace.

Built from tables only; time in optimizer steps; theory dashed beside measurements
(predictions that need ``rankflow.theory`` are passed in by the caller).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import LABELS, palette, positive
from .finish import finish_log_figure

__all__ = ["balancing_figure"]

T = LABELS["t"]
DYNAMICS = {
    "gradient_flow": ("gradient flow (GF)", "C0", "o"),
    "gd": ("GD", "C1", "s"),
    "stochastic_flow": ("stochastic GF (mean over paths)", "C2", "^"),
    "momentum_flow": ("momentum flow", "C4", "D"),
    "adamw": ("AdamW", "C3", "v"),
}


def _median_over_paths(g: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    m = g.groupby("t")[col].median()
    return m.index.to_numpy(), m.to_numpy()


def balancing_figure(
    tables: dict[str, pd.DataFrame],
    rates: pd.DataFrame,
    z: pd.DataFrame,
    bound: pd.DataFrame,
    sgf_shape: tuple[int, int, int],
    out_path: str | Path | None = None,
    *,
    rate_bracket: Callable,
    orbit_rate: Callable,
    sgf_mean_trace: Callable,
) -> Figure:
    """Six panels (``sgf_shape``: the SGF run's m, n, r): (a) fitted rate/(2ηλ) of GF
    and GD against 2ηλ, with T4's 1 and GD's T5 bracket dashed; (b) momentum flow against
    μ/(ηλ), the T7 orbit rate dashed; (c) L_L2 − L_* beside its T2 bound (dashed) and T4's
    envelope (GF; wide and pale, since it equals the bound until rounding); (d) the
    balance gap of every dynamics at one (η, λ), e^{−2ηλt} dashed;
    (e) AdamW's scale-free gap against t per λ; (f) SGF: tr D per path, its mean, and T6.

    The predictions are the caller's (``rankflow.theory``): ``rate_bracket(eta, lam)``
    (T5, ``gd_rate_bracket``), ``orbit_rate(eta, lam, mu)`` (T7, ``momentum_orbit_rate``)
    and ``sgf_mean_trace(trace0, eta, lam, sigma, m, n, r, t)`` (T6,
    ``sgf_mean_balance_trace``)."""
    fig = Figure(figsize=(18, 10), layout="constrained")
    axes = fig.subplots(2, 3)
    _rate_panel(axes[0, 0], rates, rate_bracket)
    _momentum_panel(axes[0, 1], rates, orbit_rate)
    _loss_gap_panel(axes[0, 2], tables["gradient_flow"], bound)
    _every_dynamics_panel(axes[1, 0], tables)
    _adamw_panel(axes[1, 1], tables["adamw"])
    _sgf_panel(axes[1, 2], tables["stochastic_flow"], z, sgf_shape, sgf_mean_trace)
    return finish_log_figure(
        fig,
        axes,
        "Balancing of W = ABᵀ's factors under each dynamics: matrix sensing, rank 2, "
        "imbalanced start ‖D(0)‖_F = 1, float64",
        out_path,
    )


def _rate_panel(ax, rates: pd.DataFrame, rate_bracket: Callable) -> None:
    """(a) fitted balancing rate of GF and GD over the λ × η grid, against T4 and T5."""
    for kind in ("gradient_flow", "gd"):
        r = rates[rates["dynamics.kind"] == kind]
        label, color, marker = DYNAMICS[kind]
        x = 2 * r["dynamics.eta"] * r["dynamics.lam"]
        ax.plot(x, r["rate_over_2etalam"], ls="none", marker=marker, ms=8, mfc="none",
                color=color, label=f"{label}, measured")  # fmt: skip
    gd = rates[rates["dynamics.kind"] == "gd"]
    x = np.geomspace((2 * gd["dynamics.eta"] * gd["dynamics.lam"]).min() / 1.3,
                     (2 * gd["dynamics.eta"] * gd["dynamics.lam"]).max() * 1.3, 100)  # fmt: skip
    low, high = rate_bracket(x / 2, 1.0)
    ax.axhline(1.0, color="C0", ls="--", lw=1.3, label="T4: gradient flow, exactly 1 (theory)")
    ax.plot(x, low, color="C1", ls="--", lw=1.2,
            label=r"T5: GD bracket, $-\log(1-\eta\lambda)^2/2\eta\lambda$")  # fmt: skip
    ax.plot(x, high, color="C1", ls=":", lw=1.5,
            label=r"T5 near a minimum: $-\log(1-2\eta\lambda)/2\eta\lambda$")  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    ax.set(
        xlabel=r"$2\eta\lambda$ (per step)", ylabel=r"fitted decay rate of $\|D\|$ / $2\eta\lambda$"
    )
    ax.set_title("(a) balancing rate over a λ × η grid", fontsize="medium")
    ax.legend(fontsize="small")


def _momentum_panel(ax, rates: pd.DataFrame, orbit_rate: Callable) -> None:
    """(b) momentum flow's fitted rate against μ/(ηλ), beside T7's orbit rate."""
    mo = rates[rates["dynamics.kind"] == "momentum_flow"]
    lams = np.sort(mo["dynamics.lam"].unique())
    for lam, color in zip(lams, palette(len(lams), numeric=True)):
        g = mo[mo["dynamics.lam"] == lam].sort_values("mu_over_etalam")
        ax.plot(g["mu_over_etalam"], g["rate_over_2etalam"], "o", ms=8, mfc="none",
                color=color, label=f"momentum flow, λ = {lam:g}")  # fmt: skip
    xs = np.geomspace(max(mo["mu_over_etalam"].min(), 6.0), mo["mu_over_etalam"].max() * 1.3, 200)
    ax.plot(xs, orbit_rate(1.0, 1.0, xs), "k--", lw=1.2,
            label=r"T7 on the symmetry orbit: $1+\eta\lambda/\mu+\dots$")  # fmt: skip
    ax.axvspan(15, xs[-1], color="0.9", zorder=0, label=r"tested: $\mu\geq15\eta\lambda$")
    ax.axhline(1.0, color="0.5", ls=":", lw=1.2, label=r"$2\eta\lambda$ (the $\mu\to\infty$ limit)")
    ax.set_xscale("log")
    eta = mo["dynamics.eta"].iloc[0] if len(mo) else np.nan
    ax.set(xlabel=r"$\mu/(\eta\lambda)$", ylabel=r"fitted decay rate of $\|D\|$ / $2\eta\lambda$")
    ax.set_title(f"(b) momentum flow (decoupled decay), η = {eta:g}", fontsize="medium")
    ax.legend(fontsize="small")


def _at_middle_eta(df: pd.DataFrame) -> tuple[float, pd.DataFrame, np.ndarray]:
    """The middle learning rate of a table, its rows at that η, and their λs sorted."""
    etas = np.sort(df["dynamics.eta"].unique())
    eta = etas[len(etas) // 2]
    rows = df[df["dynamics.eta"] == eta]
    return eta, rows, np.sort(rows["dynamics.lam"].unique())


def _loss_gap_panel(ax, gf: pd.DataFrame, bound: pd.DataFrame) -> None:
    """(c) gradient flow: L_L2 − L_* beside the T2 bound and T4's envelope."""
    eta0, g_eta, lams = _at_middle_eta(gf)
    for lam, color in zip(lams, palette(len(lams), numeric=True)):
        g = g_eta[g_eta["dynamics.lam"] == lam].sort_values("t")
        b = bound[(bound["dynamics.lam"] == lam) & (bound["dynamics.eta"] == eta0)]
        t = g["t"].to_numpy()
        ax.plot(t, positive(lam * g["frob_minus_nuc"]), color=color, lw=2,
                label=f"λ = {lam:g}")  # fmt: skip
        # Under gradient flow D(t) = e^{−2ηλt}D(0): the envelope is the T2 bound itself
        # until rounding, so it is drawn wide and pale under the bound's dashes.
        ax.plot(b["t"], positive(b["bound"]), color=color, lw=7, alpha=0.25, zorder=1,
                solid_capstyle="butt")  # fmt: skip
        ax.plot(t, positive(0.5 * lam * g["balance_nuclear"]), color=color, ls="--", lw=1.3)
    ax.set_yscale("log")
    floor = np.nanmin(positive(lams[0] * g_eta["frob_minus_nuc"]))
    top = np.nanmax(positive(bound["bound"]))
    ax.set_ylim(bottom=max(floor / 10, 1e-20), top=top * 1e5)  # headroom: the legend
    ax.legend(
        handles=ax.get_legend_handles_labels()[0]
        + [
            Line2D([], [], color="k", lw=2, label=r"$L_{L2}-L_*$ measured"),
            Line2D([], [], color="k", ls="--", label=r"T2 bound $\frac{\lambda}{2}\|D(t)\|_*$"),
            Line2D(
                [], [], color="k", lw=7, alpha=0.25,
                label=r"tested: T4 envelope $\frac{\lambda}{2}e^{-2\eta\lambda t}\|D(0)\|_*$"
                "\n(wide, pale: equals the T2 bound until rounding)",
            ),
        ],
        fontsize="small",
        loc="upper right",  # the late, slow decays pass below it
    )  # fmt: skip
    ax.set(xlabel=T, ylabel=r"$L_{L2}-L_*$ (loss units, log scale)")
    ax.set_title(f"(c) gradient flow: the gap to nuclear-norm regularisation, η = {eta0:g}",
                 fontsize="medium")  # fmt: skip


def _every_dynamics_panel(ax, tables: dict[str, pd.DataFrame]) -> None:
    """(d) the balance gap of every dynamics at one (η, λ), against T4, over the time
    that all their runs cover (the shortest run's end: the stochastic GF's)."""
    eta1, lam1 = 0.1, 0.05
    runs = {}
    for kind in ("gradient_flow", "gd", "stochastic_flow", "momentum_flow"):
        d = tables[kind]
        sel = np.isclose(d["dynamics.eta"], eta1) & np.isclose(d["dynamics.lam"], lam1)
        if kind == "momentum_flow":
            sel &= d["dynamics.mu"] == d["dynamics.mu"].max()
        if sel.any():
            runs[kind] = d[sel]
    t_max, lowest = min(g["t"].max() for g in runs.values()), np.inf
    for kind, g in runs.items():
        g = g[g["t"] <= t_max]
        label, color, _ = DYNAMICS[kind]
        if kind == "stochastic_flow":
            label = "stochastic GF: median over paths"
            if "path" in g and g["path"].nunique() > 1:
                q = g.groupby("t")["balance_gap"].quantile([0.1, 0.9]).unstack()
                ax.fill_between(q.index, q[0.1], q[0.9], color=color, alpha=0.2, lw=0)
        if kind == "momentum_flow":
            label += f", μ = {g['dynamics.mu'].iloc[0]:g}"
        t, y = _median_over_paths(g, "balance_gap")
        ax.plot(t, positive(y), color=color, lw=2, label=label)
        gap0, lowest = y[0], min(lowest, np.nanmin(positive(y)))
    tt = np.linspace(0, t_max, 200)
    ax.plot(tt, gap0 * np.exp(-2 * eta1 * lam1 * tt), "k--", lw=1.2,
            label=r"T4: $\|D(0)\|e^{-2\eta\lambda t}$ (theory)")  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylim(bottom=max(lowest / 30, 1e-16), top=10 * gap0)
    ax.set(xlabel=T, ylabel=r"balance gap $\|A^\top A-B^\top B\|_F$ (log scale)")
    ax.set_xlim(right=t_max)
    ax.set_title(f"(d) every dynamics at η = {eta1:g}, λ = {lam1:g}, t ≤ {t_max:g} "
                 "(the shortest run)", fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small")


def _adamw_panel(ax, ad: pd.DataFrame) -> None:
    """(e) AdamW's scale-free balance gap against t, one line per λ."""
    eta2, g_eta, lams = _at_middle_eta(ad)
    for lam, color in zip(lams, palette(len(lams), numeric=True)):
        t, y = _median_over_paths(g_eta[g_eta["dynamics.lam"] == lam], "balance_gap_rel")
        seeds = g_eta["seed"].nunique()
        label = f"AdamW, λ = {lam:g}" + (f" (median of {seeds} seeds)" if seeds > 1 else "")
        ax.plot(t, positive(y), color=color, lw=2, label=label)
    ax.set_yscale("log")
    ax.set(xlabel=T, ylabel="scale-free gap ‖AᵀA − BᵀB‖ / ½(‖AᵀA‖ + ‖BᵀB‖) (log scale)")
    ax.set_title(f"(e) AdamW (outside the theory), η = {eta2:g}", fontsize="medium")
    ax.legend(fontsize="small")


def _sgf_panel(ax, sg, z: pd.DataFrame, shape, sgf_mean_trace: Callable) -> None:
    """(f) stochastic GF: tr D per path and its mean, ±4 SE at the tested saves, T6."""
    key = z.groupby(["dynamics.lam", "dynamics.eta"]).size().index[0]
    g = sg[(sg["dynamics.lam"] == key[0]) & (sg["dynamics.eta"] == key[1])]
    for p, gp in g.groupby("path"):
        ax.plot(gp["t"], gp["balance_trace"], color="C2", lw=0.5, alpha=0.25,
                label="tr D, single paths" if p == 0 else None)  # fmt: skip
    m = g.groupby("t")["balance_trace"].agg(["mean", "std", "count"])
    ax.plot(m.index, m["mean"], color="C2", lw=2.5, label="mean over paths")
    zz = z[(z["dynamics.lam"] == key[0]) & (z["dynamics.eta"] == key[1])]
    ax.errorbar(zz["t"], zz["mean"], yerr=4 * zz["se"], fmt="none", ecolor="k", capsize=3,
                label="±4 SE at the tested saves")  # fmt: skip
    t = m.index.to_numpy()
    sigma = g["dynamics.sigma"].iloc[0]
    t6 = sgf_mean_trace(
        np.float64(m["mean"].iloc[0]), key[1], key[0], sigma, *shape, t.astype(np.float64)
    )
    ax.plot(t, np.asarray(t6), "k--", lw=1.3,
            label=r"T6: $e^{-2\eta\lambda t}\mathrm{tr}D(0)+r\eta\sigma^2(m-n)"
            r"\frac{1-e^{-2\eta\lambda t}}{2\lambda}$")  # fmt: skip
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xlabel=T, ylabel=r"$\mathrm{tr}(A^\top A-B^\top B)$")
    ax.set_title(f"(f) stochastic GF, m = {shape[0]}, n = {shape[1]}: mean against T6\n"
                 f"η = {key[1]:g}, λ = {key[0]:g}, σ = {sigma:g}", fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small")
