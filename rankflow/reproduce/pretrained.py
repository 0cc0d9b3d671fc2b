"""Experiment ``pretrained`` (with ``--checkpoint PATH``): the balance fingerprint of
weight decay in a pretrained checkpoint, through ``rankflow.inspect``.

The paper reports that in pretrained Llama 2 and ViT the entries of ``W_QᵀW_Q`` and
``W_KᵀW_K`` nearly coincide. Tested here, per pair (key–query, value–output), against
the null pairing of ``rankflow inspect`` (A of one head with B of the next): the median
relative balance gap of the true pairs is below the null's median, and the median
correlation of the off-diagonal Gram entries above it. A checkpoint trained without
weight decay (or with too few steps for e^{−2ηλt} to act) may fail this: the verdict is
about the checkpoint, not the code.
"""

from __future__ import annotations

import shutil

import numpy as np

from ._common import Context, fmt, verdict

NAME = "pretrained"
PAIR_NAMES = {"qk": "key–query", "vo": "value–output"}


def run_experiment(ctx: Context) -> None:
    from ..inspect import inspect_checkpoint, theory_rows

    out = ctx.out / "runs" / "inspect"
    res = inspect_checkpoint(ctx.checkpoint, out=out, progress=False)
    heads = res.heads
    ctx.table("pretrained_heads", heads)
    for name in ("scatter", "layers"):
        if (out / f"{name}.png").is_file():
            shutil.copyfile(out / f"{name}.png", ctx.figures / f"pretrained_{name}.png")
    t = theory_rows(heads)
    ctx.notes.append(
        f"Checkpoint `{res.meta['name']}`: {res.layout.arch}, {res.layout.n_layers} layers, "
        f"{res.layout.n_heads} heads; summary in `runs/inspect/summary.md`."
    )
    for pair, g in t.groupby("pair"):
        gap, null_gap = g["balance_gap_rel"].median(), g["null_balance_gap_rel"].median()
        corr, null_corr = g["gram_corr_offdiag"].median(), g["null_gram_corr_offdiag"].median()
        ok = bool(gap < null_gap and (not np.isfinite(corr) or corr > null_corr))
        ctx.claim(
            experiment=NAME,
            name=f"pretrained.{pair}_balance",
            source="paper (empirical), T4",
            statement=f"In a model trained with weight decay the {PAIR_NAMES.get(pair, pair)} "
            "factors of each head are balanced: AᵀA ≈ BᵀB.",
            prediction="median relative gap ‖AᵀA − BᵀB‖_F/½(‖AᵀA‖_F+‖BᵀB‖_F) below the null "
            "pairing's; off-diagonal Gram correlation above it",
            measurement=f"over {len(g)} units: median gap {fmt(gap, 3)} (null {fmt(null_gap, 3)}), "
            f"median r_off {fmt(corr, 3)} (null {fmt(null_corr, 3)})",
            tolerance="gap < null gap and r_off > null r_off (medians)",
            verdict=verdict(ok),
            figure="pretrained_scatter.png",
        )
