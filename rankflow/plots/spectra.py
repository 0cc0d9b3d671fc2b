"""The spectra figure of ``rankflow inspect --spectra``: singular values per layer
against the Marchenko–Pastur edge, beside the shuffled-entries null (reads tables only)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import finish_figure, png_writer

_TITLES = {
    "qk": "W_QK per head (median)",
    "vo": "W_OV per head (median)",
    "q": "W_Q",
    "k": "W_K",
    "v": "W_V",
    "o": "W_O",
}


def spectra_figure(table: pd.DataFrame, sv: pd.DataFrame, title: str = "", out_path=None):
    """One panel per matrix kind: singular values s_i / s₊ (the bulk edge) against the
    rank i, one line per layer coloured by depth (for per-head products the median over
    heads at each rank), the shuffled-entries null dashed; s/s₊ > 1 are spikes."""
    kinds = [k for k in _TITLES if k in set(table["matrix"])]
    fig = Figure(figsize=(3.2 * len(kinds), 3.4))
    axes = fig.subplots(1, len(kinds), squeeze=False)
    layers = sorted(table["layer"].unique())
    cmap = matplotlib.colormaps["viridis"]
    edges = table.set_index(["layer", "matrix", "head"])["mp_edge"]
    for ax, kind in zip(axes[0], kinds):
        for j, layer in enumerate(layers):
            part = sv[(sv["layer"] == layer) & (sv["matrix"] == kind)]
            scale = np.array([edges[(layer, kind, h)] for h in part["head"]])
            ratio = part.assign(r=part["sv"] / scale, rn=part["rand_sv"] / scale)
            med = ratio.groupby("index")[["r", "rn"]].median()
            color = cmap(j / max(len(layers) - 1, 1))
            ax.semilogy(med.index + 1, med["r"], color=color, lw=1, label=f"layer {layer}")
            ax.semilogy(med.index + 1, med["rn"], color=color, lw=0.8, ls="--", alpha=0.6)
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_title(_TITLES[kind], fontsize="medium")
        ax.set_xlabel("rank i")
        ax.set_ylabel("s_i / MP edge")
        ax.grid(True, which="both", alpha=0.3)
    if len(layers) <= 8:
        axes[0][0].legend(fontsize="x-small")
    head = "Singular values per layer against the Marchenko–Pastur edge (dashed: shuffled)"
    return finish_figure(fig, (), head + (f"\n{title}" if title else ""), out_path)


def spectra_writer(title: str = "") -> Callable[[pd.DataFrame, pd.DataFrame], Callable]:
    """``figure`` argument of ``rankflow.inspect.with_spectra``: table and singular
    values → writer of ``spectra.png`` to a path."""

    def figure(table: pd.DataFrame, sv: pd.DataFrame) -> Callable[[Path], object]:
        return png_writer(spectra_figure(table, sv, title=title))

    return figure
