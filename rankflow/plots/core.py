"""Figures of ``rankflow run`` results tables: a quick look and the balance figure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import (
    axis_label,
    draw_median,
    lr_clock,
    ok_values,
    palette,
    run_columns,
    save_figure,
    setting_title,
    sv_columns,
    value_label,
)

__all__ = ["balance_figure", "quick_plot"]


def quick_plot(
    df: pd.DataFrame,
    x: str = "t",
    y: str = "balance_gap",
    hue: str | None = None,
    logy: bool = False,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    out_path: str | Path | None = None,
) -> Figure:
    """One curve of ``y`` against ``x`` per value of the column ``hue``.

    Each curve is the median over all rows sharing ``(hue, x)`` — i.e. over seeds and
    paths — with an interquartile band where more than one run contributes. Non-``ok``
    rows and NaNs are ignored; with ``logy`` values ``≤ 0`` are masked. To plot a
    final-time quantity against a hyperparameter, filter the table first
    (e.g. ``df[df.t == df.t.max()]``). Draws into ``ax`` when given (and returns its
    figure), else into a new figure; writes it to ``out_path`` when given.
    """
    for col in (x, y) + ((hue,) if hue is not None else ()):
        if col not in df.columns:
            raise KeyError(f"quick_plot: no column {col!r} in the table")
    df = df.reset_index(drop=True)
    if ax is None:
        fig = Figure(figsize=(6.4, 4.4), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure(root=True)

    vals = ok_values(df, y)
    if hue is None:
        groups = [(None, df.index)]
    else:
        keys = pd.Series(df[hue].to_numpy(), index=df.index)
        uniq = keys.drop_duplicates()
        try:
            uniq = uniq.sort_values()
        except TypeError:  # mixed types: keep table order
            pass
        groups = [(v, df.index[(keys == v) | (keys.isna() & pd.isna(v))]) for v in uniq]
    numeric = hue is not None and pd.api.types.is_numeric_dtype(df[hue])
    colors = palette(len(groups), numeric) if hue is not None else ["C0"]
    for (value, idx), color in zip(groups, colors, strict=True):
        label = None if hue is None else value_label(hue, value)
        draw_median(ax, df.loc[idx], x, vals.loc[idx], log=logy, color=color, label=label)

    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(True, which="major", alpha=0.3)
    if hue is not None and ax.lines:
        ax.legend(title=axis_label(hue), fontsize="small")
    if title is None:
        title = f"{y} vs {x}: median over runs (band: interquartile range)"
        setting = setting_title(df, skip=(hue,) if hue else ())
        if setting:
            title += f"\n{setting}"
    ax.set_title(title, fontsize="medium")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _final_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Each run's row at its last saved time, dropping runs not ``ok`` there; also
    returns how many runs were dropped."""
    runs = run_columns(df)
    last = df.sort_values("t").groupby(runs, sort=False).tail(1) if runs else df
    ok = last["status"] == "ok" if "status" in last.columns else pd.Series(True, last.index)
    return last[ok], int((~ok).sum())


def balance_figure(
    df: pd.DataFrame,
    out_path: str | Path | None = None,
    *,
    target_sv: Sequence[float] | None = None,
) -> Figure:
    """Fig. 1 of the paper for a weight-decay sweep (column ``dynamics.lam``).

    Three panels, one colour per λ, medians over runs with interquartile bands:
      (a) ``nuclear_norm`` (solid) and ``l2_penalty`` (dashed) against t: for λ > 0
          they meet (T1: equality iff balanced);
      (b) ``balance_gap`` (solid) and ``frob_minus_nuc`` (dotted) against t on a log
          axis, with the T4 prediction ``balance_gap(t₀)·exp(−2λ∫_{t₀}^t η)`` dashed
          grey per λ (t₀ the first saved time; η from ``dynamics.eta``, per run, and
          ∫η = η(t − t₀) unless the table holds a learning-rate schedule);
      (c) each run's final singular values ``sv_i`` (at its last t, runs not ``ok``
          there left out) against λ, and — when ``target_sv`` (the singular values
          ``s_i`` of the target) is given — the T3 soft-thresholding prediction
          ``max(s_i − λ, 0)`` dashed. T3's prediction is the minimiser for
          ``L = ½‖W − S‖_F²`` (the ``diagonal`` problem), reached as t → ∞.

    Writes the figure to ``out_path`` when given.
    """
    need = ["t", "dynamics.lam", "dynamics.eta", "nuclear_norm", "l2_penalty"]
    need += ["balance_gap", "frob_minus_nuc"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise KeyError(f"balance_figure: missing columns {missing}")
    df = df.reset_index(drop=True)
    lams = np.sort(df["dynamics.lam"].dropna().unique())
    colors = palette(len(lams), numeric=True)

    fig = Figure(figsize=(16, 4.8), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    lam_handles = [
        Line2D([], [], color=c, lw=2, label=value_label("dynamics.lam", lam))
        for lam, c in zip(lams, colors, strict=True)
    ]

    gap = ok_values(df, "balance_gap")
    t4 = _t4_prediction(df, gap)
    for lam, color in zip(lams, colors, strict=True):
        sel = df["dynamics.lam"] == lam
        d = df[sel]
        draw_median(ax_a, d, "t", ok_values(d, "nuclear_norm"), log=False, color=color)
        draw_median(ax_a, d, "t", ok_values(d, "l2_penalty"), log=False, color=color, ls="--")
        draw_median(ax_b, d, "t", gap[sel], log=True, color=color)
        draw_median(ax_b, d, "t", ok_values(d, "frob_minus_nuc"), log=True, color=color, ls=":")
        draw_median(
            ax_b, d, "t", t4[sel], log=True, band=False, color="0.25", ls="--", lw=1.2, zorder=3
        )

    _label_norms_panel(ax_a, lam_handles)
    _label_balance_panel(ax_b, lam_handles, df, gap)
    _spectrum_panel(ax_c, df, lams, target_sv)

    for ax in (ax_a, ax_b, ax_c):
        ax.grid(True, alpha=0.3)
    fig.suptitle(
        "Weight decay on W = ABᵀ: balancing and rank reduction "
        "(median over runs, band: interquartile range)\n"
        + setting_title(df, skip=("dynamics.lam",))
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _t4_prediction(df: pd.DataFrame, gap: pd.Series) -> pd.Series:
    """Per-run T4 prediction gap(t₀)·e^{−2λ∫_{t₀}^t η} (t₀: the run's first finite gap), kept
    only where the measurement exists so that the median runs over the same runs as the
    measured curve."""
    runs = run_columns(df)
    rid = df.groupby(runs, sort=False).ngroup() if runs else pd.Series(0, index=df.index)
    finite = pd.DataFrame({"rid": rid, "t": df["t"], "gap": gap})[np.isfinite(gap)]
    start = finite.sort_values("t").groupby("rid").first()  # each run's first finite gap
    t0, gap0 = rid.map(start["t"]), rid.map(start["gap"])
    # ∫η: ηt, or the table's clock of the run's learning-rate schedule (T4 scheduled).
    clock = lr_clock(df, "dynamics.eta")
    lam = df["dynamics.lam"].astype(float)
    return (gap0 * np.exp(-2.0 * lam * (clock - _at_start(rid, df["t"], t0, clock)))).where(
        np.isfinite(gap)
    )


def _at_start(rid: pd.Series, t: pd.Series, t0: pd.Series, values: pd.Series) -> pd.Series:
    """Each row's run's ``values`` at the run's time ``t0``."""
    at = values[t == t0]
    return rid.map(pd.Series(at.to_numpy(), index=rid[t == t0].to_numpy()).groupby(level=0).first())


def _label_norms_panel(ax_a: Axes, lam_handles: list[Line2D]) -> None:
    """Axis text and legend of panel (a): the factors' norms (T1)."""
    tlab = axis_label("t")
    ax_a.set(xlabel=tlab, ylabel="norm of the factors")
    ax_a.set_title("(a) L2 penalty meets the nuclear norm for λ > 0 (T1)", fontsize="medium")
    ax_a.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=axis_label("nuclear_norm")),
            Line2D([], [], color="k", ls="--", label=axis_label("l2_penalty")),
        ],
        fontsize="small",
    )


def _label_balance_panel(ax_b: Axes, lam_handles: list[Line2D], df: pd.DataFrame, gap) -> None:
    """Log axis on the measured range, text and legend of panel (b): balancing (T4)."""
    tlab = axis_label("t")
    ax_b.set_yscale("log")
    # Theory lines keep decaying below what the measurement can resolve (rounding floor):
    # keep the axis on the measured range.
    measured = np.concatenate([gap.to_numpy(), ok_values(df, "frob_minus_nuc").to_numpy()])
    measured = measured[np.isfinite(measured) & (measured > 0)]
    if measured.size:
        ax_b.set_ylim(bottom=measured.min() / 10, top=measured.max() * 3)
    ax_b.set(xlabel=tlab, ylabel="imbalance (log scale)")
    ax_b.set_title(r"(b) balancing at rate $2\eta\lambda$ (T4)", fontsize="medium")
    ax_b.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=axis_label("balance_gap")),
            Line2D([], [], color="k", ls=":", label=r"$\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)-\|W\|_*$"),
            Line2D(
                [], [], color="0.25", ls="--", label=r"T4: gap$(0)\,e^{-2\eta\lambda t}$ (theory)"
            ),
        ],
        fontsize="small",
    )


def _spectrum_panel(ax_c: Axes, df: pd.DataFrame, lams, target_sv) -> None:
    """Panel (c): each run's final singular values against λ, T3's soft-thresholding."""
    svs = sv_columns(df)
    final, dropped = _final_rows(df)
    k = max(len(svs), len(target_sv) if target_sv is not None else 0)
    sv_colors = palette(k, numeric=False)
    per_index = k <= 10  # one legend entry per σ_i only while it stays readable
    for i, col in enumerate(svs):
        ax_c.plot(
            final["dynamics.lam"].to_numpy(dtype=float),
            ok_values(final, col).to_numpy(),
            ls="none",
            marker="o",
            ms=6,
            mfc="none",
            color=sv_colors[i],
            label=rf"$\sigma_{{{i + 1}}}(W)$ measured" if per_index else None,
        )
    handles = []
    if target_sv is not None:
        s = np.asarray(target_sv, dtype=float)
        grid = np.linspace(0.0, max(float(lams.max()) if len(lams) else 0.0, 1e-12) * 1.05, 200)
        for i, si in enumerate(s):
            ax_c.plot(grid, np.maximum(si - grid, 0.0), color=sv_colors[i], ls="--", lw=1.2)
        handles.append(
            Line2D([], [], color="k", ls="--", label=r"T3: $\max(s_i-\lambda,\,0)$ (theory)")
        )
    ax_c.set(xlabel=axis_label("dynamics.lam"), ylabel=r"final singular values $\sigma_i(W)$")
    title_c = "(c) weight decay soft-thresholds the spectrum (T3)"
    if dropped:
        title_c += f"\n{dropped} run(s) not ok at the end left out"
    ax_c.set_title(title_c, fontsize="medium")
    if not per_index:
        handles.insert(
            0,
            Line2D(
                [],
                [],
                color="k",
                ls="none",
                marker="o",
                mfc="none",
                label=r"$\sigma_i(W)$ measured",
            ),
        )
    ax_c.legend(handles=ax_c.get_legend_handles_labels()[0] + handles, fontsize="small")
