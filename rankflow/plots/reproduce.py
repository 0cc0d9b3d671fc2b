"""Figures of ``rankflow reproduce`` that the other families do not already draw.

Built from tables only; time in optimizer steps; theory dashed beside measurements
(predictions that need ``rankflow.theory`` are passed in by the caller); log axes where
a decay is exponential.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import LABELS, counted, finish_figure, palette, positive

__all__ = [
    "attention_nuclear_gap_figure",
    "balancing_figure",
    "floor_figure",
    "rank_figure",
    "toy_spectrum_figure",
]

T = LABELS["t"]
DYNAMICS = {
    "gradient_flow": ("gradient flow (GF)", "C0", "o"),
    "gd": ("GD", "C1", "s"),
    "stochastic_flow": ("stochastic GF (mean over paths)", "C2", "^"),
    "momentum_flow": ("momentum flow", "C4", "D"),
    "adamw": ("AdamW", "C3", "v"),
}


def _finish(fig: Figure, axes, title: str, out_path) -> Figure:
    """:func:`finish_figure`, with no labels on the minor ticks of log axes."""
    for ax in np.ravel(axes):
        # Log axes spanning less than a decade label their minor ticks, which collide.
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_minor_formatter(mpl.ticker.NullFormatter())
    return finish_figure(fig, np.ravel(axes), title, out_path)


# --- toy ---------------------------------------------------------------------------------


def toy_spectrum_figure(
    df: pd.DataFrame, target_sv: Sequence[float], out_path: str | Path | None = None
) -> Figure:
    """(a) singular values of W against t for two λ (seed 0), the limits max(s_i − λ, 0)
    dashed; (b) the final singular values against λ (all runs), soft-thresholding dashed."""
    s = np.sort(np.asarray(target_sv, float))[::-1]
    svs = sorted((c for c in df.columns if c.startswith("sv_")), key=lambda c: int(c[3:]))
    lams = np.sort(df["dynamics.lam"].unique())
    fig = Figure(figsize=(16, 4.8), layout="constrained")
    axes = fig.subplots(1, 3)
    colors = [mpl.colormaps["tab10"](i) for i in range(len(svs))]
    picks = [lams[len(lams) // 3], lams[(2 * len(lams)) // 3]]
    first = df[df["seed"] == df["seed"].min()]
    for ax, lam, tag in zip(axes[:2], picks, "ab"):
        g = first[first["dynamics.lam"] == lam].sort_values("t")
        for i, col in enumerate(svs):
            ax.plot(g["t"], positive(g[col]), color=colors[i], lw=2, label=rf"$\sigma_{i + 1}(W)$")
            limit = max(s[i] - lam, 0.0)
            if limit > 0:
                ax.axhline(limit, color=colors[i], ls="--", lw=1.2)
        ax.set_yscale("log")
        # Below 1e-16·σ_1 the vanishing singular values are float64 rounding.
        ax.set_ylim(bottom=1e-16 * s[0], top=3 * s[0])
        ax.set(xlabel=T, ylabel=r"singular values $\sigma_i(W)$ (log scale)")
        ax.set_title(
            f"({tag}) trajectories at λ = {lam:g}: survivors → $s_i-\\lambda$, the rest → 0",
            fontsize="medium",
        )
    # One key for (a) and (b), below them: their trajectories cross every corner.
    handles = axes[0].get_legend_handles_labels()[0] + [
        Line2D([], [], color="k", ls="--", label=r"T3 limit $s_i-\lambda$ (theory)")
    ]
    fig.legend(handles=handles, fontsize="small", loc="outside lower center", ncol=len(handles))

    final = df.sort_values("t").groupby(["run_id", "path"]).tail(1)
    ax = axes[2]
    grid = np.linspace(0.0, lams.max() * 1.05, 300)
    for i, col in enumerate(svs):
        ax.plot(
            final["dynamics.lam"],
            final[col],
            ls="none",
            marker="o",
            ms=7,
            mfc="none",
            color=colors[i],
            label=rf"$\sigma_{i + 1}(W)$ at t = {final['t'].max():g}",
        )
        ax.plot(grid, np.maximum(s[i] - grid, 0.0), color=colors[i], ls="--", lw=1.2)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], color="k", ls="--", label=r"T3: $\max(s_i-\lambda,0)$ (theory)")
    ]
    ax.legend(handles=handles, fontsize="small")
    ax.set(xlabel=LABELS["dynamics.lam"], ylabel=r"final singular values $\sigma_i(W)$")
    ax.set_title("(c) soft-thresholding of the spectrum (all seeds)", fontsize="medium")
    eta = df["dynamics.eta"].iloc[0]
    return _finish(
        fig,
        axes,
        f"GD on the 5×5 toy of the paper's Fig. 1: ½‖ABᵀ − diag(s)‖² + (λ/2)(‖A‖²+‖B‖²), "
        f"s = {', '.join(f'{v:g}' for v in np.sort(s))}, η = {eta:g}, "
        f"{counted(df['seed'].nunique(), 'seed')}, float64",
        out_path,
    )


# --- balancing ---------------------------------------------------------------------------


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
    return _finish(
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


# --- rank ----------------------------------------------------------------------------------

_SOLUTIONS = {
    "factorised, weight decay": ("C0", "o", "-"),
    "nuclear-norm minimiser": ("k", "x", "--"),
    "unfactorised, plain L2": ("C3", "s", ":"),
}


def rank_figure(sol: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """Top: numerical rank against λ per problem for the three solutions (each seed a
    marker, the median a line; the nuclear-norm minimiser dashed as the theory). Bottom:
    the singular values of the three solutions at one λ (seed 0, log scale)."""
    problems = list(dict.fromkeys(sol["problem"]))
    fig = Figure(figsize=(6.5 * len(problems), 9), layout="constrained")
    axes = fig.subplots(2, len(problems), squeeze=False)
    for j, problem in enumerate(problems):
        d = sol[sol["problem"] == problem]
        ax = axes[0, j]
        for name, (color, marker, ls) in _SOLUTIONS.items():
            g = d[d["solution"] == name]
            lam = g["dynamics.lam"].to_numpy(float)
            jitter = {"factorised, weight decay": -0.15, "nuclear-norm minimiser": 0.0}
            ax.plot(lam, g["rank"] + jitter.get(name, 0.15), ls="none", marker=marker,
                    ms=8, mfc="none", color=color, alpha=0.8)  # fmt: skip
            med = g.groupby("dynamics.lam")["rank"].median()
            theory = name == "nuclear-norm minimiser"
            ax.plot(med.index, med.to_numpy(), color=color, ls=ls, lw=1.5 if theory else 2,
                    marker=marker, mfc="none",
                    label=name + (" (theory, T3)" if theory else ""))  # fmt: skip
        r = int(d["model.r"].iloc[0])
        ax.axhline(r, color="0.5", lw=1, ls="-.", label=f"inner dimension r = {r}")
        s = d.iloc[0]
        ax.set(xlabel=LABELS["dynamics.lam"], ylabel="numerical rank of W (σ_i > 1e-3·σ_1)")
        seeds = counted(d["seed"].nunique(), "seed")
        ax.set_title(f"({'ab'[j]}) {problem}: rank against λ ({seeds}, markers; "
                     "median, lines)", fontsize="medium")  # fmt: skip
        ax.set_ylim(-0.5, s["min_mn"] + 1.5)
        ax.legend(fontsize="small", loc="center right")

        ax = axes[1, j]
        lams = np.sort(d["dynamics.lam"].unique())
        pick = lams[len(lams) // 2]
        first = d[(d["dynamics.lam"] == pick) & (d["seed"] == d["seed"].min())]
        for name, (color, marker, ls) in _SOLUTIONS.items():
            row = first[first["solution"] == name].iloc[0]
            cols = [c for c in first.columns if c.startswith("sv_")]
            v = row[sorted(cols, key=lambda c: int(c[3:]))].to_numpy(float)
            v = v[np.isfinite(v)]
            idx = np.arange(1, len(v) + 1)
            ax.plot(idx, positive(v), marker=marker, ls=ls, color=color, mfc="none", ms=7,
                    label=name)  # fmt: skip
        ax.axhline(1e-3 * first["sv_1"].max(), color="0.5", lw=1, ls="-.",
                   label="rank cut 1e-3·σ_1")  # fmt: skip
        ax.set_yscale("log")
        ax.set_ylim(bottom=1e-8)
        ax.set(xlabel="index i", ylabel=r"singular value $\sigma_i(W)$ (log scale)")
        ax.set_title(f"({'cd'[j]}) {problem}: spectra at λ = {pick:g} (exact zeros not drawn)",
                     fontsize="medium")  # fmt: skip
        ax.legend(fontsize="small")
    return _finish(
        fig,
        axes,
        "Numerical rank of W against λ: factorised with weight decay, the nuclear-norm "
        "minimiser, unfactorised with plain L2\n"
        + "\n".join(_rank_change(sol[sol["problem"] == p], p) for p in problems),
        out_path,
    )


def _rank_change(d: pd.DataFrame, problem: str) -> str:
    """The medians (over seeds) the rank panel of ``problem`` draws, at its smallest and
    largest λ, per solution: "sensing, median rank from λ = 0.01 to 1: factorised,
    weight decay 3 → 2; …"."""
    lams = np.sort(d["dynamics.lam"].unique())
    med = d.groupby(["solution", "dynamics.lam"])["rank"].median()
    parts = [
        f"{name} {med[(name, lams[0])]:g} → {med[(name, lams[-1])]:g}"
        for name in _SOLUTIONS
        if (name, lams[0]) in med.index and (name, lams[-1]) in med.index
    ]
    return f"{problem}, median rank from λ = {lams[0]:g} to {lams[-1]:g}: " + "; ".join(parts)


# --- discrete ------------------------------------------------------------------------------


def floor_figure(
    df: pd.DataFrame,
    floor: pd.DataFrame,
    exponents: Sequence[float],
    out_path: str | Path | None = None,
) -> Figure:
    """T6's stationary floor: (a) ‖D‖_F per path against t at one point, its RMS floor and
    the predicted one dashed; (b) floor RMS against σ per shape and (η, λ), prediction
    dashed; (c) measured against predicted over the grid, the identity dashed, and at
    m ≠ n the m = n formula (the (m − n) E tr D term dropped) as crosses."""
    fig = Figure(figsize=(18, 5), layout="constrained")
    axes = fig.subplots(1, 3)
    ax = axes[0]
    key = floor.iloc[-1]
    g = df[
        np.isclose(df["dynamics.sigma"], key["dynamics.sigma"])
        & np.isclose(df["dynamics.eta"], key["dynamics.eta"])
        & np.isclose(df["dynamics.lam"], key["dynamics.lam"])
        & (df["problem.m"] == key["problem.m"])
        & (df["problem.n"] == key["problem.n"])
    ]
    for p, gp in g.groupby("path"):
        ax.plot(gp["t"], positive(gp["balance_gap"]), color="C2", lw=0.6, alpha=0.4,
                label="single paths" if p == 0 else None)  # fmt: skip
    ax.axhline(key["floor_rms"], color="C2", lw=2.5, label="measured RMS floor (second half)")
    ax.axhline(key["predicted_rms"], color="k", ls="--", lw=1.3,
               label="RMS of T6's floor (theory)")  # fmt: skip
    ax.axvline(df["t"].max() / 2, color="0.5", ls=":", lw=1, label="floor measured right of this")
    ax.set_yscale("log")
    # The start is balanced (‖D(0)‖ = 0 to rounding): keep the axis on the floor.
    ax.set_ylim(bottom=key["floor_rms"] / 30, top=key["floor_rms"] * 10)
    ax.set(xlabel=T, ylabel=r"balance gap $\|A^\top A-B^\top B\|_F$ (log scale)")
    ax.set_title(f"(a) m×n = {int(key['problem.m'])}×{int(key['problem.n'])}, σ = "
                 f"{key['dynamics.sigma']:g}, η = {key['dynamics.eta']:g}, "
                 f"λ = {key['dynamics.lam']:g}", fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small")

    ax = axes[1]
    groups = list(floor.groupby(["problem.m", "problem.n", "dynamics.eta", "dynamics.lam"]))
    for ((m, n, eta, lam), g), color in zip(groups, palette(len(groups), numeric=True)):
        g = g.sort_values("dynamics.sigma")
        ax.errorbar(g["dynamics.sigma"], g["floor_rms"],
                    yerr=0.5 * g["ratio_se"] / g["ratio"] * g["floor_rms"],
                    fmt="o" if m == n else "s", mfc="none", ms=8, color=color, capsize=3,
                    label=f"{m}×{n}, η = {eta:g}, λ = {lam:g}")  # fmt: skip
        ax.plot(g["dynamics.sigma"], g["predicted_rms"], color=color, ls="--", lw=1.2)
    ax.plot([], [], "k--", label="prediction (theory)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel=LABELS["dynamics.sigma"], ylabel=r"floor of $\|D\|_F$ (RMS, log scale)")
    a, b, c = exponents
    ax.set_title(f"(b) fitted floor (m = n) ∝ σ^{a:.2f} η^{b:.2f} λ^{c:.2f}", fontsize="medium")
    ax.legend(fontsize="small")

    ax = axes[2]
    first_rms = np.sqrt(floor["floor_ms"] / floor["first_term_ratio"])
    lo = min(floor["predicted_rms"].min(), floor["floor_rms"].min(), first_rms.min()) / 1.5
    hi = max(floor["predicted_rms"].max(), floor["floor_rms"].max()) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=1.2, label="measured = predicted")
    for (m, n), g in floor.groupby(["problem.m", "problem.n"]):
        ax.plot(g["predicted_rms"], g["floor_rms"], "o" if m == n else "s", mfc="none", ms=8,
                color="C2" if m == n else "C1",
                label=f"T6, {m}×{n}: {len(g)} (σ, η, λ) points")  # fmt: skip
        if m != n:
            ax.plot(first_rms[g.index], g["floor_rms"], "x", ms=7, color="0.4",
                    label=f"{m}×{n} against the m = n formula")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel=r"predicted RMS $\sqrt{\eta\sigma^2[(r+1)E(\|A\|^2+\|B\|^2)"
                  r"+(m-n)E\,\mathrm{tr}\,D]/2\lambda}$",
           ylabel="measured RMS floor")  # fmt: skip
    ax.set_title("(c) measured against predicted", fontsize="medium")
    ax.legend(fontsize="small")
    return _finish(
        fig,
        axes,
        "Stochastic gradient flow: the balance gap's late RMS beside T6's floor, m = n and m ≠ n "
        f"({int(floor['paths'].min())}+ paths per point, fixed-step ShARK, float64)",
        out_path,
    )


# --- attention -----------------------------------------------------------------------------


def attention_nuclear_gap_figure(heads: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """Per pair (key–query, value–output): the relative gap (½(‖A‖²+‖B‖²) − ‖ABᵀ‖_*) /
    ½(‖A‖²+‖B‖²) against the step, median over heads and runs per λ (log scale; T1:
    zero iff balanced), and its last value per head against λ."""
    df = heads.assign(rel_gap=heads["frob_minus_nuc"] / heads["l2_penalty"])
    df = df[df["status"].astype(str) == "ok"]
    pairs = [p for p in ("qk", "vo") if p in set(df["pair"])]
    names = {"qk": r"key–query $W_Q^hW_K^{h\top}$", "vo": r"value–output $W_V^hW_O^h$"}
    fig = Figure(figsize=(13, 9), layout="constrained")
    axes = fig.subplots(2, len(pairs), squeeze=False)
    lams = np.sort(df["dynamics.lam"].unique())
    colors = palette(len(lams), numeric=True)
    for j, pair in enumerate(pairs):
        d = df[df["pair"] == pair]
        ax = axes[0, j]
        for lam, color in zip(lams, colors):
            g = d[d["dynamics.lam"] == lam].groupby("t")["rel_gap"]
            med, q1, q3 = g.median(), g.quantile(0.25), g.quantile(0.75)
            ax.plot(med.index, positive(med), color=color, lw=2, label=f"λ = {lam:g}")
            ax.fill_between(med.index, positive(q1), positive(q3), color=color, alpha=0.2, lw=0)
        ax.set_yscale("log")
        ax.set(xlabel=T, ylabel=r"$(\frac{1}{2}(\|A\|^2+\|B\|^2)-\|AB^\top\|_*)\,/\,"
               r"\frac{1}{2}(\|A\|^2+\|B\|^2)$ (log)")  # fmt: skip
        ax.set_title(f"({'ab'[j]}) {names[pair]}: median over heads and runs (band: IQR)",
                     fontsize="medium")  # fmt: skip
        ax = axes[1, j]
        last = d[d["t"] == d.groupby("run_id")["t"].transform("max")]
        x = np.searchsorted(lams, last["dynamics.lam"].to_numpy())
        offset = (last["head"].to_numpy() - last["head"].max() / 2) * 0.08
        ax.plot(x + offset, positive(last["rel_gap"]), "o", mfc="none", ms=7, color="C0",
                label="one head of one run, last step")  # fmt: skip
        med = last.groupby("dynamics.lam")["rel_gap"].median()
        ax.plot(np.arange(len(lams)), positive(med.reindex(lams)), "k-", lw=2, label="median")
        ax.set_xticks(np.arange(len(lams)), [f"{v:g}" for v in lams])
        ax.set_yscale("log")
        ax.set(xlabel=r"weight decay of attention $\lambda$ (categorical axis)",
               ylabel="relative gap at the last step (log)")  # fmt: skip
        ax.set_title(f"({'cd'[j]}) {names[pair]}: last step against λ", fontsize="medium")
        ax.legend(fontsize="small")
    # One key for both top panels, outside them: their medians fill the axes.
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside right upper",
               fontsize="small", title="weight decay\nof attention")  # fmt: skip
    s = df.iloc[0]
    return _finish(
        fig,
        axes,
        f"Attention heads as factor pairs: balance under weight decay ({s['task.kind']}, "
        f"{s['dynamics.kind']}, η = {s['dynamics.eta']:g}, decay on {s['train.decay']}, "
        f"{counted(df['seed'].nunique(), 'seed')})",
        out_path,
    )
