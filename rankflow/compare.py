"""``rankflow compare``: a discrete optimizer next to the flow it discretises.

A config names a discrete optimizer (``dynamics.kind`` in ``config.FLOW_OF``: gd,
sgd_gaussian, momentum, momentum_coupled) with its problem, init and hyperparameters.
:func:`compare` runs the optimizer and its flow (``FLOW_OF[kind]``) on the same problem,
start and hyperparameters (same seed ⇒ same data and start) through
``simulate.program_for(point, save="states")``, and measures, with time t in optimizer
steps (step k against the flow at t = k):

1. ``trajectory``: ‖θ_k − θ(k)‖_F with θ = (A, B) concatenated (THEORY.md T8). For
   sgd_gaussian against the stochastic flow the two paths use different noise, so the
   distance is that of the *means over paths*, next to the Monte Carlo floor it would
   have if the true means were equal.
2. ``contraction`` (gd only): the per-step ratio ‖D_{k+1}‖_F/‖D_k‖_F, ``D = AᵀA − BᵀB``,
   at every step of a window, next to the exact one-step prediction of T5
   (``theory.gd_balance_step`` with ``G = ∇L(A_kB_kᵀ)``), its leading factor (1 − ηλ)²
   and the gradient-flow factor e^{−2ηλ} (T4).
3. ``order`` (deterministic pairs): η, η/2, …, η/2^h with the horizon fixed in units of
   ηt (steps doubled at each halving; for momentum μ is halved with η, which keeps the
   flow's path in ηt fixed); the distance at the horizon and the fitted order
   (``theory.convergence_order``, T8: expect 1).
4. ``sde`` (sgd_gaussian): mean, std, 10–90% quantiles and Monte Carlo standard error
   of ``balance_trace`` = tr D over ``dynamics.paths`` paths for the optimizer and the
   stochastic flow, next to the closed form of T6 (``theory.sgf_mean_balance_trace``).

The flow is solved as the config's ``[solver]`` says; unset, ODE flows use adaptive
tsit5 and the stochastic flow fixed-step ShARK with dt = 0.1.

Options of the comparison itself are the keys of :data:`OPTIONS`, given as
``--set compare.KEY=VALUE``, ``overrides={"compare.KEY": value}``, or a ``[compare]``
table of the config (a config with that table is for ``rankflow compare`` only).
Tables (columns in :data:`COLUMNS`) are written as parquet and CSV, with ``summary.md``
and ``config.json``; figures are the caller's (``rankflow compare`` passes
``figures=rankflow.plots.write_compare_figures``: one PNG per table). Nothing here draws.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from . import config as config_lib
from . import theory
from .config import ConfigError
from .simulate import PARAM_KEYS, STATUS, Program, params_of, program_for

__all__ = ["COLUMNS", "OPTIONS", "compare", "write"]

# --- options ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    paths: int = 64
    window_start: int = 0
    window: int = 50
    halvings: int = 3
    order_t1: int | None = None


# key: (types, check, meaning); defaults are those of ``Options``.
OPTIONS: dict[str, tuple[tuple[type, ...], Callable[[Any], bool], str]] = {
    "paths": (
        (int,),
        lambda v: v >= 2,
        "Monte Carlo paths of sgd_gaussian and its flow when dynamics.paths = 1 (≥ 2)",
    ),
    "window_start": ((int,), lambda v: v >= 0, "gd: first step of the contraction window"),
    "window": ((int,), lambda v: v >= 1, "gd: steps in the contraction window (≥ 1)"),
    "halvings": (
        (int,),
        lambda v: v >= 1,
        "deterministic pairs: η is halved this many times for the order (≥ 1)",
    ),
    "order_t1": (
        (int,),
        lambda v: v >= 1,
        "horizon of the order measurement in steps at the config's η "
        "(default save.t1); it is doubled with each halving",
    ),
}


def _options(table: Mapping[str, Any]) -> Options:
    values = {}
    for key, value in table.items():
        if key not in OPTIONS:
            raise ConfigError(f"compare.{key}: unknown key; compare keys are {', '.join(OPTIONS)}")
        types, check, doc = OPTIONS[key]
        if isinstance(value, bool) or not isinstance(value, types) or not check(value):
            raise ConfigError(f"compare.{key}: {doc}; got {value!r}")
        values[key] = value
    return Options(**values)


def _split(raw: dict[str, Any], overrides: Mapping[str, Any] | None):
    """The compare options apart from the config proper (which ``config`` validates)."""
    table = raw.pop("compare", None) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"compare: expected a table, got {table!r}")
    table = dict(table)
    rest = {}
    for key, value in (overrides or {}).items():
        if key.startswith("compare."):
            table[key[len("compare.") :]] = value
        else:
            rest[key] = value
    return _options(table), rest


# --- tables ---------------------------------------------------------------------------

# The setting of a comparison, repeated in every table so that figures read it.
SETTING = (
    "dynamics.kind",
    "flow.kind",
    "problem.kind",
    "problem.m",
    "problem.n",
    "model.r",
    "init.kind",
    "solver.method",
    "solver.adaptive",
    "solver.dt",
    "x64",
    "dynamics.eta",
    "dynamics.lam",
    "dynamics.sigma",
    "dynamics.mu",
)

COLUMNS: dict[str, tuple[str, ...]] = {
    # One row per save time of the config (t in steps).
    "trajectory": SETTING
    + (
        "t",
        "measure",  # "paths" (deterministic) or "mean over K paths"
        "distance",  # ‖θ_k − θ(k)‖_F (of the means over paths for sgd_gaussian)
        "relative_distance",  # distance / ‖θ(k)‖_F
        "mc_floor",  # sgd_gaussian: √(Σ Var/K) of both, the distance of equal means; NaN
        "optimizer.balance_gap",  # ‖AᵀA − BᵀB‖_F (mean over paths)
        "flow.balance_gap",
        "optimizer.balance_trace",  # tr(AᵀA − BᵀB) (mean over paths)
        "flow.balance_trace",
        "optimizer.status",  # worst status over paths: ok / diverged / max_steps
        "flow.status",
    ),
    # gd: one row per step k of the window; the ratio is from step k to k + 1.
    "contraction": SETTING
    + (
        "t",
        "gap",  # ‖D_k‖_F
        "ratio",  # ‖D_{k+1}‖_F / ‖D_k‖_F, measured
        "t5_ratio",  # ‖T5 step of D_k‖_F / ‖D_k‖_F (theory.gd_balance_step, exact)
        "gd_contraction",  # (1 − ηλ)²
        "gf_contraction",  # e^{−2ηλ}
        "t5_deviation",  # |ratio − t5_ratio|
        "gd_deviation",  # |ratio − (1 − ηλ)²|
        "gf_deviation",  # |ratio − e^{−2ηλ}|
        "t5_residual",  # ‖D_{k+1} − T5 step‖_F / ‖D_{k+1}‖_F (the matrix identity)
    ),
    # Deterministic pairs: one row per learning rate (dynamics.eta varies here).
    "order": SETTING
    + (
        "steps",  # horizon in steps, order_t1 · 2^j
        "horizon",  # η · steps, the same for every row
        "distance",  # ‖θ_K − θ(K)‖_F at the horizon
        "relative_distance",
        "order",  # fitted order p of distance ≈ C ηᵖ (all rows)
        "order_stderr",
    ),
    # sgd_gaussian: one row per save time and role (optimizer / flow).
    "sde": SETTING
    + (
        "t",
        "role",  # "optimizer" (dynamics.kind) or "flow" (flow.kind)
        "paths",  # finite paths at t
        "mean",  # mean of balance_trace over paths
        "std",  # its std over paths (ddof 1)
        "q10",
        "q90",
        "se",  # Monte Carlo standard error of the mean, std/√paths
        "theory",  # T6: E[tr D(t)] of the stochastic flow
        "z",  # (mean − theory)/se
    ),
}

# --- running ----------------------------------------------------------------------------


def _with_saves(cfg: Mapping[str, Any], ts: list[int]) -> dict[str, Any]:
    """The point of ``cfg`` saving at the whole steps ``ts`` (validated again)."""
    point = copy.deepcopy(dict(cfg))
    point["save"] = dict(point["save"], ts=[float(t) for t in ts])
    return config_lib.expand(config_lib.resolve(point))[0]


def _flow_config(cfg: dict[str, Any], solver_set: set[str]) -> dict[str, Any]:
    """``cfg`` with its flow in place of the optimizer; solver keys the user did not set
    take the flow's defaults (fixed-step ShARK with dt = 0.1 for the stochastic flow)."""
    flow = copy.deepcopy(cfg)
    kind = config_lib.FLOW_OF[cfg["dynamics"]["kind"]]
    flow["dynamics"]["kind"] = kind
    solver = flow["solver"]
    for key in ("method", "adaptive"):
        if key not in solver_set:
            solver[key] = None
    if kind in config_lib.SDE_DYNAMICS:
        if "method" not in solver_set:
            solver["method"] = "shark"
        if "dt" not in solver_set:
            solver["dt"] = 0.1
    return config_lib.resolve(flow)


def _run(
    program: Program, point: Mapping[str, Any], runs: list[dict[str, Any]]
) -> dict[str, np.ndarray]:
    """Run ``program`` over ``runs`` (each: changes to the point's parameters, e.g.
    ``{"path": 3}``); returns A, B as float64 ``(runs, saves, ·, ·)`` and status."""
    rows = [params_of(point, 0) | r for r in runs]
    out = program.run({k: np.array([r[k] for r in rows]) for k in PARAM_KEYS})
    A, B = out["theta"]
    return {
        "A_raw": A,
        "B_raw": B,
        "A": A.astype(np.float64),
        "B": B.astype(np.float64),
        "status": out["status"],
    }


def _index(program: Program, ts) -> np.ndarray:
    where = {int(round(t)): i for i, t in enumerate(program.ts)}
    return np.array([where[int(t)] for t in ts])


def _frob(X: np.ndarray, axes=(-2, -1)) -> np.ndarray:
    return np.sqrt(np.sum(X**2, axis=axes))


def _theta_distance(A1, B1, A2, B2) -> tuple[np.ndarray, np.ndarray]:
    """‖(A1, B1) − (A2, B2)‖_F and ‖(A2, B2)‖_F over the last two axes."""
    dist = np.sqrt(_frob(A1 - A2) ** 2 + _frob(B1 - B2) ** 2)
    return dist, np.sqrt(_frob(A2) ** 2 + _frob(B2) ** 2)


def _balance_np(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return np.swapaxes(A, -1, -2) @ A - np.swapaxes(B, -1, -2) @ B


def _status(codes: np.ndarray) -> np.ndarray:
    """Worst status over paths (axis 0), as strings."""
    return np.array(STATUS)[np.max(codes, axis=0)]


def _setting(opt: Mapping[str, Any], flow: Mapping[str, Any], m: int, n: int) -> dict:
    s, d = flow["solver"], opt["dynamics"]
    return {
        "dynamics.kind": d["kind"],
        "flow.kind": flow["dynamics"]["kind"],
        "problem.kind": opt["problem"]["kind"],
        "problem.m": m,
        "problem.n": n,
        "model.r": opt["model"]["r"],
        "init.kind": opt["init"]["kind"],
        "solver.method": s["method"],
        "solver.adaptive": bool(s["adaptive"]),
        "solver.dt": float(s["dt"]),
        "x64": bool(opt["x64"]),
        "dynamics.eta": float(d["eta"]),
        "dynamics.lam": float(d["lam"]),
        "dynamics.sigma": float(d["sigma"]),
        "dynamics.mu": float(d["mu"]),
    }


def _frame(name: str, setting: dict, cols: dict[str, Any]) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    df = pd.DataFrame({**{k: [v] * n for k, v in setting.items()}, **cols})
    return df[list(COLUMNS[name])]


def _trajectory(setting, ts, opt, flow, i_opt, i_flow, stochastic) -> pd.DataFrame:
    # Deterministic pairs: run 0 has the config's η (the others serve the order).
    runs = slice(None) if stochastic else slice(0, 1)
    A1, B1 = opt["A"][runs, i_opt], opt["B"][runs, i_opt]
    A2, B2 = flow["A"][runs, i_flow], flow["B"][runs, i_flow]
    K = A1.shape[0]
    if stochastic:
        dist, norm = _theta_distance(A1.mean(0), B1.mean(0), A2.mean(0), B2.mean(0))
        var = sum(X.var(axis=0, ddof=1).sum(axis=(-2, -1)) for X in (A1, B1, A2, B2))
        # Where all paths coincide (t = 0) the variance is rounding: the floor is 0.
        same = np.all(np.ptp(A1, axis=0) == 0, axis=(-2, -1))
        floor = np.where(same, 0.0, np.sqrt(var / K))
        measure = f"mean over {K} paths"
    else:
        dist, norm = _theta_distance(A1[0], B1[0], A2[0], B2[0])
        floor = np.full(len(ts), np.nan)
        measure = "paths"
    return _frame(
        "trajectory",
        setting,
        {
            "t": np.asarray(ts, float),
            "measure": [measure] * len(ts),
            "distance": dist,
            "relative_distance": dist / norm,
            "mc_floor": floor,
            "optimizer.balance_gap": _frob(_balance_np(A1, B1)).mean(0),
            "flow.balance_gap": _frob(_balance_np(A2, B2)).mean(0),
            "optimizer.balance_trace": (_frob(A1) ** 2 - _frob(B1) ** 2).mean(0),
            "flow.balance_trace": (_frob(A2) ** 2 - _frob(B2) ** 2).mean(0),
            "optimizer.status": _status(opt["status"][runs, i_opt]),
            "flow.status": _status(flow["status"][runs, i_flow]),
        },
    )


def _contraction(setting, program, point, opt, steps) -> pd.DataFrame:
    """T5 at every step of the window, with G = ∇L from the problem's loss."""
    ii = _index(program, steps)
    eta, lam = point["dynamics"]["eta"], point["dynamics"]["lam"]
    with jax.enable_x64(point["x64"]):
        A = jnp.asarray(opt["A_raw"][0, ii])
        B = jnp.asarray(opt["B_raw"][0, ii])
        data = program.data(params_of(point, 0))
        grad_W = jax.vmap(jax.grad(lambda W: program.problem.loss(W, data)))
        G = grad_W(A @ jnp.swapaxes(B, -1, -2))
        D = np.asarray(jax.vmap(theory.balance)(A, B), np.float64)
        step = jax.vmap(theory.gd_balance_step, in_axes=(0, 0, 0, None, None))
        D_t5 = np.asarray(step(A[:-1], B[:-1], G[:-1], eta, lam), np.float64)
    with jax.enable_x64(True):  # exact constants, whatever the run's precision
        gd_c = float(theory.gd_contraction(eta, lam))
        gf_c = float(theory.gf_contraction(eta, lam))
    gap = _frob(D)
    ratio = gap[1:] / gap[:-1]
    t5_ratio = _frob(D_t5) / gap[:-1]
    n = len(ratio)
    return _frame(
        "contraction",
        setting,
        {
            "t": np.asarray(steps[:-1], float),
            "gap": gap[:-1],
            "ratio": ratio,
            "t5_ratio": t5_ratio,
            "gd_contraction": np.full(n, gd_c),
            "gf_contraction": np.full(n, gf_c),
            "t5_deviation": np.abs(ratio - t5_ratio),
            "gd_deviation": np.abs(ratio - gd_c),
            "gf_deviation": np.abs(ratio - gf_c),
            "t5_residual": _frob(D[1:] - D_t5) / gap[1:],
        },
    )


def _order(setting, runs, horizons, opt, flow, i_opt, i_flow) -> pd.DataFrame:
    j = np.arange(len(runs))
    dist, norm = _theta_distance(
        opt["A"][j, i_opt], opt["B"][j, i_opt], flow["A"][j, i_flow], flow["B"][j, i_flow]
    )
    etas = np.array([r["dynamics.eta"] for r in runs])
    try:
        p, se = theory.convergence_order(etas, dist)
    except ValueError:  # fewer than two usable points (diverged, or zero distance)
        p, se = math.nan, math.nan
    df = _frame(
        "order",
        setting,
        {
            "steps": np.asarray(horizons, np.int64),
            "horizon": etas * np.asarray(horizons, float),
            "distance": dist,
            "relative_distance": dist / norm,
            "order": np.full(len(runs), p),
            "order_stderr": np.full(len(runs), se),
        },
    )
    df["dynamics.eta"] = etas
    df["dynamics.mu"] = [float(r["dynamics.mu"]) for r in runs]
    return df


def _sde(setting, ts, opt, flow, i_opt, i_flow, point, m, n) -> pd.DataFrame:
    d = point["dynamics"]
    trace0 = float(_frob(opt["A"][0, 0]) ** 2 - _frob(opt["B"][0, 0]) ** 2)  # t = 0
    with jax.enable_x64(True):
        t6 = np.asarray(
            theory.sgf_mean_balance_trace(
                np.float64(trace0),
                d["eta"],
                d["lam"],
                d["sigma"],
                m,
                n,
                point["model"]["r"],
                np.asarray(ts, np.float64),
            )
        )
    frames = []
    for role, res, ii in (("optimizer", opt, i_opt), ("flow", flow, i_flow)):
        trace = _frob(res["A"][:, ii]) ** 2 - _frob(res["B"][:, ii]) ** 2  # (paths, saves)
        count = np.sum(np.isfinite(trace), axis=0)
        mean = np.nanmean(trace, axis=0)
        std = np.nanstd(trace, axis=0, ddof=1)
        se = std / np.sqrt(count)
        # Where all paths coincide (t = 0) the spread is rounding: z is undefined.
        spread = np.nanmax(trace, axis=0) > np.nanmin(trace, axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(spread & (se > 0), (mean - t6) / se, np.nan)
        frames.append(
            _frame(
                "sde",
                setting,
                {
                    "t": np.asarray(ts, float),
                    "role": [role] * len(ts),
                    "paths": count,
                    "mean": mean,
                    "std": std,
                    "q10": np.nanquantile(trace, 0.1, axis=0),
                    "q90": np.nanquantile(trace, 0.9, axis=0),
                    "se": se,
                    "theory": t6,
                    "z": z,
                },
            )
        )
    return pd.concat(frames, ignore_index=True)


def compare(
    config: str | Path | Mapping[str, Any],
    out: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    figures: Callable[[Mapping[str, pd.DataFrame], Path], Any] | None = None,
) -> dict[str, pd.DataFrame]:
    """Run a discrete optimizer and its flow on the same problem, start and
    hyperparameters, and measure how they differ (module docstring, THEORY.md T4–T6, T8).

    Args:
      config: a TOML path or nested dict naming a discrete optimizer with a flow
        counterpart (``dynamics.kind`` in ``config.FLOW_OF``), without a ``[sweep]``;
        an optional ``[compare]`` table sets :data:`OPTIONS`.
      out: a directory to write the tables (``NAME.parquet``, ``NAME.csv``),
        ``summary.md`` and ``config.json`` into.
      overrides: dotted keys, e.g. ``{"dynamics.lam": 0.1, "compare.window": 20}``.
      figures: ``figures(tables, out)`` draws the tables' figures into ``out`` (with
        ``out``), e.g. ``rankflow.plots.write_compare_figures`` (``NAME.png``, as
        ``rankflow compare`` does); ``summary.md`` then lists them.

    Returns:
      ``{"trajectory", "contraction" (gd), "order" (deterministic pairs), "sde"
      (sgd_gaussian)}`` → DataFrames with the columns of :data:`COLUMNS`.

    Raises:
      ConfigError: on an invalid config or option, or a dynamics without a flow.
    """
    t_start = time.perf_counter()
    raw = config_lib.load_config(config)
    options, rest = _split(raw, overrides)
    solver_set = set((raw.get("solver") or {}).keys())
    solver_set |= {k.split(".", 1)[1] for k in rest if k.startswith("solver.")}
    cfg = config_lib.resolve(raw, rest)
    kind = cfg["dynamics"]["kind"]
    if kind not in config_lib.FLOW_OF:
        raise ConfigError(
            f"dynamics.kind: compare needs a discrete optimizer with a flow counterpart, "
            f"one of {', '.join(config_lib.FLOW_OF)}; got {kind!r}"
        )
    if cfg["sweep"]:
        raise ConfigError(
            f"sweep: compare runs one point, not a sweep (over {', '.join(cfg['sweep'])}); "
            "remove [sweep] or use --set KEY=VALUE"
        )
    stochastic = kind == "sgd_gaussian"
    if stochastic and cfg["dynamics"]["paths"] == 1:
        cfg["dynamics"]["paths"] = options.paths
    flow_cfg = _flow_config(cfg, solver_set)

    ts = [int(round(t)) for t in config_lib.save_times(cfg)]
    order_t1 = options.order_t1 if options.order_t1 is not None else int(round(ts[-1]))
    horizons = [] if stochastic else [order_t1 * 2**j for j in range(options.halvings + 1)]
    window = []
    if kind == "gd":
        window = list(range(options.window_start, options.window_start + options.window + 1))
    opt_point = _with_saves(cfg, sorted({0, *ts, *horizons, *window}))
    flow_point = _with_saves(flow_cfg, sorted({0, *ts, *horizons}))
    opt_prog = program_for(opt_point, save="states")
    flow_prog = program_for(flow_point, save="states")
    m, n = opt_prog.problem.shape

    d = cfg["dynamics"]
    if stochastic:
        runs = [{"path": p} for p in range(d["paths"])]
    else:
        # Run j has η/2^j (and μ/2^j for momentum): the flow's path in ηt is unchanged.
        scale_mu = kind in config_lib.MOMENTUM_DYNAMICS
        runs = [
            {
                "dynamics.eta": d["eta"] / 2**j,
                "dynamics.mu": d["mu"] / 2**j if scale_mu else d["mu"],
            }
            for j in range(options.halvings + 1)
        ]
    opt = _run(opt_prog, opt_point, runs)
    flow = _run(flow_prog, flow_point, runs)

    setting = _setting(cfg, flow_cfg, m, n)
    tables = {
        "trajectory": _trajectory(
            setting, ts, opt, flow, _index(opt_prog, ts), _index(flow_prog, ts), stochastic
        )
    }
    if kind == "gd":
        tables["contraction"] = _contraction(setting, opt_prog, opt_point, opt, window)
    if not stochastic:
        tables["order"] = _order(
            setting,
            runs,
            horizons,
            opt,
            flow,
            _index(opt_prog, horizons),
            _index(flow_prog, horizons),
        )
    else:
        tables["sde"] = _sde(
            setting, ts, opt, flow, _index(opt_prog, ts), _index(flow_prog, ts), cfg, m, n
        )
    if out is not None:
        meta = {
            "optimizer": config_lib.to_json(cfg),
            "flow": config_lib.to_json(flow_cfg),
            "compare": asdict(options) | {"order_t1": order_t1},
            "seconds": round(time.perf_counter() - t_start, 2),
        }
        write(out, tables, meta, figures)
    return tables


# --- output -----------------------------------------------------------------------------


def write(
    out: str | Path,
    tables: Mapping[str, pd.DataFrame],
    meta: Mapping[str, Any],
    figures: Callable[[Mapping[str, pd.DataFrame], Path], Any] | None = None,
) -> Path:
    """Write ``tables`` (parquet, CSV), their figures (``figures(tables, out)``, when
    given), ``summary.md`` and ``config.json`` (``meta`` plus versions and devices) into
    the directory ``out``."""
    from .store import provenance

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.to_parquet(out / f"{name}.parquet", index=False)
        df.to_csv(out / f"{name}.csv", index=False)
    if figures is not None:
        figures(tables, out)
    (out / "summary.md").write_text(summary(tables, meta, figures=figures is not None))
    (out / "config.json").write_text(
        json.dumps(dict(meta) | provenance(), indent=2, default=str) + "\n"
    )
    return out


def _g(x: float) -> str:
    return f"{x:.4g}" if np.isfinite(x) else "nan"


def summary(
    tables: Mapping[str, pd.DataFrame], meta: Mapping[str, Any], *, figures: bool = True
) -> str:
    """The measured numbers of a comparison, as Markdown (its file list naming
    ``NAME.png`` when ``figures``)."""
    traj = tables["trajectory"]
    s = traj.iloc[0]
    opt, flow = meta["optimizer"], meta["flow"]
    solver = flow["solver"]
    solve = (
        f"{solver['method']}, adaptive (rtol {solver['rtol']:g}, atol {solver['atol']:g})"
        if solver["adaptive"]
        else f"{solver['method']}, fixed dt = {solver['dt']:g}"
    )
    lines = [
        f"# rankflow compare: {s['dynamics.kind']} vs {s['flow.kind']}",
        "",
        f"Problem {s['problem.kind']} ({s['problem.m']}×{s['problem.n']}), r = {s['model.r']}, "
        f"init {opt['init']['kind']} (scale {opt['init']['scale']:g}), seed {opt['seed']}, "
        f"η = {s['dynamics.eta']:g}, λ = {s['dynamics.lam']:g}"
        + (f", σ = {s['dynamics.sigma']:g}" if s["dynamics.kind"] == "sgd_gaussian" else "")
        + (
            f", μ = {s['dynamics.mu']:g}"
            if s["dynamics.kind"] in config_lib.MOMENTUM_DYNAMICS
            else ""
        )
        + f", {'float64' if s['x64'] else 'float32'}. Flow solver: {solve}. "
        f"Time t is in optimizer steps; step k is compared with the flow at t = k. "
        f"Run time {meta.get('seconds', float('nan')):.1f} s.",
        "",
        "## Trajectory distance",
        "",
    ]
    i_max = int(traj["distance"].fillna(-1).to_numpy().argmax())
    last = traj.iloc[-1]
    what = (
        "‖mean θ_k − mean θ(k)‖_F, the distance of the means over paths (single paths "
        "use different noise)"
        if last["measure"] != "paths"
        else "‖θ_k − θ(k)‖_F, θ = (A, B)"
    )
    lines += [
        f"{what}: largest {_g(traj['distance'].iloc[i_max])} at t = {traj['t'].iloc[i_max]:g} "
        f"(relative {_g(traj['relative_distance'].iloc[i_max])}); at t = {last['t']:g}: "
        f"{_g(last['distance'])} (relative {_g(last['relative_distance'])}).",
    ]
    if np.isfinite(last["mc_floor"]):
        lines[-1] += (
            f" Monte Carlo floor (distance expected if the means were equal) at "
            f"t = {last['t']:g}: {_g(last['mc_floor'])}; the ratio distance/floor has median "
            f"{_g(float(np.nanmedian(traj['distance'] / traj['mc_floor'])))}."
        )
    bad = traj[(traj["optimizer.status"] != "ok") | (traj["flow.status"] != "ok")]
    if len(bad):
        lines.append(f"Not ok from t = {bad['t'].iloc[0]:g} on (diverged or max_steps).")
    if "contraction" in tables:
        c = tables["contraction"]
        lines += [
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
    if "order" in tables:
        o = tables["order"]
        mu = s["dynamics.kind"] in config_lib.MOMENTUM_DYNAMICS
        lines += [
            "",
            f"## Order in η (T8), horizon ηt = {o['horizon'].iloc[0]:g}",
            "",
            "| η | " + ("μ | " if mu else "") + "steps | distance | relative |",
            "|---|" + ("---|" if mu else "") + "---|---|---|",
        ]
        for _, row in o.iterrows():
            lines.append(
                f"| {row['dynamics.eta']:g} | "
                + (f"{row['dynamics.mu']:g} | " if mu else "")
                + f"{row['steps']} | {_g(row['distance'])} | {_g(row['relative_distance'])} |"
            )
        lines += [
            "",
            f"Measured order {o['order'].iloc[0]:.3f} ± {o['order_stderr'].iloc[0]:.3f} "
            "(least squares of log distance on log η; first order expected)"
            + (", with μ halved along with η." if mu else "."),
        ]
    if "sde" in tables:
        sd = tables["sde"]
        lines += [
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
        for role in ("optimizer", "flow"):
            part = sd[sd["role"] == role]
            name = s["dynamics.kind"] if role == "optimizer" else s["flow.kind"]
            for _, row in part.iloc[[len(part) // 4, len(part) // 2, -1]].iterrows():
                lines.append(
                    f"| {name} | {row['t']:g} | {_g(row['mean'])} ± {_g(row['se'])} | "
                    f"{_g(row['theory'])} | {row['z']:+.2f} | {_g(row['std'])} | "
                    f"{_g(row['q10'])} – {_g(row['q90'])} |"
                )
        lines.append("")
        for role in ("optimizer", "flow"):
            part = sd[sd["role"] == role]
            name = s["dynamics.kind"] if role == "optimizer" else s["flow.kind"]
            lines.append(
                f"- {name}: max |z| over the {int(np.isfinite(part['z']).sum())} saves with "
                f"t > 0: {np.nanmax(np.abs(part['z'])):.2f}."
            )
    lines += ["", "## Files", ""]
    png = ", `{}.png`" if figures else ""
    lines += [f"- `{name}.parquet`, `{name}.csv`" + png.format(name) for name in tables]
    lines += ["- `config.json`: both resolved configs, the compare options, versions", ""]
    return "\n".join(lines)
