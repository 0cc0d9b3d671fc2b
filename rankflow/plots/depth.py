"""The figure of ``rankflow reproduce``'s ``depth`` experiment (docs/theory.md, T12, T13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import LABELS, finish_figure, positive

__all__ = ["depth_figure"]

_DEPTH_STYLE = {2: ("C0", "o"), 3: ("C1", "s"), 4: ("C2", "^")}


def depth_figure(
    diag: pd.DataFrame,
    ranks: pd.DataFrame,
    stationary: pd.DataFrame,
    out_path: str | Path | None = None,
) -> Figure:
    """(a) Every pair's ``‖D_j(t)‖/‖D_j(0)‖`` against ``2ηλt`` (diagonal, gradient
    flow): one line ``e^{−x}`` if T12 holds. (b), (c) final rank against λ at depth
    L = 2, 3, 4 on sensing and completion beside the nuclear-norm minimiser's. (d) the
    diagonal problem: final singular values against s, beside the scalar problem's global
    minimiser; markers at 0 with a nonzero global minimiser are where gradient flow from
    a small start stopped at 0."""
    fig = Figure(figsize=(13, 9.5), layout="constrained")
    axes = fig.subplots(2, 2)
    ax = axes[0, 0]
    for _, g in diag.groupby("run_id"):
        g = g.sort_values("t")
        x = 2 * g["dynamics.eta"] * g["dynamics.lam"] * g["t"]
        L = int(g["model.depth"].iloc[0])
        for j in range(1, L):
            col = f"balance_gap_{j}"
            ax.plot(x, positive(g[col] / g[col].iloc[0]), color=_DEPTH_STYLE[L][0], lw=1,
                    alpha=0.6)  # fmt: skip
    xs = np.linspace(0, 20, 50)
    ax.plot(xs, np.exp(-xs), "k--", lw=1.5, label="T12: e^{−2ηλt}")
    for L in sorted(diag["model.depth"].unique()):
        ax.plot([], [], color=_DEPTH_STYLE[int(L)][0], label=f"L = {int(L)}, every pair j")
    ax.set(yscale="log", xlim=(0, 20), ylim=(1e-9, 2), xlabel="2ηλt",
           ylabel="‖D_j(t)‖_F / ‖D_j(0)‖_F")  # fmt: skip
    ax.set_title("(a) diagonal, gradient flow: every pair decays at 2ηλ", fontsize="medium")
    ax.legend(fontsize="small")
    for ax, (problem, d) in zip(axes.ravel()[1:3], ranks.groupby("problem", sort=False)):
        for L, g in d.groupby("model.depth"):
            color, marker = _DEPTH_STYLE.get(int(L), ("C3", "v"))
            med = g.groupby("dynamics.lam")["rank"].median()
            ax.plot(med.index, med.to_numpy(), color=color, marker=marker, mfc="none",
                    label=f"GD, depth L = {int(L)}")  # fmt: skip
        nuc = d.groupby("dynamics.lam")["nuclear_rank"].median()
        ax.plot(nuc.index, nuc.to_numpy(), "k--x", label="nuclear-norm minimiser (T3)")
        ax.set(xscale="log", xlabel=LABELS["dynamics.lam"],
               ylabel="numerical rank of W (σ_i > 1e-3·σ_1)")  # fmt: skip
        seeds = d["seed"].nunique()
        ax.set_title(f"({'bc'[list(ranks['problem'].unique()).index(problem)]}) {problem}: "
                     f"rank against λ (median of {seeds} seed{'s' * (seeds > 1)})",
                     fontsize="medium")  # fmt: skip
        ax.legend(fontsize="small")
    ax = axes[1, 1]
    for L, g in stationary.groupby("model.depth"):
        color, marker = _DEPTH_STYLE.get(int(L), ("C3", "v"))
        ax.plot(g["s"] - 0.004 * (L - 3), g["w"], ls="none", marker=marker, color=color,
                mfc="none", ms=8, label=f"gradient flow, L = {int(L)}")  # fmt: skip
        ax.plot(g["s"] + 0.004 * (L - 3), g["global_minimiser"], ls="none", marker=".",
                color=color, ms=6, label=f"global minimiser, L = {int(L)}")  # fmt: skip
    ax.set(xlabel="target singular value s", ylabel="final singular value w")
    ax.set_title("(d) diagonal: w at the end vs the scalar problem's global minimiser "
                 "(all λ)", fontsize="medium")  # fmt: skip
    ax.legend(fontsize="small", ncol=2)
    return finish_figure(
        fig,
        axes.ravel(),
        "Depth L: pairs balance at 2ηλ; weight decay on L factors is Schatten-2/L",
        out_path,
    )
