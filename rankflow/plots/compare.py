"""Figures of ``rankflow compare``: an optimizer next to its flow (its tables)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .common import axis_label, dynamics_name, finish_figure, mask_log, save_figure
from .compare_sweep import write_compare_sweep_figures

__all__ = [
    "compare_contraction_figure",
    "compare_moments_figure",
    "compare_order_figure",
    "compare_weak_figure",
    "compare_sde_figure",
    "compare_trajectory_figure",
    "write_compare_figures",
]


def _dyn_name(kind: str) -> str:
    return dynamics_name(kind)


def _compare_setting(df: pd.DataFrame, eta: bool = True, flow: bool = True) -> str:
    """``GD vs gradient flow (tsit5, adaptive) · sensing 8×6, r = 4 · η = 0.1, λ = 0.05``;
    without ``flow`` (a figure of the optimizer alone) the optimizer's name only."""
    s = df.iloc[0]
    solve = f"{s['solver.method']}, " + (
        "adaptive" if s["solver.adaptive"] else f"fixed dt = {s['solver.dt']:g}"
    )
    pair = f"{_dyn_name(s['dynamics.kind'])} vs {_dyn_name(s['flow.kind'])} ({solve})"
    if not flow:
        pair = f"{_dyn_name(s['dynamics.kind'])} alone (its flow is not drawn)"
    hyper = ([f"η = {s['dynamics.eta']:g}"] if eta else []) + [f"λ = {s['dynamics.lam']:g}"]
    if s["dynamics.kind"] == "sgd_gaussian":
        hyper.append(f"σ = {s['dynamics.sigma']:g}")
    if "dynamics.noise" in s.index and s["dynamics.noise"] in ("gradient", "minibatch"):
        hyper.append(f"noise {s['dynamics.noise']}")
        if s["dynamics.noise"] == "minibatch":
            hyper.append(f"batch {s['dynamics.batch']} of {s['problem.samples']}")
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
    fig = Figure(figsize=(13, 4.8), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    _distance_panel(ax_a, df)
    _gap_panel(ax_b, df)
    title = "Discrete optimizer against its flow: " + _compare_setting(df)
    return finish_figure(fig, (ax_a, ax_b), title, out_path)


def _trajectory_setting(df: pd.DataFrame):
    """Of a trajectory table: its first row, the times, whether it compares means over
    paths (stochastic dynamics), and the optimizer's and the flow's names."""
    s = df.iloc[0]
    opt, flow = _dyn_name(s["dynamics.kind"]), _dyn_name(s["flow.kind"])
    return s, df["t"].to_numpy(float), s["measure"] != "paths", opt, flow


def _distance_panel(ax_a, df: pd.DataFrame) -> None:
    """(a) of the trajectory figure: optimizer–flow distance (and Monte Carlo floor)."""
    _, t, stochastic, opt, flow = _trajectory_setting(df)
    of_means = " of the means over paths" if stochastic else ""
    for col, fmt, color, label in (
        ("distance", "o-", "C0", rf"$\|\theta_k-\theta(t{{=}}k)\|_F${of_means}"),
        ("relative_distance", "s:", "C2", r"relative: distance / $\|\theta(t{=}k)\|_F$"),
    ):
        ax_a.plot(t, mask_log(df[col], True), fmt, ms=3, color=color, label=label)
    if stochastic:
        ax_a.plot(
            t,
            mask_log(df["mc_floor"], True),
            "--",
            color="0.3",
            label=r"Monte Carlo floor $\sqrt{\sum \mathrm{Var}/K}$ (equal means)",
        )
    ax_a.set_yscale("log")
    ax_a.set(xlabel=axis_label("t"), ylabel=r"distance, $\theta=(A,B)$ (log scale)")
    measured = np.concatenate([mask_log(df[c], True) for c in ("distance", "relative_distance")])
    measured = measured[np.isfinite(measured)]
    if measured.size:
        ax_a.set_ylim(bottom=measured.min() / 3, top=measured.max() * 3)
    which = f"means of {opt} and {flow}" if stochastic else f"{opt} step k vs {flow} at t = k (T8)"
    ax_a.set_title(f"(a) {which}", fontsize="medium")
    ax_a.legend(fontsize="small")


def _gap_panel(ax_b, df: pd.DataFrame) -> None:
    """(b) of the trajectory figure: the balance gap of both, T4 for GD's flow."""
    s, t, stochastic, opt, flow = _trajectory_setting(df)
    mean = " (mean over paths)" if stochastic else ""
    gap_o = mask_log(df["optimizer.balance_gap"], True)
    gap_f = mask_log(df["flow.balance_gap"], True)
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
    ax_b.set(xlabel=axis_label("t"), ylabel=axis_label("balance_gap") + " (log scale)")
    ax_b.set_title("(b) balancing of the factors", fontsize="medium")
    ax_b.legend(fontsize="small")


def compare_contraction_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``contraction`` table of ``rankflow.compare`` (GD alone: its flow is not drawn),
    against the step k:

    (a) the measured ratio ‖D_{k+1}‖_F/‖D_k‖_F (markers) beside the exact T5 one-step
        prediction and the per-step factors (1 − ηλ)² (T5's leading term), 1 − 2ηλ (T5's
        late factor near a balanced minimum, the top of its bracket) and e^{−2ηλ}
        (gradient flow's, T4), dashed; plain tick labels (no offset);
    (b) the absolute deviations of the measured ratio from each of the four (log
        scale): T5 is exact to rounding, the constants miss the O(η²) term.
    """
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    k = df["t"].to_numpy(float)
    fig = Figure(figsize=(13, 6.6), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    gd_c, gf_c = float(s["gd_contraction"]), float(s["gf_contraction"])
    late_c = 1.0 - 2.0 * float(s["dynamics.eta"]) * float(s["dynamics.lam"])
    ax_a.plot(k, df["ratio"], "o", ms=5, mfc="none", color="C0", label="GD, measured")
    ax_a.plot(
        k,
        df["t5_ratio"],
        "--",
        color="C3",
        lw=1.5,
        label=r"T5 one step: $\|(1-\eta\lambda)^2D_k+\eta^2(B^\top G^\top GB"
        r"-A^\top GG^\top A)\|_F/\|D_k\|_F$",
    )
    constants = (
        (gd_c, "0.35", "--", rf"$(1-\eta\lambda)^2$ = {gd_c:.6f} (T5, leading term)"),
        (late_c, "C1", "-.", rf"$1-2\eta\lambda$ = {late_c:.6f} (T5, late, near a minimum)"),
        (gf_c, "C2", ":", rf"$e^{{-2\eta\lambda}}$ = {gf_c:.6f} (T4, gradient flow's)"),
    )
    for c, color, ls, label in constants:
        ax_a.axhline(c, ls=ls, color=color, lw=1.3, label=label)
    ax_a.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax_a.set(
        xlabel="step k (optimizer steps)",
        ylabel=r"per-step ratio $\|D_{k+1}\|_F/\|D_k\|_F$, $D=A^\top A-B^\top B$",
    )
    ax_a.set_title(
        "(a) GD: per-step contraction of the balance gap against T5's factors",
        fontsize="medium",
    )
    ax_a.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14))

    ratio = df["ratio"].to_numpy(float)
    for v, color, text in (
        (df["t5_deviation"].to_numpy(float), "C3", "T5 one-step prediction"),
        (df["gd_deviation"].to_numpy(float), "0.35", r"$(1-\eta\lambda)^2$"),
        (np.abs(ratio - late_c), "C1", r"$1-2\eta\lambda$"),
        (df["gf_deviation"].to_numpy(float), "C2", r"$e^{-2\eta\lambda}$"),
    ):
        zeros = int(np.sum(v == 0))
        label = f"|measured − {text}|" + (f" ({zeros} exact zeros not drawn)" if zeros else "")
        ax_b.plot(k, mask_log(v, True), "o-", ms=3, color=color, label=label)
    ax_b.set_yscale("log")
    ax_b.set(
        xlabel="step k (optimizer steps)", ylabel="absolute deviation of the ratio (log scale)"
    )
    ax_b.set_title("(b) GD: T5 is exact; the constants miss an O(η²) term", fontsize="medium")
    ax_b.legend(fontsize="small")
    title = "Balance gap of GD per step (docs/theory.md, T5): " + _compare_setting(df, flow=False)
    return finish_figure(fig, (ax_a, ax_b), title, out_path)


def compare_order_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``order`` table of ``rankflow.compare``: the distance between optimizer and
    flow at a fixed horizon ηt against η, log–log, with the fitted order (column
    ``order`` ± ``order_stderr``) and a first-order reference ∝ η (dashed, T8)."""
    df = df.sort_values("dynamics.eta").reset_index(drop=True)
    s = df.iloc[0]
    eta = df["dynamics.eta"].to_numpy(float)
    dist = mask_log(df["distance"], True)
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
    mu = " and μ" if "momentum" in s["dynamics.kind"] else ""
    return _finish_order_figure(
        fig,
        df,
        r"$\|\theta_K-\theta(t{=}K)\|_F$ at the horizon K (log scale)",
        f"Order in η at a fixed horizon ηt = {s['horizon']:g}"
        + (f" (η{mu} halved together)" if mu else ""),
        out_path,
        legend_loc="upper left",
    )


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
    ax_a.set(xlabel=axis_label("t"), ylabel=axis_label("balance_trace"))
    ax_a.set_title("(a) mean over paths against T6", fontsize="medium")
    ax_a.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax_b.set(xlabel=axis_label("t"), ylabel=r"std over paths of $\mathrm{tr}(A^\top A-B^\top B)$")
    ax_b.set_title("(b) spread over paths", fontsize="medium")
    ax_b.legend(fontsize="small")
    for level, ls in ((2, ":"), (4, "--")):
        for sign in (1, -1):
            ax_c.axhline(
                sign * level, color="0.4", ls=ls, lw=1, label=f"±{level} SE" if sign > 0 else None
            )
    ax_c.axhline(0, color="k", lw=0.8)
    ax_c.set(xlabel=axis_label("t"), ylabel="(mean − T6) / Monte Carlo SE")
    ax_c.set_title("(c) deviation from T6 in standard errors", fontsize="medium")
    ax_c.legend(fontsize="small")
    title = "Stochastic balancing against T6: " + _compare_setting(df)
    return finish_figure(fig, (ax_a, ax_b, ax_c), title, out_path)


def compare_moments_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``moments`` table of ``rankflow.compare`` (SGD against its SME), one panel per
    observable against t: the mean over paths of the optimizer and the flow with its
    10–90% band and ±2 SE error bars."""
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    names = list(dict.fromkeys(df["observable"]))
    fig = Figure(figsize=(5.6 * len(names), 5.0), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        for role, color, marker in (("optimizer", "C0", "o"), ("flow", "C1", "s")):
            part = df[(df["role"] == role) & (df["observable"] == name)]
            kind = s["dynamics.kind"] if role == "optimizer" else s["flow.kind"]
            label = f"{_dyn_name(kind)} ({int(part['paths'].max())} paths)"
            t = part["t"].to_numpy(float)
            ax.errorbar(
                t, part["mean"], yerr=2 * part["se"], fmt="-", marker=marker, ms=3,
                color=color, capsize=2, label=f"{label}: mean ± 2 SE",
            )  # fmt: skip
            ax.fill_between(t, part["q10"], part["q90"], color=color, alpha=0.12, lw=0)
        ax.set(xlabel=axis_label("t"), ylabel=axis_label(name))
        ax.set_title(f"{name}: mean over paths, 10–90% band", fontsize="medium")
        ax.legend(fontsize="small")
    title = "SGD against its stochastic modified equation: " + _compare_setting(df)
    return finish_figure(fig, tuple(axes), title, out_path)


def compare_weak_figure(df: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """The ``weak`` table of ``rankflow.compare``: |mean of SGD − mean of its SME| at a
    fixed horizon ηt against η, log–log, with ±2 SE error bars, the fitted weak order
    (``order`` ± ``order_stderr``) as a line, and a slope-1 guide (dashed)."""
    df = df.reset_index(drop=True)
    s = df.iloc[0]
    names = list(dict.fromkeys(df["observable"]))
    fig = Figure(figsize=(6.8, 5.4), layout="constrained")
    ax = fig.add_subplot()
    for i, name in enumerate(names):
        part = df[df["observable"] == name].sort_values("dynamics.eta")
        eta = part["dynamics.eta"].to_numpy(float)
        err = np.abs(part["error"].to_numpy(float))
        se = part["error_se"].to_numpy(float)
        p, dp = float(part["order"].iloc[0]), float(part["order_stderr"].iloc[0])
        lower = np.minimum(2 * se, err * 0.999)  # a log axis cannot draw below 0
        ax.errorbar(
            eta, mask_log(err, True), yerr=[lower, 2 * se], fmt="o", ms=5,
            color=f"C{i}", capsize=3, label=f"{name}: order {p:.2f} ± {dp:.2f}",
        )  # fmt: skip
        ok = err > 0
        if np.isfinite(p) and ok.any():
            # The fitted line through the weighted centre of the points.
            w = (err[ok] / se[ok]) ** 2
            x0 = np.sum(w * np.log(eta[ok])) / np.sum(w)
            y0 = np.sum(w * np.log(err[ok])) / np.sum(w)
            ax.plot(eta, np.exp(y0 + p * (np.log(eta) - x0)), "-", color=f"C{i}", lw=1)
            ax.plot(eta, np.exp(y0 + np.log(eta) - x0), "--", color="0.5", lw=1)
    ax.plot([], [], "--", color="0.5", label="slope 1 (Li, Tai & E: weak order 1)")
    return _finish_order_figure(
        fig,
        df,
        r"|mean of SGD at step K − mean of SME at $t{=}K$| (± 2 SE)",
        f"Weak error at a fixed horizon ηt = {s['horizon']:g} (SME: Euler–Maruyama, "
        f"dt = {s['solver.dt']:g})",
        out_path,
    )


def _finish_order_figure(
    fig: Figure,
    df: pd.DataFrame,
    ylabel: str,
    title: str,
    out_path: str | Path | None,
    legend_loc: str | None = None,
) -> Figure:
    """Finish a one-panel order-in-η figure: log-log axes, η on x, ``ylabel``, ``title``,
    legend, grid and the setting as the figure's title; written to ``out_path`` when given."""
    (ax,) = fig.axes
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel=r"learning rate $\eta$ (log scale)", ylabel=ylabel)
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="small", loc=legend_loc)
    ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(_compare_setting(df, eta=False), fontsize="medium")
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


# One figure per table of ``rankflow.compare.compare``, by table name.
FIGURES = {
    "trajectory": compare_trajectory_figure,
    "contraction": compare_contraction_figure,
    "order": compare_order_figure,
    "sde": compare_sde_figure,
    "moments": compare_moments_figure,
    "weak": compare_weak_figure,
}


def write_compare_figures(tables: Mapping[str, pd.DataFrame], out: str | Path) -> list[Path]:
    """Draw each table of a comparison (``rankflow.compare.compare``) to ``out/NAME.png``,
    or, over a sweep, its ``sweep`` table to ``out/sweep.png``
    (:func:`.compare_sweep.write_compare_sweep_figures`); returns the paths written."""
    if "sweep" in tables:
        return write_compare_sweep_figures(tables, out)
    return [
        save_figure(FIGURES[name](df), Path(out) / f"{name}.png") for name, df in tables.items()
    ]
