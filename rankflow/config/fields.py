"""The config language every experiment family uses.

A family describes its config by a *schema*: sections of named :class:`Field` s, each
with its types, default, meaning and single-field check. From a schema this module
derives everything that is the same across families: defaults, dotted keys
(``"dynamics.lam"``, used alike in TOML, ``--set``, ``[sweep]`` and results columns),
type and range checks with a did-you-mean for unknown keys, ``--set`` parsing, the
``[sweep]`` table and its product, former key names refused with the new name, and
``--help`` text. Every error is a :class:`ConfigError` whose one-line message starts
with the field it names.

A family adds what only it knows: cross-field rules (a pure validation of one point)
and derived values (filled into each point after validation); see
:func:`rankflow.core.config.validate` and :func:`rankflow.core.config.derive`.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BOOL",
    "INT",
    "LIST",
    "MAX_RUNS",
    "NUM",
    "STR",
    "ConfigError",
    "Field",
    "OneOf",
    "Sections",
    "check_size",
    "check_sweep",
    "check_renamed",
    "check_value",
    "choice",
    "copy_config",
    "defaults_of",
    "field",
    "flatten",
    "ge",
    "seed_range",
    "get_dotted",
    "gt",
    "keys_of",
    "load_config",
    "env_limit",
    "merge_defaults",
    "one_of",
    "parse_set",
    "read_config",
    "renamed_error",
    "set_dotted",
    "structure_key",
    "suggest",
    "top_fields",
    "sweep_points",
]


class ConfigError(ValueError):
    """A config value is missing, unknown, of the wrong type or out of range.

    Examples:
      >>> import rankflow
      >>> rankflow.resolve({"dynamics": {"kind": "gd", "eta": -0.1}})
      Traceback (most recent call last):
      rankflow.config.fields.ConfigError: dynamics.eta: must be > 0, got -0.1
    """


# --- fields ----------------------------------------------------------------------------

INT = (int,)
NUM = (int, float)
STR = (str,)
BOOL = (bool,)
LIST = (list, tuple)


@dataclass(frozen=True)
class Field:
    """One config key: accepted types, default, meaning (for ``--help``) and check."""

    types: tuple[type, ...]
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    optional: bool = False  # None allowed
    items: tuple[type, ...] = (int, float)  # element types of a list value
    callables: bool = False  # a Python callable is taken as is (the Python API)
    # A traced input of the compiled program: a sweep over it shares one compilation
    # (one program serves every value). Every other key is structural: one program per
    # value. The families' NUMERIC_KEYS, the program's hyperparameters and the swept
    # columns of the tables derive from this.
    traced: bool = False

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The allowed values of an enumerated key (for ``--help``), or None."""
        return self.check.options if isinstance(self.check, OneOf) else None


# A family's sections: section name ("" for the top level) → field name → Field.
Sections = Mapping[str, Mapping[str, Field]]


def ge(lo):
    """Check: value ≥ lo."""
    return lambda v: None if v >= lo else f"must be ≥ {lo}"


def gt(lo):
    """Check: value > lo."""
    return lambda v: None if v > lo else f"must be > {lo}"


@dataclass(frozen=True)
class OneOf:
    """Check: value is one of ``options`` (``hint``: a did-you-mean for a near miss)."""

    options: tuple[str, ...]
    hint: bool = False

    def __call__(self, v) -> str | None:
        if v in self.options:
            return None
        error = f"must be one of {', '.join(self.options)}"
        return error + suggest(v, self.options) if self.hint else error


def one_of(options) -> OneOf:
    """Check: value is one of ``options``."""
    return OneOf(tuple(options))


# Seeds are traced as 32-bit integers: every seed in [0, 2³² − 1] gives its own PRNG key
# (as the uint32 seed of jax.random.PRNGKey); a larger one would alias a smaller one.
SEED_MAX = 2**32 - 1
# Integers cross into numpy and XLA as int64 at most.
INT_MAX = 2**63 - 1


def seed_range(v):
    """Check: a PRNG seed, 0 ≤ value ≤ 2³² − 1."""
    return None if 0 <= v <= SEED_MAX else f"must be in [0, {SEED_MAX}] (a 32-bit PRNG seed)"


def choice(options) -> OneOf:
    """Like :func:`one_of`, with a suggestion for a near miss."""
    return OneOf(tuple(options), hint=True)


def suggest(name: str, options) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options``, or an empty string."""
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def top_fields(seed_help: str) -> dict[str, Field]:
    """The top-level section of every family's schema: its PRNG ``seed`` (``seed_help``
    says what it seeds), ``x64`` and the free-form ``name`` (neither sweepable)."""
    return {
        "seed": Field(INT, 0, seed_help, seed_range, traced=True),
        "x64": Field(BOOL, False, "float64 throughout (theory checks); float32 otherwise"),
        "name": Field(STR, "", "free-form experiment name, copied to config.json"),
    }


def defaults_of(schema: Sections) -> dict[str, Any]:
    """The config of a schema's defaults (top-level keys, sections, an empty sweep)."""
    out: dict[str, Any] = {k: f.default for k, f in schema[""].items()}
    out.update({sec: {k: f.default for k, f in fs.items()} for sec, fs in schema.items() if sec})
    out["sweep"] = {}
    return out


def traced_keys(schema: Sections) -> tuple[str, ...]:
    """The dotted keys of a schema's traced fields (:attr:`Field.traced`), in schema
    order: the family's numeric keys, the program's traced inputs."""
    return tuple(k for k in keys_of(schema) if field(k, schema).traced)


def traced_in(schema: Sections, section: str) -> tuple[str, ...]:
    """The names of a section's traced fields (``("lam", "eta", …)`` of ``dynamics``)."""
    return tuple(name for name, f in schema[section].items() if f.traced)


def keys_of(schema: Sections) -> tuple[str, ...]:
    """A schema's dotted keys, in schema order."""
    return tuple(key for key, _, _ in _dotted(schema))


_DOTTED: dict[int, tuple[Sections, list[tuple[str, str, str]]]] = {}  # id → (schema, rows)


def _dotted(schema: Sections) -> list[tuple[str, str, str]]:
    """``(dotted key, section, name)`` of each field, made once per schema."""
    if _DOTTED.get(id(schema), (None,))[0] is not schema:
        rows = [(f"{s}.{k}" if s else k, s, k) for s, fs in schema.items() for k in fs]
        _DOTTED[id(schema)] = (schema, rows)
    return _DOTTED[id(schema)][1]


def field(key: str, schema: Sections) -> Field:
    """The field of a dotted key; an unknown key is a ConfigError with a suggestion."""
    sec, _, name = key.rpartition(".")
    try:
        return schema[sec][name]
    except KeyError:
        raise ConfigError(f"{key}: unknown key{suggest(key, keys_of(schema))}") from None


def check_value(key: str, value: Any, schema: Sections) -> Any:
    """A single value checked against its field: type, finiteness, range. Returns it
    normalised (numbers of float fields as floats, sequences as lists)."""
    f = field(key, schema)
    if value is None:
        if f.optional:
            return None
        raise ConfigError(f"{key}: a value is required")
    if f.callables and callable(value):
        return value
    # bool is an int in Python: keep the two apart.
    if isinstance(value, bool) and bool not in f.types:
        raise ConfigError(f"{key}: expected {_typename(f.types)}, got a boolean {value!r}")
    if not isinstance(value, f.types) and not (float in f.types and isinstance(value, int)):
        raise ConfigError(
            f"{key}: expected {_typename(f.types)}, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be finite, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float in f.types:
        value = float(value)
    if isinstance(value, (list, tuple)):
        value = _check_items(key, list(value), f.items)
    if f.check is not None:
        err = f.check(value)
        if err:
            raise ConfigError(f"{key}: {err}, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        raise ConfigError(f"{key}: must be in [-(2⁶³ − 1), 2⁶³ − 1] (int64), got {value!r}")
    return value


def _check_items(key: str, value: list, items: tuple[type, ...]) -> list:
    if items != (int, float):
        for v in value:
            if not isinstance(v, items) or (isinstance(v, bool) and bool not in items):
                what = _typename(items).removeprefix("a ").removeprefix("an ")
                raise ConfigError(f"{key}: expected a list of {what}s, got {v!r}")
        return value
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{key}: expected a list of finite numbers, got {v!r}")
    return [float(v) for v in value]


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


# --- loading ---------------------------------------------------------------------------


def load_config(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A config as a nested dict, from a TOML path or a mapping (copied)."""
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if not isinstance(source, str | os.PathLike):
        got = f"{type(source).__name__} {source!r:.40}"
        raise ConfigError(f"config: expected a TOML file's path or a dict of sections, got {got}")
    path = Path(source)
    if path.is_dir():
        tomls = sorted(path.glob("*.toml"))
        such = f", such as {tomls[0]}" if tomls else ""
        raise ConfigError(f"config: {path} is a directory; give a TOML config file{such}")
    if not path.is_file():
        raise ConfigError(f"config: no such file {str(path)!r}")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: {path} is not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config: {path} is not a text file (TOML is UTF-8 text)") from None
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror or e}") from None


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


def set_dotted(cfg: dict, key: str, value: Any, schema: Sections) -> None:
    """Set ``cfg[section][name]`` (or ``cfg["sweep"][key]`` for ``"sweep.key"``); an
    unknown key is a ConfigError with a suggestion."""
    if key.startswith("sweep."):
        cfg.setdefault("sweep", {})[key[len("sweep.") :]] = value
        return
    sec, _, name = key.rpartition(".")
    field(key, schema)
    (cfg.setdefault(sec, {}) if sec else cfg)[name] = value


def get_dotted(cfg: Mapping, key: str) -> Any:
    """``cfg[section][name]`` of a dotted key."""
    sec, _, name = key.rpartition(".")
    return (cfg[sec] if sec else cfg)[name]


def flatten(cfg: Mapping[str, Any], schema: Sections) -> dict[str, Any]:
    """Nested config → ``{"dynamics.lam": 0.05, ...}`` (the sweep table excluded)."""
    return {key: (cfg[sec] if sec else cfg)[name] for key, sec, name in _dotted(schema)}


# --- renamed keys ----------------------------------------------------------------------


def renamed_error(key: str, new: str, where: str = "", how: str = "") -> ConfigError:
    """The one-line error of a former key name: ``train.lam: renamed dynamics.lam (one
    name across rankflow's families); write dynamics.lam``. ``where`` prefixes both
    names (``sweep.``); ``how`` replaces the advice's spelling of the new one."""
    return ConfigError(
        f"{where}{key}: renamed {new} (one name across rankflow's families); "
        f"write {how or where + new}"
    )


def check_renamed(
    raw: Mapping[str, Any], overrides: Mapping[str, Any], renamed: Mapping[str, str]
) -> None:
    """Refuse a former key name (``renamed``: old dotted key → new) wherever a config
    names keys: a section's key or a top-level dotted key of ``raw``, a ``[sweep]`` key,
    an override (``--set``, ``sweep.`` ones included). Raises a one-line ConfigError
    naming the new key; changes nothing."""
    if not renamed:
        return
    for key in overrides:
        bare = key.removeprefix("sweep.")
        if bare in renamed:
            raise renamed_error(bare, renamed[bare], key[: len(key) - len(bare)])
    for key, value in raw.items():
        if key in renamed:
            raise renamed_error(key, renamed[key])
        if key == "sweep" and isinstance(value, Mapping):
            for k in value:
                if k in renamed:
                    raise renamed_error(k, renamed[k], "sweep.", f'"{renamed[k]}" in [sweep]')
        elif isinstance(value, Mapping):
            for name in value:
                if f"{key}.{name}" in renamed:
                    raise renamed_error(f"{key}.{name}", renamed[f"{key}.{name}"])


# --- resolution ------------------------------------------------------------------------


def merge_defaults(raw: Mapping[str, Any], schema: Sections) -> dict[str, Any]:
    """The schema's defaults updated with a raw config, every value checked alone."""
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
                cfg[key][name] = check_value(f"{key}.{name}", v, schema)
        elif key in schema[""]:
            cfg[key] = check_value(key, value, schema)
        else:
            known = keys_of(schema) + tuple(schema)
            raise ConfigError(f"{key}: unknown key{suggest(key, known)}")
    return cfg


def check_sweep(sweep: dict[str, Any], schema: Sections) -> None:
    """Validate a ``[sweep]`` table in place: known, sweepable keys, each with a
    non-empty list of valid values."""
    for key, values in sweep.items():
        if isinstance(values, Mapping):  # [sweep.dynamics], or dynamics.lam unquoted
            inner, v = key, values
            while isinstance(v, Mapping) and v:
                name, v = next(iter(v.items()))
                inner += f".{name}"
            raise ConfigError(
                f'sweep.{key}: a sweep key is one dotted key in quotes: "{inner}" = '
                f"{v if isinstance(v, list) else [0.1, 0.2]} in [sweep] (TOML reads an "
                f"unquoted dotted key, or a [sweep.{key}] table, as a nested table)"
            )
        field(key, schema)
        if key in ("x64", "name", "save.states"):
            raise ConfigError(
                f"sweep.{key}: not sweepable; sweepable keys are the others of "
                f"{', '.join(keys_of(schema))}"
            )
        if not isinstance(values, list) or len(values) == 0:
            raise ConfigError(f"sweep.{key}: expected a non-empty list of values, got {values!r}")
        sweep[key] = [check_value(key, v, schema) for v in values]


def read_config(
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | None,
    schema: Sections,
    renamed: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Load a config, refuse its former key names (``renamed``: old → new, see
    :func:`check_renamed`), apply the dotted-key overrides, fill the defaults and check
    every value alone and the ``[sweep]`` table (not expanded; no cross-field rule
    applied)."""
    raw, overrides = load_config(source), overrides or {}
    check_renamed(raw, overrides, renamed or {})
    for key, value in overrides.items():
        set_dotted(raw, key, value, schema)
    cfg = merge_defaults(raw, schema)
    check_sweep(cfg["sweep"], schema)
    sizes = [len(v) for v in cfg["sweep"].values()]
    check_size(math.prod(sizes), " × ".join(map(str, sizes)) + " points")
    return cfg


def copy_config(cfg: Mapping[str, Any], schema: Sections) -> dict[str, Any]:
    """A deep copy that shares callables (a custom loss keeps its identity, and with it
    its compiled program). Section by section: the dicts, lists and scalars a config
    holds are copied directly (5× faster than ``copy.deepcopy``, which every point of a
    sweep pays; issue #27); any other value is deep-copied, and a callable at a schema
    key is the same object in the copy."""
    out: dict[str, Any] = {}
    top = schema.get("", {})
    for sec, value in cfg.items():
        fields = schema.get(sec) if sec else None
        if type(value) is dict and fields is not None:
            out[sec] = {
                k: v if type(v) in _ATOMS or callable(v) and k in fields else _copied(v)
                for k, v in value.items()
            }
        else:
            out[sec] = value if callable(value) and sec in top else _copied(value)
    return out


# Values copy.deepcopy returns as they are.
_ATOMS = frozenset({str, int, float, bool, complex, bytes, type(None)})


def _copied(value: Any) -> Any:
    """``copy.deepcopy(value)``, done directly for plain dicts, lists and scalars."""
    t = type(value)
    if t in _ATOMS:
        return value
    if t is dict:
        return {k: _copied(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _ATOMS else _copied(v) for v in value]
    return copy.deepcopy(value)


def sweep_points(cfg: Mapping[str, Any], schema: Sections) -> list[dict[str, Any]]:
    """The product of the sweep lists: one config per point, in row-major order of the
    ``[sweep]`` table (the first key varies slowest), with an empty sweep. Points are
    copies, except callables (a custom loss), which all points share. Materialised: for
    large sweeps use :class:`rankflow.config.points.Points`, which makes them on demand."""
    sweep = cfg.get("sweep") or {}
    keys = list(sweep)
    points = []
    for values in itertools.product(*(sweep[k] for k in keys)):
        point = copy_config({k: v for k, v in cfg.items() if k != "sweep"}, schema)
        for k, v in zip(keys, values):
            set_dotted(point, k, copy.deepcopy(v), schema)
        point["sweep"] = {}
        points.append(point)
    return points


MAX_RUNS = 10**6  # default of RANKFLOW_MAX_RUNS: the largest sweep run without asking


def env_limit(name: str, default: int) -> int:
    """The integer of environment variable ``name`` (else ``default``), or one line."""
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None


def check_size(runs: int, how: str) -> None:
    """Refuse a sweep of more than ``RANKFLOW_MAX_RUNS`` (default 10⁶) runs (``how``:
    how they count)."""
    limit = env_limit("RANKFLOW_MAX_RUNS", MAX_RUNS)
    if runs > limit:
        raise ConfigError(
            f"sweep: {runs:,} runs ({how}) exceed the limit of {limit:,}; shrink the "
            f"[sweep] lists, or raise the limit with RANKFLOW_MAX_RUNS={runs}"
        )


def structure_key(point: Mapping[str, Any], schema: Sections, traced: Iterable[str]) -> str:
    """Everything of a point that shapes its family's compiled program, as JSON: every
    key but the ``traced`` ones; a callable (a custom loss) by its name and identity."""
    flat = flatten(point, schema)
    for k in traced:
        flat.pop(k)
    for k, v in flat.items():
        if callable(v):
            # A callable object (an instance with __call__) has no __qualname__.
            name = getattr(v, "__qualname__", type(v).__qualname__)
            flat[k] = f"{getattr(v, '__module__', '?')}.{name}#{id(v)}"
    return json.dumps(flat, sort_keys=True)
