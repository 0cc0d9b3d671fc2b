"""Experiment configuration: schema, defaults, validation and sweep expansion.

A config is a nested dict (or a TOML file) with the sections of DESIGN.md. It is
validated completely, in plain Python, before anything is traced or compiled: every
error is a :class:`ConfigError` whose message names the field (``dynamics.lam``) and
the allowed values.

Keys are addressed by dotted names (``"dynamics.lam"``); the same name is used on the
command line (``--set dynamics.lam=0.1``), in ``[sweep]`` and as the results column.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import itertools
import json
import math
import os
import sys
import tomllib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "DEFAULTS",
    "NUMERIC_KEYS",
    "expand",
    "load_config",
    "parse_set",
    "resolve",
]


class ConfigError(ValueError):
    """A config value is missing, unknown, of the wrong type or out of range."""


# --- the vocabulary -------------------------------------------------------------------

PROBLEM_KINDS = ("diagonal", "sensing", "completion", "regression", "custom")
INIT_KINDS = ("gaussian", "spectral", "balanced", "imbalanced")
# The dynamics of THEORY.md: continuous flows (diffrax) and discrete optimizers (optax).
CONTINUOUS_DYNAMICS = (
    "gradient_flow",
    "stochastic_flow",
    "momentum_flow",
    "momentum_flow_coupled",
    "stochastic_momentum_flow",
)
DISCRETE_DYNAMICS = (
    "gd",
    "sgd",
    "sgd_gaussian",
    "momentum",
    "momentum_coupled",
    "adamw",
    "adam_l2",
)
DYNAMICS_KINDS = CONTINUOUS_DYNAMICS + DISCRETE_DYNAMICS
SDE_DYNAMICS = ("stochastic_flow", "stochastic_momentum_flow")
# Dynamics whose noise is the Gaussian σ of THEORY.md (sgd's comes from minibatches).
SIGMA_DYNAMICS = SDE_DYNAMICS + ("sgd_gaussian",)
STOCHASTIC_DYNAMICS = SIGMA_DYNAMICS + ("sgd",)
MOMENTUM_DYNAMICS = (
    "momentum_flow",
    "momentum_flow_coupled",
    "stochastic_momentum_flow",
    "momentum",
    "momentum_coupled",
)
# The flow each optimizer discretises (dt = 1), for `rankflow compare`.
FLOW_OF = {
    "gd": "gradient_flow",
    "sgd_gaussian": "stochastic_flow",
    "momentum": "momentum_flow",
    "momentum_coupled": "momentum_flow_coupled",
}
ADAPTIVE_METHODS = ("tsit5", "dopri5", "dopri8", "bosh3")
FIXED_METHODS = ("euler", "heun", "midpoint", "ralston", "rk4")
ODE_METHODS = ADAPTIVE_METHODS + FIXED_METHODS
# Solvers for the additive-noise SDEs: Euler–Maruyama, Heun, and the stochastic
# Runge–Kutta methods that use space-time Lévy area (SEA: strong order 1; ShARK, SRA1:
# strong order 1.5 for additive noise). ShARK, SRA1 and Heun can also step adaptively.
SDE_METHODS = ("euler", "heun", "sea", "shark", "sra1")
SDE_ADAPTIVE_METHODS = ("heun", "shark", "sra1")
METHODS = tuple(dict.fromkeys(ODE_METHODS + SDE_METHODS))

# Keys whose values are traced inputs of the compiled program: a sweep over any of
# them shares one compilation. Every other key is structural (one program per value).
NUMERIC_KEYS = (
    "seed",
    "problem.seed",
    "problem.noise",
    "init.scale",
    "init.imbalance",
    "dynamics.lam",
    "dynamics.eta",
    "dynamics.sigma",
    "dynamics.mu",
)


@dataclass(frozen=True)
class Field:
    types: tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    optional: bool = False  # None allowed
    items: tuple[type, ...] = (int, float)  # element types of a list value


def _ge(lo):
    return lambda v: None if v >= lo else f"must be ≥ {lo}"


def _gt(lo):
    return lambda v: None if v > lo else f"must be > {lo}"


def _one_of(options):
    return lambda v: None if v in options else f"must be one of {', '.join(options)}"


_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_BOOL = (bool,)
_LIST = (list, tuple)

SCHEMA: dict[str, dict[str, Field]] = {
    "": {
        "seed": Field(_INT, 0, "PRNG seed: problem data, initialisation, noise", _ge(0)),
        "x64": Field(_BOOL, False, "float64 throughout (theory checks); float32 otherwise"),
        "name": Field(_STR, "", "free-form experiment name, copied to config.json"),
    },
    "problem": {
        "kind": Field(_STR, "diagonal", "loss of W = ABᵀ", _one_of(PROBLEM_KINDS)),
        "singular_values": Field(
            _LIST,
            None,
            "diagonal: S = diag(s); other kinds: the target's singular values "
            "(default evenly spaced from 1 down to 1/rank)",
            optional=True,
        ),
        "m": Field(_INT, 20, "rows of W (not diagonal)", _ge(1)),
        "n": Field(_INT, 20, "columns of W (not diagonal)", _ge(1)),
        "rank": Field(_INT, 3, "rank of the target W* (not diagonal)", _ge(1)),
        "samples": Field(_INT, 400, "measurements / observed entries / data points", _ge(1)),
        "noise": Field(_NUM, 0.0, "std of additive label noise", _ge(0)),
        "seed": Field(
            _INT,
            None,
            "seed of the data alone (default: the top-level seed)",
            _ge(0),
            optional=True,
        ),
        "loss": Field(_STR, None, "custom: 'module:function' giving L(W)", optional=True),
    },
    "model": {
        "r": Field(_INT, 5, "inner dimension: A is m×r, B is n×r", _ge(1)),
    },
    "init": {
        "kind": Field(_STR, "gaussian", "initialisation of (A, B)", _one_of(INIT_KINDS)),
        "scale": Field(
            _NUM,
            0.1,
            "gaussian: entry std; balanced/imbalanced: entry std of "
            "the factors whose product is balanced; spectral: W(0) = scale·UVᵀ",
            _ge(0),
        ),
        "imbalance": Field(_NUM, 1.0, "imbalanced: ‖D(0)‖_F = ‖AᵀA − BᵀB‖_F", _ge(0)),
    },
    "dynamics": {
        "kind": Field(
            _STR, "gradient_flow", "continuous flow or discrete optimizer", _one_of(DYNAMICS_KINDS)
        ),
        "lam": Field(_NUM, 0.05, "weight decay λ", _ge(0)),
        "eta": Field(_NUM, 0.5, "learning rate η (time is in steps)", _gt(0)),
        "sigma": Field(_NUM, 0.0, "std of the per-entry gradient noise of one step", _ge(0)),
        "mu": Field(_NUM, 0.1, "momentum rate μ (EMA weight of the new gradient)", _gt(0)),
        "batch": Field(_INT, 32, "minibatch size (sgd)", _ge(1)),
        "paths": Field(_INT, 1, "Monte Carlo paths (stochastic dynamics)", _ge(1)),
    },
    "solver": {
        "method": Field(
            _STR,
            None,
            "diffrax solver of continuous dynamics (default: tsit5 for ODEs, shark for SDEs)",
            _one_of(METHODS),
            optional=True,
        ),
        "adaptive": Field(
            _BOOL,
            None,
            "adaptive step size (default: yes for embedded "
            "methods tsit5/dopri5/dopri8/bosh3, no otherwise)",
            optional=True,
        ),
        "dt": Field(
            _NUM, 1.0, "step of fixed-step solves (adaptive solves choose their own)", _gt(0)
        ),
        "rtol": Field(_NUM, 1e-6, "relative tolerance (adaptive)", _gt(0)),
        "atol": Field(_NUM, 1e-8, "absolute tolerance (adaptive)", _gt(0)),
        "max_steps": Field(_INT, 100_000, "step budget of one solve", _ge(1)),
        "diverge_norm": Field(
            _NUM, 1e6, "a run whose max |entry| of A or B exceeds this is marked diverged", _gt(0)
        ),
    },
    "save": {
        "t1": Field(_NUM, 200.0, "final time, in optimizer steps", _gt(0)),
        "num": Field(_INT, 101, "evenly spaced saves from 0 to t1", _ge(2)),
        "ts": Field(_LIST, None, "explicit save times (overrides t1/num)", optional=True),
        "rank_tol": Field(_NUM, 1e-3, "rank counts sv > rank_tol·sv_1", _gt(0)),
    },
}

Schema = Mapping[str, Mapping[str, Field]]


def defaults_of(schema: Schema) -> dict[str, Any]:
    """The config of a schema's defaults (top-level keys, sections, an empty sweep)."""
    out: dict[str, Any] = {k: f.default for k, f in schema[""].items()}
    out.update({sec: {k: f.default for k, f in fs.items()} for sec, fs in schema.items() if sec})
    out["sweep"] = {}
    return out


def keys_of(schema: Schema) -> tuple[str, ...]:
    """A schema's dotted keys, in schema order."""
    return tuple(f"{s}.{k}" if s else k for s, fs in schema.items() for k in fs)


DEFAULTS: dict[str, Any] = defaults_of(SCHEMA)

_DIAGONAL_DEFAULT = [0.2, 0.4, 0.6, 0.8, 1.0]
ALL_KEYS = keys_of(SCHEMA)


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _field(key: str, schema: Schema = SCHEMA) -> Field:
    sec, _, name = key.rpartition(".")
    try:
        return schema[sec][name]
    except KeyError:
        raise ConfigError(f"{key}: unknown key{_suggest(key, keys_of(schema))}") from None


def _check_value(key: str, value: Any, schema: Schema = SCHEMA) -> Any:
    f = _field(key, schema)
    if value is None:
        if f.optional:
            return None
        raise ConfigError(f"{key}: a value is required")
    # bool is an int in Python: keep the two apart.
    if isinstance(value, bool) and bool not in f.types:
        raise ConfigError(f"{key}: expected {_typename(f.types)}, got a boolean {value!r}")
    if not isinstance(value, f.types):
        if float in f.types and isinstance(value, int):
            pass
        else:
            raise ConfigError(
                f"{key}: expected {_typename(f.types)}, got {type(value).__name__} {value!r}"
            )
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be finite, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float in f.types:
        value = float(value)
    if isinstance(value, (list, tuple)) and f.items != (int, float):
        value = list(value)
        for v in value:
            if not isinstance(v, f.items) or (isinstance(v, bool) and bool not in f.items):
                what = _typename(f.items).removeprefix("a ").removeprefix("an ")
                raise ConfigError(f"{key}: expected a list of {what}s, got {v!r}")
    elif isinstance(value, (list, tuple)):
        value = list(value)
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{key}: expected a list of finite numbers, got {v!r}")
        value = [float(v) for v in value]
    if f.check is not None:
        err = f.check(value)
        if err:
            raise ConfigError(f"{key}: {err}, got {value!r}")
    return value


def _typename(types) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true or false",
        list: "a list",
        tuple: "a list",
    }
    if float in types:
        types = tuple(t for t in types if t is not int)
    return " or ".join(dict.fromkeys(names[t] for t in types if t in names))


def keys_help(schema: Schema = SCHEMA, numeric_keys: tuple[str, ...] = NUMERIC_KEYS) -> str:
    """Every key of a schema with its default and meaning (``--help`` epilogues)."""
    lines = [
        "config keys (TOML section.key = default: meaning); numeric keys marked * "
        "can be swept without recompiling:"
    ]
    for sec, fields in schema.items():
        for name, f in fields.items():
            key = f"{sec}.{name}" if sec else name
            star = "*" if key in numeric_keys else " "
            lines.append(f"  {star}{key} = {f.default!r}: {f.doc}")
    lines.append('  [sweep] "section.key" = [values, ...]: runs the product of the lists')
    return "\n".join(lines)


# --- loading ---------------------------------------------------------------------------


def load_config(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A config as a nested dict, from a TOML path or a mapping (copied)."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"config: no such file {str(path)!r}")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: {path} is not valid TOML: {e}") from None


def parse_set(assignments: list[str]) -> dict[str, Any]:
    """``["dynamics.lam=0.1", "save.ts=[0, 10]"]`` → ``{"dynamics.lam": 0.1, ...}``.

    Values are TOML literals; anything that is not one is taken as a string.
    """
    out = {}
    for a in assignments:
        key, eq, raw = a.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"--set: expected key=value, got {a!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key] = value
    return out


def _set_dotted(cfg: dict, key: str, value: Any, schema: Schema = SCHEMA) -> None:
    if key.startswith("sweep."):
        cfg.setdefault("sweep", {})[key[len("sweep.") :]] = value
        return
    sec, _, name = key.rpartition(".")
    _field(key, schema)  # unknown keys fail here, with a suggestion
    (cfg.setdefault(sec, {}) if sec else cfg)[name] = value


def _get_dotted(cfg: Mapping, key: str) -> Any:
    sec, _, name = key.rpartition(".")
    return (cfg[sec] if sec else cfg)[name]


def flatten(cfg: Mapping[str, Any], schema: Schema = SCHEMA) -> dict[str, Any]:
    """Nested config → ``{"dynamics.lam": 0.05, ...}`` (the sweep table excluded)."""
    out = {}
    for sec, fields in schema.items():
        for name in fields:
            key = f"{sec}.{name}" if sec else name
            out[key] = _get_dotted(cfg, key)
    return out


# --- resolution ------------------------------------------------------------------------


def _merge_defaults(
    raw: Mapping[str, Any], custom_loss: Callable | None, schema: Schema = SCHEMA
) -> dict[str, Any]:
    cfg = copy.deepcopy(defaults_of(schema))
    for key, value in raw.items():
        if key == "sweep":
            if not isinstance(value, Mapping):
                raise ConfigError("sweep: expected a table of key = [values]")
            cfg["sweep"] = dict(value)
        elif key in schema and key:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key}: expected a table, got {value!r}")
            for name, v in value.items():
                full = f"{key}.{name}"
                if key == "problem" and name == "loss" and callable(v):
                    custom_loss = v
                    continue
                cfg[key][name] = _check_value(full, v, schema)
        elif key in schema[""]:
            cfg[key] = _check_value(key, value, schema)
        else:
            known = keys_of(schema) + tuple(schema)
            raise ConfigError(f"{key}: unknown key{_suggest(key, known)}")
    if custom_loss is not None:
        cfg["problem"]["loss"] = custom_loss
    return cfg


def _check_consistency(cfg: dict[str, Any]) -> None:
    """Cross-field rules (the single-field ones are in SCHEMA)."""
    p, d, s, sv = cfg["problem"], cfg["dynamics"], cfg["solver"], cfg["save"]
    if p["kind"] == "diagonal":
        if p["singular_values"] is None:
            p["singular_values"] = list(_DIAGONAL_DEFAULT)
        if len(p["singular_values"]) < 1:
            raise ConfigError("problem.singular_values: diagonal needs at least one value")
        p["m"] = p["n"] = len(p["singular_values"])
    else:
        if p["rank"] > min(p["m"], p["n"]):
            raise ConfigError(
                f"problem.rank: must be ≤ min(problem.m, problem.n) = {min(p['m'], p['n'])}, "
                f"got {p['rank']}"
            )
        if p["singular_values"] is not None and len(p["singular_values"]) != p["rank"]:
            raise ConfigError(
                f"problem.singular_values: needs problem.rank = {p['rank']} values, "
                f"got {len(p['singular_values'])}"
            )
    if p["singular_values"] is not None and any(v < 0 for v in p["singular_values"]):
        raise ConfigError("problem.singular_values: must be ≥ 0")
    if p["kind"] == "regression" and p["samples"] < p["n"]:
        raise ConfigError(
            f"problem.samples: regression whitens its inputs and needs samples ≥ problem.n "
            f"= {p['n']}, got {p['samples']}"
        )
    if p["kind"] == "custom":
        if p["loss"] is None:
            raise ConfigError(
                "problem.loss: custom problems need a loss, 'module:function' "
                "(or a callable L(W) in the Python API)"
            )
        load_callable(p["loss"])
    if p["kind"] != "custom" and p["loss"] is not None:
        raise ConfigError(f"problem.loss: only for problem.kind = 'custom', not {p['kind']!r}")
    if p["kind"] == "custom" and cfg["init"]["kind"] == "spectral":
        raise ConfigError(
            "init.kind: 'spectral' needs a target, which custom problems lack; "
            "use gaussian, balanced or imbalanced"
        )

    kind = d["kind"]
    continuous = kind in CONTINUOUS_DYNAMICS
    if d["sigma"] > 0 and kind not in SIGMA_DYNAMICS:
        why = (
            "its noise comes from minibatches (dynamics.batch)"
            if kind == "sgd"
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
    if kind in ("momentum", "momentum_coupled") and not d["mu"] <= 1:
        raise ConfigError(
            f"dynamics.mu: discrete momentum (EMA weight of the new gradient) must be in "
            f"(0, 1], got {d['mu']}"
        )
    if kind == "sgd":
        if not p_has_samples(p):
            raise ConfigError(
                f"dynamics.kind: sgd samples minibatches of data; problem.kind = "
                f"{p['kind']!r} has none (use sensing, completion or regression, or "
                f"sgd_gaussian for Gaussian gradient noise)"
            )
        if d["batch"] > p["samples"]:
            raise ConfigError(
                f"dynamics.batch: must be ≤ problem.samples = {p['samples']}, got {d['batch']}"
            )
    if continuous:
        sde = kind in SDE_DYNAMICS
        if s["method"] is None:
            s["method"] = "shark" if sde else "tsit5"
        allowed = SDE_METHODS if sde else ODE_METHODS
        if s["method"] not in allowed:
            what = "an SDE" if sde else "an ODE"
            raise ConfigError(
                f"solver.method: {kind} is {what}; {s['method']!r} is not a solver for it, "
                f"use one of {', '.join(allowed)}"
            )
        can_adapt = SDE_ADAPTIVE_METHODS if sde else ADAPTIVE_METHODS
        if s["adaptive"] is None:
            s["adaptive"] = s["method"] in can_adapt and not sde
        elif s["adaptive"] and s["method"] not in can_adapt:
            raise ConfigError(
                f"solver.adaptive: {s['method']} has no error estimate here; adaptive "
                f"{'SDE' if sde else 'ODE'} solves need one of {', '.join(can_adapt)}"
            )
    else:
        if s["adaptive"] is None:
            s["adaptive"] = False

    if sv["ts"] is not None:
        ts = sv["ts"]
        if len(ts) < 1 or any(t < 0 for t in ts) or any(b <= a for a, b in zip(ts, ts[1:])):
            raise ConfigError("save.ts: must be non-negative and strictly increasing")
        sv["t1"] = float(ts[-1])
        if sv["t1"] <= 0:
            raise ConfigError("save.ts: the last save time must be > 0")
    if not continuous:
        for t in save_times(cfg):
            if abs(t - round(t)) > 1e-9:
                raise ConfigError(
                    f"save.num: discrete dynamics save at whole steps; t = {t:g} is not one "
                    f"(choose save.num so that t1/(num-1) is an integer, or give save.ts)"
                )


def p_has_samples(problem: Mapping[str, Any]) -> bool:
    """Whether a problem's loss averages over data points (minibatches make sense)."""
    return problem["kind"] in ("sensing", "completion", "regression")


def warn_deterministic(points: list[Mapping[str, Any]]) -> None:
    """Say once that stochastic dynamics with σ = 0 run as deterministic ones."""
    quiet = sorted(
        {
            p["dynamics"]["kind"]
            for p in points
            if p["dynamics"]["kind"] in SIGMA_DYNAMICS and p["dynamics"]["sigma"] == 0
        }
    )
    if quiet:
        warnings.warn(
            f"dynamics.sigma = 0: {', '.join(quiet)} run without noise (deterministic)",
            stacklevel=2,
        )


def load_callable(spec: str | Callable) -> Callable:
    """``"package.module:function"`` → the function (a callable passes through)."""
    if callable(spec):
        return spec
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"problem.loss: expected 'module:function', got {spec!r}")
    try:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:
            # As `python -m` would: modules beside the working directory are importable.
            sys.path.insert(0, os.getcwd())
            try:
                mod = importlib.import_module(module)
            finally:
                sys.path.remove(os.getcwd())
        obj = getattr(mod, name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"problem.loss: cannot load {spec!r}: {e}") from None
    if not callable(obj):
        raise ConfigError(f"problem.loss: {spec!r} is not callable")
    return obj


def save_times(cfg: Mapping[str, Any]) -> list[float]:
    """The save times of a resolved config, in steps."""
    sv = cfg["save"]
    if sv["ts"] is not None:
        return [float(t) for t in sv["ts"]]
    t1, num = sv["t1"], sv["num"]
    return [t1 * i / (num - 1) for i in range(num)]


def resolve(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Load, override, fill defaults and validate. Returns the resolved base config.

    The ``sweep`` table is kept (validated) but not expanded: see :func:`expand`.
    """
    raw = load_config(source)
    custom_loss = None
    if isinstance(raw.get("problem"), Mapping) and callable(raw["problem"].get("loss")):
        custom_loss = raw["problem"]["loss"]
    for key, value in (overrides or {}).items():
        _set_dotted(raw, key, value)
    cfg = _merge_defaults(raw, custom_loss)
    sweep = cfg["sweep"]
    _check_sweep(sweep)
    # Validate every combination now, so that no bad point surfaces after compiling.
    warn_deterministic(expand(cfg))
    if all(k in NUMERIC_KEYS for k in sweep):
        # One structure: fill the derived values (diagonal's m, n; solver.adaptive; ...)
        # so that the saved config is the one that ran. With structural sweep keys the
        # derived values differ per point and are filled per point only.
        _check_consistency(cfg)
    return cfg


def _check_sweep(sweep: dict[str, Any], schema: Schema = SCHEMA) -> None:
    """Validate a ``[sweep]`` table in place: known, sweepable keys, each with a
    non-empty list of valid values."""
    for key, values in sweep.items():
        _field(key, schema)
        if key in ("x64", "name"):
            raise ConfigError(
                f"sweep.{key}: not sweepable; sweepable keys are the others of "
                f"{', '.join(keys_of(schema))}"
            )
        if not isinstance(values, list) or len(values) == 0:
            raise ConfigError(f"sweep.{key}: expected a non-empty list of values, got {values!r}")
        sweep[key] = [_check_value(key, v, schema) for v in values]


def expand(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The product of the sweep lists: one resolved config per point, in row-major
    order of the ``[sweep]`` table (the first key varies slowest)."""
    sweep = cfg.get("sweep") or {}
    keys = list(sweep)
    points = []
    for values in itertools.product(*(sweep[k] for k in keys)):
        point = copy.deepcopy({k: v for k, v in cfg.items() if k != "sweep"})
        if callable(cfg["problem"].get("loss")):
            point["problem"]["loss"] = cfg["problem"]["loss"]
        for k, v in zip(keys, values):
            _set_dotted(point, k, v)
        point["sweep"] = {}
        points.append(point)
    for point in points:
        _check_consistency(point)
    return points


def structure_key(point: Mapping[str, Any]) -> str:
    """Everything of a point that shapes the compiled program (numeric keys removed)."""
    flat = flatten(point)
    for k in NUMERIC_KEYS:
        flat.pop(k)
    loss = flat.get("problem.loss")
    if callable(loss):
        flat["problem.loss"] = f"{loss.__module__}.{loss.__qualname__}#{id(loss)}"
    return json.dumps(flat, sort_keys=True)


def to_json(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-serialisable copy (a custom loss callable becomes its qualified name)."""
    out = copy.deepcopy({k: v for k, v in cfg.items() if k != "problem"})
    out["problem"] = dict(cfg["problem"])
    loss = out["problem"].get("loss")
    if callable(loss):
        out["problem"]["loss"] = f"{loss.__module__}:{loss.__qualname__}"
    return out
