"""Figures from results tables (the DataFrames returned by ``rankflow.run``).

Plots read tables only: nothing here imports jax or the simulation code. Figures are
``matplotlib.figure.Figure`` objects built without pyplot, so importing this module
neither selects a backend nor disturbs an interactive session; PNGs are rendered by
the Agg canvas that ``Figure.savefig`` picks for raster formats.

Conventions shared by every figure:
  - a *run* is one trajectory, i.e. one ``(run_id, path)`` pair;
  - curves are the median over runs at each saved time, with an interquartile band
    when more than one run contributes;
  - rows whose ``status`` is not ``"ok"`` count as missing (NaN), and so do values
    ``≤ 0`` on a log axis;
  - time is in optimizer steps (THEORY.md, "Setting and conventions").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

__all__ = ["balance_figure", "quick_plot", "save_figure"]

DPI = 150
RUN_KEYS = ("run_id", "path")

# Axis / legend text for the columns of THEORY.md's observables table.
LABELS = {
    "t": "time t (optimizer steps)",
    "loss": "data loss L(W)",
    "l2_loss": "L2-regularised loss $L_{L2}(A,B)$",
    "star_loss": r"nuclear-norm loss $L_*(W)$",
    "l2_penalty": r"L2 penalty $\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)$",
    "nuclear_norm": r"nuclear norm $\|AB^\top\|_*$",
    "frob_minus_nuc": r"$\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)-\|AB^\top\|_*$",
    "balance_gap": r"balance gap $\|A^\top A-B^\top B\|_F$",
    "balance_trace": r"$\mathrm{tr}(A^\top A-B^\top B)$",
    "balance_nuclear": r"$\|A^\top A-B^\top B\|_*$",
    "effective_rank": "effective rank (Roy & Vetterli)",
    "stable_rank": r"stable rank $\|W\|_F^2/\|W\|_2^2$",
    "rank": "numerical rank of W",
    "dynamics.lam": r"weight decay $\lambda$",
    "dynamics.eta": r"learning rate $\eta$",
    "dynamics.sigma": r"gradient noise $\sigma$",
    "dynamics.mu": r"momentum rate $\mu$",
    "init.scale": "init scale",
    "init.imbalance": "init imbalance",
    "problem.noise": "label noise",
}
# Short symbols for legend entries such as "λ = 0.1".
SYMBOLS = {
    "dynamics.lam": r"$\lambda$",
    "dynamics.eta": r"$\eta$",
    "dynamics.sigma": r"$\sigma$",
    "dynamics.mu": r"$\mu$",
}
# Columns that describe a sweep's fixed setting, shown in figure titles when constant.
SETTING_KEYS = (
    "problem.kind",
    "dynamics.kind",
    "solver.method",
    "init.kind",
    "dynamics.eta",
    "dynamics.sigma",
    "init.scale",
)


def _label(col: str) -> str:
    if col in LABELS:
        return LABELS[col]
    if col.startswith("sv_"):
        return rf"singular value $\sigma_{{{col[3:]}}}(W)$"
    return col


def _fmt(value) -> str:
    if isinstance(value, float | np.floating):
        return f"{value:g}"
    return str(value)


def _value_label(col: str, value) -> str:
    return f"{SYMBOLS.get(col, col)} = {_fmt(value)}"


def _colors(n: int, numeric: bool) -> list:
    cmap: Colormap = mpl.colormaps["viridis" if numeric else "tab10"]
    if numeric:
        return [cmap(v) for v in np.linspace(0.0, 0.85, max(n, 1))][:n]
    return [cmap(i % cmap.N) for i in range(n)]


def _sv_columns(df: pd.DataFrame) -> list[str]:
    cols = [c for c in df.columns if c.startswith("sv_") and c[3:].isdigit()]
    return sorted(cols, key=lambda c: int(c[3:]))


def _runs(df: pd.DataFrame) -> list[str]:
    return [k for k in RUN_KEYS if k in df.columns]


def _values(df: pd.DataFrame, y: str) -> pd.Series:
    """``df[y]`` as floats, NaN where the run was not ``ok`` (diverged, max_steps)."""
    v = pd.to_numeric(df[y], errors="coerce").astype(float)
    if "status" in df.columns:
        v = v.where(df["status"] == "ok")
    return v


def _median_iqr(df: pd.DataFrame, x: str, y: pd.Series) -> pd.DataFrame:
    """Median, quartiles and number of finite values of ``y`` at each ``x`` (sorted)."""
    frame = pd.DataFrame({"x": df[x].to_numpy(), "y": y.to_numpy()})
    frame = frame[np.isfinite(frame["y"])]
    g = frame.groupby("x", sort=True)["y"]
    return pd.DataFrame(
        {
            "median": g.median(),
            "q25": g.quantile(0.25),
            "q75": g.quantile(0.75),
            "count": g.count(),
        }
    )


def _mask_log(v, log: bool) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    return np.where(a > 0, a, np.nan) if log else a


def _draw_median(
    ax: Axes,
    df: pd.DataFrame,
    x: str,
    y: pd.Series,
    *,
    log: bool,
    band: bool = True,
    **line_kw,
) -> Line2D | None:
    """The median of ``y`` over runs at each ``x``, plus an IQR band when some ``x``
    has more than one run; ``None`` (nothing drawn) when no value is finite."""
    stats = _median_iqr(df, x, y)
    med = _mask_log(stats["median"], log)
    if not np.isfinite(med).any():
        return None
    xs = stats.index.to_numpy()
    (line,) = ax.plot(xs, med, **line_kw)
    if band and (stats["count"] > 1).any():
        ax.fill_between(
            xs,
            _mask_log(stats["q25"], log),
            _mask_log(stats["q75"], log),
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
    return line


def _setting(df: pd.DataFrame, skip: Sequence[str] = ()) -> str:
    """The constant settings of a table, e.g. ``problem.kind=diagonal, η=0.1``."""
    parts = []
    for col in SETTING_KEYS:
        if col in skip or col not in df.columns:
            continue
        vals = df[col].dropna().unique()
        if len(vals) == 1:
            parts.append(f"{SYMBOLS.get(col, col)}={_fmt(vals[0])}")
    runs = _runs(df)
    if runs:
        parts.append(f"{len(df[runs].drop_duplicates())} runs")
        if "status" in df.columns:
            stopped = df.loc[df["status"] != "ok", runs].drop_duplicates()
            if len(stopped):  # medians after their stop run over fewer runs
                parts.append(f"{len(stopped)} not ok (diverged/max_steps) from some t on")
    return ", ".join(parts)


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (parent folders created) at 150 dpi.

    The format follows the suffix (PNG when there is none or it is ``.png``).
    Returns the path written.
    """
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    return path


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

    vals = _values(df, y)
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
    colors = _colors(len(groups), numeric) if hue is not None else ["C0"]
    for (value, idx), color in zip(groups, colors, strict=True):
        label = None if hue is None else _value_label(hue, value)
        _draw_median(ax, df.loc[idx], x, vals.loc[idx], log=logy, color=color, label=label)

    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.grid(True, which="major", alpha=0.3)
    if hue is not None and ax.lines:
        ax.legend(title=_label(hue), fontsize="small")
    if title is None:
        title = f"{y} vs {x}: median over runs (band: interquartile range)"
        setting = _setting(df, skip=(hue,) if hue else ())
        if setting:
            title += f"\n{setting}"
    ax.set_title(title, fontsize="medium")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _final_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Each run's row at its last saved time, dropping runs not ``ok`` there; also
    returns how many runs were dropped."""
    runs = _runs(df)
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
          axis, with the T4 prediction ``balance_gap(t₀)·exp(−2ηλ(t − t₀))`` dashed
          grey per λ (t₀ the first saved time; η from ``dynamics.eta``, per run);
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
    svs = _sv_columns(df)
    lams = np.sort(df["dynamics.lam"].dropna().unique())
    colors = _colors(len(lams), numeric=True)

    fig = Figure(figsize=(16, 4.8), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    tlab = _label("t")
    lam_handles = [
        Line2D([], [], color=c, lw=2, label=_value_label("dynamics.lam", lam))
        for lam, c in zip(lams, colors, strict=True)
    ]

    # Per-run T4 prediction gap(t₀)·e^{−2ηλ(t−t₀)}, kept only where the measurement
    # exists so that the median runs over the same runs as the measured curve.
    gap = _values(df, "balance_gap")
    runs = _runs(df)
    rid = df.groupby(runs, sort=False).ngroup() if runs else pd.Series(0, index=df.index)
    finite = pd.DataFrame({"rid": rid, "t": df["t"], "gap": gap})[np.isfinite(gap)]
    start = finite.sort_values("t").groupby("rid").first()  # each run's first finite gap
    t0, gap0 = rid.map(start["t"]), rid.map(start["gap"])
    rate = 2.0 * df["dynamics.eta"].astype(float) * df["dynamics.lam"].astype(float)
    t4 = (gap0 * np.exp(-rate * (df["t"] - t0))).where(np.isfinite(gap))

    for lam, color in zip(lams, colors, strict=True):
        sel = df["dynamics.lam"] == lam
        d = df[sel]
        _draw_median(ax_a, d, "t", _values(d, "nuclear_norm"), log=False, color=color)
        _draw_median(ax_a, d, "t", _values(d, "l2_penalty"), log=False, color=color, ls="--")
        _draw_median(ax_b, d, "t", gap[sel], log=True, color=color)
        _draw_median(ax_b, d, "t", _values(d, "frob_minus_nuc"), log=True, color=color, ls=":")
        _draw_median(
            ax_b, d, "t", t4[sel], log=True, band=False, color="0.25", ls="--", lw=1.2, zorder=3
        )

    ax_a.set(xlabel=tlab, ylabel="norm of the factors")
    ax_a.set_title("(a) L2 penalty meets the nuclear norm for λ > 0 (T1)", fontsize="medium")
    ax_a.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=_label("nuclear_norm")),
            Line2D([], [], color="k", ls="--", label=_label("l2_penalty")),
        ],
        fontsize="small",
    )

    ax_b.set_yscale("log")
    # Theory lines keep decaying below what the measurement can resolve (rounding floor):
    # keep the axis on the measured range.
    measured = np.concatenate([gap.to_numpy(), _values(df, "frob_minus_nuc").to_numpy()])
    measured = measured[np.isfinite(measured) & (measured > 0)]
    if measured.size:
        ax_b.set_ylim(bottom=measured.min() / 10, top=measured.max() * 3)
    ax_b.set(xlabel=tlab, ylabel="imbalance (log scale)")
    ax_b.set_title(r"(b) balancing at rate $2\eta\lambda$ (T4)", fontsize="medium")
    ax_b.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=_label("balance_gap")),
            Line2D([], [], color="k", ls=":", label=r"$\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)-\|W\|_*$"),
            Line2D(
                [], [], color="0.25", ls="--", label=r"T4: gap$(0)\,e^{-2\eta\lambda t}$ (theory)"
            ),
        ],
        fontsize="small",
    )

    final, dropped = _final_rows(df)
    k = max(len(svs), len(target_sv) if target_sv is not None else 0)
    sv_colors = _colors(k, numeric=False)
    per_index = k <= 10  # one legend entry per σ_i only while it stays readable
    for i, col in enumerate(svs):
        ax_c.plot(
            final["dynamics.lam"].to_numpy(dtype=float),
            _values(final, col).to_numpy(),
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
    ax_c.set(xlabel=_label("dynamics.lam"), ylabel=r"final singular values $\sigma_i(W)$")
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

    for ax in (ax_a, ax_b, ax_c):
        ax.grid(True, alpha=0.3)
    fig.suptitle(
        "Weight decay on W = ABᵀ: balancing and rank reduction "
        "(median over runs, band: interquartile range)\n" + _setting(df, skip=("dynamics.lam",))
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig
