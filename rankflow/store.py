"""Results directories: ``results.parquet`` (the tidy table) and ``config.json`` (the
fully resolved config, package versions, devices, git commit). Every file is written
atomically (temporary file, then rename), so a reader never sees a half-written one.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["load", "write_results"]

RESULTS = "results.parquet"
CONFIG = "config.json"
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


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
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
        "versions": _versions(),
        "devices": [str(d) for d in jax.devices()],
        "git_commit": _git_commit(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_results(out_dir: str | Path, df: pd.DataFrame, config: Mapping[str, Any]) -> Path:
    """Write ``df`` and the resolved ``config`` (JSON-ready) into ``out_dir``."""
    out = Path(out_dir)
    meta = {
        "config": dict(config),
        **provenance(),
        "rows": len(df),
        "runs": int(df["run_id"].nunique()) if len(df) else 0,
    }
    _atomic_write(out / CONFIG, lambda p: Path(p).write_text(json.dumps(meta, indent=2) + "\n"))
    _atomic_write(out / RESULTS, lambda p: df.to_parquet(p, index=False))
    return out


def load(path: str | Path) -> pd.DataFrame:
    """The results table of a results directory (or of a parquet file)."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS
    if not p.is_file():
        raise FileNotFoundError(f"no results table at {p}")
    return pd.read_parquet(p)
