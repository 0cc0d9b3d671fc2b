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
        ok = out["status"][:, at] == 0
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
        for k, v in schedule_columns("dynamics", program.point["dynamics"]).items():
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


@dataclass(frozen=True)
class AttentionFamily:
    """Transformers whose heads are factor pairs: config :mod:`.config`, program
    :class:`.program.Program`, two tables (``heads``, ``loss``; one run per point);
    ``export``: the folder of exported checkpoints (``train.export_every``), if any."""

    export: str | None = None

    # The loss file first: the heads file marks a chunk finished.
    tables = (LOSS, store.RESULTS)
    schema = config_lib
    status_table = LOSS

    def paths(self, point: Mapping[str, Any]) -> int:
        return 1

    def chunk_size(self, point: Mapping[str, Any]) -> int:
        return MAX_CHUNK

    def expected_rows(self, point: Mapping[str, Any], runs: int) -> dict[str, int]:
        saves = runs * len(config_lib.save_steps(point))
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
    points, chunks = plan(cfg, options.get("chunk"))
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
