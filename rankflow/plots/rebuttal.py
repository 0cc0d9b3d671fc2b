"""The figures of the rebuttal experiments (``sims/attention/{lambda_table, vit_ablation,
lr_control, dh}.toml``), from the per-run rows of :func:`rankflow.attention.tables.run_finals`
(one row per run at its last step: losses or accuracies, and the mean effective rank of
each pair over layers and heads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import palette, save_figure

__all__ = ["experiment_figure", "rebuttal_figure"]

_VALUE_LABELS = {
    "val_loss": "validation loss (nats per character)",
    "train_loss": "training loss",
    "val_accuracy": "validation accuracy",
    "train_accuracy": "training accuracy",
    "rank_qk": "effective rank, key–query\n(mean over heads)",
    "rank_vo": "effective rank, value–output\n(mean over heads)",
}


def _categories(values: pd.Series) -> list:
    """The distinct values in order of first appearance."""
    return list(dict.fromkeys(values.tolist()))


def _panel(ax, d: pd.DataFrame, x: str, value: str, group: str | None, xs: list) -> None:
    """Seeds as dots and mean ± std (ddof 1) as squares with error bars, per category of
    ``x`` and, side by side, per ``group``."""
    groups = _categories(d[group]) if group else [None]
    colors = palette(len(groups), numeric=False)
    width = 0.6 / max(len(groups), 1)
    for j, (g, color) in enumerate(zip(groups, colors, strict=True)):
        dg = d if g is None else d[d[group] == g]
        for i, cat in enumerate(xs):
            v = dg.loc[dg[x] == cat, value].to_numpy(float)
            v = v[np.isfinite(v)]
            if not v.size:
                continue
            pos = i + (j - (len(groups) - 1) / 2) * width
            ax.plot(pos + np.linspace(-0.04, 0.04, v.size), v, "o", color=color, alpha=0.5, ms=4)
            err = v.std(ddof=1) if v.size > 1 else 0.0
            label = None if i else (str(g) if g is not None else None)
            ax.errorbar(
                pos + 0.08,
                v.mean(),
                yerr=err,
                fmt="s",
                color=color,
                mec="k",
                capsize=3,
                ms=5,
                label=label,
            )
    ax.set_xticks(
        range(len(xs)), [f"{c:g}" if isinstance(c, float) else str(c) for c in xs], fontsize="small"
    )
    ax.set_ylabel(_VALUE_LABELS.get(value, value), fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    if group and not ax.get_subplotspec().colspan.start:
        ax.legend(fontsize="x-small")


def rebuttal_figure(
    finals: pd.DataFrame,
    x: str,
    metric: str | Mapping[str, str],
    title: str,
    out_path: str | Path | None = None,
    *,
    row: str | None = None,
    group: str | None = None,
    xlabel: str | None = None,
    values: Sequence[str] = ("rank_qk", "rank_vo"),
) -> Figure:
    """Per category of ``x`` (and side by side per ``group``), every seed's final value
    (dots) and the mean ± std over seeds (squares) of ``metric`` and of each pair's mean
    effective rank, one panel each. With ``row`` (e.g. ``task``), one row of panels per
    value of that column, ``metric`` then a mapping row value → metric column."""
    rows = _categories(finals[row]) if row else [None]
    cols = 1 + len(values)
    fig = Figure(figsize=(4.6 * cols, 3.6 * len(rows) + 0.8), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(rows), cols, squeeze=False))
    for r, name in enumerate(rows):
        d = finals if name is None else finals[finals[row] == name]
        m = metric if isinstance(metric, str) else metric[name]
        xs = _categories(d[x])
        for c, value in enumerate([m, *values]):
            ax = axes[r, c]
            _panel(ax, d, x, value, group, xs)
            if r == len(rows) - 1:
                ax.set_xlabel(xlabel or x, fontsize="small")
            if name is not None:
                ax.set_title(str(name), fontsize="medium")
    fig.suptitle(title + "\nseeds (dots), mean ± std over seeds (squares) at the last step")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


class FigureSpec(NamedTuple):
    """A rebuttal experiment's figure: its x column, metric (per ``row`` value where the
    figure has rows), title, x label and the column its points are grouped by."""

    x: str
    metric: str | Mapping[str, str]
    title: str
    xlabel: str
    group: str | None = None
    row: str | None = None


# Per experiment (a key of rankflow.attention.tables.LAYOUTS): its figure.
REBUTTAL_FIGURES = {
    "lambda": FigureSpec(
        "dynamics.lam",
        "val_loss",
        "char_lm: loss and per-head rank across weight decay λ",
        "λ (every group but LayerNorms)",
    ),
    "lr_control": FigureSpec(
        "train.lr_v",
        "val_loss",
        "char_lm: effective-learning-rate control (decay on attention)",
        "value-projection learning-rate multiplier (train.lr_v)",
        group="decay",
    ),
    "dh": FigureSpec(
        "d_h",
        "val_loss",
        "char_lm: key–query dimension, weight decay on against off attention",
        "head dimension d_h = D/H (D = 32)",
        group="decay",
    ),
    "contrast": FigureSpec(
        "variant",
        {"ViT (shapes)": "val_accuracy", "char_lm": "val_loss"},
        "Weight decay in attention: vision against language",
        "weight decay",
        row="task",
    ),
}


def experiment_figure(kind: str, finals: pd.DataFrame, out_path: str | Path | None = None):
    """The figure of rebuttal experiment ``kind`` (a key of :data:`REBUTTAL_FIGURES`) from
    its ``finals`` (:func:`rankflow.attention.tables.experiment`)."""
    f = REBUTTAL_FIGURES[kind]
    return rebuttal_figure(
        finals, f.x, f.metric, f.title, out_path, row=f.row, group=f.group, xlabel=f.xlabel
    )
