"""Figures of the balance findings: a checkpoint's effect with its interval per layer
beside the training reference, and the reference's effect along training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import finish_figure, palette

__all__ = ["findings_figure", "reference_figure"]

_PAIR_TITLES = {"qk": "key–query", "vo": "value–output"}
# One colour per finding, fixed so that figures of different checkpoints read alike.
FINDING_COLORS = {
    "balanced": "#1b7837",
    "partially balanced": "#e08214",
    "not detected": "#762a83",
    "too few pairings": "0.6",
}
_MARGIN_TEXT = "margin of 'balanced'"


def _guides(ax, margin: float) -> None:
    ax.axhline(1.0, color="k", lw=0.8, ls=":", label="chance (effect 1)")
    ax.axhline(margin, color="k", lw=0.8, ls="--", label=f"{_MARGIN_TEXT} ({margin:g})")


def reference_figure(
    table: pd.DataFrame, out_path: str | Path | None = None, *, margin: float = 0.5
) -> Figure:
    """The training reference (``reference_effects``): per pair, the permutation test's
    effect against the step, one colour per regime (optimizer and λ): the median over
    seeds (line) and their range (band), computed in training; crosses: the same test
    on the exported checkpoints."""
    t = table[table["statistic"] == "balance_gap_rel"]
    regimes = list(dict.fromkeys(t["regime"]))
    colors = dict(zip(regimes, palette(len(regimes), False), strict=True))
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, pair in zip(axes, ("qk", "vo"), strict=True):
        for reg in regimes:
            g = t[(t["pair"] == pair) & (t["regime"] == reg)]
            train = g[g["source"] == "training"].groupby("step")["effect"]
            steps = np.asarray(train.median().index, float)
            ax.plot(steps, train.median().to_numpy(), "-", color=colors[reg], lw=1.6, label=reg)
            ax.fill_between(
                steps, train.min().to_numpy(), train.max().to_numpy(), color=colors[reg], alpha=0.2
            )
            ex = g[g["source"] == "export"]
            ax.plot(ex["step"], ex["effect"], "x", color=colors[reg], ms=6, mew=1.2)
        _guides(ax, margin)
        ax.set_title(_PAIR_TITLES[pair], fontsize="medium")
        ax.set_xlabel("optimizer step")
    axes[0].set_ylabel("effect: true pairs' median gap / null's")
    axes[0].plot([], [], "x", color="0.3", label="exported checkpoint")
    # Below the panels: inside, every corner holds a regime's curve.
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize="small"
    )
    seeds = t["seed"].nunique()
    title = (
        "Training reference: the permutation test's effect along training "
        f"(line: median over {seeds} seed{'s' * (seeds != 1)}, band: their range)"
    )
    return finish_figure(fig, axes, title, out_path)


def _reference_bars(ax, reference: pd.DataFrame, pair: str, x0: float) -> list[str]:
    """The reference's last-step effect range per regime as vertical bars from ``x0``."""
    t = reference[(reference["pair"] == pair) & (reference["source"] == "training")]
    t = t[t["statistic"] == "balance_gap_rel"]
    last = t[t["step"] == t["step"].max()]
    labels = []
    for i, (reg, g) in enumerate(last.groupby("regime", sort=False)):
        lo, hi, med = g["effect"].min(), g["effect"].max(), g["effect"].median()
        ax.plot([x0 + i, x0 + i], [lo, hi], "-", color="0.45", lw=4, alpha=0.6)
        ax.plot([x0 + i], [med], "o", color="0.3", ms=4)
        labels.append(reg)
    return labels


def findings_figure(
    findings: pd.DataFrame,
    out_path: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    title: str | None = None,
) -> Figure:
    """A checkpoint's findings (``rankflow.inspect``'s ``findings`` table): per pair, the
    effect with its bootstrap interval over all layers ("all") and per layer, coloured
    by the graded finding; in grey, the training reference's effect at its last step
    (range over seeds per regime), for the same statistic."""
    pairs = [p for p in ("qk", "vo") if (findings["pair"] == p).any()]
    fig = Figure(figsize=(6.2 * max(len(pairs), 1), 4.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, max(len(pairs), 1), sharey=True))
    margin = float(findings["margin"].iloc[0]) if len(findings) else 0.5
    for ax, pair in zip(axes, pairs, strict=False):
        f = findings[findings["pair"] == pair]
        labels, ticks = [], []
        for x, (_, row) in enumerate(f.iterrows()):
            color = FINDING_COLORS.get(row["finding"], "0.5")
            lo, hi = row["effect_lo"], row["effect_hi"]
            err = None
            if np.isfinite(lo) and np.isfinite(hi):
                err = [[max(row["effect"] - lo, 0)], [max(hi - row["effect"], 0)]]
            size = 8 if row["scope"] == "all" else 5
            ax.errorbar([x], [row["effect"]], yerr=err, fmt="o", color=color, ms=size, capsize=3)
            labels.append("all" if row["scope"] == "all" else str(row["layer"]))
            ticks.append(x)
        if reference is not None and (f["statistic"] == "balance_gap_rel").any():
            x0 = len(ticks) + 0.5
            ax.axvline(x0 - 0.75, color="0.6", lw=0.8)
            regs = _reference_bars(ax, reference, pair, x0)
            labels += regs
            ticks += [x0 + i for i in range(len(regs))]
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize="small")
        _guides(ax, margin)
        ax.set_title(_PAIR_TITLES[pair], fontsize="medium")
        ax.set_xlabel("layers (this checkpoint)   |   training reference, last step")
    axes[0].set_ylabel("effect (95% bootstrap interval)")
    for finding, color in FINDING_COLORS.items():
        if (findings["finding"] == finding).any():
            axes[0].plot([], [], "o", color=color, label=finding)
    if reference is not None:
        axes[0].plot([], [], "-", color="0.45", lw=4, alpha=0.6, label="reference: seeds' range")
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=6, fontsize="small"
    )
    head = "Balance findings: effect per layer and over all layers, beside the training reference"
    return finish_figure(fig, axes, head + (f"\n{title}" if title else ""), out_path)
