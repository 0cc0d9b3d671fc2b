"""Sweeps at scale: a config's points, cut into chunks, run on every local device or as
a SLURM job array, each finished chunk written atomically; resumable after any kill.

The plan is a pure function of the resolved config and the chunk size: points are
grouped by structure (one compiled program per group, in order of first appearance),
and each group's runs ``(run_id, path)`` are cut into chunks of ``chunk`` runs. Every
chunk of a group is padded to the same batch shape, so a group compiles once however
many chunks it has. Chunk ``i`` is written as ``results.parquet/chunk-<i>.parquet``;
a chunk file exists complete or not at all, so a killed sweep, resumed, ends with
exactly the rows of an uninterrupted one.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import config as config_lib
from . import store
from .observables import OBSERVABLES, num_singular_values
from .simulate import run_runs, sort_rows, swept_structure_keys

__all__ = ["Chunk", "chunk_plan", "default_chunk_size", "execute", "plan"]

# Memory budget of one chunk's program (inputs, problem data, state, saved outputs).
CHUNK_BYTES = 256 * 2**20
MAX_CHUNK = 1024


@dataclass(frozen=True)
class Chunk:
    index: int
    group: int
    runs: tuple[tuple[int, int], ...]  # (run_id, path)
    pad_to: int  # batch size of the group's program

    @property
    def rows(self) -> int:
        return len(self.runs)


def _per_run_bytes(point: Mapping[str, Any]) -> int:
    """A generous estimate of one run's memory in the batched program."""
    p, r = point["problem"], point["model"]["r"]
    kind = p["kind"]
    m, n = (len(p["singular_values"]),) * 2 if kind == "diagonal" else (p["m"], p["n"])
    N = p["samples"]
    data = {"sensing": N * m * n, "completion": 3 * N, "regression": (m + n) * N}.get(kind, m * n)
    saves = len(config_lib.save_times(point))
    saved = saves * (len(OBSERVABLES) + num_singular_values(m, n, r) + 2)
    state = (m + n) * r
    # Solvers keep several stages of the state (Tsit5: 7, plus momentum), and the
    # observables' SVD a few m×n work arrays.
    return 8 * (data + saved + 24 * state + 4 * m * n)


def default_chunk_size(point: Mapping[str, Any]) -> int:
    """Runs per chunk: a power of two that keeps a chunk under ``CHUNK_BYTES``."""
    fit = max(1, CHUNK_BYTES // _per_run_bytes(point))
    return int(min(MAX_CHUNK, 2 ** int(np.log2(fit))))


def plan(cfg: Mapping[str, Any], chunk: int | None = None):
    """``(points, chunks)`` of a resolved config; ``chunk`` runs per chunk (default:
    :func:`default_chunk_size` of each structure)."""
    points = config_lib.expand(cfg)
    chunks = chunk_plan(
        points,
        config_lib.structure_key,
        paths=lambda point: point["dynamics"]["paths"],
        size=lambda point: chunk or default_chunk_size(point),
    )
    return points, chunks


def chunk_plan(
    points: Sequence[Mapping[str, Any]],
    structure_key: Callable[[Mapping[str, Any]], str],
    *,
    paths: Callable[[Mapping[str, Any]], int],
    size: Callable[[Mapping[str, Any]], int],
) -> list[Chunk]:
    """Points grouped by ``structure_key`` (one program per group, in order of first
    appearance); each group's runs ``(run_id, path)`` (``paths`` of its first point per
    point) cut into chunks of ``size`` (of its first point) runs, all padded to the
    group's batch shape."""
    groups: dict[str, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(structure_key(point), []).append(i)
    chunks: list[Chunk] = []
    for g, members in enumerate(groups.values()):
        first = points[members[0]]
        runs = [(i, path) for i in members for path in range(paths(first))]
        n = size(first)
        pad = min(n, len(runs))
        for start in range(0, len(runs), n):
            chunks.append(Chunk(len(chunks), g, tuple(runs[start : start + n]), pad))
    return chunks


def _progress(total: int, done: int, quiet: bool):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=done,
        unit="run",
        desc="rankflow",
        disable=quiet or not sys.stderr.isatty(),
        file=sys.stderr,
        dynamic_ncols=True,
    )


@dataclass
class Summary:
    runs: int
    diverged: int
    max_steps: int
    seconds: float
    chunks_run: int
    chunks_skipped: int
    redone: list[str]

    def line(self) -> str:
        rate = self.runs / self.seconds if self.seconds > 0 else float("inf")
        extra = f", {self.chunks_skipped} chunks resumed" if self.chunks_skipped else ""
        redo = f", {len(self.redone)} corrupt chunks redone" if self.redone else ""
        return (
            f"{self.runs} runs ({self.diverged} diverged, {self.max_steps} max_steps) in "
            f"{self.seconds:.1f} s, {rate:.3g} runs/s{extra}{redo}"
        )


def run_chunks(
    cfg: Mapping[str, Any],
    out: str | Path | None,
    chunk: int | None,
    indices: Sequence[int] | None = None,
    quiet: bool = True,
) -> list[pd.DataFrame]:
    """Run the chunks ``indices`` (default: all) of ``cfg``'s plan; with ``out``, write
    each as it finishes and skip those already there. Returns the tables computed here.
    Also the body of each SLURM array task."""
    points, chunks = plan(cfg, chunk)
    swept = swept_structure_keys(cfg)
    todo = [chunks[i] for i in (range(len(chunks)) if indices is None else indices)]
    if out is not None:
        finished, _ = store.finished_chunks(out, chunks, _expected_rows(points))
        todo = [c for c in todo if c.index not in finished]
    frames = []
    total = sum(c.rows for c in chunks)
    with _progress(total, total - sum(c.rows for c in todo), quiet) as bar:
        for c in todo:
            df = run_runs(points, list(c.runs), swept, pad_to=c.pad_to)
            if out is not None:
                store.write_chunk(out, c.index, df)
            frames.append(df)
            bar.update(c.rows)
    return frames


def _expected_rows(points):
    return lambda c: c.rows * len(config_lib.save_times(points[c.runs[0][0]]))


def execute(
    cfg: Mapping[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    chunk: int | None = None,
    executor: str = "local",
    slurm: Mapping[str, Any] | None = None,
    quiet: bool = False,
) -> tuple[pd.DataFrame, Summary]:
    """Run a resolved config's sweep; see the module docstring. Returns the table (all
    chunks, resumed ones included) and a :class:`Summary`."""
    t0 = time.perf_counter()
    points, chunks = plan(cfg, chunk)
    skipped, redone = 0, []
    if out is not None:
        store.prepare(
            out, config_lib.to_json(cfg), chunk_size=chunk, chunks=len(chunks), resume=resume
        )
        finished, redone = store.finished_chunks(out, chunks, _expected_rows(points))
        skipped = len(finished)
        for name in redone:
            print(f"rankflow: {name} was corrupt or partial; running it again", file=sys.stderr)
    if executor == "local":
        frames = run_chunks(cfg, out, chunk, quiet=quiet)
        ran = len(frames)
    elif executor == "submitit":
        if out is None:
            raise config_lib.ConfigError("--executor: submitit needs a results directory (--out)")
        ran = _submit(cfg, out, chunk, chunks, slurm or {}, quiet)
    else:
        raise config_lib.ConfigError(f"--executor: must be local or submitit, got {executor!r}")
    df = store.load(out) if out is not None else sort_rows(pd.concat(frames, ignore_index=True))
    last = df.groupby(["run_id", "path"], sort=False)["status"].last()
    summary = Summary(
        runs=len(last),
        diverged=int((last == "diverged").sum()),
        max_steps=int((last == "max_steps").sum()),
        seconds=time.perf_counter() - t0,
        chunks_run=ran,
        chunks_skipped=skipped,
        redone=redone,
    )
    return df, summary


def _submit(cfg, out, chunk, chunks, slurm: Mapping[str, Any], quiet: bool) -> int:
    """Send the unfinished chunks as a job array through submitit; wait for it."""
    import submitit

    points = config_lib.expand(cfg)
    finished, _ = store.finished_chunks(out, chunks, _expected_rows(points))
    todo = [c.index for c in chunks if c.index not in finished]
    if not todo:
        return 0
    jobs_n = min(len(todo), int(slurm.get("jobs") or len(todo)))
    # Job j takes chunks j, j + J, j + 2J, ...: balanced when chunks are alike.
    assignments = [todo[j::jobs_n] for j in range(jobs_n)]
    folder = Path(out) / "submitit"
    ex = submitit.AutoExecutor(folder=folder, cluster=slurm.get("cluster"))
    params: dict[str, Any] = {"timeout_min": int(slurm.get("time") or 60)}
    if slurm.get("partition"):
        params["slurm_partition"] = slurm["partition"]
    if slurm.get("gpus_per_task"):
        params["gpus_per_node"] = int(slurm["gpus_per_task"])
    if slurm.get("array_parallelism"):
        params["slurm_array_parallelism"] = int(slurm["array_parallelism"])
    ex.update_parameters(name="rankflow", **params)
    with ex.batch():
        jobs = [ex.submit(run_chunks, cfg, str(out), chunk, ids) for ids in assignments]
    if not quiet:
        print(
            f"rankflow: submitted {len(jobs)} jobs ({len(todo)} chunks) → {folder}", file=sys.stderr
        )
    errors = []
    for job in jobs:
        try:
            job.result()
        except Exception as e:  # noqa: BLE001 - a failed task must not lose the others
            errors.append(f"job {job.job_id}: {e}")
    if errors:
        raise RuntimeError(
            "rankflow: some array tasks failed (finished chunks are kept; rerun with "
            "--resume):\n" + "\n".join(errors)
        )
    return len(todo)


def enable_compilation_cache() -> str | None:
    """Turn on JAX's persistent compilation cache (default ``~/.cache/rankflow/jax``;
    ``RANKFLOW_CACHE_DIR`` moves it, ``RANKFLOW_CACHE_DIR=off`` turns it off), so a
    rerun of a sweep in a new process does not compile again."""
    import jax

    where = os.environ.get("RANKFLOW_CACHE_DIR", str(Path.home() / ".cache/rankflow/jax"))
    if where.lower() in ("off", "0", "none", ""):
        return None
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return where
