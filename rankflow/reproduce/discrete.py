"""Experiment ``discrete``: discrete optimizers against the flows they discretise, and the
noise floor of the balance under the stochastic flow.

Through ``rankflow.compare`` (``sims/reproduce/discrete_gd.toml``, ``discrete_sgd.toml``):

- ``discrete.gd_order`` (T8): GD is first order in η against gradient flow at a fixed
  horizon ηt.
- ``discrete.gd_contraction`` (T5): the measured per-step ratio ‖D_{k+1}‖/‖D_k‖ equals
  the exact one-step identity; its distance from the leading factor (1 − ηλ)² (the O(η²)
  term) is reported.
- ``discrete.sgf_mean`` (T6, m ≠ n): the mean over paths of tr D under the stochastic flow
  against the closed form, and SGD with Gaussian noise (its Euler–Maruyama discretisation
  at dt = 1 step) within the same SE plus an allowance for its O(η) weak bias.

Through sweeps of the stochastic flow (``discrete_floor.toml`` with m = n,
``discrete_floor_rect.toml`` with m ≠ n):

- ``discrete.sgf_floor`` (T6, stationary floor): per grid point, E‖D‖_F² on the second half
  of the run against ``theory.sgf_floor``, ``ησ²[(r+1)E(‖A‖²+‖B‖²) + (m−n)E tr D]/(2λ)``.
- ``discrete.sgf_floor_scaling`` (observation): the floor's power law in σ, η, λ (m = n).

Each claim is a pure function of the experiment's tables (``gd_order_claim``, …), so that
``tests/claims/test_mutants_discrete.py`` can run it on data made under a wrong theory or a wrong
implementation and see it fail. Every prediction comes from ``rankflow.theory``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import compare as compare_lib
from .. import plots, theory
from ..api import run
from ..core import config as config_lib
from ._common import Claim, Context, config_path, fmt, full_overrides, sweep_config, verdict

NAME = "discrete"
# The claims that can pass (each has a mutant in tests/claims/test_mutants_discrete.py).
CLAIMS = (
    "discrete.gd_order",
    "discrete.gd_contraction",
    "discrete.sgf_mean",
    "discrete.sgf_floor",
)
# Monte Carlo tests: |estimate − theory| ≤ 4 standard errors. A correct theory misses it
# with probability 6e-5 per test, ≲ 1e-3 over the ~20 saves or points of a claim.
Z_MAX = 4.0
# T8's tolerance on the fitted order, 0.15: rankflow compare's, whose verdicts judge by the
# same constant (its justification is at rankflow.compare.verdict.ORDER_TOL).
ORDER_TOL = compare_lib.ORDER_TOL
# T5 is an exact identity: float64 rounding (ε = 2.2e-16) amplified at most 10⁵-fold by
# the products and the division by ‖D_k‖ (measured: ≲ 1e-14).
T5_TOL = 1e-10
# SGD with Gaussian noise is T6's SDE discretised by Euler–Maruyama at dt = 1 step: its
# mean of tr D carries a weak bias O(η). Measured on sims/reproduce/discrete_sgd.toml
# (η = 0.1) with 4096 paths: at most 0.026 = 2.9% of T6 (t = 20, 3.9 SE there; 2.5 SE at
# 128 and 512 paths). The allowance: 4 SE plus 5% of T6. Noise of twice the variance moves
# the late mean by ~100% of T6.
SGD_BIAS = 0.05
FLOOR_CONFIGS = ("discrete_floor", "discrete_floor_rect")
# One grid point of the floor sweeps.
FLOOR_POINT = (
    "problem.m",
    "problem.n",
    "model.r",
    "dynamics.sigma",
    "dynamics.eta",
    "dynamics.lam",
)


def validate(mode: str) -> None:
    for name in FLOOR_CONFIGS:
        sweep_config(name, mode)
    for name in ("discrete_gd", "discrete_sgd"):
        config_path(name)
        full_overrides(name, mode)


# --- the stationary floor (T6) ------------------------------------------------------------


def floor_runs(cfg: str | Path | Mapping[str, Any], out: str | Path | None = None) -> pd.DataFrame:
    """Run a stochastic-flow sweep (resuming in ``out``) and return its table with the
    shape columns ``problem.m``, ``problem.n`` that the floor of T6 depends on."""
    cfg = config_lib.resolve(cfg)
    df = run(cfg, out=out, resume=out is not None)
    for key in ("m", "n"):
        if f"problem.{key}" not in df:
            df[f"problem.{key}"] = cfg["problem"][key]
    return df


def _point_floor(g: pd.DataFrame, point: dict[str, Any]) -> dict[str, Any]:
    """T6's stationary floor at one grid point: each path's time averages over the second
    half of the run are one sample; the ratio E‖D‖²/prediction has the delta-method SE of
    a ratio of means (the prediction uses the measured size and trace, noisy as well)."""
    late = g[g["t"] >= g["t"].max() / 2]
    per_path = late.groupby("path").agg(
        d2=("balance_gap", lambda x: float(np.mean(np.square(x)))),
        size=("l2_penalty", lambda x: float(np.mean(2 * x))),
        trace=("balance_trace", "mean"),
    )
    finite = np.isfinite(per_path).all(axis=1)  # a diverged path is NaN from then on
    per_path, k, diverged = per_path[finite], int(finite.sum()), int((~finite).sum())
    args = [point[f"dynamics.{v}"] for v in ("eta", "sigma", "lam")]
    shape = (int(point["model.r"]), int(point["problem.m"]), int(point["problem.n"]))
    d2, size, trace = (per_path[c].to_numpy() for c in ("d2", "size", "trace"))
    pred = np.asarray(theory.sgf_floor(*args, *shape, size, trace))
    # The first term alone: the m = n formula, applied at this m, n.
    first = np.asarray(theory.sgf_floor(*args, *shape, size, 0.0))
    row = dict(point) | {
        "paths": k,
        "diverged": diverged,
        "floor_ms": float(d2.mean()),
        "size": float(size.mean()),
        "balance_trace": float(trace.mean()),
        "predicted_ms": float(np.mean(pred)),
        "floor_rms": float(np.sqrt(d2.mean())),
        "predicted_rms": float(np.sqrt(np.mean(pred))),
    }
    for name, p in (("", pred), ("first_term_", first)):
        ratio = d2.mean() / p.mean()
        se = np.std(d2 - ratio * p, ddof=1) / np.sqrt(k) / p.mean() if k > 1 else np.nan
        row[f"{name}ratio"], row[f"{name}ratio_se"] = float(ratio), float(se)
    return row


def floor_table(df: pd.DataFrame) -> pd.DataFrame:
    """T6 (stationary floor), per grid point of ``floor_runs`` tables: the measured
    E‖D‖_F² (``floor_ms``), E[‖A‖²+‖B‖²] (``size``) and E tr D (``balance_trace``) over the
    second half of the run and the finite paths (``diverged``: the others),
    ``theory.sgf_floor`` of them (``predicted_ms``), and the ratio with its SE;
    ``first_term_ratio`` is the same against the m = n formula (the (m − n) E tr D term
    dropped)."""
    rows = [
        _point_floor(g, dict(zip(FLOOR_POINT, key, strict=True)))
        for key, g in df.groupby(list(FLOOR_POINT))
    ]
    return pd.DataFrame(rows)


def scaling(floor: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``log floor_rms = c + a log σ + b log η + d log λ``: (a, b, d) and
    their standard errors (an observation beside T6's floor)."""
    X = np.column_stack(
        [np.ones(len(floor))]
        + [np.log(floor[k].to_numpy()) for k in ("dynamics.sigma", "dynamics.eta", "dynamics.lam")]
    )
    y = np.log(floor["floor_rms"].to_numpy())
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = max(len(y) - X.shape[1], 1)
    resid = y - X @ coef
    cov = np.linalg.inv(X.T @ X) * float(resid @ resid) / dof
    return coef[1:], np.sqrt(np.diag(cov))[1:]


def _square(floor: pd.DataFrame) -> pd.Series:
    return floor["problem.m"] == floor["problem.n"]


# --- claims: pure functions of the tables -----------------------------------------------


def gd_order_claim(order: pd.DataFrame) -> Claim:
    """T8: from ``compare``'s ``order`` table (GD against GF at η/2^j, fixed ηt), the
    fitted order of the distance in η is 1 to ``ORDER_TOL``."""
    p, se = float(order["order"].iloc[0]), float(order["order_stderr"].iloc[0])
    return Claim(
        experiment=NAME,
        name="discrete.gd_order",
        source="T8",
        statement="GD is the explicit Euler discretisation of gradient flow (dt = 1 step): "
        "at a fixed horizon ηt the distance between them is first order in η.",
        prediction="distance ∝ η¹ (halve η, double the steps: the distance halves)",
        measurement=f"order {p:.3f} ± {se:.3f} over η = "
        + ", ".join(f"{v:g}" for v in order["dynamics.eta"])
        + f" at ηt = {order['horizon'].iloc[0]:g}; distances "
        + ", ".join(fmt(float(v), 3) for v in order["distance"]),
        tolerance=f"|order − 1| ≤ {ORDER_TOL:g} (T8: order 1 up to the O(η) correction at "
        "the largest η; non-convergent 0 and second-order 2 miss it by ≥ 0.85)",
        verdict=verdict(abs(p - 1) <= ORDER_TOL),
        figure="discrete_gd_order.png",
    )


def gd_contraction_claim(contraction: pd.DataFrame) -> Claim:
    """T5: from ``compare``'s ``contraction`` table (``theory.gd_balance_step`` at every
    step of a window), the measured ratio equals T5's one-step ratio and D_{k+1} its
    matrix, to float64 rounding (``T5_TOL``)."""
    c = contraction
    dev = float(c["t5_deviation"].max())
    resid = float(c["t5_residual"].max())
    return Claim(
        experiment=NAME,
        name="discrete.gd_contraction",
        source="T5",
        statement="One GD step maps D = AᵀA − BᵀB exactly to (1 − ηλ)²D + η²(BᵀGᵀGB − "
        "AᵀGGᵀA): the contraction is (1 − ηλ)² up to an O(η²) term.",
        prediction="measured ratio ‖D_(k+1)‖/‖D_k‖ = T5's one-step ratio; (1 − ηλ)² = "
        f"{float(c['gd_contraction'].iloc[0]):.8f}",
        measurement=f"steps {c['t'].iloc[0]:g}–{c['t'].iloc[-1] + 1:g}: max |ratio − T5| = "
        f"{fmt(dev)}, max relative residual of the matrix identity {fmt(resid)}; ratio "
        f"{c['ratio'].min():.8f}–{c['ratio'].max():.8f}, max |ratio − (1 − ηλ)²| = "
        f"{fmt(float(c['gd_deviation'].max()))} (the η² term)",
        tolerance=f"|ratio − T5| ≤ {T5_TOL:g} and residual ≤ {T5_TOL:g} (an exact identity: "
        "float64 rounding, ε = 2.2e-16, amplified ≤ 10⁵-fold)",
        verdict=verdict(dev <= T5_TOL and resid <= T5_TOL),
        figure="discrete_gd_contraction.png",
    )


def _max_abs(z: pd.Series) -> tuple[float, int]:
    """max |z| over the finite entries and their count (NaN when there are none)."""
    z = np.abs(z.to_numpy(np.float64))
    z = z[np.isfinite(z)]
    return (float(z.max()) if z.size else float("nan")), int(z.size)


def sgd_excess(opt: pd.DataFrame) -> tuple[float, float]:
    """SGD with Gaussian noise against T6: the largest ``|mean − T6| / (Z_MAX·SE +
    SGD_BIAS·|T6|)`` over the saves (≤ 1 passes) and the largest |z|."""
    dev = (opt["mean"] - opt["theory"]).abs()
    allowed = Z_MAX * opt["se"] + SGD_BIAS * opt["theory"].abs()
    ok = np.isfinite(dev) & np.isfinite(allowed)
    excess = float((dev[ok] / allowed[ok]).max()) if ok.any() else float("nan")
    return excess, _max_abs(opt["z"])[0]


def sgf_mean_claim(sde: pd.DataFrame) -> Claim:
    """T6 (mean): from ``compare``'s ``sde`` table (``theory.sgf_mean_balance_trace`` at
    every save), the stochastic flow's mean of tr D over paths is within ``Z_MAX`` SE;
    SGD with Gaussian noise, its Euler–Maruyama discretisation at dt = 1 step, within
    ``Z_MAX`` SE plus its weak bias allowance ``SGD_BIAS``·|T6|."""
    flow = sde[sde["role"] == "flow"]
    opt = sde[sde["role"] == "optimizer"]
    zf, saves = _max_abs(flow["z"])
    excess, zo = sgd_excess(opt)
    s, last = sde.iloc[0], flow.iloc[-1]
    ok = zf <= Z_MAX and (len(opt) == 0 or excess <= 1.0)
    return Claim(
        experiment=NAME,
        name="discrete.sgf_mean",
        source="T6",
        statement="Under the stochastic gradient flow E[tr D(t)] has a closed form: "
        "e^{−2ηλt} tr D(0) + r ησ²(m−n)/(2λ) (1 − e^{−2ηλt}); with m ≠ n the noise moves "
        "the mean away from balance. SGD with Gaussian gradient noise follows it up to its "
        "O(η) discretisation bias.",
        prediction=f"T6, m = {int(s['problem.m'])}, n = {int(s['problem.n'])}: "
        f"{fmt(float(last['theory']))} at t = {last['t']:g}",
        measurement=f"stochastic flow: max |z| = {zf:.2f} over {saves} saves, "
        f"{int(flow['paths'].max())} paths; at t = {last['t']:g} mean "
        f"{fmt(float(last['mean']))} ± {fmt(float(last['se']))}. SGD with "
        f"Gaussian noise: max |z| = {zo:.2f}, deviation at most {excess:.2f} of its allowance",
        tolerance=f"stochastic flow: |z| ≤ {Z_MAX:g} at every save (z in Monte Carlo SE, "
        f"std/√paths); SGD with Gaussian noise: |mean − T6| ≤ {Z_MAX:g} SE + "
        f"{SGD_BIAS:g}·|T6| at every save (Euler–Maruyama's weak bias at η = 0.1: measured "
        "0.026 = 2.9% of T6 at t = 20 with 4096 paths, 3.9 SE there)",
        verdict=verdict(ok),
        figure="discrete_sgd_sde.png",
    )


def _floor_part(floor: pd.DataFrame, label: str) -> str:
    z = (floor["ratio"] - 1) / floor["ratio_se"]
    return (
        f"{label}: ratio {floor['ratio'].min():.3f}–{floor['ratio'].max():.3f} over "
        f"{len(floor)} points, max |z| = {_max_abs(z)[0]:.2f}"
    )


def sgf_floor_claim(floor: pd.DataFrame) -> Claim:
    """T6 (stationary floor): from :func:`floor_table`, E‖D‖² over ``theory.sgf_floor``
    is 1 within ``Z_MAX`` SE at every point, m = n and m ≠ n."""
    z, points = _max_abs((floor["ratio"] - 1) / floor["ratio_se"])
    sq, rect = floor[_square(floor)], floor[~_square(floor)]
    parts = [
        _floor_part(part, label) for part, label in ((sq, "m = n"), (rect, "m ≠ n")) if len(part)
    ]
    if len(rect):
        zf, _ = _max_abs((rect["first_term_ratio"] - 1) / rect["first_term_ratio_se"])
        parts.append(
            f"the m = n formula at m ≠ n would give ratio up to "
            f"{rect['first_term_ratio'].max():.3f} (max |z| = {zf:.1f})"
        )
    shapes = ", ".join(
        f"{m}×{n}" for m, n in floor[["problem.m", "problem.n"]].drop_duplicates().to_numpy()
    )
    return Claim(
        experiment=NAME,
        name="discrete.sgf_floor",
        source="T6 (derived, Itô)",
        statement="Under the stochastic flow the balance gap does not vanish: it settles "
        "where E‖D‖_F² = ησ²[(r+1)E(‖A‖_F²+‖B‖_F²) + (m−n)E tr D]/(2λ).",
        prediction=f"measured E‖D‖²/predicted = 1 at every (σ, η, λ), shapes m×n = {shapes}",
        measurement="; ".join(parts)
        + f" ({int(floor['paths'].min())}+ paths each, {int(floor['diverged'].sum())} diverged)",
        tolerance=f"|ratio − 1| ≤ {Z_MAX:g} SE at every point (SE over paths: each path's "
        "time average over the second half one sample)",
        verdict=verdict(points == len(floor) > 0 and z <= Z_MAX and floor["diverged"].sum() == 0),
        figure="discrete_floor.png",
    )


def sgf_floor_scaling_claim(floor: pd.DataFrame) -> Claim:
    """Observation beside T6's floor: its power law in σ, η, λ over the m = n points."""
    (a, b, d), (sa, sb, sd) = scaling(floor[_square(floor)])
    return Claim(
        experiment=NAME,
        name="discrete.sgf_floor_scaling",
        source="observation",
        statement="The floor's scaling in σ, η and λ at m = n, fitted as floor ∝ σ^a η^b λ^c.",
        prediction="a = 1, b = ½, c = −½ from T6's floor, up to the λ-dependence of ‖A‖² + ‖B‖²",
        measurement=f"a = {a:.3f} ± {sa:.3f}, b = {b:.3f} ± {sb:.3f}, c = {d:.3f} ± {sd:.3f}",
        tolerance="—",
        verdict="observation",
        figure="discrete_floor.png",
    )


# --- running ----------------------------------------------------------------------------


def _compare(ctx: Context, name: str) -> dict[str, pd.DataFrame]:
    tables = compare_lib.compare(
        config_path(name),
        out=ctx.runs(name),
        overrides=full_overrides(name, ctx.mode),
        figures=plots.write_compare_figures,
    )
    for table, df in tables.items():
        ctx.table(f"{name}_{table}", df)
        shutil.copyfile(ctx.runs(name) / f"{table}.png", ctx.figures / f"{name}_{table}.png")
    return tables


def run_experiment(ctx: Context) -> None:
    gd = _compare(ctx, "discrete_gd")
    sgd = _compare(ctx, "discrete_sgd")
    ctx.claims.append(gd_order_claim(gd["order"]))
    ctx.claims.append(gd_contraction_claim(gd["contraction"]))
    ctx.claims.append(sgf_mean_claim(sgd["sde"]))

    # run_id counts from 0 in each config: the config column tells the runs apart.
    df = pd.concat(
        [
            floor_runs(sweep_config(name, ctx.mode), ctx.runs(name)).assign(config=name)
            for name in FLOOR_CONFIGS
        ],
        ignore_index=True,
    )
    ctx.table("discrete_floor_runs", df)
    floor = floor_table(df)
    ctx.table("discrete_floor", floor)
    (exponents, _) = scaling(floor[_square(floor)])
    plots.floor_figure(df, floor, exponents, ctx.figures / "discrete_floor.png")
    ctx.claims.append(sgf_floor_claim(floor))
    ctx.claims.append(sgf_floor_scaling_claim(floor))
