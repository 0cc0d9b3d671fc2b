"""The balance figure's (:func:`~.core.balance_figure`) predictions and panel labels: each
run's balancing law (T5's leading term for GD, T4's otherwise, scheduled by the table's
``lr_clock``), the norms panel's and the balance panel's legends and titles.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from .common import (
    axis_label,
    dynamics_name,
    lr_clock,
    ok_values,
    run_columns,
)

__all__ = [
    "LEGEND_BELOW",
    "balance_prediction",
    "dynamics_kinds",
    "label_balance_panel",
    "label_norms_panel",
]


def dynamics_kinds(df: pd.DataFrame) -> list[str]:
    """The table's dynamics (``dynamics.kind``), sorted; empty when it does not say."""
    if "dynamics.kind" not in df.columns:
        return []
    return sorted(str(k) for k in df["dynamics.kind"].dropna().unique())


def balance_prediction(df: pd.DataFrame, gap: pd.Series) -> pd.Series:
    """Per run, gap(t₀) times the balancing law of its dynamics (t₀: the run's first finite
    gap): T5's leading term (1 − ηλ)^{2(t − t₀)} for GD, T4's e^{−2λ∫_{t₀}^t η} otherwise
    (and under a learning-rate schedule); kept only where the measurement exists so that
    the median runs over the same runs as the measured curve."""
    runs = run_columns(df)
    rid = df.groupby(runs, sort=False).ngroup() if runs else pd.Series(0, index=df.index)
    finite = pd.DataFrame({"rid": rid, "t": df["t"], "gap": gap})[np.isfinite(gap)]
    start = finite.sort_values("t").groupby("rid").first()  # each run's first finite gap
    t0, gap0 = rid.map(start["t"]), rid.map(start["gap"])
    # ∫η: ηt, or the table's clock of the run's learning-rate schedule (T4 scheduled).
    clock = lr_clock(df, "dynamics.eta")
    lam = df["dynamics.lam"].astype(float)
    exponent = -2.0 * lam * (clock - _at_start(rid, df["t"], t0, clock))
    if "dynamics.kind" in df.columns:
        steps = df["t"].astype(float) - t0
        gd = (df["dynamics.kind"] == "gd") & _unscheduled(df)
        eta = df["dynamics.eta"].astype(float)
        with np.errstate(divide="ignore"):
            t5 = 2.0 * steps * np.log(np.abs(1.0 - eta * lam))
        exponent = exponent.where(~gd, t5)
    return (gap0 * np.exp(exponent)).where(np.isfinite(gap))


def _unscheduled(df: pd.DataFrame) -> pd.Series:
    """Rows whose learning rate is constant (no ``lr_clock`` value)."""
    if "lr_clock" not in df.columns:
        return pd.Series(True, index=df.index)
    return df["lr_clock"].isna()


def _at_start(rid: pd.Series, t: pd.Series, t0: pd.Series, values: pd.Series) -> pd.Series:
    """Each row's run's ``values`` at the run's time ``t0``."""
    at = values[t == t0]
    return rid.map(pd.Series(at.to_numpy(), index=rid[t == t0].to_numpy()).groupby(level=0).first())


# Legends under their panels: inside, the curves of some λ pass under every corner.
LEGEND_BELOW = {
    "fontsize": "small",
    "loc": "upper center",
    "bbox_to_anchor": (0.5, -0.14),
    "ncol": 2,
}


def label_norms_panel(ax_a: Axes, lam_handles: list[Line2D]) -> None:
    """Axis text and legend of panel (a): the factors' norms (T1)."""
    tlab = axis_label("t")
    ax_a.set(xlabel=tlab, ylabel="norm of the factors")
    ax_a.set_title(r"(a) $\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)$ and $\|W\|_*$ against t (T1)",
                   fontsize="medium")  # fmt: skip
    ax_a.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=axis_label("nuclear_norm")),
            Line2D([], [], color="k", ls="--", label=axis_label("l2_penalty")),
        ],
        **LEGEND_BELOW,
    )


def _balance_law(df: pd.DataFrame, kinds: list[str]) -> tuple[str, str]:
    """Panel (b)'s title and the legend text of its dashed line, naming the dynamics."""
    scheduled = not _unscheduled(df).all()
    names = ", ".join(dynamics_name(k) for k in kinds)
    if kinds == ["gd"]:
        if scheduled:
            law = r"T5: gap$(0)\,e^{-2\lambda\sum_k\eta_k}$ (theory, GD's leading term)"
        else:
            law = r"T5: gap$(0)\,(1-\eta\lambda)^{2t}$ (theory, GD's leading term)"
        return r"(b) GD: balancing by $(1-\eta\lambda)^2$ per step (T5)", law
    t4 = (
        r"T4: gap$(0)\,e^{-2\eta\lambda t}$"
        if not scheduled
        else r"T4: gap$(0)\,e^{-2\lambda\int\eta}$"
    )
    if kinds in ([], ["gradient_flow"]):
        who = "gradient flow: " if kinds else ""
        return rf"(b) {who}balancing at rate $2\eta\lambda$ (T4)", t4 + " (theory)"
    if "gd" in kinds:
        law = t4 + r"; GD: T5's $(1-\eta\lambda)^{2t}$ (theory)"
    else:
        law = t4 + " (gradient flow's law, theory for reference)"
    return rf"(b) {names}: balancing beside gradient flow's rate $2\eta\lambda$ (T4)", law


def label_balance_panel(
    ax_b: Axes, lam_handles: list[Line2D], df: pd.DataFrame, gap, kinds: list[str]
) -> None:
    """Log axis on the measured range, text and legend of panel (b): balancing (T4, T5)."""
    tlab = axis_label("t")
    ax_b.set_yscale("log")
    # Theory lines keep decaying below what the measurement can resolve (rounding floor):
    # keep the axis on the measured range.
    measured = np.concatenate([gap.to_numpy(), ok_values(df, "frob_minus_nuc").to_numpy()])
    measured = measured[np.isfinite(measured) & (measured > 0)]
    if measured.size:
        ax_b.set_ylim(bottom=measured.min() / 10, top=measured.max() * 3)
    ax_b.set(xlabel=tlab, ylabel="imbalance (log scale)")
    title, law = _balance_law(df, kinds)
    ax_b.set_title(title, fontsize="medium")
    ax_b.legend(
        handles=lam_handles
        + [
            Line2D([], [], color="k", label=axis_label("balance_gap")),
            Line2D([], [], color="k", ls=":", label=r"$\frac{1}{2}(\|A\|_F^2+\|B\|_F^2)-\|W\|_*$"),
            Line2D([], [], color="0.25", ls="--", label=law),
        ],
        **LEGEND_BELOW,
    )
