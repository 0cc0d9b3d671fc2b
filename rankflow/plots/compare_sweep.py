"""The figure of ``rankflow compare`` over a ``[sweep]``: its ``sweep`` table (one row per
point) against the swept values, one line per combination of the other swept keys."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .common import SYMBOLS, finish_figure, palette, save_figure, value_label

__all__ = ["compare_sweep_figure", "sweep_axes", "write_compare_sweep_figures"]


def sweep_axes(sw: pd.DataFrame) -> tuple[str, list[str]]:
    """The ``sweep.KEY`` column drawn along x (η when swept, else the first numeric
    swept key, else the point) and the swept columns that tell the lines apart."""
    swept = [c for c in sw.columns if c.startswith("sweep.")]
    numeric = [c for c in swept if pd.api.types.is_numeric_dtype(sw[c])]
    x = "sweep.dynamics.eta" if "sweep.dynamics.eta" in numeric else None
    x = x or (numeric[0] if numeric else "point")
    return x, [c for c in swept if c != x]


def _ticks_at(ax: Axes, values: np.ndarray, log: bool) -> None:
    """x ticks at the swept values themselves, labelled plainly (``%g``)."""
    if log:
        ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(np.unique(values)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _lines(ax: Axes, sw: pd.DataFrame, x: str, groups: list[str], y: str, **kw) -> list:
    """One line of ``y`` against ``x`` per combination of ``groups``, labelled by it;
    ``yerr`` (a column name) draws error bars. Returns the colours, in group order."""
    parts = list(sw.groupby(groups, sort=True)) if groups else [((), sw)]
    colours = palette(len(parts), numeric=bool(groups))
    yerr = kw.pop("yerr", None)
    for colour, (key, part) in zip(colours, parts, strict=True):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(value_label(g[len("sweep.") :], v) for g, v in zip(groups, key))
        part = part.sort_values(x)
        ax.errorbar(
            part[x],
            part[y],
            yerr=None if yerr is None else part[yerr],
            color=colour,
            marker="o",
            capsize=3,
            label=label or "measured",
            **kw,
        )
    return colours


def compare_sweep_figure(sw: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``sweep`` table of ``rankflow.compare`` over a sweep: (a) the trajectory
    distance at the last save, (b) the order in η at a fixed ηt (T8, expect 1; or the
    SME's weak order), and, for GD, (c) 1 − the measured per-step ratio of ‖D‖_F with
    its leading term 1 − (1 − ηλ)² dashed in each line's colour (T5; the rest of T5's
    exact step, the loss gradient's part, fades as the run converges)."""
    x, groups = sweep_axes(sw)
    log_x = x != "point" and bool((sw[x] > 0).all())
    has_order = "order" in sw.columns
    weak = [c for c in sw.columns if c.startswith("weak_order.") and not c.endswith("_stderr")]
    has_ratio = "ratio_min" in sw.columns
    n = 1 + (has_order or bool(weak)) + has_ratio
    fig = Figure(figsize=(5.2 * n, 4.6), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    ax = axes[0]
    _lines(ax, sw, x, groups, "distance_final")
    ax.set_yscale("log")
    ax.set_ylabel(r"$\|\theta_k-\theta(t{=}k)\|_F$ at the last save")
    ax.set_title("(a) distance, optimizer to flow")
    i = 1
    if has_order or weak:
        ax = axes[i]
        i += 1
        if has_order:
            _lines(ax, sw, x, groups, "order", yerr="order_stderr")
            ax.set_ylabel("fitted order p in η (± SE)")
            ax.set_title("(b) order in η at a fixed ηt (T8)")
        else:
            col = weak[0]
            _lines(ax, sw, x, groups, col, yerr=f"{col}_stderr")
            ax.set_ylabel(f"weak order of E[{col[len('weak_order.') :]}] (± SE)")
            ax.set_title("(b) weak order against the SME (T10)")
        ax.axhline(1.0, color="k", ls=":", lw=1, label="first order (theory)")
    if has_ratio:
        ax = axes[i]
        measured = sw.assign(
            shrink_max=1.0 - sw["ratio_min"],
            shrink_min=1.0 - sw["ratio_max"],
            shrink_gd=1.0 - sw["gd_contraction"],
        )
        parts = list(measured.groupby(groups, sort=True)) if groups else [((), measured)]
        colours = palette(len(parts), numeric=bool(groups))
        for j, (colour, (key, part)) in enumerate(zip(colours, parts, strict=True)):
            key = key if isinstance(key, tuple) else (key,)
            label = ", ".join(value_label(g[len("sweep.") :], v) for g, v in zip(groups, key))
            part = part.sort_values(x)
            # Bars of the groups side by side at each swept value (log x: a factor).
            shift = 1.03 ** (j - (len(parts) - 1) / 2)
            part = part.assign(**{x: part[x] * shift if log_x else part[x] + 0.1 * (shift - 1)})
            # The range over the window: a bar from the smallest to the largest shrink
            # (a step that grew ‖D‖ has no positive shrink and is left off the log axis).
            lo = part["shrink_min"].where(part["shrink_min"] > 0, part["shrink_max"])
            ax.vlines(part[x], lo, part["shrink_max"], color=colour, lw=4, alpha=0.8)
            ax.plot(part[x], part["shrink_max"], "_", color=colour, ms=10)
            ax.plot(part[x], lo, "_", color=colour, ms=10, label=f"{label or 'measured'}: range")
            ax.plot(part[x], part["shrink_gd"], "--", color=colour, lw=1.2)
        ax.plot([], [], "--", color="0.4", lw=1.2, label=r"$1-(1-\eta\lambda)^2$ (theory)")
        ax.text(
            0.98,
            0.03,
            f"measured − T5's exact step: max {sw['t5_deviation_max'].max():.1e}",
            transform=ax.transAxes,
            ha="right",
            fontsize="small",
        )
        ax.set_yscale("log")
        ax.set_ylabel(r"$1-\|D_{k+1}\|_F/\|D_k\|_F$, its range over the window")
        ax.set_title("(c) GD's per-step contraction of ‖D‖_F (T5)")
    for ax in axes:
        _ticks_at(ax, sw[x].to_numpy(float), log_x)
        key = x[len("sweep.") :] if x != "point" else "point"
        ax.set_xlabel(f"{SYMBOLS.get(key, key)} (swept" + (", log scale)" if log_x else ")"))
        ax.legend(fontsize="small")
    first = sw.iloc[0]
    title = (
        f"rankflow compare over a sweep of {len(sw)} points: {first['dynamics.kind']} "
        f"against {first['flow.kind']}"
    )
    return finish_figure(fig, axes, title, out_path)


def write_compare_sweep_figures(tables: Mapping[str, pd.DataFrame], out: str | Path) -> list[Path]:
    """``out/sweep.png`` from the ``sweep`` table of a comparison over a sweep."""
    return [save_figure(compare_sweep_figure(tables["sweep"]), Path(out) / "sweep.png")]
