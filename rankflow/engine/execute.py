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

import numpy as np
import pandas as pd

from ..config.callables import UNHASHABLE_CODE
from . import store
from .executors import check_executor, finished_chunks, run_chunks, submit, user_code
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
    result: bool = True,
) -> tuple[Any, Summary]:
    """Run a family's resolved config's sweep (see the module docstring), writing each
    finished chunk to ``out`` when given and skipping those already there (only with
    ``resume``). ``out`` is checked and held exclusively while the sweep runs
    (:func:`rankflow.engine.writer.claimed`); a sweep that fails before its first chunk leaves
    no directory behind. Returns the family's result (all chunks, resumed ones
    included) and a :class:`Summary`; with ``out`` and ``result=False``, None and the
    summary, counted chunk by chunk (the command's way: memory O(chunk), not the table)."""
    check_executor(executor, out)
    args = (family, cfg, out)
    kw = dict(resume=resume, chunk=chunk, executor=executor, slurm=slurm, quiet=quiet)
    kw["result"] = result or out is None
    if out is None:
        return _execute(*args, **kw)
    with claimed(out, "sweep", keep=lambda: has_chunks(out, family.tables)):
        return _execute(*args, **kw)


def has_chunks(out: str | Path, tables: Sequence[str]) -> bool:
    """Whether a results directory holds any chunk file."""
    return any(any((Path(out) / t).glob("chunk-*.parquet")) for t in tables)


def not_resumable(
    config: Mapping[str, Any], code: Mapping[str, Mapping[str, Any]] | None = None
) -> str | None:
    """Why a sweep of the JSON config cannot be resumed (a callable whose code cannot
    be hashed: :func:`rankflow.config.callables.callable_identity`; or one reaching a
    value whose content cannot be: ``code``, :func:`rankflow.config.usercode.code_of`),
    or None."""
    flat = store.flat(config)
    for key, value in flat.items():
        if isinstance(value, str) and value.endswith(UNHASHABLE_CODE):
            name = value.removesuffix(UNHASHABLE_CODE)
            return f"{key} = {name} has code that cannot be hashed, so its identity is unknown"
    for name, record in (code or {}).items():
        if "unhashable" in record:
            return f"{name} reaches {record['unhashable']}, so a change to it could not be detected"
    return None


def _execute(family, cfg, out, *, resume, chunk, executor, slurm, quiet, result):
    t0 = time.perf_counter()
    chunk, points, chunks = checked_plan(family, cfg, chunk, executor)  # before any work
    finished, redone, ident = set(), [], None
    if out is not None:
        config = family.schema.to_json(cfg)
        code = user_code(family, cfg)
        ident = store.prepare(
            out,
            config,
            chunk_size=chunk,
            chunks=len(chunks),
            resume=resume,
            tables=family.tables,
            runs=sum(c.rows for c in chunks),
            not_resumable=not_resumable(config, code),
            code=code,
        )
        finished, redone = finished_chunks(family, out, points, chunks, ident)
        for what in redone:
            print(f"rankflow: {what}; running it again", file=sys.stderr)
        for table in family.tables:
            for what in store.stray_files(out, ident, table):
                print(f"rankflow: {table}/{what}; left out", file=sys.stderr)
    if executor == "local":
        planned = (points, chunks, finished)
        frames = run_chunks(family, cfg, out, chunk, quiet=quiet, ident=ident, planned=planned)
        ran = len(frames)
    else:
        todo = [c.index for c in chunks if c.index not in finished]
        ran = submit(family, cfg, out, chunk, todo, slurm or {}, quiet)
    if not result:
        tables = None
        runs, last = _chunk_statuses(out, family.status_table, len(chunks))
    elif out is not None:
        with warnings.catch_warnings():  # strays were named above
            warnings.simplefilter("ignore")
            tables = {t: store.load(out, table=t) for t in family.tables}
    else:
        tables = {t: _rows([f[t] for f in frames]) for t in family.tables}
    if tables is not None:
        runs, last = _last_status(tables[family.status_table])
    summary = Summary(
        runs=runs,
        diverged=last.get("diverged", 0),
        max_steps=last.get("max_steps", 0),
        seconds=time.perf_counter() - t0,
        chunks_run=ran,
        chunks_skipped=len(finished),
        redone=redone,
    )
    return (family.result(tables) if tables is not None else None), summary


def _chunk_statuses(out: str | Path, table: str, chunks: int) -> tuple[int, dict[str, int]]:
    """:func:`_last_status` of a results directory's table, read chunk by chunk (each
    run lies in one chunk): three columns of one chunk in memory at a time."""
    import pyarrow.parquet as pq

    runs, last = 0, {}
    for i in range(chunks):
        path = store.chunk_path(out, i, table)
        if path.exists():
            frame = pq.read_table(path, columns=["run_id", "path", "status"]).to_pandas()
            n, counts = _last_status(frame)
            runs += n
            for name, c in counts.items():
                last[name] = last.get(name, 0) + c
    return runs, last


def _rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The chunks' frames of one table as one, in the canonical row order
    (:func:`rankflow.engine.store.sort_rows`). One chunk already in that order, with the
    default index, is returned as it is: sorting it would copy it unchanged."""
    if len(frames) == 1 and _in_order(frames[0]):
        return frames[0]
    return store.sort_rows(pd.concat(frames, ignore_index=True))


def _in_order(df: pd.DataFrame) -> bool:
    """Whether ``df``'s rows are in (run_id, path, t) order and its index is 0, 1, …"""
    index = df.index
    if type(index) is not pd.RangeIndex or index.name is not None:
        return False
    if not index.equals(pd.RangeIndex(len(df))):
        return False
    r, p, t = (np.diff(df[k].to_numpy()) for k in ("run_id", "path", "t"))
    return bool(np.all((r > 0) | ((r == 0) & ((p > 0) | ((p == 0) & (t >= 0))))))


def _last_status(table: pd.DataFrame) -> tuple[int, dict[str, int]]:
    """The number of runs ``(run_id, path)`` of a table and how many of them have each
    status at their last row that has one (the ``groupby(...)["status"].last()`` of
    the table, counted from its arrays)."""
    if not len(table):
        return 0, {}
    status = table["status"]
    if isinstance(status.dtype, pd.CategoricalDtype):
        codes, names = status.cat.codes.to_numpy(), status.cat.categories
    else:
        codes, names = pd.factorize(status)
    r = table["run_id"].to_numpy().astype(np.int64)
    p = table["path"].to_numpy().astype(np.int64)
    key = (r - r.min()) * (int(p.max() - p.min()) + 1) + (p - p.min())
    runs = len(np.unique(key))
    has = codes >= 0  # groupby's last() skips missing values
    # The last row of each run with a status: the first in reverse order.
    _, first = np.unique(key[has][::-1], return_index=True)
    counts = np.bincount(codes[has][::-1][first], minlength=len(names))
    return runs, {str(name): int(c) for name, c in zip(names, counts)}


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
