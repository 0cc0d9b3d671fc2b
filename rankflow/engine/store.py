"""Results directories.

```
DIR/config.json            resolved config, package versions, devices, git commit
DIR/manifest.json          config hash, chunk size and count, the user code's record
                           (a custom loss: rankflow.config.usercode): what resuming
                           must match
DIR/results.parquet/       the tidy table, one parquet file per finished chunk
    chunk-00000.parquet
DIR/states.parquet/        with save.states only: the factors at the saves, one file
    chunk-00000.parquet    per chunk beside its table's (:mod:`rankflow.engine.states`)
DIR/submitit/              logs of SLURM array tasks (``--executor submitit``)
DIR/.rankflow.lock         the marker that rankflow made DIR, and the writer's lock
                           (:mod:`rankflow.engine.writer`)
```

Every file is written atomically (a hidden temporary file, then a rename), so a
reader — or a resumed sweep — never sees a half-written one; parquet readers skip the
hidden temporaries. Every chunk records its sweep's :class:`Identity` (config hash,
plan, index, the user code's hash) in its parquet metadata: resuming and ``load(DIR)``
take only the chunks of the manifest's config, plan and code, name the others (foreign,
duplicate, stray), and ``load`` warns (or, ``strict``, raises) when chunks are missing.
Who may write a directory (one writer at a time, never a folder that is not rankflow's)
is :mod:`rankflow.engine.writer`'s; ``load`` needs only the manifest and the chunks.
The directory's names, manifest and chunk identity are :mod:`.manifest`'s, what it
records of its provenance :mod:`.provenance`'s (both re-exported here).

The states table (``save.states``) is a chunked table like the results: chunk ``i`` of
each is written atomically, states first, and a chunk counts as finished only when both
files are complete and of the sweep, so a resumed sweep neither mixes nor loses states.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.fields import ConfigError
from ..config.usercode import code_changes
from .files import atomic_write, write_outputs
from .manifest import CONFIG as CONFIG
from .manifest import FORMAT as FORMAT
from .manifest import MANIFEST as MANIFEST
from .manifest import RESULTS as RESULTS
from .manifest import STATES as STATES
from .manifest import STATUS as STATUS
from .manifest import Identity as Identity
from .manifest import ResultsError as ResultsError
from .manifest import chunk_dir, identity_of, read_manifest
from .manifest import chunk_path as chunk_path
from .provenance import PACKAGES as PACKAGES
from .provenance import package_versions as package_versions
from .provenance import provenance as provenance

__all__ = [
    "STATUS",
    "Identity",
    "ResultsError",
    "atomic_write",
    "chunk_files",
    "write_outputs",
    "chunk_problem",
    "finished_chunks",
    "flat",
    "identity_of",
    "load",
    "package_versions",
    "prepare",
    "read_manifest",
    "sort_rows",
    "stray_files",
    "write_chunk",
]


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as one mapping of dotted keys."""
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    fa, fb = flat(a), flat(b)
    keys = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    shown = [f"{k} = {fb.get(k)!r} here, {fa.get(k)!r} there" for k in keys[:4]]
    more = f" (and {len(keys) - 4} more)" if len(keys) > 4 else ""
    return "; ".join(shown) + more


def prepare(
    out: str | Path,
    config: Mapping[str, Any],
    *,
    chunk_size: int | None,
    chunks: int,
    resume: bool,
    tables: tuple[str, ...] = (RESULTS,),
    runs: int | None = None,
    not_resumable: str | None = None,
    code: Mapping[str, Any] | None = None,
) -> Identity:
    """Open ``out`` for a sweep of ``config`` (``runs`` runs in ``chunks`` chunks): a new
    directory gets its manifest and config.json; an existing one must hold the same
    config, plan and user code (``code``: :func:`rankflow.config.usercode.code_of`),
    and is resumed only when ``resume``, and never when ``not_resumable`` says why not.
    Raises ``ConfigError`` in one line naming the differences otherwise, before
    anything in ``out`` changes. ``tables``: the chunked tables the sweep writes.
    Returns the identity its chunks must record."""
    out = Path(out)
    manifest = {
        "config_hash": config_hash(config),
        "config": dict(config),
        "chunk_size": chunk_size,
        "chunks": chunks,
        "runs": runs,
        "format": FORMAT,
    }
    if code:
        manifest["code"] = dict(code)
    mpath = out / MANIFEST
    if mpath.is_file():
        old = read_manifest(out)
        _check_resume(out, old, manifest, resume, not_resumable)
        ident = identity_of(old)
    elif any((out / t).exists() for t in tables):
        raise ConfigError(f"--out: {out} holds results without a manifest; use another --out")
    else:
        meta = {"config": dict(config), **provenance()}
        atomic_write(out / CONFIG, lambda p: Path(p).write_text(json.dumps(meta, indent=2)))
        atomic_write(mpath, lambda p: Path(p).write_text(json.dumps(manifest, indent=2)))
        ident = identity_of(manifest)
    for table in tables:
        if chunk_dir(out, table).is_file():
            raise ResultsError(
                f"{chunk_dir(out, table)}: is a file, not a directory of chunks; "
                "rerun into a new --out"
            )
        chunk_dir(out, table).mkdir(parents=True, exist_ok=True)
        for tmp in chunk_dir(out, table).glob(".*.tmp"):  # left by a killed writer
            tmp.unlink(missing_ok=True)
    return ident


def _check_resume(out, old, manifest, resume, not_resumable) -> None:
    _check_code(out, old.get("code"), manifest.get("code"))
    if old["config_hash"] != manifest["config_hash"]:
        raise ConfigError(
            f"--out: {out} holds results of another config "
            f"({_differences(old.get('config', {}), manifest['config'])}); use another --out"
        )
    if old.get("chunk_size") != manifest["chunk_size"]:
        was, now = old.get("chunk_size"), manifest["chunk_size"]
        given = "gives no --chunk" if now is None else f"gives --chunk {now}"
        how = "without --chunk" if was is None else f"with --chunk {was}"
        what = " (each structure's default size)" if was is None else ""
        raise ConfigError(f"--chunk: {out} was run {how}{what}, this run {given}; resume {how}")
    if old["chunks"] != manifest["chunks"]:
        raise ConfigError(
            f"--out: {out} was planned as {old['chunks']} chunks, this sweep has "
            f"{manifest['chunks']} (another rankflow version?); use another --out"
        )
    if not_resumable:
        raise ConfigError(
            f"--out: {out} holds a sweep that cannot be resumed: {not_resumable}; use a new --out"
        )
    if not resume:
        raise ConfigError(
            f"--out: {out} already holds results of this config; pass --resume to "
            f"finish it, or use another --out"
        )


def _check_code(out, old: Mapping | None, new: Mapping | None) -> None:
    """Refuse to resume ``out`` when the user code its sweep ran has changed since (or
    was not recorded, by an earlier rankflow): its table would mix two versions."""
    start = f"run into a new folder (--out NEW), or delete {out} to start it again"
    if new and old is None:
        names = ", ".join(new)
        raise ConfigError(
            f"--out: {out}/{MANIFEST} records no version of {names} (written by an "
            f"earlier rankflow), so a change to it since cannot be ruled out; {start}"
        )
    changed = code_changes(old or {}, new or {})
    if changed:
        raise ConfigError(
            f"--out: {out} was run with another version of {changed}; resuming would mix "
            f"results of the two versions in one table: {start}"
        )


def chunk_problem(path: Path, index: int, ident: Identity) -> str | None:
    """Why the file ``path``, at plan index ``index``, is not a chunk of the sweep
    ``ident`` (foreign, of another plan, a duplicate of another index, unreadable), or
    None when it is."""
    import pyarrow.parquet as pq

    if index >= ident.chunks:
        return f"is outside the plan of {ident.chunks} chunks (a stray)"
    try:
        raw = (pq.read_schema(path).metadata or {}).get(b"rankflow")
        rec = None if raw is None else json.loads(raw)
    except Exception:  # noqa: BLE001 - any unreadable file is a corrupt chunk
        return "was corrupt or partial"
    if rec is None:
        return None if ident.legacy else "records no sweep identity (foreign)"
    if rec.get("config_hash") != ident.config_hash:
        return f"belongs to another config (hash {rec.get('config_hash')}; foreign)"
    if (rec.get("chunk_size"), rec.get("chunks")) != (ident.chunk_size, ident.chunks):
        return f"belongs to another plan ({rec.get('chunks')} chunks; foreign)"
    if rec.get("code") != ident.code:
        return "was computed by another version of the custom loss's code (foreign)"
    if rec.get("chunk") != index:
        return f"is a copy of chunk {rec.get('chunk')} (a duplicate)"
    return None


def stray_files(out: str | Path, ident: Identity, table: str = RESULTS) -> list[str]:
    """Chunk files of a table outside the plan's names: each as "NAME is …" (a stray
    index, or a second file for one index, i.e. a duplicate)."""
    found = []
    for f in sorted(chunk_dir(out, table).glob("chunk-*.parquet")):
        index = _index_of(f)
        if index is None or index >= ident.chunks:
            found.append(f"{f.name} is outside the plan of {ident.chunks} chunks (a stray)")
        elif f != chunk_path(out, index, table):
            found.append(f"{f.name} is a second file for chunk {index} (a duplicate)")
    return found


def _refuse_directory(p: Path) -> None:
    if p.is_dir():
        raise ResultsError(
            f"{p}: is a directory, not a chunk file; remove it (--resume then runs that "
            "chunk again)"
        )


def _index_of(f: Path) -> int | None:
    try:
        return int(f.name.removeprefix("chunk-").removesuffix(".parquet"))
    except ValueError:
        return None


def chunk_files(out: str | Path, table: str = RESULTS) -> set[str]:
    """The names in a table's directory of chunks, read in one listing (a sweep of
    30,000 chunks stats none of the absent ones); empty where it is not there."""
    try:
        return set(os.listdir(chunk_dir(out, table)))
    except OSError:
        return set()


def finished_chunks(
    out: str | Path, chunks, expected_rows, table: str = RESULTS, ident: Identity | None = None
) -> tuple[set[int], list[str]]:
    """Indices of the chunks whose files are complete and of the sweep ``ident``;
    others (corrupt, partial, foreign, duplicates) are removed, each returned as
    "NAME was/is …", to be redone."""
    import pyarrow.parquet as pq

    done, bad = set(), []
    present = chunk_files(out, table)
    for c in chunks:
        if f"chunk-{c.index:05d}.parquet" not in present:
            continue
        p = chunk_path(out, c.index, table)
        _refuse_directory(p)
        problem = chunk_problem(p, c.index, ident) if ident is not None else None
        try:
            read = pq.read_table(p, columns=["run_id", "path"])
            ok = read.num_rows == expected_rows(c) and set(
                zip(read.column("run_id").to_pylist(), read.column("path").to_pylist())
            ) == set(c.runs)
        except Exception:  # noqa: BLE001 - any unreadable file is a corrupt chunk
            ok = False
        problem = problem or (None if ok else "was corrupt or partial")
        if problem is None:
            done.add(c.index)
        else:
            p.unlink(missing_ok=True)
            bad.append(f"{p.name if table == RESULTS else f'{table}/{p.name}'} {problem}")
    return done, bad


def write_chunk(
    out: str | Path,
    index: int,
    df: pd.DataFrame,
    table: str = RESULTS,
    ident: Identity | None = None,
) -> Path:
    """Write chunk ``index`` of a table atomically, recording ``ident`` in its
    metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(tmp: str) -> None:
        t = pa.Table.from_pandas(df, preserve_index=False)
        if ident is not None:
            meta = {**(t.schema.metadata or {}), b"rankflow": ident.record(index)}
            t = t.replace_schema_metadata(meta)
        pq.write_table(t, tmp)

    path = chunk_path(out, index, table)
    atomic_write(path, write)
    return path


def load(path: str | Path, *, table: str = RESULTS, strict: bool = False) -> pd.DataFrame:
    """The results table of a results directory (or of a parquet file), rows in the
    canonical order (run_id, path, t). Only the chunks of the manifest's config and
    plan are read: others are named in a ``UserWarning``, as are missing chunks (how
    many runs are absent); ``strict``: raise :class:`ResultsError` instead. A missing,
    empty or corrupt directory raises :class:`ResultsError` naming the path.

    Examples:
      A sweep over two seeds written by :func:`rankflow.run`, read back:

      >>> import tempfile
      >>> import rankflow
      >>> cfg = {"problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
      ...        "model": {"r": 2}, "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
      ...        "save": {"t1": 500, "num": 3}, "sweep": {"seed": [0, 1]}}
      >>> with tempfile.TemporaryDirectory() as out:
      ...     _ = rankflow.run(cfg, out=out)
      ...     df = rankflow.load(out)
      >>> df.shape, df["run_id"].tolist(), df["t"].tolist()
      ((6, 33), [0, 0, 0, 1, 1, 1], [0.0, 250.0, 500.0, 0.0, 250.0, 500.0])
    """
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p}: no such results directory")
    if p.is_dir() and not (p / MANIFEST).exists() and (p.parent / MANIFEST).exists():
        return load(p.parent, table=p.name, strict=strict)
    if p.is_file():
        df = _read_file(p)
    elif (p / MANIFEST).exists():
        df = _read_checked(p, table, strict)
    elif p.name.endswith(".parquet"):  # a bare directory of chunk files
        files = sorted(p.glob("chunk-*.parquet"))
        if not files:
            raise ResultsError(f"{p}: no finished chunks")
        # Chunks of different structures may have different sv_* columns: concat
        # aligns them (missing singular values are NaN).
        df = pd.concat([_read_parquet(f) for f in files], ignore_index=True)
    else:
        raise ResultsError(f"{p}: not a rankflow results directory (no {MANIFEST})")
    if "status" in df.columns:  # categories are per file: one set for all
        df["status"] = pd.Categorical(df["status"].astype(str), categories=list(STATUS))
    return sort_rows(df)


def _read_file(p: Path) -> pd.DataFrame:
    """A table given as one file: parquet (told by its leading magic bytes), or refused
    as not rankflow's (a CSV export, a config) rather than called damaged."""
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ResultsError(f"{p}: cannot read ({e.strerror or e})") from None
    if magic != b"PAR1":
        raise ResultsError(
            f"{p}: not a results directory or parquet file (rankflow reads the directory "
            "`rankflow run --out DIR` writes, or a .parquet table)"
        )
    try:
        return pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - any unreadable parquet file is damaged
        raise ResultsError(f"{p}: damaged parquet file ({type(e).__name__})") from None


def _read_parquet(f: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(f)
    except Exception as e:  # noqa: BLE001 - any unreadable file is a damaged chunk
        raise ResultsError(f"{f}: damaged ({type(e).__name__}); --resume redoes it") from None


def _read_checked(p: Path, table: str, strict: bool) -> pd.DataFrame:
    """The chunks of ``p``'s table that belong to its manifest; the others and the
    missing ones reported (see :func:`load`)."""
    manifest = read_manifest(p)
    ident = identity_of(manifest)
    tdir = chunk_dir(p, table)
    if not tdir.is_dir():
        what = "is a file, not a directory of chunks" if tdir.exists() else "is missing"
        raise ResultsError(f"{tdir}: {what}")
    problems = stray_files(p, ident, table)
    frames, have = [], []
    for i in range(ident.chunks):
        f = chunk_path(p, i, table)
        if not f.exists():
            continue
        _refuse_directory(f)
        problem = chunk_problem(f, i, ident)
        if problem == "was corrupt or partial":
            raise ResultsError(f"{f}: damaged chunk; --resume redoes it")
        if problem:
            problems.append(f"{f.name} {problem}")
            continue
        frames.append(_read_parquet(f))
        have.append(i)
    notes = [f"{tdir}: left out {'; '.join(problems)}"] if problems else []
    if len(have) < ident.chunks:
        notes.append(_missing_note(p, manifest, have, frames))
    for note in notes:
        if strict:
            raise ResultsError(note)
        warnings.warn(note, UserWarning, stacklevel=3)
    if not frames:
        raise ResultsError(f"{tdir}: no finished chunks")
    return pd.concat(frames, ignore_index=True)


def _missing_note(p: Path, manifest, have: list[int], frames) -> str:
    chunks = manifest["chunks"]
    missing = [i for i in range(chunks) if i not in set(have)]
    names = _listing_of([f"chunk-{i:05d}" for i in missing])
    runs = manifest.get("runs")
    if runs is not None:
        present = sum(len(f[["run_id", "path"]].drop_duplicates()) for f in frames)
        absent = f": {runs - present} of {runs} runs absent"
    else:
        absent = ""
    return (
        f"{p}: {len(missing)} of {chunks} chunks missing ({names}){absent}; "
        f"rerun with --resume to finish the sweep"
    )


def _listing_of(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The canonical row order of a results table: (run_id, path, t), stable."""
    return df.sort_values(["run_id", "path", "t"], kind="stable", ignore_index=True)
