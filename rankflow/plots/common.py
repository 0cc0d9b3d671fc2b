"""What every figure family shares: axis text, colours, medians over runs, saving.

Conventions shared by every figure:
  - a *run* is one trajectory, i.e. one ``(run_id, path)`` pair;
  - curves are the median over runs at each saved time, with an interquartile band
    when more than one run contributes;
  - rows whose ``status`` is not ``"ok"`` count as missing (NaN), and so do values
    ``≤ 0`` on a log axis;
  - time is in optimizer steps (docs/theory.md, "Setting and conventions").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import Colormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

DPI = 150
RUN_KEYS = ("run_id", "path")

# Axis / legend text for the columns of docs/theory.md's observables table.
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
# Columns that describe a sweep's fixed setting, shown in figure titles when constant: its
# kinds, then its hyperparameters.
# The dynamics (``dynamics.kind``) as titles and legends name them.
DYNAMICS_NAMES = {
    "gd": "GD",
    "sgd_gaussian": "SGD, Gaussian noise",
    "sgd": "SGD, minibatches",
    "momentum": "momentum (decoupled decay)",
    "momentum_coupled": "momentum (L2 in the loss)",
    "adamw": "AdamW",
    "adam_l2": "Adam with L2 in the loss",
    "sign_gd": "sign descent",
    "signum": "Signum (sign of momentum)",
    "lion": "Lion",
    "muon": "Muon",
    "schedule_free_adamw": "schedule-free AdamW",
    "gradient_flow": "gradient flow",
    "stochastic_flow": "stochastic gradient flow",
    "momentum_flow": "momentum flow",
    "momentum_flow_coupled": "momentum flow (coupled)",
    "stochastic_momentum_flow": "stochastic momentum flow",
}
KIND_KEYS = ("problem.kind", "dynamics.kind", "solver.method", "init.kind")
SETTING_KEYS = KIND_KEYS + ("dynamics.eta", "dynamics.sigma", "init.scale")


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` in agreement: "1 seed", "3 seeds" (the figure review's plural
    check fails "1 seeds")."""
    return f"{n} {noun}{'s' * (n != 1)}"


def axis_label(col: str) -> str:
    if col in LABELS:
        return LABELS[col]
    if col.startswith("sv_"):
        return rf"singular value $\sigma_{{{col[3:]}}}(W)$"
    return col


def dynamics_name(kind: str) -> str:
    return DYNAMICS_NAMES.get(kind, kind)


def fmt_value(value) -> str:
    if isinstance(value, float | np.floating):
        return f"{value:g}"
    return str(value)


def value_label(col: str, value) -> str:
    return f"{SYMBOLS.get(col, col)} = {fmt_value(value)}"


def palette(n: int, numeric: bool) -> list:
    cmap: Colormap = mpl.colormaps["viridis" if numeric else "tab10"]
    if numeric:
        return [cmap(v) for v in np.linspace(0.0, 0.85, max(n, 1))][:n]
    return [cmap(i % cmap.N) for i in range(n)]


def sv_columns(df: pd.DataFrame) -> list[str]:
    cols = [c for c in df.columns if c.startswith("sv_") and c[3:].isdigit()]
    return sorted(cols, key=lambda c: int(c[3:]))


def run_columns(df: pd.DataFrame) -> list[str]:
    return [k for k in RUN_KEYS if k in df.columns]


def lr_clock(df: pd.DataFrame, eta_col: str) -> pd.Series:
    """The learning rate accumulated by each row's time: the ``lr_clock`` column of a
    table with a learning-rate schedule (∫η for flows, Σ_{k<t} η_k for optimizers),
    else ``η·t``."""
    if "lr_clock" in df.columns:
        clock = df["lr_clock"].astype(float)
        return clock.where(clock.notna(), df[eta_col].astype(float) * df["t"].astype(float))
    return df[eta_col].astype(float) * df["t"].astype(float)


def ok_values(df: pd.DataFrame, y: str) -> pd.Series:
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


def positive(v) -> np.ndarray:
    """``v`` as floats with every entry that a log axis cannot show (≤ 0, NaN, ±inf) NaN."""
    a = np.asarray(v, dtype=float)
    return np.where(np.isfinite(a) & (a > 0), a, np.nan)


def mask_log(v, log: bool) -> np.ndarray:
    return positive(v) if log else np.asarray(v, dtype=float)


def draw_median(
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
    med = mask_log(stats["median"], log)
    if not np.isfinite(med).any():
        return None
    xs = stats.index.to_numpy()
    (line,) = ax.plot(xs, med, **line_kw)
    if band and (stats["count"] > 1).any():
        ax.fill_between(
            xs,
            mask_log(stats["q25"], log),
            mask_log(stats["q75"], log),
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
    return line


def _noiseless(df: pd.DataFrame) -> bool:
    """Whether every run has σ = 0: gd, gradient flow and the other dynamics without
    Gaussian noise have no σ to state."""
    return bool((pd.to_numeric(df["dynamics.sigma"], errors="coerce").fillna(0) == 0).all())


def setting_title(df: pd.DataFrame, skip: Sequence[str] = ()) -> str:
    """The constant settings of a table, e.g. ``problem.kind=diagonal, η=0.1`` (σ only
    where some run has Gaussian noise)."""
    parts = []
    for col in SETTING_KEYS:
        if col in skip or col not in df.columns or (col == "dynamics.sigma" and _noiseless(df)):
            continue
        vals = df[col].dropna().unique()
        if len(vals) == 1:
            parts.append(f"{SYMBOLS.get(col, col)}={fmt_value(vals[0])}")
    runs = run_columns(df)
    if runs:
        parts.append(counted(len(df[runs].drop_duplicates()), "run"))
        if "status" in df.columns:
            stopped = df.loc[df["status"] != "ok", runs].drop_duplicates()
            if len(stopped):  # medians after their stop run over fewer runs
                parts.append(f"{len(stopped)} not ok (diverged/max_steps) from some t on")
    return ", ".join(parts)


def _plain_log_label(value: float, _pos=None) -> str:
    return f"{value:g}"


def _labelled_ticks(axis, lo: float, hi: float) -> int:
    """How many tick labels (major and minor) the axis would draw inside [lo, hi]."""
    count = 0
    for locator, formatter in (
        (axis.get_major_locator(), axis.get_major_formatter()),
        (axis.get_minor_locator(), axis.get_minor_formatter()),
    ):
        ticks = [v for v in locator() if lo <= v <= hi]
        formatter.set_locs(ticks)
        count += sum(1 for i, v in enumerate(ticks) if formatter(v, i).strip())
    return count


def label_log_axes(fig: Figure) -> Figure:
    """Give every log axis of ``fig`` that would show fewer than two tick labels (one
    label, or none, cannot give a scale) labels at 1, 2 and 5 times each power of ten (1
    to 9 on less than a factor 4), written plainly (``0.5``, ``1``, ``2``). Axes with
    fixed ticks are left alone. Returns ``fig``."""
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale != "log" or not isinstance(axis.get_major_locator(), mticker.LogLocator):
                continue
            lo, hi = sorted(axis.get_view_interval())
            if not (0 < lo < hi < np.inf) or _labelled_ticks(axis, lo, hi) >= 2:
                continue
            subs = (1.0, 2.0, 5.0) if hi / lo >= 4 else tuple(range(1, 10))
            axis.set_major_locator(mticker.LogLocator(base=10, subs=subs))
            axis.set_major_formatter(mticker.FuncFormatter(_plain_log_label))
            axis.set_minor_formatter(mticker.NullFormatter())
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (parent folders created) at 150 dpi, its short log axes
    labelled (:func:`label_log_axes`).

    The format follows the suffix (PNG when there is none or it is ``.png``).
    Returns the path written.
    """
    label_log_axes(fig)
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    return path


def png_writer(fig: Figure) -> Callable[[Path], object]:
    """A writer of ``fig`` as a PNG to a given path (what ``rankflow.inspect`` calls
    with a temporary file, so the path's suffix does not choose the format)."""

    def write(p: Path) -> None:
        label_log_axes(fig)
        fig.savefig(p, format="png", dpi=DPI, bbox_inches="tight", facecolor="white")

    return write


def finish_figure(
    fig: Figure, axes: Sequence[Axes], title: str, out_path: str | Path | None
) -> Figure:
    """Grid the panels ``axes``, title the figure, and write it to ``out_path`` when
    given. Returns the figure."""
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    label_log_axes(fig)
    if out_path is not None:
        save_figure(fig, out_path)
    return fig
