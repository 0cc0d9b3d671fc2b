"""Figures of ``rankflow run`` results tables: a quick look and the balance figure (its
predictions and panel labels: :mod:`.balance_panels`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .balance_panels import (
    LEGEND_BELOW,
    balance_prediction,
    dynamics_kinds,
    label_balance_panel,
    label_norms_panel,
)
from .common import (
    SYMBOLS,
    axis_label,
    draw_median,
    fmt_value,
    ok_values,
    palette,
    run_columns,
    save_figure,
    setting_title,
    sv_columns,
    value_label,
)

__all__ = ["balance_figure", "quick_plot"]


# quick_plot draws one line per combination of the swept columns up to this many lines;
# beyond, it pools the columns other than ``hue`` and says so in its title.
MAX_LINES = 24
LINESTYLES = ("-", "--", ":", "-.")


def swept_columns(df: pd.DataFrame, exclude: Sequence[str | None] = ()) -> list[str]:
    """The columns a sweep varies, in table order: config columns (dotted names, constant
    within each run) that differ between runs, seeds left out (a line's runs are its seeds
    and paths), each kept only when it tells apart runs that the earlier ones do not (a
    column derived from a swept one adds nothing)."""
    runs = run_columns(df)
    first = df.drop_duplicates(subset=runs) if runs else df  # one row per run
    keys = [c for c in exclude if c is not None and c in df.columns and c != "t"]
    keys = [c for c in keys if not runs or _constant_per_run(df, runs, c)]
    combos = len(first[keys].drop_duplicates()) if keys else 1
    cols: list[str] = []
    for c in df.columns:
        if "." not in c or c in exclude or c.rsplit(".", 1)[-1] == "seed":
            continue
        if first[c].nunique(dropna=True) < 2:
            continue
        if runs and not _constant_per_run(df, runs, c):
            continue  # varies within a run: an observable, not a setting
        n = len(first[keys + cols + [c]].drop_duplicates())
        if n > combos:
            cols.append(c)
            combos = n
    return cols


def _constant_per_run(df: pd.DataFrame, runs: list[str], col: str) -> bool:
    return bool((df.groupby(runs, sort=False)[col].nunique(dropna=False) <= 1).all())


def _sorted_unique(frame: pd.DataFrame) -> list[tuple]:
    """The distinct rows of ``frame`` as tuples, sorted where the values allow it."""
    rows = list(dict.fromkeys(map(tuple, frame.itertuples(index=False, name=None))))
    try:
        return sorted(rows)
    except TypeError:  # mixed types: keep table order
        return rows


def _symbol(col: str) -> str:
    return SYMBOLS.get(col, col)


def quick_plot(
    df: pd.DataFrame,
    x: str = "t",
    y: str = "balance_gap",
    hue: str | None = None,
    logy: bool = False,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    theory: pd.DataFrame | None = None,
    out_path: str | Path | None = None,
) -> Figure:
    """One curve of ``y`` against ``x`` per combination of the swept columns.

    The swept columns are the config columns that differ between runs
    (:func:`swept_columns`: λ, η, scales, …; seeds excluded); ``hue`` is one of them, drawn
    as colour, the others as line style. Each curve is the median over the runs of its
    combination (its seeds and paths) at each ``x``, with their interquartile band where
    more than one run contributes. With more than :data:`MAX_LINES` combinations the swept
    columns other than ``hue`` are pooled, and the title says which. Non-``ok`` rows and NaNs
    are ignored; with ``logy`` values ``≤ 0`` are masked. To plot a final-time quantity
    against a hyperparameter, filter the table first (e.g. ``df[df.t == df.t.max()]``).
    Draws into ``ax`` when given (and returns its figure), else into a new figure; writes
    it to ``out_path`` when given. ``theory`` (``x = "t"``): the fit of the table's ``y``
    (``rankflow.fit(df, column=y)``), each line's prediction drawn beside it
    (:func:`theory_lines`).
    """
    for col in (x, y) + ((hue,) if hue is not None else ()):
        if col not in df.columns:
            raise KeyError(f"quick_plot: no column {col!r} in the table")
    df = df.reset_index(drop=True)
    own = ax is None
    fig = Figure(figsize=(6.4, 4.4), layout="constrained") if own else ax.get_figure(root=True)
    ax = fig.add_subplot() if own else ax

    others = swept_columns(df, exclude=(hue, x, y))
    hue_values = _sorted_unique(df[[hue]]) if hue is not None else [()]
    other_values = _sorted_unique(df[others]) if others else [()]
    pooled: list[str] = []
    if len(hue_values) * len(other_values) > MAX_LINES:
        pooled, others, other_values = others, [], [()]
    keys = ([hue] if hue is not None else []) + others
    vals = ok_values(df, y)
    if hue is not None:
        colors = dict(zip(hue_values, palette(len(hue_values), _numeric(df, hue)), strict=True))
    else:
        colors = dict(zip(other_values, palette(len(other_values), _numeric(df, *others))))
    drawn = []
    for combo in _sorted_unique(df[keys]) if keys else [()]:
        sel = np.ones(len(df), bool)
        for col, value in zip(keys, combo, strict=True):
            sel &= (df[col] == value).to_numpy() | (df[col].isna() & pd.isna(value)).to_numpy()
        rest = combo[1:] if hue is not None else combo
        color = colors[combo[:1]] if hue is not None else colors.get(rest, "C0")
        style = LINESTYLES[other_values.index(rest) % len(LINESTYLES)] if hue is not None else "-"
        label = ", ".join(value_label(c, v) for c, v in zip(keys, combo, strict=True)) or None
        idx = df.index[sel]
        kw = dict(log=logy, color=color, ls=style, label=label)
        drawn.append((idx, draw_median(ax, df.loc[idx], x, vals.loc[idx], **kw)))
    if theory is not None:
        theory_lines(ax, df, theory, drawn)

    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(True, which="major", alpha=0.3)
    if (keys or theory is not None) and ax.lines:
        _legend(ax, axis_label(hue) if keys == [hue] else ", ".join(map(_symbol, keys)), own)
    if title is None:
        title = f"{y} vs {x}: " + _pooling_text(df, pooled)
        setting = setting_title(df, skip=tuple(keys + pooled))
        if setting:
            title += f"\n{setting}"
    ax.set_title(title, fontsize="medium")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _legend(ax: Axes, title: str, own: bool) -> None:
    """The legend: beside the axes (not over its lines) past 4 entries, the figure widened
    for it when quick_plot made the figure (``own``); else where it covers least."""
    outside = len(ax.get_legend_handles_labels()[1]) > 4
    where = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)} if outside else {"loc": "best"}
    ax.legend(title=title or None, fontsize="small", **where)
    if outside and own:
        ax.get_figure(root=True).set_size_inches(10.4, 4.4)


THEORY_GID = "theory"
FLOOR_GID = "theory_floor"  # a level, not anchored on its line: not THEORY_GID
FLOOR_LABEL = "T10 floor (E[D], theory)"


def theory_lines(
    ax: Axes, df: pd.DataFrame, table: pd.DataFrame, drawn: list[tuple[pd.Index, Line2D]]
) -> None:
    """Beside each drawn line (its rows ``idx`` of ``df``), its runs' prediction (from
    ``table``, ``rankflow.fit``'s rows of those runs): dashed, in the line's colour, over the
    median fitted window, anchored at the line's value at the window's start; a bracket
    as a thin band between its ends (the dashed line at its low end), a tick at the
    window's end; an ``sgd`` line with a predicted T10 floor, that level over the floor
    phase (:func:`_draw_floor`). A line whose runs
    have no prediction (or not one prediction) says so in its legend entry."""
    laws, floors = set(), False
    for idx, line in ((i, ln) for i, ln in drawn if ln is not None):
        runs = df.loc[idx, "run_id"].unique() if "run_id" in df.columns else [0]
        rows = table[table["run_id"].isin(runs)] if "run_id" in table.columns else table
        lows = rows["predicted_low"].to_numpy(float)
        if not (len(rows) and np.isfinite(lows).all() and np.ptp(lows) <= 1e-12 * abs(lows[0])):
            why = "no prediction" if len(rows) and not np.isfinite(lows).any() else "mixed laws"
            kinds = ", ".join(sorted(map(str, rows["dynamics.kind"].unique())))
            label = line.get_label()
            named = label if kinds in label else f"{label}, {kinds}"
            line.set_label(f"{kinds}: {why}" if label.startswith("_") else f"{named}: {why}")
            continue
        laws.add(str(rows["source"].iloc[0]))
        _draw_law(ax, line, rows, df.loc[idx])
        floors |= _draw_floor(ax, line, rows)
    if laws:
        text = f"theory ({', '.join(sorted(laws))}) over the fitted window (|: its end)"
        ax.plot([], [], color="0.3", ls="--", lw=3.0, alpha=0.55, label=text)
    if floors:
        ax.plot([], [], color="0.3", ls="--", lw=1.2, label=FLOOR_LABEL)


def _draw_floor(ax: Axes, line: Line2D, rows: pd.DataFrame) -> bool:
    """An ``sgd`` line's predicted T10 floor (``floor_predicted``, ‖mean D*‖_F of
    :func:`rankflow.fitting.minibatch_floor`; the median over its runs): level, dashed,
    thin, in the line's colour, over the floor phase (from ``floor_t_min`` to the line's
    last x). Whether it drew one."""
    if "floor_predicted" not in rows.columns or set(rows["series"]) != {"balance_gap"}:
        return False  # a level of ‖D‖_F: drawn only beside the balance gap
    level = rows["floor_predicted"].to_numpy(float)
    start = rows["floor_t_min"].to_numpy(float)
    if not (np.isfinite(level).all() and np.isfinite(start).all()):
        return False
    xs = np.asarray(line.get_xdata(), float)
    x0, x1 = float(np.median(start)), float(np.nanmax(xs))
    if not x0 < x1:
        return False
    y = float(np.median(level))
    ax.plot([x0, x1], [y, y], ls="--", lw=1.2, color=line.get_color(), gid=FLOOR_GID)
    return True


def _draw_law(ax: Axes, line: Line2D, rows: pd.DataFrame, runs: pd.DataFrame) -> None:
    """One line's prediction over its runs' median window (in the fit's clock), from the
    line's value there."""
    xs, ys = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    clock = xs  # the fit's clock: steps, or T11's lr_clock/η under a schedule
    if "lr_clock" in runs.columns and runs["lr_clock"].notna().all():
        eta = float(rows["dynamics.eta"].iloc[0])
        clock = runs.groupby("t")["lr_clock"].median().reindex(xs).to_numpy() / eta
    t0, t1 = float(rows["t_min"].median()), float(rows["t_max"].median())
    sel = (clock >= t0) & (clock <= t1) & np.isfinite(ys)
    if sel.sum() < 2:
        return
    dt, anchor = clock[sel] - clock[sel][0], ys[sel][0]
    low, high = float(rows["predicted_low"].iloc[0]), float(rows["predicted_high"].iloc[0])
    color = line.get_color()
    # wide, translucent and under the measured line: seen where the two agree
    z = line.get_zorder() - 0.1
    law = anchor * np.exp(-low * dt)
    ax.plot(xs[sel], law, ls="--", lw=3.0, alpha=0.55, color=color, zorder=z, gid=THEORY_GID)
    ax.plot(xs[sel][-1], law[-1], marker="|", ms=12, mew=2, color=color, ls="none")
    if high > low:
        band = (anchor * np.exp(-high * dt), anchor * np.exp(-low * dt))
        ax.fill_between(xs[sel], *band, color=color, alpha=0.15, linewidth=0, zorder=z)


def _numeric(df: pd.DataFrame, *cols: str) -> bool:
    return len(cols) == 1 and pd.api.types.is_numeric_dtype(df[cols[0]])


def _pooling_text(df: pd.DataFrame, pooled: list[str]) -> str:
    """What each curve's median runs over: its seeds and paths, and the pooled columns."""
    if not pooled:
        return "median over each line's runs (seeds, paths; band: their interquartile range)"
    what = "; ".join(
        f"{_symbol(c)} ∈ {{{', '.join(fmt_value(v) for (v,) in _sorted_unique(df[[c]])[:6])}"
        + (", …" if df[c].nunique() > 6 else "")
        + "}"
        for c in pooled
    )
    return (
        f"median over runs POOLED across {what} (too many combinations to draw; band: "
        "interquartile range over the pooled runs)"
    )


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
          axis, with the prediction of the table's dynamics dashed grey per λ, from
          ``balance_gap(t₀)`` (t₀ the first saved time; η from ``dynamics.eta``, per run):
          for GD (``dynamics.kind = gd``) T5's leading term ``(1 − ηλ)^{2(t − t₀)}``, for
          other dynamics T4's ``exp(−2λ∫_{t₀}^t η)`` (∫η = η(t − t₀)), gradient flow's law
          (for the other dynamics a reference); under a learning-rate schedule (the
          table's ``lr_clock``) ``exp(−2λ·(clock − clock₀))``, exact for gradient flow
          and T5's leading term to O(η²λ²) per step for GD. The panel's title names the
          dynamics and the result drawn;
      (c) each run's final singular values ``sv_i`` (at its last t, runs not ``ok``
          there left out) against λ, and — when ``target_sv`` (the singular values
          ``s_i`` of the target, in any order) is given — the T3 soft-thresholding
          prediction ``max(s_i − λ, 0)`` dashed, in the colour of ``sv_i`` (both
          largest first). T3's prediction is the minimiser for
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
    kinds = dynamics_kinds(df)
    t4 = balance_prediction(df, gap)
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

    label_norms_panel(ax_a, lam_handles)
    label_balance_panel(ax_b, lam_handles, df, gap, kinds)
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


def descending(values: Sequence[float]) -> np.ndarray:
    """Singular values in the order of the table's ``sv_1, sv_2, …``: largest first (a
    config may list the target's in any order, e.g. ascending)."""
    return np.sort(np.asarray(values, dtype=float))[::-1]


def _t3_deviation(final: pd.DataFrame, svs: list[str], target_sv) -> str:
    """ "; largest |σ_i − max(s_i − λ, 0)| = …": how far the final spectra drawn are from
    T3's soft-thresholding (empty without a target or ok runs)."""
    if target_sv is None or not len(final):
        return ""
    s = descending(target_sv)[: len(svs)]
    lam = final["dynamics.lam"].to_numpy(float)[:, None]
    measured = np.stack([ok_values(final, c).to_numpy(float) for c in svs[: len(s)]], axis=1)
    dev = np.abs(measured - np.maximum(s[None, :] - lam, 0.0))
    if not np.isfinite(dev).any():
        return ""
    return f"\nlargest |σ_i − max(s_i − λ, 0)| = {np.nanmax(dev):.2g}"


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
        s = descending(target_sv)  # σ_i: the i-th largest, as the columns sv_i
        grid = np.linspace(0.0, max(float(lams.max()) if len(lams) else 0.0, 1e-12) * 1.05, 200)
        for i, si in enumerate(s):
            ax_c.plot(grid, np.maximum(si - grid, 0.0), color=sv_colors[i], ls="--", lw=1.2)
        handles.append(
            Line2D([], [], color="k", ls="--", label=r"T3: $\max(s_i-\lambda,\,0)$ (theory)")
        )
    ax_c.set(xlabel=axis_label("dynamics.lam"), ylabel=r"final singular values $\sigma_i(W)$")
    title_c = "(c) final singular values against λ (T3)" + _t3_deviation(final, svs, target_sv)
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
    ax_c.legend(handles=ax_c.get_legend_handles_labels()[0] + handles, **LEGEND_BELOW)
