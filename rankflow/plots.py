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

__all__ = [
    "balance_figure",
    "compare_contraction_figure",
    "compare_order_figure",
    "compare_sde_figure",
    "compare_trajectory_figure",
    "quick_plot",
    "save_figure",
]

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
    "balance_gap_rel": r"$\|A^\top A-B^\top B\|_F/\frac{1}{2}(\|A^\top A\|_F+\|B^\top B\|_F)$",
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


# --- rankflow compare: an optimizer next to its flow (tables of rankflow.compare) ---------

_DYNAMICS_NAMES = {
    "gd": "GD",
    "sgd_gaussian": "SGD, Gaussian noise",
    "momentum": "momentum (decoupled decay)",
    "momentum_coupled": "momentum (L2 in the loss)",
    "gradient_flow": "gradient flow",
    "stochastic_flow": "stochastic gradient flow",
    "momentum_flow": "momentum flow",
    "momentum_flow_coupled": "momentum flow (coupled)",
}


def _dyn_name(kind: str) -> str:
    return _DYNAMICS_NAMES.get(kind, kind)


def _compare_setting(df: pd.DataFrame, eta: bool = True) -> str:
    """``GD vs gradient flow (tsit5, adaptive) · sensing 8×6, r = 4 · η = 0.1, λ = 0.05``."""
    s = df.iloc[0]
    solve = f"{s['solver.method']}, " + (
        "adaptive" if s["solver.adaptive"] else f"fixed dt = {s['solver.dt']:g}"
    )
    pair = f"{_dyn_name(s['dynamics.kind'])} vs {_dyn_name(s['flow.kind'])} ({solve})"
    hyper = ([f"η = {s['dynamics.eta']:g}"] if eta else []) + [f"λ = {s['dynamics.lam']:g}"]
    if s["dynamics.kind"] == "sgd_gaussian":
        hyper.append(f"σ = {s['dynamics.sigma']:g}")
    if "momentum" in s["dynamics.kind"] and eta:
        hyper.append(f"μ = {s['dynamics.mu']:g}")
    problem = f"{s['problem.kind']} {s['problem.m']}×{s['problem.n']}, r = {s['model.r']}"
    precision = "float64" if s["x64"] else "float32"
    return f"{pair}\n{problem}, {', '.join(hyper)}, {precision}"


def compare_trajectory_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``trajectory`` table of ``rankflow.compare``, two panels against t:

    (a) ``distance`` ‖θ_k − θ(t=k)‖_F and ``relative_distance`` (log scale); for
        sgd_gaussian these are distances of the means over paths, drawn with the
        Monte Carlo floor ``mc_floor`` (dashed) they would have if the means agreed;
    (b) the balance gap ‖AᵀA − BᵀB‖_F of optimizer and flow (log scale), and for GD
        the T4 law ``gap(0)·e^{−2ηλt}`` that the gradient flow obeys exactly (dashed).
    """
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    t = df["t"].to_numpy(float)
    stochastic = s["measure"] != "paths"
    opt, flow = _dyn_name(s["dynamics.kind"]), _dyn_name(s["flow.kind"])
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)

    of_means = " of the means over paths" if stochastic else ""
    ax_a.plot(
        t,
        _mask_log(df["distance"], True),
        "o-",
        ms=3,
        color="C0",
        label=rf"$\|\theta_k-\theta(t{{=}}k)\|_F${of_means}",
    )
    ax_a.plot(
        t,
        _mask_log(df["relative_distance"], True),
        "s:",
        ms=3,
        color="C2",
        label=r"relative: distance / $\|\theta(t{=}k)\|_F$",
    )
    if stochastic:
        ax_a.plot(
            t,
            _mask_log(df["mc_floor"], True),
            "--",
            color="0.3",
            label=r"Monte Carlo floor $\sqrt{\sum \mathrm{Var}/K}$ (equal means)",
        )
    ax_a.set_yscale("log")
    ax_a.set(xlabel=_label("t"), ylabel=r"distance, $\theta=(A,B)$ (log scale)")
    measured = np.concatenate([_mask_log(df[c], True) for c in ("distance", "relative_distance")])
    measured = measured[np.isfinite(measured)]
    if measured.size:
        ax_a.set_ylim(bottom=measured.min() / 3, top=measured.max() * 3)
    which = f"means of {opt} and {flow}" if stochastic else f"{opt} step k vs {flow} at t = k (T8)"
    ax_a.set_title(f"(a) {which}", fontsize="medium")
    ax_a.legend(fontsize="small")

    mean = " (mean over paths)" if stochastic else ""
    gap_o = _mask_log(df["optimizer.balance_gap"], True)
    gap_f = _mask_log(df["flow.balance_gap"], True)
    ax_b.plot(t, gap_o, "o", ms=4, mfc="none", color="C0", label=f"{opt}{mean}")
    ax_b.plot(t, gap_f, "-", color="C1", label=f"{flow}{mean}")
    if s["dynamics.kind"] == "gd" and np.isfinite(gap_f[0]):
        rate = 2.0 * s["dynamics.eta"] * s["dynamics.lam"]
        ax_b.plot(
            t,
            gap_f[0] * np.exp(-rate * (t - t[0])),
            "--",
            color="k",
            lw=1.2,
            label=r"T4: gap$(0)\,e^{-2\eta\lambda t}$ (theory, gradient flow)",
        )
    ax_b.set_yscale("log")
    measured = np.concatenate([gap_o, gap_f])
    measured = measured[np.isfinite(measured)]
    if measured.size:
        ax_b.set_ylim(bottom=measured.min() / 10, top=measured.max() * 3)
    ax_b.set(xlabel=_label("t"), ylabel=_label("balance_gap") + " (log scale)")
    ax_b.set_title("(b) balancing of the factors", fontsize="medium")
    ax_b.legend(fontsize="small")
    for ax in (ax_a, ax_b):
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Discrete optimizer against its flow: " + _compare_setting(df))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def compare_contraction_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``contraction`` table of ``rankflow.compare`` (GD), against the step k:

    (a) the measured ratio ‖D_{k+1}‖_F/‖D_k‖_F (markers) beside the exact T5 one-step
        prediction and the constants (1 − ηλ)² and e^{−2ηλ} (dashed);
    (b) the absolute deviations of the measured ratio from each of the three (log
        scale): T5 is exact to rounding, the constants miss the O(η²) term.
    """
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    k = df["t"].to_numpy(float)
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    gd_c, gf_c = float(s["gd_contraction"]), float(s["gf_contraction"])
    ax_a.plot(k, df["ratio"], "o", ms=5, mfc="none", color="C0", label="measured")
    ax_a.plot(
        k,
        df["t5_ratio"],
        "--",
        color="C3",
        lw=1.5,
        label=r"T5 one step: $\|(1-\eta\lambda)^2D_k+\eta^2(B^\top G^\top GB"
        r"-A^\top GG^\top A)\|_F/\|D_k\|_F$",
    )
    ax_a.axhline(
        gd_c,
        ls="--",
        color="0.35",
        lw=1.2,
        label=rf"$(1-\eta\lambda)^2$ = {gd_c:.6f} (T5, leading term)",
    )
    ax_a.axhline(
        gf_c,
        ls="--",
        color="C2",
        lw=1.2,
        label=rf"$e^{{-2\eta\lambda}}$ = {gf_c:.6f} (T4, gradient flow)",
    )
    ax_a.set(
        xlabel="step k (optimizer steps)",
        ylabel=r"per-step ratio $\|D_{k+1}\|_F/\|D_k\|_F$, $D=A^\top A-B^\top B$",
    )
    ax_a.set_title("(a) per-step contraction of the balance gap under GD", fontsize="medium")
    ax_a.legend(fontsize="small")

    for col, color, text in (
        ("t5_deviation", "C3", "T5 one-step prediction"),
        ("gd_deviation", "0.35", r"$(1-\eta\lambda)^2$"),
        ("gf_deviation", "C2", r"$e^{-2\eta\lambda}$"),
    ):
        v = df[col].to_numpy(float)
        zeros = int(np.sum(v == 0))
        label = f"|measured − {text}|" + (f" ({zeros} exact zeros not drawn)" if zeros else "")
        ax_b.plot(k, _mask_log(v, True), "o-", ms=3, color=color, label=label)
    ax_b.set_yscale("log")
    ax_b.set(
        xlabel="step k (optimizer steps)", ylabel="absolute deviation of the ratio (log scale)"
    )
    ax_b.set_title("(b) T5 is exact; the constants miss an O(η²) term", fontsize="medium")
    ax_b.legend(fontsize="small")
    for ax in (ax_a, ax_b):
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Balance gap of GD, step by step (THEORY.md T5): " + _compare_setting(df))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def compare_order_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``order`` table of ``rankflow.compare``: the distance between optimizer and
    flow at a fixed horizon ηt against η, log–log, with the fitted order (column
    ``order`` ± ``order_stderr``) and a first-order reference ∝ η (dashed, T8)."""
    df = df.sort_values("dynamics.eta").reset_index(drop=True)
    s = df.iloc[0]
    eta = df["dynamics.eta"].to_numpy(float)
    dist = _mask_log(df["distance"], True)
    fig = Figure(figsize=(6.8, 5.2), layout="constrained")
    ax = fig.add_subplot()
    p, se = float(s["order"]), float(s["order_stderr"])
    ax.plot(
        eta, dist, "o-", color="C0", ms=6, label=f"measured (fitted order p = {p:.3f} ± {se:.3f})"
    )
    ok = np.isfinite(dist)
    if ok.any():
        i = int(np.flatnonzero(ok)[0])
        ax.plot(
            eta,
            dist[i] * eta / eta[i],
            "--",
            color="k",
            lw=1.2,
            label=r"T8: first order, $\propto\eta$ (theory)",
        )
    for e, d, k in zip(eta, dist, df["steps"]):
        if np.isfinite(d):
            ax.annotate(
                f"{k} steps",
                (e, d),
                textcoords="offset points",
                xytext=(8, -12),
                ha="left",
                fontsize="small",
            )
    ax.margins(x=0.15)  # room for the labels right of the points
    ax.set_xscale("log")
    ax.set_yscale("log")
    mu = " and μ" if "momentum" in s["dynamics.kind"] else ""
    ax.set(
        xlabel=r"learning rate $\eta$ (log scale)",
        ylabel=r"$\|\theta_K-\theta(t{=}K)\|_F$ at the horizon K (log scale)",
    )
    ax.set_title(
        f"Order in η at a fixed horizon ηt = {s['horizon']:g}"
        + (f" (η{mu} halved together)" if mu else ""),
        fontsize="medium",
    )
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(_compare_setting(df, eta=False), fontsize="medium")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def compare_sde_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``sde`` table of ``rankflow.compare`` (sgd_gaussian vs the stochastic flow),
    three panels against t:

      (a) the mean of tr(AᵀA − BᵀB) over paths for each, with its 10–90% band, and the
          T6 closed form of E[tr D(t)] (dashed);
      (b) the spread over paths: std of tr D;
      (c) (mean − T6)/SE, SE the Monte Carlo standard error, with ±2 and ±4 (dashed).
    """
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    fig = Figure(figsize=(17, 5.8), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    for role, color, marker in (("optimizer", "C0", "o"), ("flow", "C1", "s")):
        part = df[df["role"] == role]
        if not len(part):
            continue
        kind = s["dynamics.kind"] if role == "optimizer" else s["flow.kind"]
        name = f"{_dyn_name(kind)} ({int(part['paths'].max())} paths)"
        t = part["t"].to_numpy(float)
        ax_a.plot(t, part["mean"], "-", marker=marker, ms=3, color=color, label=f"{name}: mean")
        ax_a.fill_between(
            t,
            part["q10"],
            part["q90"],
            color=color,
            alpha=0.15,
            linewidth=0,
            label=f"{name}: 10–90% of paths",
        )
        ax_b.plot(t, part["std"], "-", marker=marker, ms=3, color=color, label=name)
        ax_c.plot(t, part["z"], "-", marker=marker, ms=3, color=color, label=name)
    theory_part = df[df["role"] == df["role"].iloc[0]]
    ax_a.plot(
        theory_part["t"],
        theory_part["theory"],
        "--",
        color="k",
        lw=1.5,
        label=r"T6: $E[\mathrm{tr}\,D(t)]$ (theory, stochastic flow)",
    )
    ax_a.set(xlabel=_label("t"), ylabel=_label("balance_trace"))
    ax_a.set_title("(a) mean over paths against T6", fontsize="medium")
    ax_a.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax_b.set(xlabel=_label("t"), ylabel=r"std over paths of $\mathrm{tr}(A^\top A-B^\top B)$")
    ax_b.set_title("(b) spread over paths", fontsize="medium")
    ax_b.legend(fontsize="small")
    for level, ls in ((2, ":"), (4, "--")):
        for sign in (1, -1):
            ax_c.axhline(
                sign * level, color="0.4", ls=ls, lw=1, label=f"±{level} SE" if sign > 0 else None
            )
    ax_c.axhline(0, color="k", lw=0.8)
    ax_c.set(xlabel=_label("t"), ylabel="(mean − T6) / Monte Carlo SE")
    ax_c.set_title("(c) deviation from T6 in standard errors", fontsize="medium")
    ax_c.legend(fontsize="small")
    for ax in (ax_a, ax_b, ax_c):
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle("Stochastic balancing against T6: " + _compare_setting(df))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


# --- rankflow inspect: balance of pretrained attention (tables of rankflow.inspect) ------

__all__ += ["inspect_layers_figure", "inspect_scatter_figure"]

_PAIR_TITLES = {"qk": "key–query", "vo": "value–output"}
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
                ax.plot(
                    null["gram_a"],
                    null["gram_b"],
                    ls="none",
                    marker=".",
                    ms=3,
                    color="0.6",
                    alpha=0.5,
                    label=f"null: $B^\\top B$ of {kind} {partner}",
                    zorder=1,
                )
            off, diag = real[~real["diagonal"]], real[real["diagonal"]]
            ax.plot(
                off["gram_a"],
                off["gram_b"],
                ls="none",
                marker=".",
                ms=3,
                color="C0",
                alpha=0.7,
                label="off-diagonal entries",
                zorder=2,
            )
            ax.plot(
                diag["gram_a"],
                diag["gram_b"],
                ls="none",
                marker="o",
                ms=4,
                mfc="none",
                color="C3",
                label="diagonal entries",
                zorder=3,
            )
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
            if heads is not None:
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
            ax.legend(fontsize="x-small", loc="lower right")
            ax.grid(True, alpha=0.3)
    head = "Gram entries of attention factors (balanced: on y = x)"
    fig.suptitle(head + (f"\n{title}" if title else ""))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


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
                ax.plot(
                    x, _mask_log(raw, log), ls="none", marker=".", ms=3, alpha=0.45, color=color
                )
                # Medians of the raw values: masking first would drop rounding-level ones.
                med = pd.Series(raw).groupby(d["layer"].to_numpy()).median().reindex(layers)
                ax.plot(
                    layers + shift,
                    _mask_log(med.to_numpy(), log),
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
    fig.suptitle(head + (f"\n{title}" if title else ""))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


# --- rankflow attention: per-head figures (tables of rankflow.attention) ------------------

# Each pair's product, after its name in _PAIR_TITLES.
_PAIR_PRODUCTS = {"qk": r"$W_Q^h W_K^{h\top}$", "vo": r"$W_V^h W_O^h$"}
_ATTENTION_KINDS = {
    "sgd": "SGD",
    "momentum": "momentum",
    "adamw": "AdamW",
    "gradient_flow": "gradient flow",
}
# The weight-decay variants of the ablation, by whether λ_qk, λ_vo are > 0.
_VARIANTS = {
    (True, True): "decay on all",
    (False, False): "off attention (qk and vo)",
    (False, True): "off key–query only",
    (True, False): "off value–output only",
}


def _head_labels(df: pd.DataFrame) -> list[tuple[int, int]]:
    return sorted({(int(l), int(h)) for l, h in zip(df["layer"], df["head"], strict=True)})


def _last_step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows at each run's last saved step, ``ok`` only."""
    last = df.groupby("run_id")["t"].transform("max")
    out = df[df["t"] == last]
    return out[out["status"] == "ok"] if "status" in out.columns else out


def attention_rank_figure(heads: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """Per-head rank of ``W_Q^h W_K^hᵀ`` and ``W_V^h W_O^h`` against the pair's λ, from
    the ``heads`` table of ``rankflow.attention`` at each run's last step.

    Two columns (key–query, value–output), two rows: the numerical ``rank`` (count of
    singular values above ``train.rank_tol``·σ₁) and the ``effective_rank``. One marker
    per head and run (colour: layer; spread sideways by head), the mean over heads and
    runs as a line. λ is the pair's own ``train.lam_qk`` / ``train.lam_vo``, on a
    categorical axis (0 included).
    """
    df = _last_step_rows(heads.reset_index(drop=True))
    layers = sorted(df["layer"].unique())
    H = int(df["head"].max()) + 1
    colors = _colors(len(layers), numeric=False)
    fig = Figure(figsize=(12, 8), layout="constrained")
    axes = fig.subplots(2, 2, sharex="col")
    for j, pair in enumerate(("qk", "vo")):
        d = df[df["pair"] == pair]
        lam_col = f"train.lam_{pair}"
        lams = np.sort(d[lam_col].unique())
        pos = {lam: i for i, lam in enumerate(lams)}
        for i, col in enumerate(("rank", "effective_rank")):
            ax = axes[i, j]
            for li, layer in enumerate(layers):
                dl = d[d["layer"] == layer]
                x = dl[lam_col].map(pos).to_numpy(float)
                x = x + 0.5 * ((dl["head"].to_numpy(float) + 0.5) / H - 0.5) * 0.6
                x = x + 0.06 * (li - (len(layers) - 1) / 2)
                ax.plot(
                    x,
                    dl[col].to_numpy(float),
                    "o",
                    ms=4,
                    alpha=0.6,
                    color=colors[li],
                    label=f"layer {layer} (one marker per head and run)",
                )
            mean = d.groupby(lam_col)[col].mean()
            ax.plot(
                [pos[lam] for lam in mean.index],
                mean.to_numpy(),
                "-",
                color="k",
                lw=1.5,
                label="mean over heads and runs",
            )
            ax.set_xticks(range(len(lams)), [f"{lam:g}" for lam in lams])
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            if i == 1:
                ax.set_xlabel(rf"weight decay $\lambda_{{{pair}}}$ of the pair")
        tol = d["train.rank_tol"].iloc[0] if "train.rank_tol" in d.columns else None
        rank_label = "numerical rank" + (rf" ($\sigma_i > {tol:g}\,\sigma_1$)" if tol else "")
        axes[0, j].set_ylabel(rank_label)
        axes[1, j].set_ylabel("effective rank (Roy & Vetterli)")
        axes[0, j].set_title(
            f"({'ab'[j]}) {_PAIR_TITLES[pair]} {_PAIR_PRODUCTS[pair]} of each head",
            fontsize="medium",
        )
    axes[0, 0].legend(fontsize="small", loc="lower left")
    setting = _attention_setting(df)
    fig.suptitle("Weight decay lowers the rank of every head's products (final step)\n" + setting)
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _attention_setting(df: pd.DataFrame) -> str:
    parts = []
    for col, name in (
        ("task.kind", "task"),
        ("train.kind", "dynamics"),
        ("train.eta", "η"),
        ("train.decay", "decayed groups"),
    ):
        if col in df.columns and df[col].nunique() == 1:
            v = df[col].iloc[0]
            if col == "train.kind":
                v = _ATTENTION_KINDS.get(v, v)
            parts.append(f"{name} = {_fmt(v)}")
    if "t" in df.columns:
        parts.append(f"{int(df['t'].max())} steps")
    if "seed" in df.columns:
        seeds = df["seed"].nunique()
        parts.append(f"{seeds} seed{'s' if seeds > 1 else ''}")
    return ", ".join(parts)


def attention_balance_figure(
    tables: Sequence[pd.DataFrame], out_path: str | Path | None = None
) -> Figure:
    """Per-head balance gap ``‖AᵀA − BᵀB‖_F`` against the step, one column per
    ``heads`` table (one dynamics each: SGD, AdamW, gradient flow, …), one row per pair.

    Solid: each head's gap (median over runs; colour: head, one legend for the
    figure). Dashed, from each head's gap at step 0: ``(1 − ηλ)^{2k}`` for SGD and
    momentum (THEORY.md T5, leading term; the O(η²) term and minibatch noise make the
    measured gap level off), ``e^{−2ηλt}`` for gradient flow (T4, exact); for AdamW,
    dotted, ``(1 − ηλ)^{2k}`` of its decoupled decay alone (no theorem). λ is the pair's
    own λ.
    """
    tables = [t.reset_index(drop=True) for t in tables]
    fig = Figure(figsize=(5.2 * len(tables), 9.0), layout="constrained")
    head_handles: dict[str, Line2D] = {}
    axes = np.atleast_2d(fig.subplots(2, len(tables), squeeze=False))
    for j, df in enumerate(tables):
        kind = str(df["train.kind"].iloc[0])
        eta = float(df["train.eta"].iloc[0])
        labels = _head_labels(df)
        colors = _colors(len(labels), numeric=True)
        for i, pair in enumerate(("qk", "vo")):
            ax = axes[i, j]
            d = df[df["pair"] == pair]
            lam = float(d[f"train.lam_{pair}"].iloc[0])
            measured = []
            for (layer, head), color in zip(labels, colors, strict=True):
                dh = d[(d["layer"] == layer) & (d["head"] == head)]
                line = _draw_median(
                    ax,
                    dh,
                    "t",
                    _values(dh, "balance_gap"),
                    log=True,
                    band=False,
                    color=color,
                    lw=1.4,
                    label=f"layer {layer}, head {head}",
                )
                if line is None:
                    continue
                head_handles.setdefault(line.get_label(), line)
                t, gap = line.get_data()
                measured.append(np.asarray(gap, float))
                t = np.asarray(t, float)
                if kind == "gradient_flow":
                    theory = gap[0] * np.exp(-2 * eta * lam * (t - t[0]))
                    ls = "--"
                else:
                    theory = gap[0] * (1 - eta * lam) ** (2 * (t - t[0]))
                    ls = ":" if kind == "adamw" else "--"
                # Theory on top, thin and dark: where it is exact it hides in the line.
                ax.plot(t, _mask_log(theory, True), ls, color="0.1", lw=0.9, zorder=3)
            if kind == "gradient_flow":
                law = r"T4: gap$(0)\,e^{-2\eta\lambda t}$ (theory, exact)"
            elif kind == "adamw":
                law = r"gap$(0)\,(1-\eta\lambda)^{2k}$: the decoupled decay alone (no theorem)"
            else:
                law = r"T5: gap$(0)\,(1-\eta\lambda)^{2k}$ (theory, leading term)"
            theory_handle = Line2D([], [], color="0.1", ls=":" if kind == "adamw" else "--")
            ax.legend([theory_handle], [law], fontsize="small", loc="lower left")
            ax.set_yscale("log")
            vals = np.concatenate(measured) if measured else np.array([])
            vals = vals[np.isfinite(vals) & (vals > 0)]
            if vals.size:
                ax.set_ylim(bottom=vals.min() / 10, top=vals.max() * 3)
            ax.set_xlabel(_label("t"))
            ax.set_ylabel(r"balance gap $\|A^\top A-B^\top B\|_F$ (log scale)")
            ax.grid(True, which="major", alpha=0.3)
            name = _ATTENTION_KINDS.get(kind, kind)
            ax.set_title(
                f"{name}: {_PAIR_TITLES[pair]} {_PAIR_PRODUCTS[pair]}\nη = {eta:g}, λ = {lam:g}",
                fontsize="medium",
            )
    setting = _attention_setting(
        pd.concat([t.drop(columns=["train.kind", "train.eta", "t"]) for t in tables])
    )
    fig.suptitle(
        "Per-head balance gap of both factor pairs in a transformer (solid: measured, "
        "one line per head; dark: theory)\n" + setting
    )
    fig.legend(
        list(head_handles.values()),
        list(head_handles),
        loc="outside lower center",
        ncol=min(len(head_handles), 8),
        fontsize="small",
        title="measured gap of each head (median over runs)",
        title_fontsize="small",
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _variant_labels(loss: pd.DataFrame) -> pd.Series:
    on_qk = loss["train.lam_qk"].astype(float) > 0
    on_vo = loss["train.lam_vo"].astype(float) > 0
    return pd.Series(
        [_VARIANTS[(bool(a), bool(b))] for a, b in zip(on_qk, on_vo, strict=True)],
        index=loss.index,
    )


def attention_ablation_table(loss: pd.DataFrame) -> pd.DataFrame:
    """Final validation (and training) loss of each weight-decay variant of a ``loss``
    table: mean and standard deviation (ddof 1) over seeds at the last step. Variants
    by which of λ_qk, λ_vo are > 0: decay on all, off attention, off key–query only,
    off value–output only."""
    df = _last_step_rows(loss.reset_index(drop=True))
    df = df.assign(variant=_variant_labels(df))
    rows = []
    for name in _VARIANTS.values():
        d = df[df["variant"] == name]
        if not len(d):
            continue
        rows.append(
            {
                "variant": name,
                "lam_qk": float(d["train.lam_qk"].iloc[0]),
                "lam_vo": float(d["train.lam_vo"].iloc[0]),
                "seeds": int(d["seed"].nunique()),
                "val_loss_mean": float(d["val_loss"].mean()),
                "val_loss_std": float(d["val_loss"].std(ddof=1)) if len(d) > 1 else np.nan,
                "train_loss_mean": float(d["train_loss"].mean()),
                "train_loss_std": float(d["train_loss"].std(ddof=1)) if len(d) > 1 else np.nan,
            }
        )
    return pd.DataFrame(rows)


def attention_ablation_markdown(loss: pd.DataFrame) -> str:
    """:func:`attention_ablation_table` as a markdown table (mean ± std over seeds)."""
    table = attention_ablation_table(loss)
    steps = int(loss["t"].max())
    lines = [
        f"| weight decay | λ_qk | λ_vo | seeds | validation loss at step {steps} "
        f"| training loss at step {steps} |",
        "|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.variant} | {r.lam_qk:g} | {r.lam_vo:g} | {r.seeds} "
            f"| {r.val_loss_mean:.4f} ± {r.val_loss_std:.4f} "
            f"| {r.train_loss_mean:.4f} ± {r.train_loss_std:.4f} |"
        )
    return "\n".join(lines) + "\n"


def attention_ablation_figure(
    loss: pd.DataFrame,
    out_path: str | Path | None = None,
    *,
    baseline: float | None = None,
) -> Figure:
    """The weight-decay ablation of a ``loss`` table (``rankflow.attention``):

    (a) validation loss against the step for each variant (decay on all, off attention,
        off key–query only, off value–output only): mean over seeds, band ± one
        standard deviation; dashed, ``baseline`` when given (char_lm: the unigram
        entropy of the validation split, the loss of a context-free prediction);
    (b) the final validation loss of each variant: every seed (dots) and mean ± std.
    """
    df = loss.reset_index(drop=True)
    df = df.assign(variant=_variant_labels(df), val=_values(df, "val_loss"))
    names = [v for v in _VARIANTS.values() if (df["variant"] == v).any()]
    colors = _colors(len(names), numeric=False)
    fig = Figure(figsize=(14, 5.2), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2, width_ratios=(1.6, 1))
    for name, color in zip(names, colors, strict=True):
        d = df[df["variant"] == name]
        g = d.groupby("t")["val"]
        t = g.mean().index.to_numpy(float)
        mean, std = g.mean().to_numpy(), g.std(ddof=1).fillna(0).to_numpy()
        ax_a.plot(t, mean, color=color, lw=1.6, label=f"{name} ({d['seed'].nunique()} seeds)")
        ax_a.fill_between(t, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    ax_a.set(xlabel=_label("t"), ylabel="validation loss (cross-entropy, nats per character)")
    ax_a.set_title("(a) validation loss, mean ± std over seeds", fontsize="medium")
    last = df.groupby("run_id")["t"].transform("max")
    final = df[(df["t"] == last) & np.isfinite(df["val"])]
    top = None
    if baseline is not None:
        ax_a.axhline(
            baseline,
            ls="--",
            color="0.3",
            lw=1.2,
            label=f"unigram entropy of the validation split ({baseline:.2f}): no context",
        )
        top = baseline + 0.5
    # The first steps (from log V) are cut off: the variants separate later.
    tail = df[df["t"] >= df["t"].max() / 4]["val"]
    if np.isfinite(tail).any():
        lo, hi = float(np.nanmin(tail)), float(np.nanmax(tail))
        ax_a.set_ylim(lo - 0.1 * (hi - lo), max(hi, top or hi))
    ax_a.legend(fontsize="small")
    ax_a.grid(True, alpha=0.3)
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        v = final.loc[final["variant"] == name, "val"].to_numpy(float)
        ax_b.plot(
            np.full(v.size, i) + np.linspace(-0.08, 0.08, v.size), v, "o", color=color, alpha=0.6
        )
        if v.size:
            err = v.std(ddof=1) if v.size > 1 else 0.0
            ax_b.errorbar(i + 0.22, v.mean(), yerr=err, fmt="s", color="k", capsize=4, ms=5)
    wrapped = [n.replace(" (", "\n(").replace(" only", "\nonly") for n in names]
    ax_b.set_xticks(range(len(names)), wrapped, fontsize="small")
    ax_b.set_xlim(-0.5, len(names) - 0.3)
    ax_b.set_ylabel(f"validation loss at step {int(df['t'].max())} (nats per character)")
    ax_b.set_title(
        "(b) final validation loss: seeds (dots), mean ± std (squares)", fontsize="medium"
    )
    ax_b.grid(True, axis="y", alpha=0.3)
    others = [
        f"λ_{g} = {df[f'train.lam_{g}'].iloc[0]:g}"
        for g in ("mlp", "embed", "norm")
        if f"train.lam_{g}" in df.columns and df[f"train.lam_{g}"].nunique() == 1
    ]
    fig.suptitle(
        "Weight decay in attention and language-model loss (char_lm)\n"
        + _attention_setting(df)
        + (f"; other groups: {', '.join(others)}" if others else "")
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig
