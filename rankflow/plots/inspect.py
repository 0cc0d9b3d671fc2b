"""Figures of ``rankflow inspect``: balance of pretrained attention (its tables)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import finish_figure, mask_log, png_writer
from .findings import findings_figure

__all__ = ["inspect_layers_figure", "inspect_scatter_figure", "inspection_figures"]

_PAIR_TITLES = {"qk": "key–query", "vo": "value–output"}
# The training reference's table, shipped beside rankflow.inspect (read as a table).
REFERENCE = Path(__file__).resolve().parents[1] / "inspect" / "reference_effects.csv"
# Axis text for the two Gram matrices of each pair, per unit kind (head / GQA group).
_GRAM_LABELS = {
    ("qk", "head"): (r"$W_Q^{h\top} W_Q^h$", r"$W_K^{h\top} W_K^h$"),
    ("vo", "head"): (r"$W_V^{h\top} W_V^h$", r"$W_O^h W_O^{h\top}$"),
    ("qk", "group"): (r"$\sum_{i\in g} W_Q^{i\top} W_Q^i$", r"$W_K^{g\top} W_K^g$"),
    ("vo", "group"): (r"$W_V^{g\top} W_V^g$", r"$\sum_{i\in g} W_O^i W_O^{i\top}$"),
}
_INSPECT_METRICS = {
    "balance_gap_rel": ("relative balance gap\n‖AᵀA − BᵀB‖ / mean(‖AᵀA‖, ‖BᵀB‖)", True),
    "gram_corr_offdiag": ("Pearson r of the off-diagonal\nentries of AᵀA and BᵀB", False),
    "frob_minus_nuc_rel": ("frob_minus_nuc / l2_penalty\n= 1 − ‖ABᵀ‖_* / ½(‖A‖² + ‖B‖²)", True),
    "rotary_gap_rel": ("relative gap of the rotary\nblock energies (key–query)", True),
}


def _theory_rows(heads: pd.DataFrame) -> pd.DataFrame:
    return heads[heads["theory"].astype(bool)] if "theory" in heads.columns else heads


def inspect_scatter_figure(
    grams: pd.DataFrame,
    heads: pd.DataFrame | None = None,
    out_path: str | Path | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Fig. 4 of the paper for chosen heads: the entries (i ≤ j) of ``AᵀA`` against those
    of ``BᵀB``, one column per head (or GQA group) in ``grams`` (the ``grams`` table of
    ``rankflow.inspect``), one row per pair (key–query, value–output).

    Balanced factors put every point on the diagonal y = x (dashed). Diagonal Gram
    entries (squared column norms) are drawn apart from the off-diagonal ones, which
    carry the finer evidence; grey points pair the same ``AᵀA`` with ``BᵀB`` of another
    head (the null pairing). Panel text: correlations and relative gaps from ``heads``
    (the heads table) when given.
    """
    need = ["layer", "pair", "unit", "index", "role", "b_index", "diagonal", "gram_a", "gram_b"]
    missing = [c for c in need if c not in grams.columns]
    if missing:
        raise KeyError(f"inspect_scatter_figure: missing columns {missing}")
    units = list(dict.fromkeys(zip(grams["layer"], grams["unit"], grams["index"])))
    pairs = [p for p in ("qk", "vo") if (grams["pair"] == p).any()]
    ncols = max(len(units), 1)
    fig = Figure(figsize=(4.6 * ncols, 4.6 * max(len(pairs), 1) + 0.6), layout="constrained")
    axes = np.atleast_2d(fig.subplots(max(len(pairs), 1), ncols, squeeze=False))
    for row, pair in enumerate(pairs):
        for col, (layer, unit, index) in enumerate(units):
            ax = axes[row, col]
            _scatter_cell(ax, grams, pair, layer, unit, index)
            if heads is not None:
                _statistics_box(ax, heads, pair, layer, unit, index)
            ax.legend(fontsize="x-small", loc="lower right")
            ax.grid(True, alpha=0.3)
    head = "Gram entries of attention factors (balanced: on y = x)"
    # Each panel is gridded as it is drawn (the layers figure switches some off).
    return finish_figure(fig, (), head + (f"\n{title}" if title else ""), out_path)


def _gram_points(ax, entries: pd.DataFrame, zorder: int, **style) -> None:
    """Gram entries as unjoined points: AᵀA's on x, BᵀB's on y."""
    ax.plot(entries["gram_a"], entries["gram_b"], ls="none", zorder=zorder, **style)


def _scatter_cell(ax, grams: pd.DataFrame, pair: str, layer, unit, index) -> None:
    """One head's (or group's) Gram entries, its null pairing and y = x, in one panel."""
    sel = (
        (grams["pair"] == pair)
        & (grams["layer"] == layer)
        & (grams["unit"] == unit)
        & (grams["index"] == index)
    )
    g = grams[sel]
    real, null = g[g["role"] == "pair"], g[g["role"] == "null"]
    kind = "head" if unit == "head" else "group"
    xl, yl = _GRAM_LABELS[(pair, kind)]
    if len(null):
        partner = int(null["b_index"].iloc[0])
        null_label = f"null: $B^\\top B$ of {kind} {partner}"
        _gram_points(ax, null, 1, marker=".", ms=3, color="0.6", alpha=0.5, label=null_label)
    off, diag = real[~real["diagonal"]], real[real["diagonal"]]
    _gram_points(ax, off, 2, marker=".", ms=3, color="C0", alpha=0.7, label="off-diagonal entries")
    _gram_points(ax, diag, 3, marker="o", ms=4, mfc="none", color="C3", label="diagonal entries")
    vals = np.concatenate([g["gram_a"].to_numpy(float), g["gram_b"].to_numpy(float)])
    vals = vals[np.isfinite(vals)]
    lo, hi = (vals.min(), vals.max()) if vals.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    lim = (lo - pad, hi + pad)
    ax.plot(lim, lim, ls="--", color="k", lw=1, label="y = x (balanced)", zorder=4)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel(f"entries of {xl}  (A = {'W_Q' if pair == 'qk' else 'W_V'})")
    ax.set_ylabel(f"entries of {yl}  (B = {'W_K' if pair == 'qk' else 'W_Oᵀ'})")
    name = f"head {index}" if kind == "head" else f"key/value group {index}"
    ax.set_title(f"layer {layer}, {name}: {_PAIR_TITLES[pair]}", fontsize="medium")


def _statistics_box(ax, heads: pd.DataFrame, pair: str, layer, unit, index) -> None:
    """The panel's correlations and relative gaps (true and null), from the heads table."""
    kind = "head" if unit == "head" else "group"
    h = heads[
        (heads["layer"] == layer)
        & (heads["pair"] == pair)
        & (heads["unit"] == unit)
        & ((heads["head"] if kind == "head" else heads["group"]) == index)
    ]
    if len(h):
        s = h.iloc[0]
        text = (
            f"r = {s['gram_corr']:.3f}, off-diag r = {s['gram_corr_offdiag']:.3f}\n"
            f"relative gap = {s['balance_gap_rel']:.3g}\n"
            f"null: off-diag r = {s['null_gram_corr_offdiag']:.3f}, "
            f"gap = {s['null_balance_gap_rel']:.3g}"
        )
        ax.text(
            0.03,
            0.97,
            text,
            transform=ax.transAxes,
            va="top",
            fontsize="small",
            bbox={"boxstyle": "round", "fc": "white", "ec": "0.7", "alpha": 0.9},
        )


def inspect_layers_figure(
    heads: pd.DataFrame,
    out_path: str | Path | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Per-layer distributions of the balance statistics of ``rankflow.inspect``'s heads
    table against the null pairing, one column per pair (key–query, value–output).

    Rows: the relative balance gap, the correlation of the off-diagonal Gram entries,
    ``frob_minus_nuc`` relative to ``l2_penalty`` (log axes mask values ≤ 0) and, for
    rotary models, the relative gap of the rotary block energies. Dots: the heads (GQA:
    the key/value groups) of each layer (blue) and their null pairings (grey), side by
    side; lines: medians per layer. Only rows with ``theory`` true are drawn.
    """
    t = _theory_rows(heads)
    metrics = ["balance_gap_rel", "gram_corr_offdiag", "frob_minus_nuc_rel"]
    if "rotary_gap_rel" in t.columns and np.isfinite(t["rotary_gap_rel"].astype(float)).any():
        metrics.append("rotary_gap_rel")
    pairs = [p for p in ("qk", "vo") if (t["pair"] == p).any()]
    unit = "key/value groups" if (t["unit"] == "group").any() else "heads"
    one = "group" if unit != "heads" else "head"
    fig = Figure(figsize=(13, 3.3 * len(metrics) + 0.8), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(metrics), max(len(pairs), 1), squeeze=False))
    rng = np.random.default_rng(0)  # fixed jitter: the figure is reproducible
    for col, pair in enumerate(pairs):
        d = t[t["pair"] == pair]
        layers = np.sort(d["layer"].unique())
        for row, metric in enumerate(metrics):
            ax = axes[row, col]
            ylabel, log = _INSPECT_METRICS[metric]
            if metric == "rotary_gap_rel" and pair != "qk":
                ax.axis("off")
                ax.text(0.5, 0.5, "no rotary constraint on value–output", ha="center")
                continue
            for key, color, shift, label in (
                (metric, "C0", -0.17, f"{unit} (line: median)"),
                (f"null_{metric}", "0.45", 0.17, f"null: A with B of the next {one} (median)"),
            ):
                raw = d[key].to_numpy(float)
                x = d["layer"].to_numpy(float) + shift + rng.uniform(-0.08, 0.08, len(d))
                ax.plot(x, mask_log(raw, log), ls="none", marker=".", ms=3, alpha=0.45, color=color)
                # Medians of the raw values: masking first would drop rounding-level ones.
                med = pd.Series(raw).groupby(d["layer"].to_numpy()).median().reindex(layers)
                ax.plot(
                    layers + shift,
                    mask_log(med.to_numpy(), log),
                    "-o",
                    ms=4,
                    lw=1.5,
                    color=color,
                    label=label,
                )
            if log:
                ax.set_yscale("log")
            if metric == "gram_corr_offdiag":
                ax.axhline(1.0, color="k", lw=0.8, ls=":")
            ax.set_ylabel(ylabel)
            ax.set_xlabel("layer")
            if len(layers) <= 24:
                ax.set_xticks(layers)
            ax.grid(True, alpha=0.3)
            if row == 0:
                ax.set_title(f"{_PAIR_TITLES[pair]}", fontsize="medium")
                ax.legend(fontsize="small")
    head = f"Balance of attention factors per layer: {unit} against a null pairing"
    # Each panel is gridded as it is drawn (the layers figure switches some off).
    return finish_figure(fig, (), head + (f"\n{title}" if title else ""), out_path)


def inspection_figures(insp) -> dict[str, Callable[[Path], object]]:
    """The figures of an inspection (``rankflow.inspect.Inspection``: its ``grams``,
    ``heads``, ``meta["name"]`` and ``layout.arch``) as file name → writer of a PNG to a
    given path: ``scatter.png`` (:func:`inspect_scatter_figure`), ``layers.png``
    (:func:`inspect_layers_figure`) and, with findings, ``findings.png``
    (:func:`rankflow.plots.findings.findings_figure`, beside the training reference).
    Pass it as ``inspect_checkpoint(..., figures=...)``, which writes them atomically
    before the inspection's finished marker."""
    title = f"{insp.meta['name']} ({insp.layout.arch})"
    figs = {
        "scatter.png": inspect_scatter_figure(insp.grams, insp.heads, title=title),
        "layers.png": inspect_layers_figure(insp.heads, title=title),
    }
    findings = getattr(insp, "findings", None)
    if findings is not None and len(findings):
        reference = pd.read_csv(REFERENCE) if REFERENCE.is_file() else None
        figs["findings.png"] = findings_figure(findings, reference=reference, title=title)
    return {name: png_writer(fig) for name, fig in figs.items()}
