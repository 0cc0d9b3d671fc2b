"""The core family's config: its schema, the cross-field rules of a point and the
values derived from it.

A config is a nested dict (or a TOML file) with the sections of :data:`SCHEMA`
(``problem``, ``model``, ``init``, ``dynamics``, ``solver``, ``save``). It is
validated completely, in plain Python, before anything is traced or compiled: every
error is a :class:`ConfigError` whose message names the field (``dynamics.lam``) and
the allowed values. The config language itself (fields, dotted keys, ``--set``,
``[sweep]``, did-you-mean) is :mod:`rankflow.config.fields`; this module holds what is the
core's own: :data:`SCHEMA`, :func:`validate` (pure) and :func:`derive` (fills a
point's derived values), applied to every point of a sweep by :func:`expand`.

Keys are addressed by dotted names (``"dynamics.lam"``); the same name is used on the
command line (``--set dynamics.lam=0.1``), in ``[sweep]`` and as the results column.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import fields as schema_lib
from ..config.callables import UNHASHABLE_CODE, callable_identity
from ..config.fields import (
    BOOL,
    INT,
    LIST,
    NUM,
    STR,
    ConfigError,
    Field,
    choice,
    defaults_of,
    ge,
    gt,
    keys_of,
    load_config,
    one_of,
    parse_set,
    seed_range,
)
from ..config.schema import Schema
from ..numerics.schedules import schedule_fields
from ..numerics.solve import DIVERGE_NORM, solver_fields
from ..numerics.solve import SECTION_DEFAULTS as SOLVER
from .depth_rules import MODEL_FIELDS, PAIRS_FIELD, validate_depth, warn_narrow
from .dynamics import RegisteredDynamics, dynamics_of
from .problems import PROBLEMS, RegisteredKinds, problem_class, problem_section
from .vocabulary import (
    BATCH_PAD_RATIO,
    CONTINUOUS_DYNAMICS,
    DISCRETE_DYNAMICS,
    INIT_KINDS,
    MAX_STEPS,
    METHODS,
    MOMENTUM_DYNAMICS,
    NOISE_MODELS,
    NOISE_MODELS_OF,
    SDE_DYNAMICS,
    SIGMA_DYNAMICS,
    STOCHASTIC_DYNAMICS,
    adaptive_by_default_methods,
    adaptive_methods,
    batch_pads,
    batch_traced,
    ito_methods,
    last_save_time,
    multiplicative_noise,
    noise_model,
    ode_methods,
    save_times,
    schedule_error,
    sde_methods,
    solver_adaptive,
    solver_method,
)

__all__ = [
    "ConfigError",
    "DEFAULTS",
    "NUMERIC_KEYS",
    "PROGRAM_KEYS",
    "UNHASHABLE_CODE",
    "callable_identity",
    "defaults_of",
    "derive",
    "expand",
    "keys_of",
    "load_config",
    "parse_set",
    "resolve",
    "validate",
]


# The sections of :data:`SCHEMA` (built at the end of the module, with the rules).
SECTIONS: dict[str, dict[str, Field]] = {
    "": schema_lib.top_fields("PRNG seed: problem data, initialisation, noise"),
    # The fields every kind has, then each registered kind's own (Problem.fields).
    "problem": problem_section(
        {
            "kind": Field(STR, "diagonal", "loss of W = ABᵀ", RegisteredKinds()),
            "singular_values": Field(
                LIST,
                None,
                "diagonal: S = diag(s); other kinds: the target's singular values "
                "(default evenly spaced from 1 down to 1/rank)",
                optional=True,
            ),
            "m": Field(INT, 20, "rows of W (not diagonal)", ge(1)),
            "n": Field(INT, 20, "columns of W (not diagonal)", ge(1)),
            "rank": Field(INT, 3, "rank of the target W* (not diagonal)", ge(1)),
            "samples": Field(INT, 400, "measurements / observed entries / data points", ge(1)),
            "seed": Field(
                INT,
                None,
                "seed of the data alone (default: the top-level seed)",
                seed_range,
                optional=True,
                traced=True,
            ),
            "noise": Field(NUM, 0.0, "std of additive label noise", ge(0), traced=True),
        }
    ),
    "model": MODEL_FIELDS,
    "init": {
        "kind": Field(STR, "gaussian", "initialisation of (A, B)", one_of(INIT_KINDS)),
        "scale": Field(
            NUM,
            0.1,
            "gaussian: entry std; balanced/imbalanced: entry std of "
            "the factors whose product is balanced; spectral: W(0) = scale·UVᵀ",
            ge(0),
            traced=True,
        ),
        "imbalance": Field(NUM, 1.0, "imbalanced: ‖D(0)‖_F = ‖AᵀA − BᵀB‖_F", ge(0), traced=True),
        "pairs": PAIRS_FIELD,
    },
    "dynamics": {
        "kind": Field(
            STR, "gradient_flow", "continuous flow or discrete optimizer", RegisteredDynamics()
        ),
        "lam": Field(NUM, 0.05, "weight decay λ", ge(0), traced=True),
        "eta": Field(NUM, 0.5, "learning rate η (time is in steps)", gt(0), traced=True),
        "sigma": Field(
            NUM, 0.0, "std of the per-entry gradient noise of one step", ge(0), traced=True
        ),
        "mu": Field(
            NUM, 0.1, "momentum rate μ (EMA weight of the new gradient)", gt(0), traced=True
        ),
        "batch": Field(
            INT,
            32,
            "minibatch size b (sgd; noise = minibatch). sgd: a sweep over it shares one "
            "program (the batches drawn at dynamics.batch_pad); the minibatch SME "
            "(noise = minibatch): one program per value",
            ge(1),
        ),
        "batch_pad": Field(
            INT,
            None,
            "sgd: minibatches are drawn at this size (at least dynamics.batch, at most "
            "problem.samples) and their first dynamics.batch points used, so batch sizes up "
            "to it share one program (default: the sweep's batch sizes grouped, largest ≤ "
            f"{BATCH_PAD_RATIO}× smallest, each drawn at its group's largest; "
            "dynamics.batch itself when not swept); other dynamics ignore it",
            ge(1),
            optional=True,
        ),
        "noise": Field(
            STR,
            None,
            "noise model of stochastic dynamics: parameter (σ dW on A and B; the default), "
            "gradient (σ dΞ on the gradient of W), minibatch (a batch-`batch` minibatch "
            "gradient's covariance; sgd's own noise)",
            choice(NOISE_MODELS),
            optional=True,
        ),
        "paths": Field(INT, 1, "Monte Carlo paths (stochastic dynamics)", ge(1)),
        **schedule_fields("save.t1"),
    },
    "solver": {
        "method": Field(
            STR,
            None,
            "diffrax solver of continuous dynamics (default: tsit5 for ODEs, shark for SDEs)",
            one_of(METHODS),
            optional=True,
        ),
        "adaptive": Field(
            BOOL,
            None,
            "adaptive step size (default: yes for ODE solvers with an error estimate of "
            f"order ≥ 3, {'/'.join(adaptive_by_default_methods())}; no otherwise)",
            optional=True,
        ),
        "dt": Field(
            NUM, SOLVER["dt"], "step of fixed-step solves (adaptive solves choose their own)", gt(0)
        ),
        **solver_fields("adaptive"),
        "max_steps": Field(INT, SOLVER["max_steps"], "step budget of one solve", ge(1)),
        "diverge_norm": Field(
            NUM,
            DIVERGE_NORM,
            "a run whose max |entry| of A or B exceeds this is marked diverged",
            gt(0),
        ),
    },
    "save": {
        "t1": Field(NUM, 200.0, "final time, in optimizer steps", gt(0)),
        "num": Field(INT, 101, "evenly spaced saves from 0 to t1", ge(2)),
        "ts": Field(LIST, None, "explicit save times (overrides t1/num)", optional=True),
        "rank_tol": Field(NUM, 1e-3, "rank counts sv > rank_tol·sv_1", gt(0)),
        "states": Field(
            BOOL,
            False,
            "also keep the factors at every save (A, B; W_1 … W_L at depth L; per path): "
            "DIR/states.parquet/, read by rankflow.load_states (not sweepable)",
        ),
    },
}

# --- validation (pure) -------------------------------------------------------------------


def validate(cfg: Mapping[str, Any]) -> None:
    """Check one point's cross-field rules (the single-field ones are in SCHEMA).
    Raises ConfigError naming the field; changes nothing."""
    _validate_problem(cfg["problem"], cfg["init"])
    validate_depth(cfg["model"], cfg["init"])
    _validate_dynamics(cfg["dynamics"], cfg["problem"])
    _validate_solver(cfg["dynamics"], cfg["solver"])
    _validate_save(cfg)
    t1 = last_save_time(cfg)
    d = cfg["dynamics"]
    err = schedule_error(
        "dynamics",
        d["schedule"],
        d["warmup"],
        d["final_fraction"],
        t1,
        "save.t1",
        d["decay_steps"],
    )
    if err:
        raise ConfigError(err)


def _validate_problem(p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
    """The kind's rules (:meth:`~.problems.Problem.check_config` of its class)."""
    problem_class(p["kind"]).check_config(p, init)


def _validate_dynamics(d: Mapping[str, Any], p: Mapping[str, Any]) -> None:
    kind = d["kind"]
    if d["sigma"] > 0 and kind not in SIGMA_DYNAMICS:
        why = (
            "its noise comes from minibatches (dynamics.batch)"
            if dynamics_of(kind).minibatches
            else "it is deterministic"
        )
        raise ConfigError(
            f"dynamics.sigma: must be 0 for {kind} ({why}), got {d['sigma']}; Gaussian noise "
            f"needs one of {', '.join(SIGMA_DYNAMICS)}"
        )
    if d["paths"] > 1 and kind not in STOCHASTIC_DYNAMICS:
        raise ConfigError(
            f"dynamics.paths: {kind} is deterministic and has one path, got {d['paths']}; "
            f"Monte Carlo paths need one of {', '.join(STOCHASTIC_DYNAMICS)}"
        )
    if kind in MOMENTUM_DYNAMICS and kind in DISCRETE_DYNAMICS and not d["mu"] <= 1:
        raise ConfigError(
            f"dynamics.mu: discrete momentum (EMA weight of the new gradient) must be in "
            f"(0, 1], got {d['mu']}"
        )
    _validate_noise(d)
    if dynamics_of(kind).minibatches:
        if not p_has_samples(p):
            raise ConfigError(
                f"dynamics.kind: {kind} samples minibatches of data; problem.kind = "
                f"{p['kind']!r} has none (use {kinds_with_samples()}, or "
                f"sgd_gaussian for Gaussian gradient noise)"
            )
    if noise_model(d) == "minibatch":
        if not p_has_samples(p):
            raise ConfigError(
                f"dynamics.noise: 'minibatch' noise is the covariance of minibatches of "
                f"data; problem.kind = {p['kind']!r} has none (use {kinds_with_samples()}, "
                f"or noise = 'gradient' for isotropic gradient noise)"
            )
        if d["batch"] > p["samples"]:
            raise ConfigError(
                f"dynamics.batch: must be ≤ problem.samples = {p['samples']}, got {d['batch']}"
            )


def _validate_noise(d: Mapping[str, Any]) -> None:
    kind, noise = d["kind"], d["noise"]
    if noise is None:
        return
    allowed = NOISE_MODELS_OF.get(kind)
    if allowed is None:
        raise ConfigError(
            f"dynamics.noise: {kind} is deterministic and has no noise model; noise models "
            f"need one of {', '.join(NOISE_MODELS_OF)}"
        )
    if noise not in allowed:
        hint = {
            "sgd": "; Gaussian gradient noise is sgd_gaussian's",
            "sgd_gaussian": "; real minibatches are dynamics.kind = 'sgd', their SDE "
            "stochastic_flow with noise = 'minibatch'",
        }.get(kind, "")
        raise ConfigError(f"dynamics.noise: {kind} takes {', '.join(allowed)}, got {noise!r}{hint}")
    if noise == "minibatch" and d["sigma"] != 0:
        raise ConfigError(
            f"dynamics.sigma: must be 0 with noise = 'minibatch' (the noise's covariance "
            f"is the data's, set by dynamics.batch), got {d['sigma']}"
        )


def _validate_solver(d: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    """The solver fits the dynamics, as diffrax's types say (:mod:`.vocabulary`'s
    ``*_methods``): an SDE or ODE solver, Itô for multiplicative noise, an error estimate
    for adaptive steps."""
    kind = d["kind"]
    if kind not in CONTINUOUS_DYNAMICS:
        return
    sde = kind in SDE_DYNAMICS
    method = solver_method(d, s)
    can_adapt = adaptive_methods(d)
    if multiplicative_noise(d):
        ito = ito_methods()
        if method not in ito:
            raise ConfigError(
                f"solver.method: noise = {noise_model(d)!r} is multiplicative and {method!r} "
                f"does not converge to its Itô solution (Heun and midpoint converge to the "
                f"Stratonovich one; SEA, ShARK and SRA1 need additive noise); use one of "
                f"{', '.join(ito)}"
            )
        if s["adaptive"] and not can_adapt:
            raise ConfigError(
                f"solver.adaptive: must be false with noise = {noise_model(d)!r}: its Itô "
                f"solver ({', '.join(ito)}) has no error estimate; set solver.dt"
            )
    allowed = sde_methods() if sde else ode_methods()
    if method not in allowed:
        what = "an SDE" if sde else "an ODE"
        raise ConfigError(
            f"solver.method: {kind} is {what}; {method!r} is not a solver for it, "
            f"use one of {', '.join(allowed)}"
        )
    if s["adaptive"] and method not in can_adapt:
        raise ConfigError(
            f"solver.adaptive: {method} has no error estimate here; adaptive "
            f"{'SDE' if sde else 'ODE'} solves need one of {', '.join(can_adapt)}"
        )


def _validate_save(cfg: Mapping[str, Any]) -> None:
    ts = cfg["save"]["ts"]
    if ts is not None:
        if len(ts) < 1 or any(t < 0 for t in ts) or any(b <= a for a, b in zip(ts, ts[1:])):
            raise ConfigError("save.ts: must be non-negative and strictly increasing")
        if float(ts[-1]) <= 0:
            raise ConfigError("save.ts: the last save time must be > 0")
    if cfg["dynamics"]["kind"] not in CONTINUOUS_DYNAMICS:
        last = last_save_time(cfg)
        if last > MAX_STEPS:
            key = "save.t1" if ts is None else "save.ts"
            raise ConfigError(
                f"{key}: discrete dynamics take at most {MAX_STEPS} steps (a 32-bit step "
                f"count), got {last:g}"
            )
        # Evenly spaced saves fall on whole steps iff their spacing does: checked in
        # O(1), so that save.num = 1e9 is refused here rather than listed first.
        sv = cfg["save"]
        times = save_times(cfg) if ts is not None else [sv["t1"] / (sv["num"] - 1), last]
        for t in times:
            if abs(t - round(t)) > 1e-9:
                raise ConfigError(
                    f"save.num: discrete dynamics save at whole steps; t = {t:g} is not one "
                    f"(choose save.num so that t1/(num-1) is an integer, or give save.ts)"
                )


# --- derivation ----------------------------------------------------------------------------


def derive(cfg: dict[str, Any], pads: Mapping[int, int] | None = None) -> dict[str, Any]:
    """Fill a validated point's derived values in place: the problem kind's
    (:meth:`~.problems.Problem.derive`; a diagonal problem's singular values and its
    m = n), the solver's method and ``adaptive``, ``save.t1`` from
    ``save.ts``, a depth-2 ``model.r`` list as its one width, sgd's ``batch_pad`` (the
    given one, else its batch's in ``pads``, the sweep's :func:`~.vocabulary.batch_pads`,
    else the batch; at least the batch and at most ``problem.samples``, so that a point
    resolved again with another batch stays valid; None for other dynamics). Returns
    the point."""
    p, d, s, sv = cfg["problem"], cfg["dynamics"], cfg["solver"], cfg["save"]
    problem_class(p["kind"]).derive(p)
    s["method"] = solver_method(d, s)
    s["adaptive"] = solver_adaptive(d, s)
    d["noise"] = noise_model(d)
    if dynamics_of(d["kind"]).minibatches:
        pad = d["batch_pad"] if d["batch_pad"] is not None else (pads or {}).get(d["batch"], 0)
        d["batch_pad"] = min(max(d["batch"], pad), p["samples"])
    else:
        d["batch_pad"] = None
    model = cfg["model"]
    if model["depth"] == 2 and isinstance(model["r"], list):
        model["r"] = model["r"][0]  # the pair's one inner width
    if sv["ts"] is not None:
        sv["t1"] = float(sv["ts"][-1])
    return cfg


def p_has_samples(problem: Mapping[str, Any]) -> bool:
    """Whether a problem's loss averages over data points (minibatches make sense)."""
    return problem_class(problem["kind"]).has_samples


def kinds_with_samples() -> str:
    """The registered kinds with data points, as a phrase: ``"sensing, completion or
    regression"``."""
    kinds = [name for name, cls in PROBLEMS.items() if cls.has_samples]
    return " or ".join(filter(None, (", ".join(kinds[:-1]), kinds[-1])))


def warn_deterministic(points: list[Mapping[str, Any]]) -> None:
    """Say once that stochastic dynamics with σ = 0 run as deterministic ones."""
    quiet = sorted(
        {
            p["dynamics"]["kind"]
            for p in points
            if p["dynamics"]["kind"] in SIGMA_DYNAMICS
            and p["dynamics"]["sigma"] == 0
            and noise_model(p["dynamics"]) != "minibatch"
        }
    )
    if quiet:
        warnings.warn(
            f"dynamics.sigma = 0: {', '.join(quiet)} run without noise (deterministic)",
            stacklevel=2,
        )


# --- resolution ------------------------------------------------------------------------


def sweep_batch_pads(cfg: Mapping[str, Any]) -> dict[int, int]:
    """What :func:`derive` needs of the whole sweep: sgd's minibatch pads of the swept
    ``dynamics.batch`` values (:func:`~.vocabulary.batch_pads`)."""
    swept = (cfg.get("sweep") or {}).get("dynamics.batch") or ()
    return batch_pads(b for b in swept if type(b) is int and b >= 1)


def traced_batch(point: Mapping[str, Any]) -> tuple[str, ...]:
    """``dynamics.batch`` where the point's program traces it
    (:func:`~.vocabulary.batch_traced`; sgd's ``dynamics.batch_pad`` stays
    structural), else nothing: left out of the structure key."""
    return ("dynamics.batch",) if batch_traced(point["dynamics"]) else ()


# The core family's config: its sections and rules, and every operation on its configs
# (rankflow.config.schema.Schema).
SCHEMA = Schema(
    SECTIONS,
    validate=validate,
    derive=derive,
    prepare=sweep_batch_pads,
    traced_also=traced_batch,
    warn=(warn_deterministic, warn_narrow),
)
# Traced inputs of the compiled program (Field.traced): a sweep over any of them compiles
# once. Every other key is structural (one program per value).
NUMERIC_KEYS = SCHEMA.numeric_keys
# What a program takes per run: the numeric keys and the minibatch size, which sgd's
# program traces although the key is structural for the sweep (a swept batch is a table
# column of its own, and the minibatch SME compiles one program per value):
# :func:`structure_key` leaves it out where :func:`traced_batch`.
PROGRAM_KEYS = NUMERIC_KEYS + ("dynamics.batch",)
DEFAULTS: dict[str, Any] = SCHEMA.defaults
ALL_KEYS = SCHEMA.all_keys


def resolve(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Load, override, fill defaults and validate every point of the sweep
    (:meth:`rankflow.config.schema.Schema.resolve` of :data:`SCHEMA`). Returns the base
    config, holding the derived values every point shares (see
    :func:`rankflow.config.points.shared_base`); its ``sweep`` table is validated but not
    expanded: see :func:`expand`, which reuses this expansion.

    Examples:
      >>> import rankflow
      >>> cfg = rankflow.resolve({"dynamics": {"kind": "gd", "eta": 0.05}},
      ...                        overrides={"sweep.dynamics.lam": [0.0, 0.1]})
      >>> cfg["dynamics"]["eta"], cfg["model"]["r"], cfg["problem"]["kind"]
      (0.05, 5, 'diagonal')
      >>> cfg["problem"]["m"], cfg["problem"]["singular_values"]  # derived from the default
      (5, [0.2, 0.4, 0.6, 0.8, 1.0])
      >>> cfg["sweep"]
      {'dynamics.lam': [0.0, 0.1]}
    """
    return SCHEMA.resolve(source, overrides)


# The points of a resolved config (made once per sweep), the structure key, the JSON
# copy and the flat dotted keys of a config: the schema's (rankflow.config.schema).
expand = SCHEMA.expand
structure_key = SCHEMA.structure_key
to_json = SCHEMA.to_json
flatten = SCHEMA.flatten
