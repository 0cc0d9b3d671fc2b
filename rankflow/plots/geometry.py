"""The figure of ``rankflow reproduce``'s ``geometry`` experiment (docs/theory.md, T14):
bounded updates with decoupled decay.

Built from tables only (the experiment's ``geometry_norms`` and ``geometry_balance``
tables); time in optimizer steps; theory dashed beside measurements.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from .common import finish_figure, positive

__all__ = ["geometry_figure"]

# kind → its label; its colour C0, C1, … in this order
KINDS = {"gd": "GD", "sign_gd": "sign descent", "lion": "Lion", "muon": "Muon"}
FACTOR_STYLE = {"A": "-", "B": ":"}


def _kind(kind: str, i: int) -> tuple[str, str]:
    order = list(KINDS)
    return KINDS.get(kind, kind), f"C{order.index(kind) if kind in order else len(order) + i}"


def _norm_panel(ax, norms: pd.DataFrame, kinds, column: str) -> None:
    for i, (kind, g) in enumerate(norms[norms["dynamics.kind"].isin(kinds)].groupby(
            "dynamics.kind", sort=False)):  # fmt: skip
        label, color = _kind(kind, i)
        for factor, f in g.groupby("factor"):
            f = f.sort_values("t")
            ax.plot(f["t"], f[column] * f["dynamics.lam"], color=color,
                    ls=FACTOR_STYLE.get(factor, "--"), lw=1.5 if kind != "lion" else 3,
                    alpha=0.8 if kind != "lion" else 0.4,
                    label=f"{label}, {factor}")  # fmt: skip


def geometry_figure(
    norms: pd.DataFrame, balance: pd.DataFrame, rho_muon: float, out_path: str | Path | None = None
) -> Figure:
    """(a) sign descent and Lion: ``λ·max|X_k|`` of each factor against the step, with
    ρ = 1 dashed. (b) Muon: ``λ‖X_k‖₂`` with ρ = ``rho_muon`` and 1 dashed. (c) every
    optimizer's balance gap ``‖D_k‖_F/‖D_0‖_F`` beside ``(1 − ηλ)^{2k}``."""
    fig = Figure(figsize=(16, 5), layout="constrained")
    axes = fig.subplots(1, 3)
    ax = axes[0]
    _norm_panel(ax, norms, ("sign_gd", "lion"), "max_norm")
    ax.axhline(1.0, color="k", ls="--", lw=1, label="T14: ρ/λ, ρ = 1")
    ax.set(xlabel="step k", ylabel="λ · max |X_k|  (X = A, B)")
    ax.set_title("(a) sign descent, Lion: max norm against ρ/λ", fontsize="medium")
    ax.legend(fontsize="small")
    ax = axes[1]
    _norm_panel(ax, norms, ("muon",), "spectral_norm")
    ax.axhline(rho_muon, color="k", ls="--", lw=1, label=f"T14: ρ/λ, ρ = {rho_muon:.4f}")
    ax.axhline(1.0, color="0.5", ls=":", lw=1, label="1/λ (ρ = 1)")
    ax.set(xlabel="step k", ylabel="λ · ‖X_k‖₂  (X = A, B)")
    ax.set_title("(b) Muon: spectral norm against ρ/λ", fontsize="medium")
    ax.legend(fontsize="small")
    ax = axes[2]
    for i, (kind, g) in enumerate(balance.groupby("dynamics.kind", sort=False)):
        label, color = _kind(kind, i)
        g = g.sort_values("t")
        ax.plot(g["t"], positive(g["gap_ratio"]), color=color,
                lw=1.5 if kind != "lion" else 3, alpha=0.8 if kind != "lion" else 0.4,
                label=label)  # fmt: skip
    g = balance.sort_values("t").drop_duplicates("t")
    ax.plot(g["t"], g["decay"], "k--", lw=1, label="(1 − ηλ)²ᵏ")
    ax.set(yscale="log", xlabel="step k", ylabel="‖D_k‖_F / ‖D_0‖_F")
    ax.set_title("(c) balance gap against (1 − ηλ)²ᵏ", fontsize="medium")
    ax.legend(fontsize="small")
    return finish_figure(
        fig, axes, "T14: decoupled decay bounds the factors at ρ/λ in the update's norm", out_path
    )
