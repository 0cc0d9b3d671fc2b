"""Experiment ``rebuttal``: the experiments of the paper's rebuttal, as observations.

Through ``rankflow.attention.run`` (``sims/reproduce/rebuttal_{lambda, vit, lr, dh}.toml``,
and ``attention_ablation.toml`` for the char_lm half of the contrast; --full gives them
the sizes of ``sims/attention/{lambda_table, vit_ablation, lr_control, dh}.toml``):

- char_lm: validation loss and each pair's mean effective rank across λ (the rebuttal's
  Table 1 beside its Fig. 3);
- the weight-decay ablation (decay on all, off attention, off key–query, off
  value–output) on the vision transformer beside char_lm: the rebuttal found that
  removing decay from a ViT's attention did not help, unlike language models;
- the effective-learning-rate control: decay on attention with the value projection's
  learning rate × 1 … 0.01, against decay off on value–output (the rebuttal: lower value
  learning rates did worse);
- the key–query dimension d_h = D/H at fixed D, decay on against off attention (the
  rebuttal's speculation: with larger d_h rank regularisation may help language).

None of these is a prediction of docs/theory.md (AdamW is outside T3–T5, and the rebuttal's
statements are empirical), so every verdict is ``observation``: means ± std over seeds
are reported, and a difference inside the spread is said to be none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import Context, attention_config, run_attention, validate_attention

NAME = "rebuttal"
CONFIGS = ("rebuttal_lambda", "rebuttal_vit", "attention_ablation", "rebuttal_lr", "rebuttal_dh")
CLAIMS: tuple[str, ...] = ()  # observations only


def validate(mode: str) -> None:
    validate_attention(CONFIGS, mode)


def _run(ctx: Context, name: str):
    res = run_attention(ctx, name)
    return res.loss, res.heads


def labels(kind: str, summary: pd.DataFrame) -> list[str]:
    """A short label for every row of an experiment's summary."""
    if kind == "lambda":
        return [f"λ = {x:g}" for x in summary["dynamics.lam"]]
    if kind == "contrast":
        return [f"{t}, {v}" for t, v in zip(summary["task"], summary["variant"], strict=True)]
    if kind == "lr_control":
        return list(summary["setting"])
    return [f"d_h = {d}, {x}" for d, x in zip(summary["d_h"], summary["decay"], strict=True)]


def _pm(r: dict, value: str, digits: int) -> str:
    std = r[f"{value}_std"]
    return f"{r[f'{value}_mean']:.{digits}f}" + (
        "" if not np.isfinite(std) else f" ± {std:.{digits}f}"
    )


def measurement(kind: str, summary: pd.DataFrame) -> str:
    """Per row: the final metric (validation accuracy for the ViT, validation loss for
    char_lm) and both pairs' mean effective rank, mean ± std over seeds; then, per task,
    the largest difference of metric means against the largest std over seeds."""
    rows = summary.assign(label=labels(kind, summary)).to_dict("records")
    parts, spreads = [], {}
    for r in rows:
        v = "val_accuracy" if np.isfinite(r.get("val_accuracy_mean", np.nan)) else "val_loss"
        parts.append(
            f"{r['label']}: {v} {_pm(r, v, 3)}, eff. rank qk {_pm(r, 'rank_qk', 2)}, "
            f"vo {_pm(r, 'rank_vo', 2)}"
        )
        spreads.setdefault((r.get("task", ""), v), []).append((r[f"{v}_mean"], r[f"{v}_std"]))
    notes = []
    for (task, v), ms in spreads.items():
        m, s = np.array(ms, float).T
        worst = float(np.nanmax(s)) if np.isfinite(s).any() else float("nan")
        notes.append(
            f"{task + ' ' if task else ''}{v}: largest difference of means "
            f"{m.max() - m.min():.3f}, largest std over seeds {worst:.3f}"
        )
    return (
        "mean ± std over seeds at the last step. "
        + "; ".join(parts)
        + ". "
        + "; ".join(notes)
        + " (a difference inside the spread is no difference)"
    )


def _observe(ctx: Context, name: str, statement: str, measurement: str, figure: str) -> None:
    ctx.claim(
        experiment=NAME,
        name=f"rebuttal.{name}",
        source="observation (the rebuttal, empirical)",
        statement=statement,
        prediction="none from the theory (AdamW is outside T3–T5)",
        measurement=measurement,
        tolerance="—",
        verdict="observation",
        figure=figure,
    )


def run_experiment(ctx: Context) -> None:
    from ..attention import tables
    from ..plots.rebuttal import experiment_figure

    runs = {name: _run(ctx, name) for name in CONFIGS}
    specs = {
        "lambda": (
            [runs["rebuttal_lambda"]],
            "Table 1: language-model loss across weight-decay values, beside the rank.",
        ),
        "contrast": (
            [runs["rebuttal_vit"], runs["attention_ablation"]],
            "Removing weight decay from a ViT's attention did not help (slightly "
            "hurt), unlike language models, though its rank fell more.",
        ),
        "lr_control": (
            [runs["rebuttal_lr"]],
            "With decay on attention, lowering the value projection's learning "
            "rate (× 0.1, × 0.01) did worse, so the effect of value–output decay "
            "is not only an effective-learning-rate effect.",
        ),
        "dh": (
            [runs["rebuttal_dh"]],
            "With a larger key–query dimension, weight decay's rank regularisation may "
            "become beneficial even for language (speculation).",
        ),
    }
    D = int(attention_config("rebuttal_dh", ctx.mode)["attention"]["D"])
    for kind, (results, statement) in specs.items():
        summary, finals = tables.experiment(kind, results, D=D)
        ctx.table(f"rebuttal_{kind}", summary)
        ctx.table(f"rebuttal_{kind}_runs", finals)
        figure = f"rebuttal_{kind}.png"
        experiment_figure(kind, finals, ctx.figures / figure)
        _observe(ctx, kind, statement, measurement(kind, summary), figure)
