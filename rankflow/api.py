"""The Python entry point: ``rankflow.run(config) -> pandas.DataFrame``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .core import config as config_lib
from .engine import enable_compilation_cache

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
      One row per run × path × saved time; its columns are listed with their meanings
      in docs/reference/columns.md. With ``save.states = true``, ``df.attrs["states"]``
      holds the factors at the saves (:class:`rankflow.engine.states.States`, the same
      as :func:`rankflow.load_states` reads from ``out``).

    Raises:
      ConfigError: on any invalid field, before anything is compiled.

    Examples:
      GD on the diagonal problem ½‖ABᵀ − diag(1, 0.5)‖² with weight decay λ = 0.1, three
      saves; the limit is the soft-thresholded target, each singular value less λ:

      >>> import rankflow
      >>> df = rankflow.run({"problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
      ...                    "model": {"r": 2}, "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
      ...                    "save": {"t1": 500, "num": 3}})
      >>> df.shape, df["t"].tolist(), df["status"].astype(str).unique().tolist()
      ((3, 33), [0.0, 250.0, 500.0], ['ok'])
      >>> df[["sv_1", "sv_2"]].iloc[-1].round(3).tolist()
      [0.9, 0.4]
    """
    from .core.family import execute

    options = dict(out=out, resume=resume, chunk=chunk, executor=executor, slurm=slurm)
    cfg = config_lib.resolve(config, overrides)  # every config error before compiling
    enable_compilation_cache()
    df, _ = execute(cfg, quiet=quiet, **options)
    return df
