"""What every experiment of ``rankflow reproduce`` shares: claims with verdicts, its
configs under ``sims/reproduce/`` with the ``--quick``/``--full`` sizes, and where its
tables and figures go.

A *claim* is one statement of docs/theory.md (or of the paper) turned into a test: a
prediction, a measurement from the experiment's tables, a tolerance chosen from the
theory, and the verdict ``pass``/``fail`` computed from them. Statements the theory does
not make exactly (AdamW, the scaling of a noise floor) are reported with verdict
``observation``: measured and shown, never counted as passed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config.fields import ConfigError
from ..config.resources import sims_path

__all__ = ["MODES", "Claim", "Context", "config_path", "full_overrides"]

MODES = ("quick", "full")
VERDICTS = ("pass", "fail", "observation")

# The experiment configs: sims/reproduce/, inside the installed package or the checkout.
SIMS = sims_path("reproduce")
# --full: per config, dotted keys that enlarge it (sims/reproduce/full.toml).
FULL_OVERRIDES = "full.toml"


@dataclass(frozen=True)
class Claim:
    """One checked statement. ``verdict`` is computed by the experiment from
    ``measured`` against the prediction and ``tolerance`` (see the module docstring)."""

    experiment: str
    name: str  # short id, unique in the report, e.g. "toy.soft_threshold"
    source: str  # where the statement comes from: "T4", "T3", "paper", "derived"
    statement: str  # what is claimed, in words
    prediction: str  # the predicted value or relation
    measurement: str  # what was measured, with numbers
    tolerance: str  # the test, with its tolerance
    verdict: str  # pass | fail | observation
    figure: str = ""  # figure file name under DIR/figures/ ("" for none)
    one_sided: str = ""  # "" if two-sided; else the direction it cannot see, its partner

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"Claim.verdict must be one of {VERDICTS}, got {self.verdict!r}")


def verdict(ok: bool) -> str:
    return "pass" if bool(ok) else "fail"


@dataclass
class Context:
    """Where an experiment writes, at which size, and what it found."""

    out: Path
    mode: str
    checkpoint: str | None = None
    claims: list[Claim] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def figures(self) -> Path:
        return self._folder("figures")

    @property
    def tables(self) -> Path:
        return self._folder("tables")

    def _folder(self, name: str) -> Path:
        """``out/name``, made on first use."""
        p = self.out / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def runs(self, name: str) -> Path:
        """The results directory of one config's run (per size, so that a --quick and a
        --full run into the same DIR never mix; a rerun resumes)."""
        return self.out / "runs" / self.mode / name

    def table(self, name: str, df: pd.DataFrame) -> Path:
        """Write ``df`` as ``DIR/tables/NAME.csv`` and ``.parquet``."""
        df = df.reset_index(drop=True)
        df.to_csv(self.tables / f"{name}.csv", index=False)
        df.to_parquet(self.tables / f"{name}.parquet", index=False)
        return self.tables / f"{name}.csv"

    def claim(self, **kw: Any) -> Claim:
        c = Claim(**kw)
        self.claims.append(c)
        return c


def config_path(name: str) -> Path:
    """``sims/reproduce/NAME.toml``; a ConfigError naming it when it is missing."""
    path = SIMS / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(
            f"reproduce: no config {path} (rankflow reproduce reads sims/reproduce/, "
            "installed with the package as rankflow/sims or in a source checkout)"
        )
    return path


def full_overrides(name: str, mode: str) -> dict[str, Any]:
    """The dotted-key overrides of config ``name`` at size ``mode`` (none for quick)."""
    if mode == "quick":
        return {}
    path = SIMS / FULL_OVERRIDES
    with open(path, "rb") as f:
        table = tomllib.load(f)
    over = table.get(name, {})
    if not isinstance(over, Mapping):
        raise ConfigError(f"{path}: [{name}] must be a table of dotted keys")
    return dict(over)


def sweep_config(name: str, mode: str) -> dict[str, Any]:
    """A ``rankflow run`` config of ``sims/reproduce/NAME.toml``, resolved at ``mode``."""
    from ..core import config as config_lib

    return config_lib.resolve(config_path(name), full_overrides(name, mode))


def run_sweep(ctx: Context, name: str) -> tuple[dict[str, Any], pd.DataFrame]:
    """Run (or resume) the ``rankflow.run`` sweep of config ``name`` into
    ``ctx.runs(name)``: its resolved config and its table."""
    from ..api import run

    cfg = sweep_config(name, ctx.mode)
    return cfg, run(cfg, out=ctx.runs(name), resume=True)


def per_problem(
    ctx: Context,
    configs: Mapping[str, str],
    prefix: str,
    table_of: Callable[[dict[str, Any], pd.DataFrame, str], pd.DataFrame],
) -> pd.DataFrame:
    """:func:`run_sweep` of each config of ``{problem: name}``, its table written as
    ``PREFIX_PROBLEM_runs``; ``table_of(cfg, runs, problem)`` of each, concatenated."""
    frames = []
    for problem, name in configs.items():
        cfg, df = run_sweep(ctx, name)
        ctx.table(f"{prefix}_{problem}_runs", df)
        frames.append(table_of(cfg, df, problem))
    return pd.concat(frames, ignore_index=True)


def attention_config(name: str, mode: str) -> dict[str, Any]:
    """A ``rankflow attention train`` config of ``sims/reproduce/NAME.toml``, resolved at
    ``mode``."""
    from ..attention import resolve

    return resolve(config_path(name), full_overrides(name, mode))


def run_attention(ctx: Context, name: str):
    """Train (or resume) the attention sweep of config ``name`` into ``ctx.runs(name)``;
    its ``rankflow.attention.run`` results (``loss``, ``heads``)."""
    from .. import attention

    return attention.run(attention_config(name, ctx.mode), out=ctx.runs(name), resume=True)


def validate_attention(names: tuple[str, ...], mode: str) -> None:
    """Resolve (and so validate) every attention config of ``names`` at ``mode``."""
    for name in names:
        attention_config(name, mode)


def fmt(x: float, digits: int = 4) -> str:
    """A number for the report: ``nan`` for non-finite values."""
    if x is None or not np.isfinite(x):
        return "nan"
    return f"{x:.{digits}g}"


def final_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Each run's (and path's) row at its last saved time."""
    return df.sort_values("t").groupby(["run_id", "path"], sort=False).tail(1)


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([asdict(c) for c in claims])
