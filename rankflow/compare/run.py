"""Running a comparison: the optimizer's config and its flow's, the two programs run at
the steps :mod:`.plan` names, the resource checks and the tables (written by
:func:`rankflow.compare.output.write`, re-exported here with :func:`sme_pair`)."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config.fields import ConfigError
from ..core import config as config_lib
from ..core import vocabulary
from ..core.family import memory_parts
from ..core.program import PARAM_KEYS, Program, params_of, program_for
from ..engine.programs import enable_compilation_cache
from ..engine.resources import check_fits, check_saves, dominant_keys, sizes_text
from ..engine.writer import check_out, claimed
from .options import Options, split_options
from .output import Figures
from .output import write as write
from .plan import ComparePlan, compare_plan, with_saves
from .plan import sme_pair as sme_pair
from .sme import moments_table, side_observables, weak_table
from .sweep import at_point, join
from .tables import (
    contraction_table,
    order_table,
    save_index,
    sde_table,
    setting_of,
    trajectory_table,
)

__all__ = ["check_resources", "compare", "flow_config", "sme_pair", "write"]


# --- the two configs (what each runs: :mod:`.plan`; the outputs: :mod:`.output`) -----


def flow_config(cfg: dict[str, Any], solver_set: set[str]) -> dict[str, Any]:
    """``cfg`` with its flow in place of the optimizer (the same ``dynamics.noise``);
    solver keys the user did not set take the flow's defaults: fixed dt = 0.1 for the
    stochastic flow, by ShARK for parameter noise and by Euler–Maruyama, the one Itô
    solver (``vocabulary.ito_methods()``), for gradient and minibatch noise."""
    flow = copy.deepcopy(cfg)
    kind = vocabulary.FLOW_OF[cfg["dynamics"]["kind"]]
    flow["dynamics"]["kind"] = kind
    solver = flow["solver"]
    for key in ("method", "adaptive"):
        if key not in solver_set:
            solver[key] = None
    if kind in vocabulary.SDE_DYNAMICS:
        if "method" not in solver_set:
            multiplicative = vocabulary.multiplicative_noise(flow["dynamics"])
            solver["method"] = vocabulary.ito_methods()[0] if multiplicative else "shark"
        if "dt" not in solver_set:
            solver["dt"] = 0.1
    return config_lib.resolve(flow)


def _resolve(
    config: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None
) -> tuple[dict[str, Any], Options, set[str]]:
    """The optimizer's resolved config (with its ``[sweep]``, if any), the compare
    options and the solver keys the user set (the flow's defaults fill the others)."""
    raw = config_lib.load_config(config)
    options, rest = split_options(raw, overrides)
    solver_set = set((raw.get("solver") or {}).keys())
    solver_set |= {k.split(".", 1)[1] for k in rest if k.startswith("solver.")}
    solver_set |= {k.split(".", 2)[2] for k in rest if k.startswith("sweep.solver.")}
    solver_set |= {k.split(".", 1)[1] for k in (raw.get("sweep") or {}) if k.startswith("solver.")}
    return config_lib.resolve(raw, rest), options, solver_set


def _pair(
    point: Mapping[str, Any], options: Options, solver_set: set[str], where: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One point's optimizer config and its flow's (:func:`flow_config`); sgd and
    sgd_gaussian with one path get ``options.paths``. ``where`` names the point in
    errors (empty without a sweep)."""
    cfg = copy.deepcopy(dict(point))
    kind = cfg["dynamics"]["kind"]
    if kind not in vocabulary.FLOW_OF:
        raise ConfigError(
            f"dynamics.kind: compare needs a discrete optimizer with a flow counterpart, "
            f"one of {', '.join(vocabulary.FLOW_OF)}; got {kind!r}{where}"
        )
    if cfg["model"]["depth"] != 2:
        raise ConfigError(
            f"model.depth: compare measures W = ABᵀ's balance (depth 2), got "
            f"{cfg['model']['depth']}{where}; run deeper products with rankflow run"
        )
    if kind in ("sgd_gaussian", "sgd") and cfg["dynamics"]["paths"] == 1:
        cfg["dynamics"]["paths"] = options.paths
    return cfg, flow_config(cfg, solver_set)


def _run(program: Program, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Run ``program`` over ``rows`` (each one run's traced values, keys ``PARAM_KEYS``)
    in one batch (adaptive solves mapped, one compilation: measuring the batching would
    cost more compilations than a comparison's one batch saves); returns A, B as float64
    ``(runs, saves, ·, ·)``, in the run's precision (``A_raw``, ``B_raw``) and status."""
    out = program.run({k: np.array([r[k] for r in rows]) for k in PARAM_KEYS}, measure=False)
    A, B = out["theta"]
    return {
        "A_raw": A,
        "B_raw": B,
        "A": A.astype(np.float64),
        "B": B.astype(np.float64),
        "status": out["status"],
    }


# --- resources ---------------------------------------------------------------------------


def _side_sizes(cfg: Mapping[str, Any], options: Options) -> tuple[int, int, int, int]:
    """``(runs, optimizer saves, flow saves, window saves)`` of a point, as
    :func:`_plan` and :func:`_point` will make them, counted in O(1) (upper bounds: a
    horizon or a window step may coincide with a save)."""
    kind, d = cfg["dynamics"]["kind"], cfg["dynamics"]
    sme = sme_pair(cfg)
    stochastic = kind in ("sgd_gaussian", "sgd") and not sme
    paths = d["paths"] if kind in ("sgd_gaussian", "sgd") else 1
    halvings = options.halvings + 1
    runs = halvings * paths if sme else paths if stochastic else halvings
    saves = vocabulary.save_count(cfg) + 1 + (0 if stochastic else halvings)
    window = options.window + 1 if kind == "gd" else 0
    return runs, saves + window, saves, window


def check_horizons(cfg: Mapping[str, Any], options: Options) -> None:
    """Refuse, in O(1), an order measurement whose longest run (η/2^halvings for
    ``order_t1 · 2^halvings`` steps) passes the 32-bit step count of discrete dynamics,
    naming the option the user set (not the ``save.ts`` the comparison would list)."""
    if cfg["dynamics"]["kind"] in ("sgd_gaussian", "sgd") and not sme_pair(cfg):
        return  # T6's paths at the config's η alone: no halving
    given = options.order_t1 is not None
    t1 = options.order_t1 if given else int(round(vocabulary.last_save_time(cfg)))
    h, limit = options.halvings, vocabulary.MAX_STEPS
    if t1 * 2**h <= limit:
        return
    origin = "compare.order_t1" if given else "save.t1"
    most = (limit // t1).bit_length() - 1  # the most halvings that fit t1
    key = "compare.order_t1" if given and h == Options.halvings else "compare.halvings"
    fix = (
        f"at most {limit // 2**h:,} at compare.halvings = {h}"
        if key == "compare.order_t1"
        else f"at most {most} halvings at {origin} = {t1:,}"
    )
    raise ConfigError(
        f"{key}: the order's longest run takes {origin} · 2^compare.halvings = {t1:,} · 2^{h} "
        f"= {t1 * 2**h:,} steps, more than the {limit:,} of discrete dynamics (a 32-bit step "
        f"count); {fix}"
    )


def check_resources(configs: list[tuple[dict[str, Any], dict[str, Any]]], options: Options):
    """Refuse, before anything is listed or compiled, a comparison whose saves per run
    exceed :func:`rankflow.engine.resources.max_saves`, or whose memory exceeds what is
    free: the largest batch (one side's runs of one structure; the core family's
    :func:`~rankflow.core.family.memory_parts` per run, saves apart), the
    states of every point's runs kept as run and as float64 until the tables are made,
    and the contraction window's gradients."""
    kept: dict[tuple[str, ...], int] = {}
    batches: dict[str, dict[tuple[str, ...], int]] = {}
    for opt, flow in configs:
        check_horizons(opt, options)
        runs, s_opt, s_flow, window = _side_sizes(opt, options)
        stochastic = opt["dynamics"]["kind"] in ("sgd_gaussian", "sgd")
        batch_keys = ("compare.paths",) * stochastic + ("compare.halvings",) * (
            sme_pair(opt) or not stochastic
        )
        key = "compare.window" if window > vocabulary.save_count(opt) else "save.num"
        check_saves(s_opt, key, "the saves, the order's horizons and the window together")
        item = 8 if opt["x64"] else 4
        m, n = opt["problem"]["m"], opt["problem"]["n"]
        state = (m + n) * opt["model"]["r"]
        if flow["dynamics"]["kind"] in vocabulary.MOMENTUM_DYNAMICS:
            s_flow *= 2  # the momentum is saved beside the factors
        for i, side in enumerate((opt, flow)):  # the sides' batches run one after the other
            group = batches.setdefault(f"{i}{config_lib.structure_key(opt)}", {})
            for k, b in memory_parts(side).items():
                if not k[0].startswith("save."):
                    group[k + batch_keys] = group.get(k + batch_keys, 0) + runs * b
        states = ("save.num", *batch_keys, "model.r")
        kept[states] = kept.get(states, 0) + runs * (s_opt + s_flow) * state * (2 * item + 8)
        grads = ("compare.window", "problem.m", "problem.n")
        kept[grads] = max(kept.get(grads, 0), 4 * item * window * m * n)
    parts = kept | max(batches.values(), key=lambda group: sum(group.values()))
    keys = dominant_keys(parts)
    values = dict(configs[0][0], compare=asdict(options))
    check_fits(sum(parts.values()), keys, sizes_text(values, keys), "the comparison")


# --- the comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """One side of a comparison (the optimizer or its flow): its point, its compiled
    program and the states of its runs (:func:`_run`)."""

    point: dict[str, Any]
    program: Program
    states: dict[str, np.ndarray]


@dataclass(frozen=True)
class _Point:
    """One point of a comparison: the optimizer's config and its flow's, what to run,
    and each side's point with the saves the tables read."""

    cfg: dict[str, Any]
    flow: dict[str, Any]
    plan: ComparePlan
    opt_point: dict[str, Any]
    flow_point: dict[str, Any]


def _point(cfg: dict[str, Any], flow_cfg: dict[str, Any], options: Options) -> _Point:
    """The optimizer also saves the contraction window, both save the order's horizons."""
    plan = compare_plan(cfg, options)
    opt_point = with_saves(cfg, sorted({0, *plan.ts, *plan.horizons, *plan.window}))
    flow_point = with_saves(flow_cfg, sorted({0, *plan.ts, *plan.horizons}))
    return _Point(cfg, flow_cfg, plan, opt_point, flow_point)


def _run_all(points: list[_Point]) -> list[tuple[_Side, _Side]]:
    """Both sides of every point: the points of one structure (the same programs) run as
    one batch on each side, so that a structure compiles once on each side."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(points):
        key = (config_lib.structure_key(p.opt_point), config_lib.structure_key(p.flow_point))
        groups.setdefault(key, []).append(i)
    sides: dict[int, tuple[_Side, _Side]] = {}
    for members in groups.values():
        first = points[members[0]]
        bounds = np.cumsum([0] + [len(points[i].plan.runs) for i in members])
        pair = []
        for name in ("opt_point", "flow_point"):
            program = program_for(getattr(first, name), save="states")
            rows = [
                params_of(getattr(points[i], name), 0) | r
                for i in members
                for r in points[i].plan.runs
            ]
            pair.append((program, _run(program, rows)))
        for j, i in enumerate(members):
            part = slice(bounds[j], bounds[j + 1])
            sides[i] = tuple(
                _Side(getattr(points[i], name), program, {k: v[part] for k, v in states.items()})
                for name, (program, states) in zip(("opt_point", "flow_point"), pair, strict=True)
            )
    return [sides[i] for i in range(len(points))]


def _tables(p: _Point, opt: _Side, flow: _Side) -> dict[str, pd.DataFrame]:
    """The tables of one point: trajectory always, contraction for gd, order for
    deterministic pairs, sde for sgd_gaussian with parameter noise, moments and weak
    for SME pairs (:func:`sme_pair`)."""
    cfg, plan = p.cfg, p.plan
    m, n = opt.program.problem.shape
    setting = setting_of(cfg, p.flow, m, n)
    kind, ts, horizons = cfg["dynamics"]["kind"], plan.ts, plan.horizons
    sme = sme_pair(cfg)
    stochastic = kind in ("sgd_gaussian", "sgd")
    i_opt, i_flow = save_index(opt.program, ts), save_index(flow.program, ts)
    # SME pairs: the trajectory is that of the paths at the config's η (the first P).
    first = slice(0, plan.paths)
    opt_states = {k: v[first] for k, v in opt.states.items()} if sme else opt.states
    flow_states = {k: v[first] for k, v in flow.states.items()} if sme else flow.states
    tables = {
        "trajectory": trajectory_table(
            setting, ts, opt_states, flow_states, i_opt, i_flow, stochastic
        )
    }
    if kind == "gd":
        tables["contraction"] = contraction_table(
            setting, opt.program, opt.point, opt.states, plan.window
        )
    if horizons:
        h_opt, h_flow = save_index(opt.program, horizons), save_index(flow.program, horizons)
    if sme:
        opt_obs = side_observables(opt.program, opt.point, opt.states)
        flow_obs = side_observables(flow.program, flow.point, flow.states)
        first_obs = [{k: v[first] for k, v in obs.items()} for obs in (opt_obs, flow_obs)]
        tables["moments"] = moments_table(setting, ts, *first_obs, i_opt, i_flow)
        etas = [r["dynamics.eta"] for r in plan.runs[:: plan.paths]]
        tables["weak"] = weak_table(
            setting, etas, horizons, plan.paths, opt_obs, flow_obs, h_opt, h_flow
        )
    elif not stochastic:
        tables["order"] = order_table(
            setting, plan.runs, horizons, opt.states, flow.states, h_opt, h_flow
        )
    else:
        tables["sde"] = sde_table(setting, ts, opt.states, flow.states, i_opt, i_flow, cfg, m, n)
    return tables


def compare(
    config: str | Path | Mapping[str, Any],
    out: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    figures: Figures | None = None,
) -> dict[str, pd.DataFrame]:
    """Run a discrete optimizer and its flow on the same problem, start and
    hyperparameters, and measure how they differ (module docstring, docs/theory.md, T4–T6, T8).

    Args:
      config: a TOML path or nested dict naming a discrete optimizer with a flow
        counterpart (``dynamics.kind`` in ``vocabulary.FLOW_OF``); an optional
        ``[compare]`` table sets :data:`OPTIONS`. With a ``[sweep]``, every point is
        compared (the points of one structure in one batch: one compilation per
        structure and side) and the tables are joined (:mod:`.sweep`).
      out: a directory to write the tables (``NAME.parquet``, ``NAME.csv``),
        ``summary.md`` and ``config.json`` into.
      overrides: dotted keys, e.g. ``{"dynamics.lam": 0.1, "compare.window": 20}`` or
        ``{"sweep.dynamics.eta": [0.05, 0.1]}``.
      figures: ``figures(tables, out)`` draws the tables' figures into ``out`` (with
        ``out``), e.g. ``rankflow.plots.write_compare_figures`` (``NAME.png``, as
        ``rankflow compare`` does; a sweep's figures show the sweep); ``summary.md``
        then lists them.

    Returns:
      ``{"trajectory", "contraction" (gd), "order" (deterministic pairs), "sde"
      (sgd_gaussian with parameter noise), "moments" and "weak" (SME pairs: sgd, and
      sgd_gaussian with noise = gradient)}`` → DataFrames with the columns of
      :data:`COLUMNS`; with a sweep, each table holds every point's rows after the
      columns ``point`` and ``sweep.KEY`` (the point's value of each swept key), and
      ``"sweep"`` has one row per point (``COLUMNS["sweep"]``). Their verdicts, the
      ``halvings`` and ``verdict`` tables that ``out`` also receives, are
      ``rankflow.compare.judge(tables)``.

    Raises:
      ConfigError: on an invalid config or option, or a dynamics without a flow, at any
        point of a sweep, before anything is compiled.

    Examples:
      GD against gradient flow on a small diagonal problem, η halved once for the order:

      >>> from rankflow.compare import compare
      >>> cfg = {"problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
      ...        "model": {"r": 2}, "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
      ...        "save": {"t1": 20, "num": 3}}
      >>> tables = compare(cfg, overrides={"compare.halvings": 1, "compare.window": 3})
      >>> sorted(tables)
      ['contraction', 'order', 'trajectory']
      >>> round(float(tables["order"]["order"].iloc[0]), 1)  # T8: first order in η
      1.0
      >>> bool(tables["contraction"]["t5_deviation"].abs().max() < 1e-4)  # T5's exact step
      True
    """
    t_start = time.perf_counter()
    if out is not None:
        check_out(out, "compare")  # before any work: never into a folder not rankflow's
    cfg, options, solver_set = _resolve(config, overrides)
    swept = list(cfg["sweep"])
    points = list(config_lib.expand(cfg)) if swept else [cfg]
    configs = [_pair(point, options, solver_set, at_point(point, swept)) for point in points]
    check_resources(configs, options)  # O(1) per point, before any list of saves
    pairs = [_point(opt, flow, options) for opt, flow in configs]
    enable_compilation_cache()  # as rankflow.run: a rerun in a new process compiles nothing
    per_point = [_tables(p, *sides) for p, sides in zip(pairs, _run_all(pairs), strict=True)]
    tables = join(per_point, [p.cfg for p in pairs], swept) if swept else per_point[0]
    if out is not None:
        meta = {
            "optimizer": config_lib.to_json(cfg if swept else pairs[0].cfg),
            "flow": config_lib.to_json(pairs[0].flow),
            "compare": asdict(options) | {"order_t1": pairs[0].plan.order_t1},
            "seconds": round(time.perf_counter() - t_start, 2),
        }
        if swept:
            meta["points"] = len(pairs)
        with claimed(out, "compare"):
            write(out, tables, meta, figures)
    return tables
