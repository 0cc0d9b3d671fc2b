"""Where a sweep's chunks run: in this process (``local``, every local device) or as a
SLURM job array through submitit (``submitit``), writing into the same directory.

Under :func:`interruptible` (the ``rankflow`` command) each local chunk is computed in a
worker thread while the main thread waits in 0.1 s slices, so Ctrl-C is seen at once
even while XLA runs a chunk for minutes: the chunk is abandoned (only the main thread
writes chunk files, after the worker has finished), the finished chunks stay, and the
command exits without waiting for the worker (:func:`abandoned_chunk`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.fields import ConfigError
from ..config.points import frozen_gc
from ..config.usercode import code_changes, code_hash, code_of
from . import store
from .family import Family
from .plan import Chunk, plan, resource_error, swept_structure_keys
from .programs import enable_compilation_cache
from .progress import progress

__all__ = [
    "EXECUTORS",
    "abandoned_chunk",
    "array_task",
    "check_executor",
    "finished_chunks",
    "interruptible",
    "run_chunks",
    "submit",
    "sweep_identity",
    "user_code",
]

EXECUTORS = ("local", "submitit")
# The name of the thread that computes a chunk under :func:`interruptible`.
WORKER = "rankflow-chunk"
# How often the main thread wakes while a worker computes (what Ctrl-C waits for).
SLICE_S = 0.1
_interruptible = False
# The workers' "finished" events (a worker's Thread.is_alive() is not to be trusted
# after a KeyboardInterrupt interrupted its join: CPython 3.11 then marks it stopped).
_running: set[threading.Event] = set()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While the block runs, compute each local chunk in a worker thread that the main
    thread joins in :data:`SLICE_S` slices (see the module docstring): Ctrl-C raises
    ``KeyboardInterrupt`` within a fraction of a second whatever the chunk's length.
    The ``rankflow`` command's mode; the Python API computes in the calling thread (a
    chunk abandoned there would go on computing in the background)."""
    global _interruptible
    before, _interruptible = _interruptible, True
    try:
        yield
    finally:
        _interruptible = before


def abandoned_chunk() -> bool:
    """Whether a chunk's worker thread is still computing (its chunk abandoned when
    Ctrl-C stopped the main thread): a command exits without waiting for it."""
    return any(not done.is_set() for done in _running)


def _compute(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: in a worker thread under :func:`interruptible` (from the main
    thread), else here."""
    if not _interruptible or threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            box["error"] = e
        finally:
            done.set()

    _running.add(done)
    threading.Thread(target=work, name=WORKER, daemon=True).start()
    while not done.wait(SLICE_S):  # a signal interrupts the wait: KeyboardInterrupt here
        pass
    _running.discard(done)
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def finished_chunks(
    family: Family, out: str | Path, points, chunks: Sequence[Chunk], ident: store.Identity
) -> tuple[set[int], list[str]]:
    """Indices of ``chunks`` whose files are complete, and of the sweep ``ident``, in
    every table of the family. Other files (corrupt, partial, foreign, duplicates) are
    removed and returned as "NAME was/is …"; a chunk missing a table's file loses its
    other tables' files too (it runs again whole)."""
    done: set[int] | None = None
    bad: list[str] = []
    for table in family.tables:

        def rows(c: Chunk, table=table) -> int:
            return family.expected_rows(points[c.runs[0][0]], c.rows)[table]

        ok, redo = store.finished_chunks(out, chunks, rows, table, ident)
        done = ok if done is None else done & ok
        bad += redo
    present = {table: store.chunk_files(out, table) for table in family.tables}
    for c in chunks:
        if c.index not in done:
            for table in family.tables:
                if f"chunk-{c.index:05d}.parquet" in present[table]:
                    store.chunk_path(out, c.index, table).unlink(missing_ok=True)
    return done, bad


def run_chunks(
    family: Family,
    cfg: Mapping[str, Any],
    out: str | Path | None,
    chunk: int | None,
    indices: Sequence[int] | None = None,
    quiet: bool = True,
    ident: store.Identity | None = None,
    planned: tuple[Any, Sequence[Chunk], set[int]] | None = None,
) -> list[dict[str, pd.DataFrame] | None]:
    """Run the chunks ``indices`` (default: all) of ``cfg``'s plan; with ``out``, write
    each as it finishes, recording ``ident`` (default: :func:`sweep_identity`), and
    skip those already there. Returns the tables computed here (with ``out``, None per
    chunk: written, not held, so memory stays O(chunk)). Also the body of
    each SLURM array task: it checks and removes only its own chunks' files, so tasks
    running at once never touch each other's. ``planned``: ``(points, chunks,
    finished)`` of a caller that planned and checked the directory already."""
    points, chunks, finished = planned or (*plan(family, cfg, chunk), None)
    if out is not None and finished is None:
        ident = ident or sweep_identity(family, cfg, out, len(chunks))
        mine = chunks if indices is None else [chunks[i] for i in indices]
        finished, _ = finished_chunks(family, out, points, mine, ident)
    finished = finished or set()

    def todo():  # made as they run: a plan of 10⁶ chunks is never a list
        mine = chunks if indices is None else (chunks[i] for i in indices)
        return (c for c in mine if c.index not in finished)

    swept = swept_structure_keys(cfg, family.schema.numeric_keys)
    frames = []
    total = sum(c.rows for c in chunks)
    left = (sum(c.rows for c in todo()), sum(1 for _ in todo()))
    with (
        progress(total, total - left[0], quiet, len(chunks), len(chunks) - left[1]) as bar,
        frozen_gc(),
    ):
        for c in todo():
            try:
                tables = _compute(family.run_chunk, points, c, swept)
            except Exception as e:
                oom = resource_error(e, family, points[c.runs[0][0]], c.rows)
                if oom is None:
                    raise
                raise oom from None
            if out is not None:
                for table in family.tables:
                    store.write_chunk(out, c.index, tables[table], table, ident)
            frames.append(tables if out is None else None)  # written: not held in memory
            bar.update(c.rows)
    return frames


def sweep_identity(
    family: Family, cfg: Mapping[str, Any], out: str | Path, chunks: int
) -> store.Identity:
    """The identity of ``out``'s sweep, from its manifest; raises ``ConfigError`` unless
    it is ``cfg``'s (a SLURM array task writes under its submitter's claim, into the
    directory the submitter prepared)."""
    manifest = store.read_manifest(out)
    ident = store.identity_of(manifest)
    if ident.config_hash != store.config_hash(family.schema.to_json(cfg)) or ident.chunks != chunks:
        raise ConfigError(f"--out: {out} holds another sweep than this task's; not writing")
    code = user_code(family, cfg)
    if code_hash(code) != ident.code:  # the user's code was edited after submission
        changed = code_changes(manifest.get("code") or {}, code) or "its user code"
        raise ConfigError(
            f"--out: {out} was started with another version of {changed}; not writing"
        )
    return ident


def user_code(family: Family, cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The identity of the user code a family's resolved config names (a custom loss):
    :func:`rankflow.config.usercode.code_of` over the fields its schema marks
    ``callables`` (``family.schema.callables``); empty for a family without such
    fields."""
    return code_of(cfg, family.schema) if family.schema.callables else {}


def array_task(
    family: Family, cfg: Mapping[str, Any], out: str, chunk: int | None, indices: list[int]
) -> None:
    """The body of one SLURM array task: its chunks, run into ``out``. The task reads
    the persistent compilation cache of the submitter's environment, so a structure
    compiled once (by any task or an earlier sweep) is not compiled again."""
    enable_compilation_cache()
    run_chunks(family, cfg, out, chunk, indices)


def submit(
    family: Family,
    cfg: Mapping[str, Any],
    out: str | Path,
    chunk: int | None,
    todo: Sequence[int],
    slurm: Mapping[str, Any],
    quiet: bool,
) -> int:
    """Send the chunks ``todo`` as a job array through submitit (options in ``slurm``:
    partition, time (minutes), gpus_per_task, array_parallelism, jobs, cluster); wait
    for it. Returns the number of chunks sent."""
    import submitit

    if not todo:
        return 0
    jobs_n = min(len(todo), int(slurm.get("jobs") or len(todo)))
    # Job j takes chunks j, j + J, j + 2J, ...: balanced when chunks are alike.
    assignments = [list(todo[j::jobs_n]) for j in range(jobs_n)]
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
        jobs = [ex.submit(array_task, family, cfg, str(out), chunk, ids) for ids in assignments]
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


def check_executor(executor: str, out: str | Path | None) -> None:
    """Raise ``ConfigError`` unless ``executor`` can run into ``out``."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: must be local or submitit, got {executor!r}")
    if executor == "submitit" and out is None:
        raise ConfigError("--executor: submitit needs a results directory (--out)")
