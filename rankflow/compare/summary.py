"""``summary.md`` of a comparison: its measured numbers as Markdown, one section per
table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..core.vocabulary import MOMENTUM_DYNAMICS
from .verdict import RULES, judge

__all__ = ["NO_VERDICT", "summary", "verdict_lines"]

# The verdict of sgd_gaussian with parameter noise against the stochastic flow (T6).
NO_VERDICT = (
    "No order in η is fitted for this pair (T6: the mean of tr D over paths), so there is "
    "no verdict; its z-scores against T6 are in the summary (E[tr D] against T6)."
)


def _g(x: float) -> str:
    return f"{x:.4g}" if np.isfinite(x) else "nan"


def summary(
    tables: Mapping[str, pd.DataFrame], meta: Mapping[str, Any], *, figures: bool = True
) -> str:
    """The measured numbers of a comparison, as Markdown (its file list naming
    ``NAME.png`` when ``figures``)."""
    traj = tables["trajectory"]
    s = traj.iloc[0]
    judged = judge(tables)
    head = _header(s, meta) + _verdict_section(judged, "sde" in tables)
    if "sweep" in tables:
        lines = head + _sweep_section(tables["sweep"], meta) + _sweep_verdicts(judged)
        files = _files_section(tables, False, judged)
        if figures:
            files.insert(-2, "- `sweep.png`: the measured numbers against the swept values")
        return "\n".join(lines + files)
    lines = head + _trajectory_section(traj)
    if "contraction" in tables:
        lines += _contraction_section(tables["contraction"])
    if "order" in tables:
        momentum = s["dynamics.kind"] in MOMENTUM_DYNAMICS
        lines += _order_section(tables["order"], judged, momentum=momentum)
    if "sde" in tables:
        lines += _sde_section(tables["sde"], s)
    if "moments" in tables:
        lines += _moments_section(tables["moments"], s)
    if "weak" in tables:
        lines += _weak_section(tables["weak"], judged, meta)
    return "\n".join(lines + _files_section(tables, figures, judged))


def _point_name(row: pd.Series) -> str:
    """``point 3 (dynamics.lam=0.1, dynamics.eta=0.05)`` of a judged row in a sweep;
    empty without one."""
    if "point" not in row:
        return ""
    swept = [f"{c[len('sweep.') :]}={_cell(row[c])}" for c in row.index if c.startswith("sweep.")]
    return f"point {row['point']} ({', '.join(swept)}): "


def _cell(v: Any) -> str:
    """A swept value as text: floats by ``:g``, others as they print."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def _halving_texts(h: pd.DataFrame) -> list[str]:
    """The halving orders of one fit (``halvings`` rows), each with ± SE where it has one."""
    return [
        f"{o:.3f}" + (f" ± {e:.3f}" if np.isfinite(e) else "")
        for o, e in zip(h["halving_order"], h["halving_order_stderr"], strict=True)
    ]


def _halving_cells(h: pd.DataFrame) -> str:
    """The halving orders of one fit, comma-separated."""
    return ", ".join(_halving_texts(h))


def _fits(judged: Mapping[str, pd.DataFrame]):
    """``(verdict row, its halvings rows)`` of each fit judged."""
    if not judged:
        return
    keys = [c for c in judged["verdict"].columns if c == "point"] + ["table", "observable"]
    h = judged["halvings"]
    for _, row in judged["verdict"].iterrows():
        mask = np.logical_and.reduce([h[k] == row[k] for k in keys])
        yield row, h[mask]


def verdict_lines(judged: Mapping[str, pd.DataFrame]) -> list[str]:
    """One line per fit of :func:`rankflow.compare.verdict.judge`'s tables (per point of
    a sweep, per observable of a weak table): its order ± SE against the expected order
    and tolerance, its halving orders, its verdict, and its reading when it has one."""
    lines = []
    for row, h in _fits(judged):
        what, _, _, source = RULES[row["table"]]
        obs = "" if row["table"] == "order" else f"{row['observable']}: "
        line = (
            f"{_point_name(row)}{obs}order of the {what} in η {row['order']:.3f} ± "
            f"{row['order_stderr']:.3f} ({source}: {row['expected_order']:g} ± "
            f"{row['tolerance']:g}); per halving {_halving_cells(h)}: {row['verdict']}"
        )
        lines.append(line + (f"; {row['reading']}" if row["reading"] else ""))
    return lines


def _verdict_section(judged: Mapping[str, pd.DataFrame], sde: bool) -> list[str]:
    """How many fits pass, and the rule, after the header; for T6's pair (``sde``),
    that it has no order in η to judge."""
    if not judged:
        return ["", "## Verdict", "", NO_VERDICT] if sde else []
    v = judged["verdict"]
    counts = v["verdict"].value_counts()
    tally = ", ".join(f"{counts[k]} {k}" for k in ("pass", "fail", "inconclusive") if k in counts)
    return [
        "",
        "## Verdict",
        "",
        f"{len(v)} fitted order{'s' * (len(v) > 1)} in η: {tally}. Rule: inconclusive when the "
        "fit's SE is NaN (fewer than 3 rates) or exceeds the tolerance; otherwise pass when "
        "|order − p| ≤ tolerance (p = 1; tolerance "
        + ", ".join(f"{RULES[t][2]:g} for {t}" for t in dict.fromkeys(v["table"]))
        + ", those of rankflow reproduce). The halving orders are log2(d_j/d_(j+1)) "
        "between consecutive learning rates at the same ηt.",
    ]


def _header(s: pd.Series, meta: Mapping[str, Any]) -> list[str]:
    """The title and the paragraph stating the problem, start, hyperparameters, solver
    and run time (``s``: a row of the trajectory table)."""
    opt, flow = meta["optimizer"], meta["flow"]
    solver = flow["solver"]
    solve = (
        f"{solver['method']}, adaptive (rtol {solver['rtol']:g}, atol {solver['atol']:g})"
        if solver["adaptive"]
        else f"{solver['method']}, fixed dt = {solver['dt']:g}"
    )
    return [
        f"# rankflow compare: {s['dynamics.kind']} vs {s['flow.kind']}",
        "",
        f"Problem {s['problem.kind']} ({s['problem.m']}×{s['problem.n']}), r = {s['model.r']}, "
        f"init {opt['init']['kind']} (scale {opt['init']['scale']:g}), seed {opt['seed']}, "
        f"η = {s['dynamics.eta']:g}, λ = {s['dynamics.lam']:g}"
        + (f", σ = {s['dynamics.sigma']:g}" if s["dynamics.kind"] == "sgd_gaussian" else "")
        + (
            f", noise {opt['dynamics']['noise']}"
            + (f", batch {opt['dynamics']['batch']}" if s["dynamics.kind"] == "sgd" else "")
            if opt["dynamics"].get("noise")
            else ""
        )
        + (f", μ = {s['dynamics.mu']:g}" if s["dynamics.kind"] in MOMENTUM_DYNAMICS else "")
        + f", {'float64' if s['x64'] else 'float32'}. Flow solver: {solve}. "
        f"Time t is in optimizer steps; step k is compared with the flow at t = k. "
        f"Run time {meta.get('seconds', float('nan')):.1f} s.",
    ]


def _trajectory_section(traj: pd.DataFrame) -> list[str]:
    """The largest and the last distance, the Monte Carlo floor (stochastic pairs) and
    the first save that is not ok."""
    i_max = int(traj["distance"].fillna(-1).to_numpy().argmax())
    last = traj.iloc[-1]
    what = (
        "‖mean θ_k − mean θ(k)‖_F, the distance of the means over paths (single paths "
        "use different noise)"
        if last["measure"] != "paths"
        else "‖θ_k − θ(k)‖_F, θ = (A, B)"
    )
    text = (
        f"{what}: largest {_g(traj['distance'].iloc[i_max])} at t = {traj['t'].iloc[i_max]:g} "
        f"(relative {_g(traj['relative_distance'].iloc[i_max])}); at t = {last['t']:g}: "
        f"{_g(last['distance'])} (relative {_g(last['relative_distance'])})."
    )
    if np.isfinite(last["mc_floor"]):
        text += (
            f" Monte Carlo floor (distance expected if the means were equal) at "
            f"t = {last['t']:g}: {_g(last['mc_floor'])}; the ratio distance/floor has median "
            f"{_g(float(np.nanmedian(traj['distance'] / traj['mc_floor'])))}."
        )
    lines = ["", "## Trajectory distance", "", text]
    bad = traj[(traj["optimizer.status"] != "ok") | (traj["flow.status"] != "ok")]
    if len(bad):
        lines.append(f"Not ok from t = {bad['t'].iloc[0]:g} on (diverged or max_steps).")
    return lines


def _contraction_section(c: pd.DataFrame) -> list[str]:
    """GD's measured per-step ratios against T5, (1 − ηλ)² and e^{−2ηλ}, as a table."""
    return [
        "",
        f"## Per-step contraction of ‖D‖_F (GD, steps {c['t'].iloc[0]:g}–"
        f"{c['t'].iloc[-1] + 1:g}; T5)",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| measured ratio ‖D_(k+1)‖/‖D_k‖, min – max | {c['ratio'].min():.10f} – "
        f"{c['ratio'].max():.10f} |",
        f"| (1 − ηλ)² | {c['gd_contraction'].iloc[0]:.10f} |",
        f"| e^(−2ηλ) | {c['gf_contraction'].iloc[0]:.10f} |",
        f"| max \\|measured − T5 one-step prediction\\| | {_g(c['t5_deviation'].max())} |",
        f"| max relative residual of the T5 matrix identity | {_g(c['t5_residual'].max())} |",
        f"| max \\|measured − (1 − ηλ)²\\| | {_g(c['gd_deviation'].max())} |",
        f"| max \\|measured − e^(−2ηλ)\\| | {_g(c['gf_deviation'].max())} |",
        f"| at step {c['t'].iloc[-1]:g}: \\|measured − T5\\|, \\|measured − (1 − ηλ)²\\|, "
        f"\\|measured − e^(−2ηλ)\\| | {_g(c['t5_deviation'].iloc[-1])}, "
        f"{_g(c['gd_deviation'].iloc[-1])}, {_g(c['gf_deviation'].iloc[-1])} |",
    ]


def _halving_column(h: pd.DataFrame) -> list[str]:
    """The halving order of each learning rate from the one before it (``—`` for the
    first), as table cells."""
    return ["—", *_halving_texts(h)]


def _judged_line(judged: Mapping[str, pd.DataFrame], observable: str) -> list[str]:
    """The verdict line (and reading) of the fit of ``observable`` in a single config."""
    return [f"- {line}" for line in verdict_lines(_only(judged, observable))]


def _only(judged: Mapping[str, pd.DataFrame], observable: str) -> dict[str, pd.DataFrame]:
    return {k: v[v["observable"] == observable] for k, v in judged.items()}


def _order_section(
    o: pd.DataFrame, judged: Mapping[str, pd.DataFrame], *, momentum: bool
) -> list[str]:
    """The distance and relative distance at the horizon for each η (and μ, for
    momentum), the order from the η before, the fitted order and its verdict (T8)."""
    mu = momentum
    lines = [
        "",
        f"## Order in η (T8), horizon ηt = {o['horizon'].iloc[0]:g}",
        "",
        "| η | " + ("μ | " if mu else "") + "steps | distance | relative | halving order |",
        "|---|" + ("---|" if mu else "") + "---|---|---|---|",
    ]
    halving = _halving_column(judged["halvings"])
    for (_, row), cell in zip(o.iterrows(), halving, strict=True):
        lines.append(
            f"| {row['dynamics.eta']:g} | "
            + (f"{row['dynamics.mu']:g} | " if mu else "")
            + f"{row['steps']} | {_g(row['distance'])} | {_g(row['relative_distance'])} | "
            f"{cell} |"
        )
    return lines + [
        "",
        f"Measured order {o['order'].iloc[0]:.3f} ± {o['order_stderr'].iloc[0]:.3f} "
        "(least squares of log distance on log η; first order expected)"
        + (", with μ halved along with η." if mu else ".")
        + " Halving order: log2 of the distance at the η before over the distance here.",
        "",
        *_judged_line(judged, "distance"),
    ]


def _sde_section(sd: pd.DataFrame, s: pd.Series) -> list[str]:
    """E[tr D] of the optimizer and its stochastic flow against T6 at three saves each,
    and the largest |z| of each (``s``: a row of the trajectory table)."""
    lines = [
        "",
        "## E[tr D] against T6",
        "",
        f"{int(sd['paths'].max())} paths each; mean of balance_trace = tr(AᵀA − BᵀB) "
        "over paths against the closed form of T6 (exact for the stochastic flow), "
        "z = (mean − T6)/SE with SE = std/√paths.",
        "",
        "| dynamics | t | mean ± SE | T6 | z | std | 10–90% |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"optimizer": s["dynamics.kind"], "flow": s["flow.kind"]}
    for role, name in names.items():
        part = sd[sd["role"] == role]
        for _, row in part.iloc[[len(part) // 4, len(part) // 2, -1]].iterrows():
            lines.append(
                f"| {name} | {row['t']:g} | {_g(row['mean'])} ± {_g(row['se'])} | "
                f"{_g(row['theory'])} | {row['z']:+.2f} | {_g(row['std'])} | "
                f"{_g(row['q10'])} – {_g(row['q90'])} |"
            )
    lines.append("")
    for role, name in names.items():
        part = sd[sd["role"] == role]
        lines.append(
            f"- {name}: max |z| over the {int(np.isfinite(part['z']).sum())} saves with "
            f"t > 0: {np.nanmax(np.abs(part['z'])):.2f}."
        )
    return lines


def _moments_section(mo: pd.DataFrame, s: pd.Series) -> list[str]:
    """Mean ± SE and std over paths of each observable, optimizer and flow, at the last
    save (``s``: a row of the trajectory table)."""
    last = mo[mo["t"] == mo["t"].max()]
    lines = [
        "",
        f"## Means and spreads over paths at t = {mo['t'].max():g} (η = {s['dynamics.eta']:g})",
        "",
        "| observable | dynamics | paths | mean ± SE | std | 10–90% |",
        "|---|---|---|---|---|---|",
    ]
    names = {"optimizer": s["dynamics.kind"], "flow": s["flow.kind"]}
    for _, row in last.sort_values(["observable", "role"], ascending=[True, False]).iterrows():
        lines.append(
            f"| {row['observable']} | {names[row['role']]} | {row['paths']} | "
            f"{_g(row['mean'])} ± {_g(row['se'])} | {_g(row['std'])} | "
            f"{_g(row['q10'])} – {_g(row['q90'])} |"
        )
    return lines


def _weak_section(
    w: pd.DataFrame, judged: Mapping[str, pd.DataFrame], meta: Mapping[str, Any]
) -> list[str]:
    """The weak error (difference of the means, optimizer − flow) at a fixed horizon in
    ηt for each η, with its Monte Carlo SE, and the fitted weak order per observable."""
    dt = meta["flow"]["solver"]["dt"]
    lines = [
        "",
        f"## Weak error against η at a fixed horizon ηt = {w['horizon'].iloc[0]:g} "
        "(T10; Li, Tai & E: order 1)",
        "",
        "error = mean over paths of the optimizer at step K minus that of the flow at "
        "t = K; SE = √(SE₁² + SE₂²). The flow is solved by Euler–Maruyama at fixed "
        f"dt = {dt:g} step: its own weak error, O(η·dt) at fixed ηt, is part of what is "
        "measured.",
        "",
        "| observable | η | steps | paths | error ± SE | z | halving order ± SE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, part in w.groupby("observable", sort=False):
        halving = _halving_column(_only(judged, name)["halvings"])
        for (_, row), cell in zip(part.iterrows(), halving, strict=True):
            lines.append(
                f"| {name} | {row['dynamics.eta']:g} | {row['steps']} | "
                f"{row['optimizer.paths']} | {_g(row['error'])} ± {_g(row['error_se'])} | "
                f"{row['z']:+.1f} | {cell} |"
            )
    lines += [
        "",
        "Weak order: weighted least squares of log|error| on log η, weights (error/SE)²; "
        "its SE from the weights, scaled by √(χ²/dof) when that exceeds 1. Halving order: "
        "log2 of |error| at the η before over |error| here, its SE by the delta method.",
        "",
    ]
    for name in w["observable"].unique():
        lines += _judged_line(judged, name)
    return lines


# The sweep section's columns (those a point has), with their headings.
_SWEEP_HEADINGS = {
    "status": "status",
    "distance_final": "distance at the last save",
    "relative_distance_final": "relative",
    "ratio_min": "‖D‖ ratio min",
    "ratio_max": "‖D‖ ratio max",
    "gd_contraction": "(1 − ηλ)²",
    "t5_deviation_max": "max \\|ratio − T5\\|",
    "order": "order in η",
    "order_stderr": "± SE",
    "optimizer.z_max": "optimizer max \\|z\\| (T6)",
    "flow.z_max": "flow max \\|z\\| (T6)",
}


def _sweep_section(sw: pd.DataFrame, meta: Mapping[str, Any]) -> list[str]:
    """One line per point of a sweep: its swept values and the measured numbers of
    ``sweep.parquet``."""
    swept = [c for c in sw.columns if c.startswith("sweep.")]
    cols = [c for c in _SWEEP_HEADINGS if c in sw.columns]
    cols += [c for c in sw.columns if c.startswith("weak_order.")]
    heads = [c[len("sweep.") :] for c in swept] + [_SWEEP_HEADINGS.get(c, c) for c in cols]
    lines = [
        "",
        f"## Sweep: {len(sw)} points over {', '.join(c[len('sweep.') :] for c in swept)}",
        "",
        "The header above describes point 0; every point's tables are in the files below "
        "(columns `point` and `sweep.KEY`), one row per point in `sweep.parquet`.",
        "",
        "| point | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for _, row in sw.iterrows():
        cells = [_cell(row[c]) for c in swept]
        cells += [_g(row[c]) if isinstance(row[c], float) else str(row[c]) for c in cols]
        lines.append(f"| {row['point']} | " + " | ".join(cells) + " |")
    if "order" in sw.columns:
        o = sw["order"].to_numpy(float)
        lines += [
            "",
            f"Order in η (T8; η halved {meta['compare']['halvings']} times at a fixed ηt at "
            f"each point): {np.nanmin(o):.3f} – {np.nanmax(o):.3f} over the points.",
        ]
    return lines


def _sweep_verdicts(judged: Mapping[str, pd.DataFrame]) -> list[str]:
    """Each point's halving orders, fitted order ± SE and verdict (and reading)."""
    if not judged:
        return []
    lines = [
        "",
        "### Verdict per point",
        "",
        "| point | fit | halving orders | order ± SE | verdict |",
        "|---|---|---|---|---|",
    ]
    readings = []
    for row, h in _fits(judged):
        fit = "distance" if row["table"] == "order" else f"weak, {row['observable']}"
        lines.append(
            f"| {row['point']} | {fit} | {_halving_cells(h)} | {row['order']:.3f} ± "
            f"{row['order_stderr']:.3f} | {row['verdict']} |"
        )
        if row["reading"]:
            readings.append(f"- point {row['point']} ({fit}): {row['reading']}.")
    return lines + ([""] + readings if readings else [])


def _files_section(
    tables: Mapping[str, pd.DataFrame], figures: bool, judged: Mapping[str, pd.DataFrame]
) -> list[str]:
    """The files a comparison writes: ``tables`` (with a figure each when ``figures``)
    and the ``judged`` tables (:func:`rankflow.compare.verdict.judge`)."""
    png = ", `{}.png`" if figures else ""
    return [
        "",
        "## Files",
        "",
        *(f"- `{name}.parquet`, `{name}.csv`" + png.format(name) for name in tables),
        *(f"- `{name}.parquet`, `{name}.csv`: judged from the orders" for name in judged),
        "- `config.json`: both resolved configs, the compare options, versions",
        "",
    ]
