"""The figure of ``rankflow reproduce``'s ``optimizers`` experiment passes the figure
review (``figure_checks``): the momentum optimizers' order from the captured table of
``sims/reproduce/optimizers_momentum.toml``, the schedule panels from a small synthetic
steps table (no simulation runs here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from figure_checks import capture_figures, check_figure

from rankflow import plots

GOLDEN = Path(__file__).resolve().parents[1] / "claims" / "golden"


def _steps() -> pd.DataFrame:
    """Two schedules' step tables with the experiment's columns: 5 warmup steps to η = 0.2,
    then down to 0.02 at k = 20; the departure inside its bound."""
    t = np.arange(21.0)
    lam, frames = 0.25, []
    for i, kind in enumerate(("warmup_cosine", "linear")):
        u = np.clip((t - 5) / 15, 0, 1)
        after = 0.02 + 0.18 * (0.5 * (1 + np.cos(np.pi * u)) if i == 0 else 1 - u)
        eta = np.where(t < 5, 0.04 * t, after)
        lead = (1 - eta * lam) ** 2
        log_product = np.concatenate([[0.0], np.cumsum(np.log(lead[:-1]))])
        bound = 0.004 * t
        frames.append(
            pd.DataFrame({
                "dynamics.schedule": kind, "dynamics.eta": 0.2, "dynamics.lam": lam, "t": t,
                "eta_k": eta, "log_gap": log_product - 0.9 * bound, "log_product": log_product,
                "bound_low": -bound, "bound_high": bound,
                "t5_residual": np.append(1e-16 * (1 + t[:-1]), np.nan),
                "shift": np.append(np.abs(np.diff(lead)), np.nan),
            })
        )  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_optimizers_figure(monkeypatch, tmp_path):
    order = pd.read_parquet(GOLDEN / "reproduce__optimizers_momentum__order.parquet")
    with capture_figures(monkeypatch) as figs:
        plots.optimizers_figure(order, _steps(), tmp_path / "optimizers.png")
    (fig,) = figs
    check_figure(fig, {"momentum", "momentum_flow", "gd"}, "optimizers")
    assert (tmp_path / "optimizers.png").stat().st_size > 0
    # Panel (a) draws each optimizer's distances at the learning rates run.
    lines = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() not in ("None", None, "")]
    assert len(lines) == 2
    for line in lines:
        np.testing.assert_allclose(
            np.sort(line.get_xdata()), np.sort(order["dynamics.eta"].unique())
        )
