"""Results directories.

```
DIR/config.json            resolved config, package versions, devices, git commit
DIR/manifest.json          config hash, chunk size and count: what resuming must match
DIR/results.parquet/       the tidy table, one parquet file per finished chunk
    chunk-00000.parquet
DIR/submitit/              logs of SLURM array tasks (``--executor submitit``)
```

Every file is written atomically (a hidden temporary file, then a rename), so a
reader — or a resumed sweep — never sees a half-written one; parquet readers skip the
hidden temporaries. ``load(DIR)`` reads the chunks as one table.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "STATUS",
    "atomic_write",
    "finished_chunks",
    "load",
    "package_versions",
    "prepare",
    "sort_rows",
    "write_chunk",
]

RESULTS = "results.parquet"
CONFIG = "config.json"
MANIFEST = "manifest.json"
# The ``status`` column's values; a program's status codes 0, 1, 2 index them.
STATUS = ("ok", "diverged", "max_steps")
_PACKAGES = (
    "rankflow",
    "jax",
    "jaxlib",
    "equinox",
    "diffrax",
    "optax",
    "flax",
    "numpy",
    "pandas",
    "pyarrow",
)


def atomic_write(path: Path, write) -> None:
    """Write ``path`` through ``write(tmp)`` on a hidden temporary file of the same
    folder, then rename it into place: readers see the old file or the new, never a
    half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def package_versions(names: Iterable[str] = _PACKAGES) -> dict[str, str]:
    """The installed version of each package in ``names`` (those not installed left
    out), for the provenance a results directory records."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Versions, devices, git commit and time of this run."""
    import jax

    return {
        "versions": package_versions(),
        "devices": [str(d) for d in jax.devices()],
        "git_commit": _git_commit(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def config_hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    fa, fb = _flat(a), _flat(b)
    keys = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    shown = [f"{k} = {fb.get(k)!r} here, {fa.get(k)!r} there" for k in keys[:4]]
    more = f" (and {len(keys) - 4} more)" if len(keys) > 4 else ""
    return "; ".join(shown) + more


def _chunk_dir(out: str | Path, table: str = RESULTS) -> Path:
    return Path(out) / table


def chunk_path(out: str | Path, index: int, table: str = RESULTS) -> Path:
    """Chunk ``index``'s file of a table (``results.parquet``, or another table of the
    same directory written chunk by chunk alongside it)."""
    return _chunk_dir(out, table) / f"chunk-{index:05d}.parquet"


def prepare(
    out: str | Path,
    config: Mapping[str, Any],
    *,
    chunk_size: int | None,
    chunks: int,
    resume: bool,
    tables: tuple[str, ...] = (RESULTS,),
) -> None:
    """Open ``out`` for a sweep of ``config``: a new directory gets its manifest and
    config.json; an existing one must hold the same config (and is resumed only when
    ``resume``). Raises ``ConfigError`` naming the differences otherwise. ``tables``:
    the chunked tables the sweep writes."""
    from .config import ConfigError

    out = Path(out)
    manifest = {
        "config_hash": config_hash(config),
        "config": dict(config),
        "chunk_size": chunk_size,
        "chunks": chunks,
        "format": 1,
    }
    mpath = out / MANIFEST
    if mpath.is_file():
        old = json.loads(mpath.read_text())
        if old["config_hash"] != manifest["config_hash"]:
            raise ConfigError(
                f"--out: {out} holds results of another config "
                f"({_differences(old['config'], manifest['config'])}); "
                f"use another --out"
            )
        if old.get("chunk_size") != chunk_size:
            raise ConfigError(
                f"--chunk: {out} was run with --chunk {old.get('chunk_size')}, not "
                f"{chunk_size}; resume with the same value"
            )
        if not resume:
            raise ConfigError(
                f"--out: {out} already holds results of this config; pass --resume to "
                f"finish it, or use another --out"
            )
    elif (out / RESULTS).exists():
        raise ConfigError(f"--out: {out} holds results without a manifest; use another --out")
    else:
        meta = {"config": dict(config), **provenance()}
        atomic_write(out / CONFIG, lambda p: Path(p).write_text(json.dumps(meta, indent=2)))
        atomic_write(mpath, lambda p: Path(p).write_text(json.dumps(manifest, indent=2)))
    for table in tables:
        _chunk_dir(out, table).mkdir(parents=True, exist_ok=True)
        for tmp in _chunk_dir(out, table).glob(".*.tmp"):  # left by a killed writer
            tmp.unlink(missing_ok=True)


def finished_chunks(
    out: str | Path, chunks, expected_rows, table: str = RESULTS
) -> tuple[set[int], list[str]]:
    """Indices of the chunks whose files are complete; corrupt or partial ones (wrong
    row count or runs, unreadable) are removed and returned by name, to be redone."""
    import pyarrow.parquet as pq

    done, bad = set(), []
    for c in chunks:
        p = chunk_path(out, c.index, table)
        if not p.exists():
            continue
        try:
            read = pq.read_table(p, columns=["run_id", "path"])
            ok = read.num_rows == expected_rows(c) and set(
                zip(read.column("run_id").to_pylist(), read.column("path").to_pylist())
            ) == set(c.runs)
        except Exception:  # noqa: BLE001 - any unreadable file is a corrupt chunk
            ok = False
        if ok:
            done.add(c.index)
        else:
            p.unlink(missing_ok=True)
            bad.append(p.name if table == RESULTS else f"{table}/{p.name}")
    return done, bad


def write_chunk(out: str | Path, index: int, df: pd.DataFrame, table: str = RESULTS) -> Path:
    path = chunk_path(out, index, table)
    atomic_write(path, lambda p: df.to_parquet(p, index=False))
    return path


def load(path: str | Path) -> pd.DataFrame:
    """The results table of a results directory (or of a parquet file), rows in the
    canonical order (run_id, path, t)."""
    p = Path(path)
    if p.is_dir() and (p / RESULTS).exists():
        p = p / RESULTS
    if not p.exists():
        raise FileNotFoundError(f"no results table at {p}")
    if p.is_dir():
        files = sorted(p.glob("chunk-*.parquet"))
        if not files:
            raise FileNotFoundError(f"no finished chunks in {p}")
        # Chunks of different structures may have different sv_* columns: concat
        # aligns them (missing singular values are NaN).
        df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    else:
        df = pd.read_parquet(p)
    if "status" in df.columns:  # categories are per file: one set for all
        df["status"] = pd.Categorical(df["status"].astype(str), categories=list(STATUS))
    return sort_rows(df)


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The canonical row order of a results table: (run_id, path, t), stable."""
    return df.sort_values(["run_id", "path", "t"], kind="stable", ignore_index=True)
