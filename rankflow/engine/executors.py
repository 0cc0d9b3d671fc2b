"""Where a sweep's chunks run: in this process (``local``, every local device) or as a
SLURM job array through submitit (``submitit``), writing into the same directory."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.fields import ConfigError
from . import store
from .family import Family
from .plan import Chunk, plan, resource_error, swept_structure_keys
from .programs import enable_compilation_cache
from .progress import progress

__all__ = [
    "EXECUTORS",
    "array_task",
    "check_executor",
    "finished_chunks",
    "run_chunks",
    "submit",
    "sweep_identity",
]

EXECUTORS = ("local", "submitit")


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
    for c in chunks:
        if c.index not in done:
            for table in family.tables:
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
) -> list[dict[str, pd.DataFrame]]:
    """Run the chunks ``indices`` (default: all) of ``cfg``'s plan; with ``out``, write
    each as it finishes, recording ``ident`` (default: :func:`sweep_identity`), and
    skip those already there. Returns the tables computed here. Also the body of each
    SLURM array task: it checks and removes only its own chunks' files, so tasks
    running at once never touch each other's."""
    points, chunks = plan(family, cfg, chunk)
    todo = [chunks[i] for i in (range(len(chunks)) if indices is None else indices)]
    if out is not None:
        ident = ident or sweep_identity(family, cfg, out, len(chunks))
        finished, _ = finished_chunks(family, out, points, todo, ident)
        todo = [c for c in todo if c.index not in finished]
    swept = swept_structure_keys(cfg, family.schema.NUMERIC_KEYS)
    frames = []
    total = sum(c.rows for c in chunks)
    with progress(total, total - sum(c.rows for c in todo), quiet) as bar:
        for c in todo:
            try:
                tables = family.run_chunk(points, c, swept)
            except Exception as e:
                oom = resource_error(e, family, points[c.runs[0][0]], c.rows)
                if oom is None:
                    raise
                raise oom from None
            if out is not None:
                for table in family.tables:
                    store.write_chunk(out, c.index, tables[table], table, ident)
            frames.append(tables)
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
    return ident


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
