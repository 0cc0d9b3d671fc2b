"""Figures of ``rankflow attention``: per-head rank and balance, the weight-decay
ablation (tables of ``rankflow.attention``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import (
    axis_label,
    counted,
    draw_median,
    fmt_value,
    mask_log,
    ok_values,
    palette,
    save_figure,
)

__all__ = [
    "attention_ablation_figure",
    "attention_balance_figure",
    "attention_rank_figure",
]

_PAIR_NAMES = {"qk": "key–query", "vo": "value–output"}
_PAIR_PRODUCTS = {"qk": r"$W_Q^h W_K^{h\top}$", "vo": r"$W_V^h W_O^h$"}
_ATTENTION_KINDS = {
    "sgd": "SGD",
    "momentum": "momentum",
    "adamw": "AdamW",
    "gradient_flow": "gradient flow",
}


def _head_labels(df: pd.DataFrame) -> list[tuple[int, int]]:
    return sorted({(int(l), int(h)) for l, h in zip(df["layer"], df["head"], strict=True)})


def _last_step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows at each run's last saved step, ``ok`` only."""
    last = df.groupby("run_id")["t"].transform("max")
    out = df[df["t"] == last]
    return out[out["status"] == "ok"] if "status" in out.columns else out


def attention_rank_figure(heads: pd.DataFrame, out_path: str | Path | None = None) -> Figure:
    """Per-head rank of ``W_Q^h W_K^hᵀ`` and ``W_V^h W_O^h`` against the pair's λ, from
    the ``heads`` table of ``rankflow.attention`` at each run's last step.

    Two columns (key–query, value–output), two rows: the numerical ``rank`` (count of
    singular values above ``save.rank_tol``·σ₁) and the ``effective_rank``. One marker
    per head and run (colour: layer; spread sideways by head), the mean over heads and
    runs as a line. λ is the pair's own ``train.lam_qk`` / ``train.lam_vo``, on a
    categorical axis (0 included). The title says what is plotted and, per pair, the
    change of both means from the smallest to the largest λ (:func:`_rank_change`).
    """
    df = _last_step_rows(heads.reset_index(drop=True))
    layers = sorted(df["layer"].unique())
    H = int(df["head"].max()) + 1
    colors = palette(len(layers), numeric=False)
    fig = Figure(figsize=(12, 8), layout="constrained")
    axes = fig.subplots(2, 2, sharex="col")
    for j, pair in enumerate(("qk", "vo")):
        d = df[df["pair"] == pair]
        lam_col = f"train.lam_{pair}"
        lams = np.sort(d[lam_col].unique())
        pos = {lam: i for i, lam in enumerate(lams)}
        for i, col in enumerate(("rank", "effective_rank")):
            ax = axes[i, j]
            for li, layer in enumerate(layers):
                dl = d[d["layer"] == layer]
                x = dl[lam_col].map(pos).to_numpy(float)
                x = x + 0.5 * ((dl["head"].to_numpy(float) + 0.5) / H - 0.5) * 0.6
                x = x + 0.06 * (li - (len(layers) - 1) / 2)
                ax.plot(
                    x,
                    dl[col].to_numpy(float),
                    "o",
                    ms=4,
                    alpha=0.6,
                    color=colors[li],
                    label=f"layer {layer} (one marker per head and run)",
                )
            mean = d.groupby(lam_col)[col].mean()
            ax.plot(
                [pos[lam] for lam in mean.index],
                mean.to_numpy(),
                "-",
                color="k",
                lw=1.5,
                label="mean over heads and runs",
            )
            ax.set_xticks(range(len(lams)), [f"{lam:g}" for lam in lams])
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
            if i == 1:
                ax.set_xlabel(rf"weight decay $\lambda_{{{pair}}}$ of the pair")
        tol = d["save.rank_tol"].iloc[0] if "save.rank_tol" in d.columns else None
        rank_label = "numerical rank" + (rf" ($\sigma_i > {tol:g}\,\sigma_1$)" if tol else "")
        axes[0, j].set_ylabel(rank_label)
        axes[1, j].set_ylabel("effective rank (Roy & Vetterli)")
        axes[0, j].set_title(
            f"({'ab'[j]}) {_PAIR_NAMES[pair]} {_PAIR_PRODUCTS[pair]} of each head",
            fontsize="medium",
        )
    axes[0, 0].legend(fontsize="small", loc="lower left")
    changes = [_rank_change(df[df["pair"] == pair], pair) for pair in ("qk", "vo")]
    title = "Numerical and effective rank of each head's products against λ (final step)"
    fig.suptitle("\n".join([title, *changes, _attention_setting(df) + _left_out(heads)]))
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _left_out(heads: pd.DataFrame) -> str:
    """The runs not ``ok`` at their last step, which the rank panels leave out: "2 runs
    diverged before the last step (λ_qk = 10 and λ_vo = 10): left out" (empty when none)."""
    if "status" not in heads.columns:
        return ""
    last = heads[heads["t"] == heads.groupby("run_id")["t"].transform("max")]
    bad = last[last["status"] != "ok"].drop_duplicates("run_id")
    if not len(bad):
        return ""
    lams = " and ".join(
        f"λ_{pair} = " + ", ".join(f"{v:g}" for v in np.unique(bad[f"train.lam_{pair}"]))
        for pair in ("qk", "vo")
    )
    how = "/".join(sorted(set(bad["status"].astype(str))))
    return f"\n{counted(len(bad), 'run')} {how} before the last step ({lams}): left out"


def _rank_change(d: pd.DataFrame, pair: str) -> str:
    """The measured change the rank panels of ``pair`` show: the mean (over heads and
    runs, the panels' black line) of ``rank`` and ``effective_rank`` at the smallest and
    the largest λ of the pair, e.g. "key–query: numerical rank 8 → 8, effective rank
    7.9 → 5.1 from λ = 0 to 0.1"."""
    lam_col = f"train.lam_{pair}"
    mean = d.groupby(lam_col)[["rank", "effective_rank"]].mean().sort_index()
    if len(mean) < 2:
        return f"{_PAIR_NAMES[pair]}: one λ only"
    lo, hi = mean.iloc[0], mean.iloc[-1]
    return (
        f"{_PAIR_NAMES[pair]}: numerical rank {lo['rank']:.3g} → {hi['rank']:.3g}, "
        f"effective rank {lo['effective_rank']:.3g} → {hi['effective_rank']:.3g} "
        f"from λ = {mean.index[0]:g} to {mean.index[-1]:g} (means over heads and runs)"
    )


def _attention_setting(df: pd.DataFrame) -> str:
    parts = []
    for col, name in (
        ("task.kind", "task"),
        ("dynamics.kind", "dynamics"),
        ("dynamics.eta", "η"),
        ("train.decay", "decayed groups"),
    ):
        if col in df.columns and df[col].nunique() == 1:
            v = df[col].iloc[0]
            if col == "dynamics.kind":
                v = _ATTENTION_KINDS.get(v, v)
            parts.append(f"{name} = {fmt_value(v)}")
    if "t" in df.columns:
        parts.append(f"{int(df['t'].max())} steps")
    if "seed" in df.columns:
        seeds = df["seed"].nunique()
        parts.append(f"{seeds} seed{'s' if seeds > 1 else ''}")
    return ", ".join(parts)


def attention_balance_figure(
    tables: Sequence[pd.DataFrame], out_path: str | Path | None = None
) -> Figure:
    """Per-head balance gap ``‖AᵀA − BᵀB‖_F`` against the step, one column per
    ``heads`` table (one dynamics each: SGD, AdamW, gradient flow, …), one row per pair.

    Solid: each head's gap (median over runs; colour: head, one legend for the
    figure). Dashed, from each head's gap at step 0: ``(1 − ηλ)^{2k}`` for SGD and
    momentum (docs/theory.md, T5, leading term; the O(η²) term and minibatch noise make the
    measured gap level off), ``e^{−2ηλt}`` for gradient flow (T4, exact); for AdamW,
    dotted, ``(1 − ηλ)^{2k}`` of its decoupled decay alone (no theorem). λ is the pair's
    own λ. Under a learning-rate schedule (the table's ``lr_clock``) the lines are
    ``e^{−2λ∫η}`` (T4, exact) and ``e^{−2λΣη_k}`` (T5's leading term to O(η²λ²)).
    """
    tables = [t.reset_index(drop=True) for t in tables]
    fig = Figure(figsize=(5.2 * len(tables), 9.0), layout="constrained")
    head_handles: dict[str, Line2D] = {}
    axes = np.atleast_2d(fig.subplots(2, len(tables), squeeze=False))
    for j, df in enumerate(tables):
        kind = str(df["dynamics.kind"].iloc[0])
        eta = float(df["dynamics.eta"].iloc[0])
        labels = _head_labels(df)
        clock = _clock_by_t(df)
        colors = palette(len(labels), numeric=True)
        for i, pair in enumerate(("qk", "vo")):
            ax = axes[i, j]
            d = df[df["pair"] == pair]
            lam = float(d[f"train.lam_{pair}"].iloc[0])
            measured = []
            for (layer, head), color in zip(labels, colors, strict=True):
                dh = d[(d["layer"] == layer) & (d["head"] == head)]
                line = draw_median(
                    ax,
                    dh,
                    "t",
                    ok_values(dh, "balance_gap"),
                    log=True,
                    band=False,
                    color=color,
                    lw=1.4,
                    label=f"layer {layer}, head {head}",
                )
                if line is None:
                    continue
                head_handles.setdefault(line.get_label(), line)
                t, gap = line.get_data()
                measured.append(np.asarray(gap, float))
                t = np.asarray(t, float)
                theory = gap[0] * _balance_law(kind, eta, lam, t, clock)
                ls = ":" if kind == "adamw" else "--"
                # Theory on top, thin and dark: where it is exact it hides in the line.
                ax.plot(t, mask_log(theory, True), ls, color="0.1", lw=0.9, zorder=3)
            if clock is not None:
                law = _scheduled_law(kind, df)
            elif kind == "gradient_flow":
                law = r"T4: gap$(0)\,e^{-2\eta\lambda t}$ (theory, exact)"
            elif kind == "adamw":
                law = r"gap$(0)\,(1-\eta\lambda)^{2k}$: the decoupled decay alone (no theorem)"
            else:
                law = r"T5: gap$(0)\,(1-\eta\lambda)^{2k}$ (theory, leading term)"
            theory_handle = Line2D([], [], color="0.1", ls=":" if kind == "adamw" else "--")
            ax.legend([theory_handle], [law], fontsize="small", loc="lower left")
            ax.set_yscale("log")
            vals = np.concatenate(measured) if measured else np.array([])
            vals = vals[np.isfinite(vals) & (vals > 0)]
            if vals.size:
                ax.set_ylim(bottom=vals.min() / 10, top=vals.max() * 3)
            ax.set_xlabel(axis_label("t"))
            ax.set_ylabel(r"balance gap $\|A^\top A-B^\top B\|_F$ (log scale)")
            ax.grid(True, which="major", alpha=0.3)
            name = _ATTENTION_KINDS.get(kind, kind)
            ax.set_title(
                f"{name}: {_PAIR_NAMES[pair]} {_PAIR_PRODUCTS[pair]}\nη = {eta:g}, λ = {lam:g}",
                fontsize="medium",
            )
    setting = _attention_setting(
        pd.concat([t.drop(columns=["dynamics.kind", "dynamics.eta", "t"]) for t in tables])
    )
    fig.suptitle(
        "Per-head balance gap of both factor pairs in a transformer (solid: measured, "
        "one line per head; dark: theory)\n" + setting
    )
    fig.legend(
        list(head_handles.values()),
        list(head_handles),
        loc="outside lower center",
        ncol=min(len(head_handles), 8),
        fontsize="small",
        title="measured gap of each head (median over runs)",
        title_fontsize="small",
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def attention_ablation_figure(
    loss: pd.DataFrame,
    out_path: str | Path | None = None,
    *,
    baseline: float | None = None,
) -> Figure:
    """The weight-decay ablation of a ``loss`` table (``rankflow.attention``) whose rows
    carry their ``variant`` (``rankflow.attention.tables.by_variant``: decay on all, off
    attention, off key–query, off value–output), drawn in the order of the rows:

    (a) validation loss against the step for each variant: mean over seeds, band ± one
        standard deviation; dashed, ``baseline`` when given (char_lm: the unigram
        entropy of the validation split, the loss of a context-free prediction);
    (b) the final validation loss of each variant: every seed (dots) and mean ± std.
    """
    if "variant" not in loss.columns:
        raise ValueError("loss: needs a 'variant' column (rankflow.attention.tables.by_variant)")
    df = loss.reset_index(drop=True)
    df = df.assign(val=ok_values(df, "val_loss"))
    names = list(dict.fromkeys(df["variant"]))
    colors = palette(len(names), numeric=False)
    fig = Figure(figsize=(14, 5.2), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2, width_ratios=(1.6, 1))
    for name, color in zip(names, colors, strict=True):
        d = df[df["variant"] == name]
        g = d.groupby("t")["val"]
        t = g.mean().index.to_numpy(float)
        mean, std = g.mean().to_numpy(), g.std(ddof=1).fillna(0).to_numpy()
        label = f"{name} ({counted(d['seed'].nunique(), 'seed')})"
        ax_a.plot(t, mean, color=color, lw=1.6, label=label)
        ax_a.fill_between(t, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
    ax_a.set(xlabel=axis_label("t"), ylabel="validation loss (cross-entropy, nats per character)")
    ax_a.set_title("(a) validation loss, mean ± std over seeds", fontsize="medium")
    last = df.groupby("run_id")["t"].transform("max")
    final = df[(df["t"] == last) & np.isfinite(df["val"])]
    top = None
    if baseline is not None:
        ax_a.axhline(
            baseline,
            ls="--",
            color="0.3",
            lw=1.2,
            label=f"unigram entropy of the validation split ({baseline:.2f}): no context",
        )
        top = baseline + 0.5
    # The first steps (from log V) are cut off: the variants separate later.
    tail = df[df["t"] >= df["t"].max() / 4]["val"]
    if np.isfinite(tail).any():
        lo, hi = float(np.nanmin(tail)), float(np.nanmax(tail))
        ax_a.set_ylim(lo - 0.1 * (hi - lo), max(hi, top or hi))
    ax_a.legend(fontsize="small")
    ax_a.grid(True, alpha=0.3)
    for i, (name, color) in enumerate(zip(names, colors, strict=True)):
        v = final.loc[final["variant"] == name, "val"].to_numpy(float)
        ax_b.plot(
            np.full(v.size, i) + np.linspace(-0.08, 0.08, v.size), v, "o", color=color, alpha=0.6
        )
        if v.size:
            err = v.std(ddof=1) if v.size > 1 else 0.0
            ax_b.errorbar(i + 0.22, v.mean(), yerr=err, fmt="s", color="k", capsize=4, ms=5)
    wrapped = [n.replace(" (", "\n(").replace(" only", "\nonly") for n in names]
    ax_b.set_xticks(range(len(names)), wrapped, fontsize="small")
    ax_b.set_xlim(-0.5, len(names) - 0.3)
    ax_b.set_ylabel(f"validation loss at step {int(df['t'].max())} (nats per character)")
    ax_b.set_title(
        "(b) final validation loss: seeds (dots), mean ± std (squares)", fontsize="medium"
    )
    ax_b.grid(True, axis="y", alpha=0.3)
    fig.suptitle(
        "Weight decay in attention and language-model loss (char_lm)\n"
        + _attention_setting(df)
        + _other_groups(df)
    )
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


def _other_groups(df: pd.DataFrame) -> str:
    """ "; other groups: λ_mlp = 0.1, …": the decay of the groups held fixed in a table."""
    others = [
        f"λ_{g} = {df[f'train.lam_{g}'].iloc[0]:g}"
        for g in ("mlp", "embed", "norm")
        if f"train.lam_{g}" in df.columns and df[f"train.lam_{g}"].nunique() == 1
    ]
    return f"; other groups: {', '.join(others)}" if others else ""


def _clock_by_t(df: pd.DataFrame):
    """``t ↦ lr_clock`` of a table with a learning-rate schedule (None: constant)."""
    if "lr_clock" not in df.columns or df["lr_clock"].isna().all():
        return None
    return df.groupby("t")["lr_clock"].first()


def _balance_law(kind: str, eta: float, lam: float, t: np.ndarray, clock) -> np.ndarray:
    """The balance gap over its value at ``t[0]``: T4's ``e^{−2ηλt}`` for gradient flow,
    T5's leading term ``(1 − ηλ)^{2k}`` for the optimizers; under a schedule
    ``e^{−2λ·lr_clock}`` (exact for the flow; for the optimizers
    ``Π(1 − η_kλ)²`` to O(η²λ²) per step)."""
    if clock is not None:
        c = clock.reindex(t).to_numpy(float)
        return np.exp(-2 * lam * (c - c[0]))
    if kind == "gradient_flow":
        return np.exp(-2 * eta * lam * (t - t[0]))
    return (1 - eta * lam) ** (2 * (t - t[0]))


def _scheduled_law(kind: str, df: pd.DataFrame) -> str:
    row = df.iloc[0]
    name = (
        f"{row['dynamics.schedule']}, warmup {row['dynamics.warmup']:g}, "
        f"final {row['dynamics.final_fraction']:g}"
    )
    if kind == "gradient_flow":
        return rf"T4: gap$(0)\,e^{{-2\lambda\int\eta}}$ ({name}; exact)"
    return rf"gap$(0)\,e^{{-2\lambda\sum_k\eta_k}}$ ({name}; T5's leading term)"
