"""The attention laboratory's config: schema, defaults, validation and sweep expansion.

Same conventions as :mod:`rankflow.core.config`: a nested dict (or TOML file) validated
completely in plain Python before anything is traced; every error is a
:class:`rankflow.ConfigError` naming the field (``attention.H``) and the allowed values;
keys are dotted names, used alike on the command line (``--set dynamics.lam=0.1``), in
``[sweep]`` and as results columns.

The quantities both families have take the core's names (one name per quantity):
``dynamics.kind``, ``dynamics.eta``, ``dynamics.mu``, ``dynamics.lam``,
``dynamics.batch``, the schedule's ``dynamics.*``, ``init.scale``, ``save.t1`` (here an
integer number of optimizer steps), ``save.rank_tol`` and ``solver.diverge_norm``. The
former attention names (:data:`RENAMED`) are a one-line ConfigError naming the new key.

Weight decay (docs/theory.md conventions: the decay is ``−ηλθ`` per step) is set per
*parameter group* (:data:`GROUPS`): ``train.decay`` lists the decayed groups (the optax
masks, structural), ``dynamics.lam`` is their λ, and ``train.lam_<group>`` overrides it
for one group. Groups outside ``train.decay`` are never decayed (their ``lam_<group>`` is
0 in the results; setting it is an error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..config import fields as schema_lib
from ..config.fields import BOOL, INT, LIST, NUM, STR, ConfigError, Field, choice, ge, gt, suggest
from ..config.schema import Schema
from ..core.vocabulary import MAX_STEPS, schedule_error
from ..numerics import solve as solve_lib
from ..numerics.schedules import schedule_fields

__all__ = [
    "ALL_KEYS",
    "DEFAULTS",
    "GROUPS",
    "FACTORS",
    "KINDS",
    "LR_KEYS",
    "NUMERIC_KEYS",
    "RENAMED",
    "SCHEMA",
    "TASK_KINDS",
    "derive",
    "expand",
    "flatten",
    "lam_of",
    "resolve",
    "export_steps",
    "save_steps",
    "structure_key",
    "to_json",
    "validate",
]

# Parameter groups (see ``optimizers.group_of``): the key-query factors (and q/k biases),
# the value-output factors (and v/output biases), the MLPs, the embeddings (token or
# read-in, positions, unembedding or read-out), the LayerNorms.
GROUPS = ("qk", "vo", "mlp", "embed", "norm")
# The single factors of the attention pairs (query, key, value, output), each with its
# own learning-rate multiplier ``train.lr_<factor>`` beside its group's.
FACTORS = ("q", "k", "v", "o")
TASK_KINDS = ("char_lm", "associative_recall", "in_context_regression", "images")
POOLINGS = ("cls", "mean")
# The optimizers: each the core family's kind of the same name, its direction with decay
# per group (:func:`.optimizers.make_optimizer`); muon on the hidden matrices, AdamW on
# the rest (:func:`.optimizers.muon_dimensions`).
OPTIMIZERS = ("sgd", "momentum", "adamw", "sign_gd", "signum", "lion", "muon")
KINDS = OPTIMIZERS + ("gradient_flow",)
# Gradient flow steps adaptively: the ODE solvers with an error estimate.
METHODS = solve_lib.methods(solve_lib.solves_odes, solve_lib.has_error_estimate)
SOLVER = solve_lib.SECTION_DEFAULTS  # the solver's defaults, numerics' own
DEFAULT_DECAY = ["qk", "vo", "mlp", "embed"]

# Learning-rate multipliers per group and per attention factor (default 1).
LR_KEYS = tuple(f"train.lr_{u}" for u in GROUPS + FACTORS)


# The attention family's former names of the quantities both families have, with the
# names they now share with the core family: an old name in a config (TOML, --set or
# [sweep]) is a one-line ConfigError naming the new one.
RENAMED = {
    "train.kind": "dynamics.kind",
    "train.eta": "dynamics.eta",
    "train.mu": "dynamics.mu",
    "train.lam": "dynamics.lam",
    "train.batch": "dynamics.batch",
    "train.schedule": "dynamics.schedule",
    "train.warmup": "dynamics.warmup",
    "train.final_fraction": "dynamics.final_fraction",
    "train.steps": "save.t1",
    "train.rank_tol": "save.rank_tol",
    "train.diverge_norm": "solver.diverge_norm",
    "attention.init_scale": "init.scale",
}


def _groups(value: list[str]) -> str | None:
    for g in value:
        if g not in GROUPS:
            return f"{g!r} is no parameter group{suggest(g, GROUPS)}; groups: {', '.join(GROUPS)}"
    if len(set(value)) < len(value):
        return "a group is listed twice"
    return None


def _fraction(v):
    return None if 0 < v < 1 else "must be in (0, 1)"


def _multiplier(v):
    return None if 0 <= v < float("inf") else "must be a finite number ≥ 0"


def _classes(v):
    from .images import MAX_CLASSES

    return None if 2 <= v <= MAX_CLASSES else f"must be in 2 … {MAX_CLASSES} (shapes drawn)"


# The sections of :data:`SCHEMA` (built at the end of the module, with the rules).
SECTIONS: dict[str, dict[str, Field]] = {
    "": schema_lib.top_fields("PRNG seed: initialisation, minibatches, gradient flow's batch"),
    "attention": {
        "D": Field(INT, 32, "model width (residual stream)", ge(1)),
        "H": Field(INT, 4, "heads per layer; d_h = D/H", ge(1)),
        "layers": Field(INT, 2, "transformer blocks", ge(1)),
        "context": Field(INT, 64, "rows of the learned position table (longest sequence)", ge(1)),
        "mlp_ratio": Field(INT, 4, "MLP hidden width / D", ge(1)),
        "tied_embedding": Field(BOOL, False, "token tasks: unembedding = embeddingᵀ"),
        "qk_bias": Field(BOOL, False, "biases on q and k (break the key-query product form)"),
        "vo_bias": Field(BOOL, False, "biases on v and the output (break value-output's)"),
        "bias_scale": Field(NUM, 0.0, "std of the initial attention biases", ge(0)),
        "causal": Field(
            BOOL,
            None,
            "causal mask (default: the task's; images: bidirectional, sequences: causal)",
            optional=True,
        ),
        "pooling": Field(
            STR, "cls", "images: class token (cls) or mean over patches", choice(POOLINGS)
        ),
    },
    "task": {
        "kind": Field(STR, "char_lm", "what the transformer learns", choice(TASK_KINDS)),
        "seq_len": Field(INT, 32, "char_lm: characters per input window", ge(1)),
        "val_fraction": Field(
            NUM, 0.1, "char_lm: the held-out last fraction of the corpus", _fraction
        ),
        "max_chars": Field(
            INT, None, "char_lm: use the first max_chars characters only", ge(2), optional=True
        ),
        "pairs": Field(INT, 8, "associative_recall: key-value pairs per sequence", ge(1)),
        "keys": Field(INT, 16, "associative_recall: key symbols", ge(1)),
        "values": Field(INT, 16, "associative_recall: value symbols", ge(1)),
        "points": Field(
            INT, 16, "in_context_regression: (x, y) pairs per sequence, query included", ge(1)
        ),
        "dim": Field(INT, 4, "in_context_regression: dimension of x", ge(1)),
        "noise": Field(NUM, 0.0, "in_context_regression: std of the label noise", ge(0)),
        "val_size": Field(INT, 256, "sequences of the validation and train-eval sets", ge(1)),
        "image": Field(INT, 16, "images: side of the square grayscale images, pixels", ge(1)),
        "patch": Field(INT, 4, "images: side of the square patches (divides task.image)", ge(1)),
        "classes": Field(INT, 10, "images: shape classes (balanced)", _classes),
        "train_size": Field(INT, 16384, "images: the fixed training set's size", ge(1)),
        "pixel_noise": Field(NUM, 0.15, "images: std of the Gaussian pixel noise", ge(0)),
        "data_seed": Field(
            INT, 0, "images: PRNG seed of the training and validation images", ge(0)
        ),
    },
    "init": {
        "scale": Field(
            NUM,
            1.0,
            "attention factors start N(0, scale²/D) entrywise",
            ge(0),
            traced=True,
        ),
    },
    "dynamics": {
        "kind": Field(
            STR, "adamw", "optimizer, or full-batch gradient flow (diffrax)", choice(KINDS)
        ),
        "eta": Field(NUM, 3e-3, "learning rate η (time is in optimizer steps)", gt(0), traced=True),
        "mu": Field(
            NUM,
            0.1,
            "momentum, signum: EMA weight of the new gradient, M ← (1−μ)M + μg",
            gt(0),
            traced=True,
        ),
        "lam": Field(NUM, 0.1, "weight decay λ of the groups in train.decay", ge(0), traced=True),
        "batch": Field(
            INT, 32, "sequences per minibatch (gradient flow: of the fixed full batch)", ge(1)
        ),
        **schedule_fields("save.t1"),
    },
    "train": {
        "eval_every": Field(INT, 50, "steps between saves (observables and losses)", ge(1)),
        "export_every": Field(
            INT,
            0,
            "steps between exported checkpoints (Hugging Face safetensors in "
            "DIR/export/; 0: none); a multiple of train.eval_every dividing save.t1",
            ge(0),
        ),
        "decay": Field(
            LIST,
            DEFAULT_DECAY,
            f"decayed parameter groups, any of {', '.join(GROUPS)} (optax masks)",
            _groups,
            items=(str,),
        ),
        **{
            f"lam_{g}": Field(
                NUM,
                None,
                f"λ of group {g} (default dynamics.lam; needs {g} in train.decay)",
                ge(0),
                optional=True,
                traced=True,
            )
            for g in GROUPS
        },
        **{
            f"lr_{u}": Field(
                NUM,
                1.0,
                f"learning-rate multiplier of group {u}: its whole step, decay included, "
                "times this (PyTorch's per-group lr; gradient flow: its field)",
                _multiplier,
                traced=True,
            )
            for u in GROUPS
        },
        **{
            f"lr_{u}": Field(
                NUM,
                1.0,
                f"learning-rate multiplier of the attention factor W_{u.upper()} (and "
                f"b_{u.upper()}) alone, times its group's lr_{'qk' if u in 'qk' else 'vo'}",
                _multiplier,
                traced=True,
            )
            for u in FACTORS
        },
        "b1": Field(NUM, 0.9, "adamw (muon: its AdamW leaves): β₁", _fraction),
        "b2": Field(NUM, 0.999, "adamw (muon: its AdamW leaves): β₂", _fraction),
        "eps": Field(NUM, 1e-8, "adamw: ε (muon: its one ε, both branches)", gt(0)),
    },
    "save": {
        "t1": Field(
            INT, 1000, "the run's optimizer steps, an integer (gradient flow: final time)", ge(1)
        ),
        "rank_tol": Field(NUM, 1e-3, "rank counts sv > rank_tol·sv_1", gt(0)),
        "cross_gaps": Field(
            BOOL,
            False,
            "record per head the relative Gram gap of its A with the B of every head of its "
            "layer: heads-table columns cross_gap_rel_0 … cross_gap_rel_{H−1} (the input of "
            "inspect's permutation test, along training)",
        ),
    },
    "solver": {
        "method": Field(
            STR, SOLVER["method"], "gradient flow: adaptive diffrax solver", choice(METHODS)
        ),
        **solve_lib.solver_fields("gradient flow"),
        "max_steps": Field(INT, SOLVER["max_steps"], "gradient flow: solver step budget", ge(1)),
        "diverge_norm": Field(
            NUM,
            solve_lib.DIVERGE_NORM,
            "a run with a parameter entry beyond this is marked diverged",
            gt(0),
        ),
    },
}


def sequence_length(task: Mapping[str, Any]) -> tuple[str, int]:
    """The tokens per input sequence of a task, and the field that sets it."""
    kind = task["kind"]
    if kind == "char_lm":
        return "task.seq_len", task["seq_len"]
    if kind == "associative_recall":
        return "task.pairs", 2 * task["pairs"] + 1
    if kind == "images":  # patches; the class token is checked by check_images
        return "task.image", (task["image"] // task["patch"]) ** 2
    return "task.points", task["points"]


# Divisors are listed by trial division up to this bound, whatever the user's number:
# all of them for n ≤ DIVISOR_BOUND², beyond that the small ones and their cofactors.
DIVISOR_BOUND = 10**4


def _divisors(n: int) -> str:
    """``"one of 1, 2, …, n"``: the divisors of ``n`` (a user's n may be huge: at most
    :data:`DIVISOR_BOUND` trial divisions, so O(1)); beyond ``DIVISOR_BOUND²``, ``"a
    divisor of it, such as …"`` with those found."""
    small = [d for d in range(1, min(math.isqrt(n), DIVISOR_BOUND) + 1) if n % d == 0]
    found = ", ".join(map(str, sorted({*small, *(n // d for d in small)})))
    return f"one of {found}" if n <= DIVISOR_BOUND**2 else f"a divisor of it, such as {found}"


def check_images(a: Mapping[str, Any], t: Mapping[str, Any]) -> None:
    """The image task's rules and the attention mask's (raises ConfigError)."""
    if t["kind"] != "images":
        if t["kind"] == "char_lm" and a["causal"] is False:
            raise ConfigError(
                "attention.causal: char_lm predicts the next character at every position, "
                "so without the causal mask the inputs show the targets; set it to true"
            )
        return
    if a["causal"]:
        raise ConfigError(
            "attention.causal: the images task uses the bidirectional vision transformer "
            "(no mask); set it to false or leave it out"
        )
    size, p = t["image"], t["patch"]
    if size % p:
        divisors = _divisors(size)
        raise ConfigError(f"task.patch: must divide task.image = {size}, {divisors}; got {p}")
    tokens = (size // p) ** 2 + (a["pooling"] == "cls")
    if tokens > a["context"]:
        raise ConfigError(
            f"attention.context: must be ≥ {tokens}, the (task.image / task.patch)² patches"
            f"{' and the class token' if a['pooling'] == 'cls' else ''} (the rows of the "
            f"position table); got {a['context']}"
        )
    if t["train_size"] < t["classes"]:
        raise ConfigError(
            f"task.train_size: must be ≥ task.classes = {t['classes']} (an image of each "
            f"class); got {t['train_size']}"
        )
    if a["tied_embedding"]:
        raise ConfigError(
            "attention.tied_embedding: the images task reads pixels in and class logits "
            "out, so there is no token embedding to tie; set it to false"
        )


def validate(cfg: Mapping[str, Any]) -> None:
    """Check one point's cross-field rules (single-field ones are in SCHEMA). Raises
    ConfigError naming the field; changes nothing."""
    a, t, tr = cfg["attention"], cfg["task"], cfg["train"]
    dyn, steps = cfg["dynamics"], cfg["save"]["t1"]
    if a["D"] % a["H"]:
        raise ConfigError(
            f"attention.H: must divide attention.D = {a['D']} (d_h = D/H), "
            f"{_divisors(a['D'])}; got {a['H']}"
        )
    check_images(a, t)
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
    if dyn["kind"] in ("momentum", "signum") and not dyn["mu"] <= 1:
        raise ConfigError(
            f"dynamics.mu: discrete momentum (EMA weight of the new gradient) must be in "
            f"(0, 1] ({dyn['kind']}), got {dyn['mu']}"
        )
    if steps > MAX_STEPS:
        raise ConfigError(f"save.t1: at most {MAX_STEPS} (a 32-bit step count), got {steps}")
    if steps % tr["eval_every"]:
        raise ConfigError(
            f"train.eval_every: must divide save.t1 = {steps} (saves at whole "
            f"multiples), got {tr['eval_every']}"
        )
    if tr["export_every"]:
        _check_export(cfg)
    err = schedule_error(
        "dynamics",
        dyn["schedule"],
        dyn["warmup"],
        dyn["final_fraction"],
        steps,
        "save.t1",
        dyn["decay_steps"],
    )
    if err:
        raise ConfigError(err)
    for g in GROUPS:
        lam = tr[f"lam_{g}"]
        if g not in tr["decay"] and lam is not None and lam != 0:
            raise ConfigError(
                f"train.lam_{g}: group {g!r} is not in train.decay = {tr['decay']}, so it is "
                f"not decayed; add it to train.decay or drop train.lam_{g}"
            )


def _check_export(point: Mapping[str, Any]) -> None:
    """Exported checkpoints fall on saves, and exist only for models that a Hugging
    Face architecture holds (GPT-2 for token decoders, ViT with a class token)."""
    tr, t, a = point["train"], point["task"], point["attention"]
    k, every, steps = tr["export_every"], tr["eval_every"], point["save"]["t1"]
    if k % every or steps % k:
        raise ConfigError(
            f"train.export_every: must be a multiple of train.eval_every = {every} (exports "
            f"fall on saves) and divide save.t1 = {steps}, got {k}"
        )
    if t["kind"] == "in_context_regression":
        raise ConfigError(
            "train.export_every: in_context_regression reads vectors, which no Hugging "
            "Face architecture (GPT-2 naming) holds; exports are of token and image models"
        )
    if t["kind"] == "images" and a["pooling"] != "cls":
        raise ConfigError(
            f"train.export_every: Hugging Face's ViT pools the class token; "
            f"attention.pooling = {a['pooling']!r} has no ViT export (use cls)"
        )


def derive(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill a validated point's derived values in place: each group's λ (``dynamics.lam``
    for decayed groups without their own, 0 for the others). Returns the point."""
    tr = cfg["train"]
    for g in GROUPS:
        key = f"lam_{g}"
        if g not in tr["decay"]:
            tr[key] = 0.0
        elif tr[key] is None:
            tr[key] = cfg["dynamics"]["lam"]
    return cfg


def lam_of(point: Mapping[str, Any]) -> dict[str, float]:
    """Each group's λ in a resolved point (0 for groups outside ``train.decay``)."""
    return {g: float(point["train"][f"lam_{g}"]) for g in GROUPS}


def save_steps(point: Mapping[str, Any]) -> list[int]:
    """The saved steps 0, eval_every, …, t1."""
    return list(range(0, point["save"]["t1"] + 1, point["train"]["eval_every"]))


def export_steps(point: Mapping[str, Any]) -> list[int]:
    """The exported steps 0, export_every, …, t1 (none when export_every is 0)."""
    k = point["train"].get("export_every", 0)
    return list(range(0, point["save"]["t1"] + 1, k)) if k else []


# The attention family's config: its sections and rules (its former key names among
# them), and every operation on its configs (rankflow.config.schema.Schema).
SCHEMA = Schema(SECTIONS, validate=validate, derive=derive, renamed=RENAMED)
# Traced inputs of the compiled program (Field.traced): a sweep over any of them compiles
# once.
NUMERIC_KEYS = SCHEMA.numeric_keys
DEFAULTS: dict[str, Any] = SCHEMA.defaults
ALL_KEYS = SCHEMA.all_keys
# Load, override, fill defaults and validate every point of the sweep (a former name,
# RENAMED, is a ConfigError naming the new one); the points of a resolved config (made
# once per sweep); the structure key; the JSON copy; the flat dotted keys: the schema's.
resolve = SCHEMA.resolve
expand = SCHEMA.expand
structure_key = SCHEMA.structure_key
to_json = SCHEMA.to_json
flatten = SCHEMA.flatten
