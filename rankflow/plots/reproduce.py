"""Figures of ``rankflow reproduce`` that the other families do not already draw (the
balancing claims' figure: :mod:`.balancing`).

Built from tables only; time in optimizer steps; theory dashed beside measurements
(predictions that need ``rankflow.theory`` are passed in by the caller); log axes where
a decay is exponential.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .balancing import balancing_figure as balancing_figure
from .common import LABELS, counted, palette, positive
from .finish import finish_log_figure

__all__ = [
    "attention_nuclear_gap_figure",
    "balancing_figure",
    "floor_figure",
    "rank_figure",
    "toy_spectrum_figure",
]

T = LABELS["t"]


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
    return finish_log_figure(
        fig,
        axes,
        f"GD on the 5×5 toy of the paper's Fig. 1: ½‖ABᵀ − diag(s)‖² + (λ/2)(‖A‖²+‖B‖²), "
        f"s = {', '.join(f'{v:g}' for v in np.sort(s))}, η = {eta:g}, "
        f"{counted(df['seed'].nunique(), 'seed')}, float64",
        out_path,
    )


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
    return finish_log_figure(
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
    return finish_log_figure(
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
    return finish_log_figure(
        fig,
        axes,
        f"Attention heads as factor pairs: balance under weight decay ({s['task.kind']}, "
        f"{s['dynamics.kind']}, η = {s['dynamics.eta']:g}, decay on {s['train.decay']}, "
        f"{counted(df['seed'].nunique(), 'seed')})",
        out_path,
    )
