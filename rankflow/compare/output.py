"""A comparison's outputs: its tables, their judged ``halvings`` and ``verdict``,
``summary.md``, the figures and ``config.json`` written into one directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .summary import summary
from .verdict import judge

__all__ = ["Figures", "write"]

# The figures of a comparison: ``figures(tables, out)`` draws into ``out``, returns the paths.
Figures = Callable[[Mapping[str, pd.DataFrame], Path], Any]


def write(
    out: str | Path,
    tables: Mapping[str, pd.DataFrame],
    meta: Mapping[str, Any],
    figures: Figures | None = None,
) -> Path:
    """Write ``tables`` and their judged ``halvings`` and ``verdict`` tables
    (:func:`rankflow.compare.verdict.judge`, where ``tables`` has an order or weak table)
    as parquet and CSV, the figures of ``tables`` (``figures(tables, out)``, when
    given; it returns the paths it wrote), ``summary.md`` and ``config.json`` (``meta``
    plus versions, devices and the list of outputs) into the directory ``out``; the
    files a previous comparison there wrote and this one did not are removed
    (:func:`rankflow.engine.store.write_outputs`).

    Examples:
      The tables of :func:`compare` (whose ``out`` calls this), with the two resolved
      configs that ``summary.md`` states:

      >>> import tempfile
      >>> import rankflow
      >>> from rankflow.compare import compare, write
      >>> cfg = {"problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
      ...        "model": {"r": 2}, "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
      ...        "save": {"t1": 20, "num": 3}}
      >>> tables = compare(cfg, overrides={"compare.halvings": 1, "compare.window": 3})
      >>> meta = {"optimizer": rankflow.resolve(cfg), "compare": {"halvings": 1},
      ...         "flow": rankflow.resolve(cfg, {"dynamics.kind": "gradient_flow"})}
      >>> with tempfile.TemporaryDirectory() as out:
      ...     names = sorted(p.name for p in write(out, tables, meta).iterdir())
      >>> names  # doctest: +NORMALIZE_WHITESPACE
      ['config.json', 'contraction.csv', 'contraction.parquet', 'halvings.csv',
       'halvings.parquet', 'order.csv', 'order.parquet', 'summary.md', 'trajectory.csv',
       'trajectory.parquet', 'verdict.csv', 'verdict.parquet']
    """
    from ..engine.store import provenance, write_outputs

    out = Path(out)
    files: dict[str, Any] = {}
    for name, df in {**tables, **judge(tables)}.items():
        files |= {f"{name}.parquet": df, f"{name}.csv": df}
    files["summary.md"] = summary(tables, meta, figures=figures is not None)
    # The figures draw themselves into out; the names they return are listed as outputs.
    drawn = figures and (lambda: dict.fromkeys(Path(p).name for p in figures(tables, out) or ()))
    write_outputs(out, "config.json", dict(meta) | provenance(), files, drawn)
    return out
