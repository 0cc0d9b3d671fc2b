"""The figure of ``rankflow reproduce``'s ``geometry`` experiment passes the figure review
(``figure_checks``): the balance panel from the captured table of
``sims/reproduce/geometry.toml``, the norm panels from a small synthetic norms table
(no simulation runs here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from figure_checks import capture_figures, check_figure

from rankflow import plots
from rankflow.reproduce import geometry

GOLDEN = Path(__file__).resolve().parents[1] / "claims" / "golden"


def _norms() -> pd.DataFrame:
    """The experiment's norms columns: each factor approaches its radius like the bound."""
    t = np.arange(201.0)
    frames = []
    for run_id, (kind, rho) in enumerate([("sign_gd", 1.0), ("lion", 1.0), ("muon", 1.134)]):
        for factor, x0 in (("A", 0.4), ("B", 0.6)):
            x = rho + 0.95**t * (x0 - rho)
            frames.append(
                pd.DataFrame({
                    "run_id": run_id, "dynamics.kind": kind, "dynamics.eta": 0.05,
                    "dynamics.lam": 1.0, "factor": factor, "t": t, "max_norm": x,
                    "spectral_norm": x,
                })
            )  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_geometry_figure(monkeypatch, tmp_path):
    runs = pd.read_parquet(GOLDEN / "reproduce__geometry.parquet")
    balance = geometry.balance_table(runs)
    with capture_figures(monkeypatch) as figs:
        plots.geometry_figure(_norms(), balance, 1.134357, tmp_path / "geometry.png")
    (fig,) = figs
    check_figure(fig, {"gd", "sign_gd", "lion", "muon"}, "geometry", t_end=200.0)
    assert (tmp_path / "geometry.png").stat().st_size > 0
    # Panel (c): one gap curve per optimizer and the dashed (1 − ηλ)²ᵏ.
    assert len(fig.axes[2].get_lines()) == balance["dynamics.kind"].nunique() + 1
