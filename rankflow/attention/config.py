"""The attention laboratory's config: schema, defaults, validation and sweep expansion.

Same conventions as :mod:`rankflow.config`: a nested dict (or TOML file) validated
completely in plain Python before anything is traced; every error is a
:class:`rankflow.ConfigError` naming the field (``attention.H``) and the allowed values;
keys are dotted names, used alike on the command line (``--set train.lam=0.1``), in
``[sweep]`` and as results columns.

Weight decay (THEORY.md conventions: the decay is ``−ηλθ`` per step) is set per
*parameter group* (:data:`GROUPS`): ``train.decay`` lists the decayed groups (the optax
masks, structural), ``train.lam`` is their λ, and ``train.lam_<group>`` overrides it for
one group. Groups outside ``train.decay`` are never decayed (their ``lam_<group>`` is 0
in the results; setting it is an error).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import config as core
from ..config import (
    _BOOL,
    _INT,
    _LIST,
    _NUM,
    _STR,
    ADAPTIVE_METHODS,
    ConfigError,
    Field,
    _ge,
    _gt,
    _one_of,
    _suggest,
    load_config,
)

__all__ = [
    "ALL_KEYS",
    "DEFAULTS",
    "GROUPS",
    "KINDS",
    "NUMERIC_KEYS",
    "SCHEMA",
    "TASK_KINDS",
    "expand",
    "flatten",
    "lam_of",
    "resolve",
    "save_steps",
    "structure_key",
    "to_json",
]

# Parameter groups (see ``optimizers.group_of``): the key-query factors (and q/k biases),
# the value-output factors (and v/output biases), the MLPs, the embeddings (token or
# read-in, positions, unembedding or read-out), the LayerNorms.
GROUPS = ("qk", "vo", "mlp", "embed", "norm")
TASK_KINDS = ("char_lm", "associative_recall", "in_context_regression")
OPTIMIZERS = ("sgd", "momentum", "adamw")
KINDS = OPTIMIZERS + ("gradient_flow",)
METHODS = ADAPTIVE_METHODS
DEFAULT_DECAY = ["qk", "vo", "mlp", "embed"]

# Traced inputs of the compiled program: a sweep over any of them compiles once.
NUMERIC_KEYS = (
    "seed",
    "attention.init_scale",
    "train.eta",
    "train.mu",
    "train.lam",
) + tuple(f"train.lam_{g}" for g in GROUPS)


def _choice(options):
    """Like the core's one-of check, with a suggestion for a near miss."""
    plain = _one_of(options)
    return lambda v: plain(v) and plain(v) + _suggest(v, options)


def _groups(value: list[str]) -> str | None:
    for g in value:
        if g not in GROUPS:
            return f"{g!r} is no parameter group{_suggest(g, GROUPS)}; groups: {', '.join(GROUPS)}"
    if len(set(value)) < len(value):
        return "a group is listed twice"
    return None


def _fraction(v):
    return None if 0 < v < 1 else "must be in (0, 1)"


SCHEMA: dict[str, dict[str, Field]] = {
    "": {
        "seed": Field(
            _INT, 0, "PRNG seed: initialisation, minibatches, gradient flow's batch", _ge(0)
        ),
        "x64": Field(_BOOL, False, "float64 throughout (theory checks); float32 otherwise"),
        "name": Field(_STR, "", "free-form experiment name, copied to config.json"),
    },
    "attention": {
        "D": Field(_INT, 32, "model width (residual stream)", _ge(1)),
        "H": Field(_INT, 4, "heads per layer; d_h = D/H", _ge(1)),
        "layers": Field(_INT, 2, "transformer blocks", _ge(1)),
        "context": Field(_INT, 64, "rows of the learned position table (longest sequence)", _ge(1)),
        "mlp_ratio": Field(_INT, 4, "MLP hidden width / D", _ge(1)),
        "tied_embedding": Field(_BOOL, False, "token tasks: unembedding = embeddingᵀ"),
        "qk_bias": Field(_BOOL, False, "biases on q and k (break the key-query product form)"),
        "vo_bias": Field(_BOOL, False, "biases on v and the output (break value-output's)"),
        "init_scale": Field(
            _NUM, 1.0, "attention factors start N(0, init_scale²/D) entrywise", _ge(0)
        ),
        "bias_scale": Field(_NUM, 0.0, "std of the initial attention biases", _ge(0)),
    },
    "task": {
        "kind": Field(_STR, "char_lm", "what the transformer learns", _choice(TASK_KINDS)),
        "seq_len": Field(_INT, 32, "char_lm: characters per input window", _ge(1)),
        "val_fraction": Field(
            _NUM, 0.1, "char_lm: the held-out last fraction of the corpus", _fraction
        ),
        "max_chars": Field(
            _INT, None, "char_lm: use the first max_chars characters only", _ge(2), optional=True
        ),
        "pairs": Field(_INT, 8, "associative_recall: key-value pairs per sequence", _ge(1)),
        "keys": Field(_INT, 16, "associative_recall: key symbols", _ge(1)),
        "values": Field(_INT, 16, "associative_recall: value symbols", _ge(1)),
        "points": Field(
            _INT, 16, "in_context_regression: (x, y) pairs per sequence, query included", _ge(1)
        ),
        "dim": Field(_INT, 4, "in_context_regression: dimension of x", _ge(1)),
        "noise": Field(_NUM, 0.0, "in_context_regression: std of the label noise", _ge(0)),
        "val_size": Field(_INT, 256, "sequences of the validation and train-eval sets", _ge(1)),
    },
    "train": {
        "kind": Field(
            _STR, "adamw", "optimizer, or full-batch gradient flow (diffrax)", _choice(KINDS)
        ),
        "eta": Field(_NUM, 3e-3, "learning rate η (time is in optimizer steps)", _gt(0)),
        "steps": Field(_INT, 1000, "optimizer steps (gradient flow: final time t1)", _ge(1)),
        "batch": Field(
            _INT, 32, "sequences per minibatch (gradient flow: of the fixed full batch)", _ge(1)
        ),
        "eval_every": Field(_INT, 50, "steps between saves (observables and losses)", _ge(1)),
        "lam": Field(_NUM, 0.1, "weight decay λ of the groups in train.decay", _ge(0)),
        "decay": Field(
            _LIST,
            DEFAULT_DECAY,
            f"decayed parameter groups, any of {', '.join(GROUPS)} (optax masks)",
            _groups,
            items=(str,),
        ),
        **{
            f"lam_{g}": Field(
                _NUM,
                None,
                f"λ of group {g} (default train.lam; needs {g} in train.decay)",
                _ge(0),
                optional=True,
            )
            for g in GROUPS
        },
        "mu": Field(_NUM, 0.1, "momentum: EMA weight of the new gradient, M ← (1−μ)M + μg", _gt(0)),
        "b1": Field(_NUM, 0.9, "adamw: β₁", _fraction),
        "b2": Field(_NUM, 0.999, "adamw: β₂", _fraction),
        "eps": Field(_NUM, 1e-8, "adamw: ε", _gt(0)),
        "rank_tol": Field(_NUM, 1e-3, "rank counts sv > rank_tol·sv_1", _gt(0)),
        "diverge_norm": Field(
            _NUM, 1e6, "a run with a parameter entry beyond this is marked diverged", _gt(0)
        ),
    },
    "solver": {
        "method": Field(_STR, "tsit5", "gradient flow: adaptive diffrax solver", _choice(METHODS)),
        "rtol": Field(_NUM, 1e-6, "gradient flow: relative tolerance", _gt(0)),
        "atol": Field(_NUM, 1e-8, "gradient flow: absolute tolerance", _gt(0)),
        "max_steps": Field(_INT, 100_000, "gradient flow: solver step budget", _ge(1)),
    },
}

DEFAULTS: dict[str, Any] = core.defaults_of(SCHEMA)
ALL_KEYS = core.keys_of(SCHEMA)


def flatten(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Nested config → ``{"train.lam": 0.1, ...}`` (the sweep table excluded)."""
    return core.flatten(cfg, SCHEMA)


def sequence_length(task: Mapping[str, Any]) -> tuple[str, int]:
    """The tokens per input sequence of a task, and the field that sets it."""
    kind = task["kind"]
    if kind == "char_lm":
        return "task.seq_len", task["seq_len"]
    if kind == "associative_recall":
        return "task.pairs", 2 * task["pairs"] + 1
    return "task.points", task["points"]


def _check_consistency(cfg: dict[str, Any]) -> None:
    """Cross-field rules (single-field ones are in SCHEMA); fills each group's λ."""
    a, t, tr = cfg["attention"], cfg["task"], cfg["train"]
    if a["D"] % a["H"]:
        divisors = ", ".join(str(h) for h in range(1, a["D"] + 1) if a["D"] % h == 0)
        raise ConfigError(
            f"attention.H: must divide attention.D = {a['D']} (d_h = D/H), one of "
            f"{divisors}; got {a['H']}"
        )
    field, length = sequence_length(t)
    if length > a["context"]:
        how, most = {
            "task.seq_len": (f"{length} characters", a["context"]),
            "task.pairs": (f"2·pairs + 1 = {length} tokens", (a["context"] - 1) // 2),
            "task.points": (f"{length} tokens", a["context"]),
        }[field]
        raise ConfigError(
            f"{field}: must be ≤ {most}: {t['kind']} sequences have {how}, longer than the "
            f"position table (attention.context = {a['context']}); got {t[field[5:]]}"
        )
    if t["kind"] == "associative_recall" and t["pairs"] > t["keys"]:
        raise ConfigError(
            f"task.pairs: the keys of a sequence are distinct, so pairs must be ≤ task.keys "
            f"= {t['keys']}, got {t['pairs']}"
        )
    if t["kind"] == "in_context_regression" and a["tied_embedding"]:
        raise ConfigError(
            "attention.tied_embedding: in_context_regression reads vectors in and a scalar "
            "out, so there is no token embedding to tie; set it to false"
        )
    if t["kind"] == "char_lm":
        from .tasks import corpus_split_sizes

        n_train, n_val = corpus_split_sizes(t["max_chars"], t["val_fraction"])
        n, need = n_train + n_val, t["seq_len"] + 1
        if n < 2 * need:
            raise ConfigError(
                f"task.max_chars: must be ≥ 2·(task.seq_len + 1) = {2 * need} (a window in "
                f"each split); got {t['max_chars']}"
            )
        for split, size in (("training", n_train), ("validation", n_val)):
            if size < need:
                raise ConfigError(
                    f"task.val_fraction: must be in [{need / n:.3g}, {1 - need / n:.3g}] for "
                    f"{n} characters: the {split} split has {size}, fewer than "
                    f"task.seq_len + 1 = {need} (one window); got {t['val_fraction']}"
                )
    if tr["steps"] % tr["eval_every"]:
        raise ConfigError(
            f"train.eval_every: must divide train.steps = {tr['steps']} (saves at whole "
            f"multiples), got {tr['eval_every']}"
        )
    for g in GROUPS:
        key = f"lam_{g}"
        if g in tr["decay"]:
            if tr[key] is None:
                tr[key] = tr["lam"]
        elif tr[key] is None or tr[key] == 0:
            tr[key] = 0.0
        else:
            raise ConfigError(
                f"train.lam_{g}: group {g!r} is not in train.decay = {tr['decay']}, so it is "
                f"not decayed; add it to train.decay or drop train.lam_{g}"
            )


def lam_of(point: Mapping[str, Any]) -> dict[str, float]:
    """Each group's λ in a resolved point (0 for groups outside ``train.decay``)."""
    return {g: float(point["train"][f"lam_{g}"]) for g in GROUPS}


def resolve(
    source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Load, override, fill defaults and validate (every sweep point too). Returns the
    resolved base config; its ``sweep`` table is validated but not expanded."""
    raw = load_config(source)
    for key, value in (overrides or {}).items():
        core._set_dotted(raw, key, value, SCHEMA)
    cfg = core._merge_defaults(raw, None, SCHEMA)
    core._check_sweep(cfg["sweep"], SCHEMA)
    expand(cfg)  # every point is checked now, before anything compiles
    if not cfg["sweep"]:
        _check_consistency(cfg)  # fills each group's λ in the saved config
    return cfg


def expand(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The product of the sweep lists (first key slowest): one resolved point each,
    with every group's λ filled in."""
    sweep = cfg.get("sweep") or {}
    keys = list(sweep)
    points = []
    for values in itertools.product(*(sweep[k] for k in keys)):
        point = copy.deepcopy({k: v for k, v in cfg.items() if k != "sweep"})
        for k, v in zip(keys, values):
            core._set_dotted(point, k, copy.deepcopy(v), SCHEMA)
        point["sweep"] = {}
        _check_consistency(point)
        points.append(point)
    return points


def structure_key(point: Mapping[str, Any]) -> str:
    """Everything of a point that shapes the compiled program (numeric keys removed)."""
    flat = flatten(point)
    for k in NUMERIC_KEYS + ("name",):
        flat.pop(k)
    return json.dumps(flat, sort_keys=True)


def save_steps(point: Mapping[str, Any]) -> list[int]:
    """The saved steps 0, eval_every, …, steps."""
    tr = point["train"]
    return list(range(0, tr["steps"] + 1, tr["eval_every"]))


def to_json(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(cfg))


def keys_help() -> str:
    """Every key with its default and meaning (``rankflow attention train --help``)."""
    return core.keys_help(SCHEMA, NUMERIC_KEYS)
