"""Attention sweeps through the suite's sweep machinery: chunked plan, one compiled
program per structure, atomic chunk files, ``--resume``.

A results directory (``rankflow.store`` layout, plus the loss table)::

    DIR/config.json              the resolved config, versions, devices, git commit
    DIR/manifest.json            config hash, chunk size and count (what --resume matches)
    DIR/results.parquet/         the ``heads`` table, one file per finished chunk
    DIR/loss.parquet/            the ``loss`` table, one file per finished chunk

A chunk's loss file is written before its heads file, and a chunk counts as finished
when both are complete (one without the other is run again), so a sweep killed at any
moment and resumed ends with exactly the rows of an uninterrupted one.

``heads``: one row per run × saved step × layer × head × pair, with the run's numeric
hyperparameters (each group's λ as ``train.lam_<group>``), its structure, and every
per-head observable (:data:`.observables.HEAD_COLUMNS`, ``sv_1 … sv_{d_h}``).
``loss``: one row per run × saved step: ``train_loss``, ``val_loss``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .. import store
from ..simulate import sort_rows
from ..sweep import Chunk, Summary, _progress, chunk_plan
from . import config as config_lib
from .observables import HEAD_COLUMNS, PAIRS
from .program import PARAM_KEYS, STATUS, params_of, program_for

__all__ = ["LOSS", "Results", "execute", "load", "plan", "validation_baseline"]

LOSS = "loss.parquet"
# Runs per chunk by default: each chunk trains one vmapped batch of models.
MAX_CHUNK = 32
# Structural columns of every table (swept structural keys are added).
STRUCT_COLUMNS = (
    "task.kind",
    "train.kind",
    "train.decay",
    "train.rank_tol",
    "attention.qk_bias",
    "attention.vo_bias",
)


class Results(NamedTuple):
    """The two tables of an attention run."""

    heads: pd.DataFrame
    loss: pd.DataFrame


def plan(cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)``: the core's chunk plan (one program per structure), with
    ``chunk`` runs per chunk (default: at most :data:`MAX_CHUNK`)."""
    points = config_lib.expand(cfg)
    chunks = chunk_plan(
        points,
        config_lib.structure_key,
        paths=lambda point: 1,
        size=lambda point: chunk or MAX_CHUNK,
    )
    return points, chunks


def _cell(value):
    return ",".join(value) if isinstance(value, list) else value


def run_chunk(points, chunk: Chunk, swept: list[str]) -> Results:
    """Run one chunk as one batch of its structure's program; its two tables."""
    ids = [i for i, _ in chunk.runs]
    program = program_for(points[ids[0]])
    rows = [params_of(points[i]) for i in ids]
    padded = rows + [rows[-1]] * (chunk.pad_to - len(rows))
    out = program.run({k: np.array([r[k] for r in padded]) for k in PARAM_KEYS})
    out = {k: v[: len(rows)] for k, v in out.items()}
    steps = program.steps
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
            cols[k] = np.repeat([r[k] for r in rows], S * per_save)
        for k in dict.fromkeys(STRUCT_COLUMNS + tuple(swept)):
            flat = [_cell(config_lib.flatten(points[i])[k]) for i in ids]
            cols[k] = np.repeat(flat, S * per_save)
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
    loss = run_columns(1)
    loss["train_loss"] = out["train_loss"].reshape(-1).astype(np.float64)
    loss["val_loss"] = out["val_loss"].reshape(-1).astype(np.float64)
    return Results(pd.DataFrame(heads), pd.DataFrame(loss))


def _expected_rows(points):
    def heads_rows(c: Chunk) -> int:
        pt = points[c.runs[0][0]]
        a = pt["attention"]
        return c.rows * len(config_lib.save_steps(pt)) * a["layers"] * a["H"] * 2

    def loss_rows(c: Chunk) -> int:
        return c.rows * len(config_lib.save_steps(points[c.runs[0][0]]))

    return heads_rows, loss_rows


def _finished(out, points, chunks) -> tuple[set[int], list[str]]:
    """Chunks whose heads and loss files are both complete. Corrupt or partial files
    are removed and named; a chunk with one file but not the other loses it too."""
    heads_rows, loss_rows = _expected_rows(points)
    heads, bad = store.finished_chunks(out, chunks, heads_rows)
    losses, bad_loss = store.finished_chunks(out, chunks, loss_rows, table=LOSS)
    for c in chunks:
        if (c.index in heads) != (c.index in losses):
            store.chunk_path(out, c.index).unlink(missing_ok=True)
            store.chunk_path(out, c.index, LOSS).unlink(missing_ok=True)
    return heads & losses, bad + bad_loss


def execute(
    cfg: Mapping[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    chunk: int | None = None,
    quiet: bool = True,
) -> tuple[Results, Summary]:
    """Run a resolved attention config's sweep, writing each finished chunk to ``out``
    (when given) and skipping those already there (``resume``)."""
    t0 = time.perf_counter()
    points, chunks = plan(cfg, chunk)
    swept = [k for k in cfg.get("sweep") or {} if k not in config_lib.NUMERIC_KEYS]
    todo, frames, redone = list(chunks), [], []
    if out is not None:
        store.prepare(
            out,
            config_lib.to_json(cfg),
            chunk_size=chunk,
            chunks=len(chunks),
            resume=resume,
            tables=(store.RESULTS, LOSS),
        )
        finished, redone = _finished(out, points, chunks)
        for name in redone:
            print(f"rankflow: {name} was corrupt or partial; running it again", file=sys.stderr)
        todo = [c for c in chunks if c.index not in finished]
    total = sum(c.rows for c in chunks)
    with _progress(total, total - sum(c.rows for c in todo), quiet) as bar:
        for c in todo:
            res = run_chunk(points, c, swept)
            if out is not None:  # the heads file last: it marks the chunk finished
                store.write_chunk(out, c.index, res.loss, table=LOSS)
                store.write_chunk(out, c.index, res.heads)
            frames.append(res)
            bar.update(c.rows)
    if out is not None:
        results = load(out)
    else:
        results = Results(
            sort_rows(pd.concat([f.heads for f in frames], ignore_index=True)),
            sort_rows(pd.concat([f.loss for f in frames], ignore_index=True)),
        )
    last = results.loss.groupby("run_id", sort=False)["status"].last()
    summary = Summary(
        runs=len(last),
        diverged=int((last == "diverged").sum()),
        max_steps=int((last == "max_steps").sum()),
        seconds=time.perf_counter() - t0,
        chunks_run=len(todo),
        chunks_skipped=len(chunks) - len(todo),
        redone=redone,
    )
    return results, summary


def validation_baseline(path: str | Path) -> float | None:
    """char_lm: the unigram entropy of the validation split of a results directory's
    config (nats per character, the loss of a context-free prediction); None for the
    other tasks."""
    from .tasks import make_task

    cfg = json.loads((Path(path) / store.CONFIG).read_text())["config"]
    task = make_task(config_lib.expand(cfg)[0])
    return task.unigram_entropy("val") if task.kind == "char_lm" else None


def load(path: str | Path) -> Results:
    """The ``heads`` and ``loss`` tables of an attention results directory."""
    return Results(store.load(path), store.load(Path(path) / LOSS))
