"""The attention family on the engine (:mod:`rankflow.engine`): chunked plan, one
compiled program per structure, atomic chunk files, ``--resume``, the local and
submitit executors.

A results directory (``rankflow.engine.store`` layout, plus the loss table)::

    DIR/config.json              the resolved config, versions, devices, git commit
    DIR/manifest.json            config hash, chunk size and count (what --resume matches)
    DIR/results.parquet/         the ``heads`` table, one file per finished chunk
    DIR/loss.parquet/            the ``loss`` table, one file per finished chunk

A chunk's loss file is written before its heads file, and a chunk counts as finished
when both are complete (one without the other is run again), so a sweep killed at any
moment and resumed ends with exactly the rows of an uninterrupted one.

``heads``: one row per run × saved step × layer × head × pair, with the run's numeric
hyperparameters (each group's λ as ``train.lam_<group>``), its structure, and every
per-head observable (:data:`.observables.HEAD_COLUMNS`, ``sv_1 … sv_{d_h}``; with
``save.cross_gaps``, ``cross_gap_rel_0 … cross_gap_rel_{H−1}``: the row's A against head
v's B of its layer and pair).
``loss``: one row per run × saved step: ``train_loss``, ``val_loss`` (and, for the
images task, ``train_accuracy``, ``val_accuracy``).

With ``train.export_every`` a chunk also writes its runs' checkpoints into
``DIR/export/`` (:mod:`.export`) before its tables, so a finished chunk has all of
them; a chunk run again (resumed) writes them anew.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import pandas as pd

from .. import engine
from ..config.fields import ConfigError
from ..engine import store
from ..engine.plan import checked_plan
from ..engine.status import Status
from ..numerics.schedules import schedule_columns, unit_clock
from . import config as config_lib
from .export import EXPORT, check_export_memory, export_runs
from .observables import HEAD_COLUMNS, PAIRS
from .program import PARAM_KEYS, STATUS, params_of, program_for

__all__ = [
    "ATTENTION",
    "LOSS",
    "Results",
    "accuracy_baselines",
    "execute",
    "load",
    "plan",
    "validation_baseline",
]

LOSS = "loss.parquet"
# Runs per chunk by default: each chunk trains one batch of models in one program.
MAX_CHUNK = 32
# Structural columns of every table (swept structural keys are added).
STRUCT_COLUMNS = (
    "task.kind",
    "dynamics.kind",
    "train.decay",
    "save.rank_tol",
    "attention.qk_bias",
    "attention.vo_bias",
)


class Results(NamedTuple):
    """The two tables of an attention run."""

    heads: pd.DataFrame
    loss: pd.DataFrame


def _cell(value):
    return ",".join(value) if isinstance(value, list) else value


def run_chunk(
    points, runs: Sequence[tuple[int, int]], swept: list[str], pad_to, export: str | None = None
) -> Results:
    """Run ``runs`` (``(point index, 0)`` pairs of one structure) as one batch of the
    structure's program, padded to ``pad_to`` runs; their two tables. With ``export``
    (a folder) and ``train.export_every``, first write the runs' checkpoints there."""
    ids = [i for i, _ in runs]
    program = program_for(points[ids[0]])
    rows = [params_of(points[i]) for i in ids]
    out = program.run(engine.pad_runs(rows, PARAM_KEYS, pad_to))
    exported = out.pop("params", None)
    out = {k: v[: len(rows)] for k, v in out.items()}
    steps = program.steps
    if exported is not None and export is not None:
        at = np.searchsorted(steps, program.export_steps)
        extra = [{"config": config_lib.to_json(points[i])} for i in ids]
        params = jax.tree.map(lambda x: x[: len(rows)], exported)
        ok = out["status"][:, at] == Status.ok
        export_runs(export, ids, program.export_steps, params, ok, program.spec, extra)
    axes = getattr(points, "axes", ())
    n, S = len(rows), len(steps)
    L, H = program.spec.layers, program.spec.H

    def run_columns(per_save: int) -> dict[str, Any]:
        cols: dict[str, Any] = {
            "run_id": np.repeat(ids, S * per_save),
            "path": np.zeros(n * S * per_save, np.int64),
            "t": np.tile(np.repeat(steps, per_save), n),
            "status": pd.Categorical.from_codes(
                np.repeat(out["status"].reshape(-1).astype(np.int64), per_save),
                categories=list(STATUS),
            ),
        }
        for k in PARAM_KEYS:
            if k in config_lib.LR_KEYS and k not in axes and all(r[k] == 1 for r in rows):
                continue  # a multiplier is a column only where it is used: swept or ≠ 1
            cols[k] = np.repeat([r[k] for r in rows], S * per_save)
        for k in dict.fromkeys(STRUCT_COLUMNS + tuple(swept)):
            flat = [_cell(config_lib.flatten(points[i])[k]) for i in ids]
            cols[k] = np.repeat(flat, S * per_save)
        for k, v in schedule_columns(
            "dynamics", program.point["dynamics"], program.schedule.t1
        ).items():
            cols[k] = np.repeat([v] * n, S * per_save)
        if not program.schedule.constant:
            clock = unit_clock(steps, program.schedule, not program.continuous)
            eta = np.repeat([r["dynamics.eta"] for r in rows], S * per_save)
            cols["lr_clock"] = eta * np.tile(np.repeat(clock, per_save), n)
        return cols

    per = L * H * 2
    heads = run_columns(per)
    grid = np.meshgrid(np.arange(L), np.arange(H), np.arange(2), indexing="ij")
    heads["layer"] = np.tile(grid[0].reshape(-1), n * S)
    heads["head"] = np.tile(grid[1].reshape(-1), n * S)
    heads["pair"] = np.asarray(PAIRS)[np.tile(grid[2].reshape(-1), n * S)]
    for name in HEAD_COLUMNS:
        # (runs, saves, layers, H, pair) → rows ordered run, save, layer, head, pair
        heads[name] = out[name].reshape(-1).astype(np.float64)
    sv = out["sv"].reshape(n * S * per, -1)
    for j in range(sv.shape[1]):
        heads[f"sv_{j + 1}"] = sv[:, j].astype(np.float64)
    if "cross_gap_rel" in out:  # save.cross_gaps: (runs, saves, layers, H, pair, v)
        cross = out["cross_gap_rel"].reshape(n * S * per, H)
        for v in range(H):
            heads[f"cross_gap_rel_{v}"] = cross[:, v].astype(np.float64)
    loss = run_columns(1)
    loss["train_loss"] = out["train_loss"].reshape(-1).astype(np.float64)
    loss["val_loss"] = out["val_loss"].reshape(-1).astype(np.float64)
    for name in ("train_accuracy", "val_accuracy"):
        if name in out:
            loss[name] = out[name].reshape(-1).astype(np.float64)
    return Results(pd.DataFrame(heads), pd.DataFrame(loss))


# Copies of the parameters a run holds: the parameters, gradients, updates and the
# optimizer's state (AdamW: two moments; momentum, signum, lion: one; muon: one on its
# matrices, two on its AdamW leaves), or gradient flow's Tsit5 stages (7), its two
# states and error estimate.
PARAM_COPIES = {"sgd": 3, "momentum": 4, "adamw": 5, "gradient_flow": 12}
PARAM_COPIES |= {"sign_gd": 3, "signum": 4, "lion": 4, "muon": 5}
# Bytes per pixel while images.render draws a set: its float64 work arrays (the
# shape's coordinates, distance, ink, noise; measured: 48 bytes per pixel at 20,000 and
# 40,000 images of 32²) and the float32 images kept.
RENDER_BYTES = 6 * 8 + 4


def parameter_count(point: Mapping[str, Any], task) -> int:
    """The model's parameters, from the sizes alone (O(1); :func:`.export.parameter_count`
    counts them from the model's shapes, O(layers))."""
    a = point["attention"]
    D, R, L = a["D"], a["mlp_ratio"], a["layers"]
    block = 4 * D * D + 2 * R * D * D + R * D + D + 4 * D
    block += 2 * D * a["qk_bias"] + 2 * D * a["vo_bias"]
    if task.image:
        embed = (task.patch**2 + 2) * D
    else:
        embed = (task.vocab or task.d_in) * D
    unembed = 0 if a["tied_embedding"] and not task.image else D * task.d_out
    return L * block + a["context"] * D + embed + unembed + 2 * D


def _eval_sizes(point: Mapping[str, Any], task) -> tuple[int, int]:
    """Sequences of the validation and the train-eval sets (char_lm: at most the
    windows its splits hold; images: the train-eval set is the first val_size
    training images)."""
    n = task.val_size
    if task.kind == "char_lm":
        from .tasks import corpus_split_sizes

        span = task.seq_len + 1
        n_train, n_val = corpus_split_sizes(task.max_chars, task.val_fraction)
        return min(n, max(1, n_val // span)), min(n, max(1, n_train // span))
    if task.image:
        return n, min(n, task.train_size)
    return n, n


def memory_parts(point: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
    """One run's memory by the config keys that set each part (bytes, O(1)): its
    parameters and their optimizer copies, one training batch's activations through the
    layers, the evaluation sets' forward passes, the per-head factors and observables
    of every save, its exports, and its rows of the heads table; then, under
    ``"shared"`` keys, what a chunk's runs share (:func:`shared_parts`)."""
    from .tasks import make_task

    a, tr = point["attention"], point["train"]
    task = make_task(point)
    item = 8 if point["x64"] else 4
    D, H, L, R = a["D"], a["H"], a["layers"], a["mlp_ratio"]
    T = task.seq_len + (task.image > 0 and a["pooling"] == "cls")
    seq = config_lib.sequence_length(point["task"])[0]  # the key that sets T
    P = parameter_count(point, task)
    kind = point["dynamics"]["kind"]
    saves = point["save"]["t1"] // tr["eval_every"] + 1
    exports = point["save"]["t1"] // tr["export_every"] + 1 if tr["export_every"] else 0
    held = saves if exports and kind == "gradient_flow" else exports

    def forward(n: int) -> int:  # one layer's activations of n sequences
        return n * (T * D * (11 + 2 * R) + 2 * H * T * T)

    B = point["dynamics"]["batch"]
    n_val, n_train = _eval_sizes(point, task)
    model = ("attention.D", "attention.layers")
    every = ("save.t1", "train.eval_every")
    per_head = L * H * 2 * (len(HEAD_COLUMNS) + D // H + H)
    return {
        model: item * P * PARAM_COPIES[kind],
        ("dynamics.batch", seq, *model): item * ((L + 1) * forward(B) + 3 * B * T * task.d_out),
        ("task.val_size", seq, *model): item
        * (2 * forward(max(n_val, n_train)) + 2 * n_val * T * task.d_out),
        (*every, *model): item * saves * (4 * L * D * D + per_head),
        ("train.export_every", *model): item * P * held,
        (*every, "attention.layers", "attention.H"): 3 * 8 * saves * (per_head + 40 * L * H * 2),
    } | shared_parts(point, task, n_val, n_train)


def shared_parts(point: Mapping[str, Any], task, n_val: int, n_train: int):
    """What the runs of a chunk share, by its keys (the first is ``"shared"``): the
    evaluation sets, and the image task's training set, drawn on the host
    (:data:`RENDER_BYTES` per pixel) and copied to the device."""
    item = 8 if point["x64"] else 4
    seq = config_lib.sequence_length(point["task"])[0]
    if task.image:
        pixels = task.image**2
        drawn = max(task.train_size, n_val) * pixels * RENDER_BYTES
        kept = (task.train_size + n_val + n_train) * pixels * item
        return {("shared", "task.train_size", "task.image"): drawn + kept}
    width = task.d_in * item if task.d_in else 4
    return {("shared", "task.val_size", seq): (n_val + n_train) * task.seq_len * (width + 4 + item)}


def _split(parts: Mapping[tuple[str, ...], int]) -> tuple[int, int]:
    """(one run's bytes, the bytes a chunk's runs share) of :func:`memory_parts`."""
    shared = sum(n for keys, n in parts.items() if keys[0] == "shared")
    return sum(parts.values()) - shared, shared


@dataclass(frozen=True)
class AttentionFamily(engine.Family):
    """Transformers whose heads are factor pairs: config :data:`.config.SCHEMA`, program
    :class:`.program.Program`, two tables (``heads``, ``loss``; one run per point);
    ``export``: the folder of exported checkpoints (``train.export_every``), if any."""

    export: str | None = None

    # The loss file first: the heads file marks a chunk finished.
    tables = (LOSS, store.RESULTS)
    schema = config_lib.SCHEMA
    status_table = LOSS

    def paths(self, point: Mapping[str, Any]) -> int:
        return 1

    # The keys that set one run's memory (named when a chunk runs out of it).
    size_keys = ("attention.D", "attention.layers", "attention.context", "dynamics.batch")

    def chunk_size(self, point: Mapping[str, Any]) -> int:
        return MAX_CHUNK

    def saves(self, point: Mapping[str, Any]) -> tuple[int, str, str]:
        """Saves per run, the key that sets them and how they come about."""
        t1, every = point["save"]["t1"], point["train"]["eval_every"]
        return t1 // every + 1, "save.t1", f"every train.eval_every = {every} steps up to {t1}"

    def run_bytes(self, point: Mapping[str, Any]) -> int:
        """Estimated bytes of one run (O(1) in every size; :func:`memory_parts`)."""
        return _split(memory_parts(point))[0]

    def shared_bytes(self, point: Mapping[str, Any]) -> int:
        """Estimated bytes the runs of a chunk share (the data sets)."""
        return _split(memory_parts(point))[1]

    def memory_parts(self, point: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
        return {k[1:] if k[0] == "shared" else k: n for k, n in memory_parts(point).items()}

    def result_bytes(self, point: Mapping[str, Any]) -> int:
        """One run's rows of both tables, read back (and copied once while sorted)."""
        a = point["attention"]
        saves = self.saves(point)[0]
        per = a["layers"] * a["H"] * 2 * (len(HEAD_COLUMNS) + a["D"] // a["H"] + a["H"] + 40)
        return 2 * 8 * saves * (per + 40)

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        saves = runs * self.saves(point)[0]
        a = point["attention"]
        return {LOSS: saves, store.RESULTS: saves * a["layers"] * a["H"] * 2}

    def run_chunk(
        self, points: Sequence[Mapping[str, Any]], chunk: engine.Chunk, swept: Sequence[str]
    ) -> dict[str, pd.DataFrame]:
        res = run_chunk(points, list(chunk.runs), swept, chunk.pad_to, self.export)
        return {LOSS: res.loss, store.RESULTS: res.heads}

    def result(self, tables: Mapping[str, pd.DataFrame]) -> Results:
        return Results(tables[store.RESULTS], tables[LOSS])


ATTENTION = AttentionFamily()


def plan(cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)``: the engine's chunk plan (one program per structure), with
    ``chunk`` runs per chunk (default: at most :data:`MAX_CHUNK`)."""
    return engine.plan(ATTENTION, cfg, chunk)


def execute(cfg: Mapping[str, Any], out: str | Path | None = None, **options: Any):
    """A resolved attention config's sweep through the engine
    (:func:`rankflow.engine.execute`; ``options``: ``resume``, ``chunk``, ``executor``,
    ``slurm``, ``quiet``, default quiet); returns the family's result and a
    :class:`rankflow.engine.Summary`. With ``train.export_every``, checkpoints go to
    ``out/export/``: refused (one line, before anything compiles) without ``out`` or
    when a chunk's stacked exports exceed :data:`.export.MAX_EXPORT_BYTES`."""
    options.setdefault("quiet", True)
    family = ATTENTION
    # The resource guards first (engine.plan.checked_plan, O(1) per structure): building
    # a program for the export check below is O(layers), and may allocate.
    executor = options.get("executor", "local")
    chunk, points, chunks = checked_plan(ATTENTION, cfg, options.get("chunk"), executor)
    options["chunk"] = chunk
    seen: set[int] = set()
    for c in chunks:
        point = points[c.runs[0][0]]
        if c.group in seen or not config_lib.export_steps(point):
            continue
        seen.add(c.group)
        if out is None:
            raise ConfigError(
                "train.export_every: exported checkpoints are written into the results "
                "directory; pass --out (out=)"
            )
        program = program_for(point)
        # Gradient flow holds the parameters of every save inside its program.
        held = len(program.steps) if program.continuous else len(program.export_steps)
        check_export_memory(program.spec, c.pad_to, held, f"chunk {c.index}")
    if seen:
        family = AttentionFamily(export=str(Path(out) / EXPORT))
    return engine.execute(family, cfg, out, **options)


def validation_baseline(path: str | Path) -> float | None:
    """char_lm: the unigram entropy of the validation split of a results directory's
    config (nats per character, the loss of a context-free prediction); None for the
    other tasks."""
    from .tasks import make_task

    cfg = json.loads((Path(path) / store.CONFIG).read_text())["config"]
    task = make_task(config_lib.expand(cfg)[0])
    return task.unigram_entropy("val") if task.kind == "char_lm" else None


def accuracy_baselines(path: str | Path) -> dict[str, float] | None:
    """images: chance and the linear baseline's accuracies (:meth:`.tasks.Task.baselines`)
    of a results directory's config; None for the other tasks."""
    from .tasks import make_task

    cfg = json.loads((Path(path) / store.CONFIG).read_text())["config"]
    task = make_task(config_lib.expand(cfg)[0])
    return task.baselines() if task.classifier else None


def load(path: str | Path, *, strict: bool = False) -> Results:
    """The ``heads`` and ``loss`` tables of an attention results directory: only the
    chunks of its manifest's config and plan, missing ones warned about (or, with
    ``strict``, raised: see :func:`rankflow.engine.store.load`)."""
    return Results(store.load(path, strict=strict), store.load(path, table=LOSS, strict=strict))
