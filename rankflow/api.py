"""The Python entry point: ``rankflow.run(config) -> pandas.DataFrame``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from . import config as config_lib
from .simulate import simulate
from .store import write_results

__all__ = ["run"]


def run(
    config: str | Path | Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
) -> pd.DataFrame:
    """Validate ``config`` (a TOML path or a nested dict as in the TOML), run every point
    of its sweep, and return the tidy results table.

    Args:
      config: path to a TOML file, or a nested dict with the same sections. For
        ``problem.kind = "custom"``, ``problem.loss`` may be a Python callable ``L(W)``.
      overrides: dotted keys to set first, e.g. ``{"dynamics.lam": 0.1}``.
      out: if given, a results directory to write (``results.parquet``, ``config.json``).

    Returns:
      One row per run × path × saved time; see DESIGN.md for the columns.

    Raises:
      ConfigError: on any invalid field, before anything is compiled.
    """
    cfg = config_lib.resolve(config, overrides)
    df = simulate(cfg)
    if out is not None:
        write_results(out, df, config_lib.to_json(cfg))
    return df
