"""The Python entry point: ``rankflow.run(config) -> pandas.DataFrame``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from . import engine
from .core.family import CORE

__all__ = ["run"]


def run(
    config: str | Path | Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    chunk: int | None = None,
    executor: str = "local",
    slurm: Mapping[str, Any] | None = None,
    quiet: bool = True,
) -> pd.DataFrame:
    """Validate ``config``, run every point of its sweep, and return the tidy table.

    Args:
      config: path to a TOML file, or a nested dict with the same sections. For
        ``problem.kind = "custom"``, ``problem.loss`` may be a Python callable ``L(W)``.
      overrides: dotted keys to set first, e.g. ``{"dynamics.lam": 0.1}``.
      out: a results directory to write chunk by chunk (see ``rankflow.engine.store``).
      resume: continue the sweep already in ``out`` (same config), skipping finished
        chunks.
      chunk: runs per chunk (default: sized to the problem's memory).
      executor: ``"local"`` (every local device) or ``"submitit"`` (a SLURM job array;
        options in ``slurm``: partition, time (minutes), gpus_per_task,
        array_parallelism, jobs, cluster).
      quiet: no progress bar.

    Returns:
      One row per run × path × saved time; see the README for the columns.

    Raises:
      ConfigError: on any invalid field, before anything is compiled.
    """
    options = dict(out=out, resume=resume, chunk=chunk, executor=executor, slurm=slurm)
    df, _ = engine.run(CORE, config, overrides, quiet=quiet, **options)
    return df
