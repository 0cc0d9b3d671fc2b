"""Figures of ``rankflow inspect`` on a checkpoint series (its tables: the stacked heads
table with ``step``, and the per-unit and per-layer rates)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from .common import finish_figure, mask_log, png_writer

__all__ = ["series_figures", "series_gap_figure", "series_rate_figure"]

_PAIR_TITLES = {"qk": "key–query", "vo": "value–output"}


def _pair_panels(table: pd.DataFrame, height: float):
    """The theory units of a table (every row where it has no ``theory`` column), the
    pairs it holds, and a figure with one panel (axes) per pair."""
    t = table[table["theory"].astype(bool)] if "theory" in table.columns else table
    pairs = [p for p in ("qk", "vo") if (t["pair"] == p).any()]
    fig = Figure(figsize=(6.0 * max(len(pairs), 1), height), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, max(len(pairs), 1), squeeze=False)[0])
    return t, pairs, fig, axes


def series_gap_figure(
    heads: pd.DataFrame,
    statistic: str = "balance_gap_rel",
    out_path: str | Path | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """The gap against the training step, one panel per pair, one colour per layer:
    the median over the layer's theory units (line) and their quartiles (band), the
    null pairing's median beside (dashed, same colour). Log y: a decay at a constant
    rate is a straight line."""
    t, pairs, fig, axes = _pair_panels(heads, height=4.4)
    layers = sorted(t["layer"].unique())
    cmap = colormaps["viridis"]
    for ax, pair in zip(axes, pairs):
        g = t[t["pair"] == pair]
        for i, layer in enumerate(layers):
            c = cmap(i / max(len(layers) - 1, 1))
            q = g[g["layer"] == layer].groupby("step")
            s = q[statistic].quantile([0.25, 0.5, 0.75]).unstack()
            null = q["null_" + statistic].median()
            x = s.index.to_numpy(np.float64)
            ax.fill_between(x, mask_log(s[0.25], True), mask_log(s[0.75], True), color=c, alpha=0.2)
            ax.plot(x, mask_log(s[0.5], True), "-o", ms=3, color=c, label=f"layer {layer}")
            ax.plot(x, mask_log(null, True), "--", color=c, alpha=0.6)
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(f"{statistic}\n(median, quartiles over heads; dashed: null)")
        ax.set_title(_PAIR_TITLES.get(pair, pair))
        ax.legend(fontsize="x-small", ncol=2)
    head = "Balance gap across training"
    return finish_figure(fig, list(axes), head + (f"\n{title}" if title else ""), out_path)


def series_rate_figure(
    rates: pd.DataFrame, out_path: str | Path | None = None, *, title: str | None = None
) -> Figure:
    """The fitted decay rate per step of each theory unit against its layer (points,
    with ±1 standard error), the null pairing's rate (grey), and the predicted rate
    (T5's ``−2 log(1 − ηλ)`` per step, solid; gradient flow's ``2ηλ``, dotted) where the
    table has one."""
    t, pairs, fig, axes = _pair_panels(rates, height=4.2)
    rng = np.random.default_rng(0)  # horizontal jitter only, so that points do not hide
    for ax, pair in zip(axes, pairs):
        g = t[t["pair"] == pair]
        x = g["layer"].to_numpy(np.float64) + rng.uniform(-0.15, 0.15, len(g))
        ax.errorbar(x, g["rate"], yerr=g["rate_se"].fillna(0), fmt="o", ms=3, label="fitted")
        ax.plot(x, g["null_rate"], "o", ms=3, color="0.6", label="null pairing")
        for col, style, name in (
            ("predicted_rate", "-", "T5: −2 log(1 − η_kλ) per step"),
            ("predicted_rate_gf", ":", "gradient flow: 2λη_k per step"),
        ):
            v = g[col].dropna() if col in g.columns else pd.Series(dtype=float)
            if len(v):
                ax.axhline(float(v.iloc[0]), ls=style, color="C3", label=name)
        ax.set_xlabel("layer")
        ax.set_ylabel("decay rate of the gap per step")
        ax.set_title(_PAIR_TITLES.get(pair, pair))
        ax.legend(fontsize="x-small")
    head = "Fitted decay rate of each head's gap against the prediction"
    return finish_figure(fig, list(axes), head + (f"\n{title}" if title else ""), out_path)


def series_figures(series) -> dict[str, Callable[[Path], object]]:
    """The figures of a series (``rankflow.inspect.SeriesInspection``) as file name →
    PNG writer: ``series_gaps.png`` (:func:`series_gap_figure`) and ``series_rates.png``
    (:func:`series_rate_figure`). Pass it as ``inspect_series(..., figures=...)``."""
    arch = series.meta["layout"]["arch"]
    title = f"{len(series.steps)} checkpoints ({arch}), steps {series.steps[0]}–{series.steps[-1]}"
    figs = {
        "series_gaps.png": series_gap_figure(series.heads, series.meta["statistic"], title=title),
        "series_rates.png": series_rate_figure(series.rates, title=title),
    }
    return {name: png_writer(fig) for name, fig in figs.items()}
