"""The learning rate of a checkpoint series and what it predicts: a schedule file's
(step, lr) table, and the balance exponents that T4, T5 and T11 (docs/theory.md) predict
between the checkpoints from it and λ."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ._checkpoint import InspectError

__all__ = ["learning_rate", "predicted_exponents", "read_lr_schedule"]


def read_lr_schedule(file: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(steps, lr) of a schedule file: CSV or whitespace-separated text with a header
    naming the columns ``step`` and ``lr`` (or ``eta``), one row per step where the
    learning rate is known (in between it is interpolated linearly); or a parquet table
    with those columns. Steps strictly increasing, lr finite and ≥ 0.

    Examples:
        >>> import pathlib, tempfile
        >>> from rankflow.inspect import read_lr_schedule
        >>> with tempfile.TemporaryDirectory() as d:
        ...     f = pathlib.Path(d, "lr.csv")
        ...     _ = f.write_text("step,lr\\n0,0.001\\n1000,0.0005\\n")
        ...     steps, lr = read_lr_schedule(f)
        >>> steps.tolist(), lr.tolist()
        ([0, 1000], [0.001, 0.0005])
    """
    f = Path(file)
    try:
        if f.suffix == ".parquet":
            df = pd.read_parquet(f)
        else:
            df = pd.read_csv(f, sep=None, engine="python", comment="#")
    except FileNotFoundError:
        raise InspectError(f"{f}: no such schedule file") from None
    except Exception as e:  # pandas' parsers raise many kinds on a damaged file
        raise InspectError(f"{f}: cannot read the schedule ({str(e).splitlines()[0]})") from None
    lr_col = next((c for c in ("lr", "eta") if c in df.columns), None)
    for field, col in (("step", "step" if "step" in df.columns else None), ("lr", lr_col)):
        if col is None:
            raise InspectError(
                f"{f}: field {field!r}: no such column (columns: {', '.join(map(str, df.columns))})"
            )
    step = pd.to_numeric(df["step"], errors="coerce").to_numpy(np.float64)
    lr = pd.to_numeric(df[lr_col], errors="coerce").to_numpy(np.float64)
    if len(step) == 0:
        raise InspectError(f"{f}: field 'step': no rows")
    if not np.all(np.isfinite(step)) or np.any(step != np.round(step)) or np.any(step < 0):
        raise InspectError(f"{f}: field 'step': every step must be a whole number ≥ 0")
    if np.any(np.diff(step) <= 0):
        i = int(np.argmax(np.diff(step) <= 0)) + 1
        raise InspectError(f"{f}: field 'step': not increasing at row {i + 1} ({step[i]:g})")
    if not np.all(np.isfinite(lr)) or np.any(lr < 0):
        raise InspectError(f"{f}: field {lr_col!r}: every learning rate must be finite and ≥ 0")
    return step.astype(np.int64), lr


def _etas(steps: Sequence[int], lr: float | None, schedule, where: str) -> np.ndarray:
    """η_k for k = steps[0] … steps[-1] − 1 (the steps between the first and last
    checkpoint), from a constant ``lr`` or a (steps, lr) schedule that covers them."""
    k = np.arange(steps[0], steps[-1], dtype=np.int64)
    if schedule is None:
        return np.full(k.shape, float(lr))
    s, v = schedule
    if s[0] > steps[0] or s[-1] < steps[-1] - 1:
        raise InspectError(
            f"{where}: field 'step': the schedule covers steps {s[0]}–{s[-1]}, but the "
            f"checkpoints need the learning rate from step {steps[0]} to {steps[-1] - 1}"
        )
    return np.interp(k.astype(np.float64), s.astype(np.float64), v)


def predicted_exponents(
    steps: Sequence[int], lam: float, *, lr: float | None = None, schedule=None, where: str = "lr"
) -> dict[str, np.ndarray]:
    """The predicted ``−log(gap(s)/gap(s₀))`` at each step s of the series:
    ``"gd"`` — T5/T11's leading factor, ``Σ_{s₀≤k<s} −2 log|1 − η_kλ|``; ``"gf"`` —
    T4/T11, ``2λ Σ_{s₀≤k<s} η_k`` (``2λ∫η`` with η constant on each step). ``lr``
    constant, or ``schedule`` = (steps, lr) of :func:`read_lr_schedule`.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import predicted_exponents
        >>> e = predicted_exponents([0, 10, 20], lam=0.05, lr=0.1)
        >>> e["gf"].round(4).tolist(), e["gd"].round(4).tolist()  # 2ηλs; −2s·log(1 − ηλ)
        ([0.0, 0.1, 0.2], [0.0, 0.1003, 0.2005])
    """
    from ..theory import gd_balance_rate, gf_balance_rate

    etas = _etas(list(steps), lr, schedule, where)
    per_step = {
        "gd": np.asarray(gd_balance_rate(etas, lam), np.float64),
        "gf": np.asarray(gf_balance_rate(etas, lam), np.float64),
    }
    idx = np.asarray(steps, np.int64) - steps[0]
    return {k: np.concatenate([[0.0], np.cumsum(v)])[idx] for k, v in per_step.items()}


def learning_rate(lr, lam, schedule, steps) -> tuple[dict | None, dict]:
    """The predicted exponents (None without λ) and what ``series.json`` records."""
    if lam is None:
        if lr is not None or schedule is not None:
            raise InspectError("--lam: a learning rate without λ predicts nothing; give --lam")
        return None, {}
    if not np.isfinite(lam) or lam < 0:
        raise InspectError(f"--lam: must be a finite number ≥ 0, got {lam}")
    if (lr is None) == (schedule is None):
        raise InspectError("--lam: give the learning rate as one of --lr ETA or --lr-schedule FILE")
    if schedule is not None:
        where = str(schedule)
        table = read_lr_schedule(schedule)
        exps = predicted_exponents(steps, lam, schedule=table, where=where)
        return exps, {"lam": lam, "lr_schedule": str(Path(schedule).resolve())}
    if not np.isfinite(lr) or lr <= 0:
        raise InspectError(f"--lr: must be a finite number > 0, got {lr}")
    return predicted_exponents(steps, lam, lr=lr), {"lam": lam, "lr": lr}
