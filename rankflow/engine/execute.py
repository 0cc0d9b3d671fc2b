"""The one sweep loop of every family: plan, open (or resume) the results directory,
run the unfinished chunks on an executor, read the tables back, summarise.

Chunk ``i`` of table ``T`` is written as ``DIR/T/chunk-<i>.parquet``; a chunk file
exists complete or not at all, and a chunk counts as finished only when every table's
file is complete, so a killed sweep, resumed, ends with exactly the rows of an
uninterrupted one.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.callables import UNHASHABLE_CODE
from . import store
from .executors import check_executor, finished_chunks, run_chunks, submit
from .family import Family
from .plan import checked_plan
from .programs import enable_compilation_cache
from .writer import claimed

__all__ = ["Summary", "execute", "has_chunks", "not_resumable", "run"]


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


def execute(
    family: Family,
    cfg: Mapping[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    chunk: int | None = None,
    executor: str = "local",
    slurm: Mapping[str, Any] | None = None,
    quiet: bool = False,
) -> tuple[Any, Summary]:
    """Run a family's resolved config's sweep (see the module docstring), writing each
    finished chunk to ``out`` when given and skipping those already there (only with
    ``resume``). ``out`` is checked and held exclusively while the sweep runs
    (:func:`rankflow.engine.writer.claimed`); a sweep that fails before its first chunk leaves
    no directory behind. Returns the family's result (all chunks, resumed ones
    included) and a :class:`Summary`."""
    check_executor(executor, out)
    args = (family, cfg, out)
    kw = dict(resume=resume, chunk=chunk, executor=executor, slurm=slurm, quiet=quiet)
    if out is None:
        return _execute(*args, **kw)
    with claimed(out, "sweep", keep=lambda: has_chunks(out, family.tables)):
        return _execute(*args, **kw)


def has_chunks(out: str | Path, tables: Sequence[str]) -> bool:
    """Whether a results directory holds any chunk file."""
    return any(any((Path(out) / t).glob("chunk-*.parquet")) for t in tables)


def not_resumable(config: Mapping[str, Any]) -> str | None:
    """Why a sweep of the JSON config cannot be resumed (a callable whose code cannot
    be hashed: :func:`rankflow.config.callables.callable_identity`), or None."""
    flat = store.flat(config)
    for key, value in flat.items():
        if isinstance(value, str) and value.endswith(UNHASHABLE_CODE):
            name = value.removesuffix(UNHASHABLE_CODE)
            return f"{key} = {name} has code that cannot be hashed, so its identity is unknown"
    return None


def _execute(family, cfg, out, *, resume, chunk, executor, slurm, quiet):
    t0 = time.perf_counter()
    chunk, points, chunks = checked_plan(family, cfg, chunk, executor)  # before any work
    finished, redone, ident = set(), [], None
    if out is not None:
        config = family.schema.to_json(cfg)
        ident = store.prepare(
            out,
            config,
            chunk_size=chunk,
            chunks=len(chunks),
            resume=resume,
            tables=family.tables,
            runs=sum(c.rows for c in chunks),
            not_resumable=not_resumable(config),
        )
        finished, redone = finished_chunks(family, out, points, chunks, ident)
        for what in redone:
            print(f"rankflow: {what}; running it again", file=sys.stderr)
        for table in family.tables:
            for what in store.stray_files(out, ident, table):
                print(f"rankflow: {table}/{what}; left out", file=sys.stderr)
    if executor == "local":
        frames = run_chunks(family, cfg, out, chunk, quiet=quiet, ident=ident)
        ran = len(frames)
    else:
        todo = [c.index for c in chunks if c.index not in finished]
        ran = submit(family, cfg, out, chunk, todo, slurm or {}, quiet)
    if out is not None:
        with warnings.catch_warnings():  # strays were named above
            warnings.simplefilter("ignore")
            tables = {t: store.load(out, table=t) for t in family.tables}
    else:
        tables = {
            t: store.sort_rows(pd.concat([f[t] for f in frames], ignore_index=True))
            for t in family.tables
        }
    last = tables[family.status_table].groupby(["run_id", "path"], sort=False)["status"].last()
    summary = Summary(
        runs=len(last),
        diverged=int((last == "diverged").sum()),
        max_steps=int((last == "max_steps").sum()),
        seconds=time.perf_counter() - t0,
        chunks_run=ran,
        chunks_skipped=len(finished),
        redone=redone,
    )
    return family.result(tables), summary


def run(
    family: Family,
    config: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    **options: Any,
) -> tuple[Any, Summary]:
    """Resolve a family's config (a TOML path or nested dict; every config error is
    raised here, before anything compiles), then :func:`execute` its sweep with
    ``options`` (``out``, ``resume``, ``chunk``, ``executor``, ``slurm``, ``quiet``),
    reading and writing the persistent compilation cache."""
    cfg = family.schema.resolve(config, overrides)
    enable_compilation_cache()
    return execute(family, cfg, **options)
