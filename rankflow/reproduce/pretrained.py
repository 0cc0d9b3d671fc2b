"""Experiment ``pretrained`` (with ``--checkpoint PATH``): the balance fingerprint of
weight decay in a pretrained checkpoint, through ``rankflow.inspect``.

The paper reports that in pretrained Llama 2 and ViT the entries of ``W_QᵀW_Q`` and
``W_KᵀW_K`` nearly coincide; docs/theory.md, T4 predicts it for each head (or grouped-query
group) of a model trained long enough with weight decay. Tested here per pair
(key–query, value–output) by a layer-stratified permutation test
(:func:`rankflow.inspect.permutation_test`): are the true pairs' Grams closer than those
of one unit's A with another unit's B of the same layer, by a margin? For rotary models
the key–query statistic is the balance of the rotary-block energies, the only part the
theory predicts. The verdict's false-positive rate is measured for the checkpoint's own
shapes on random-initialised checkpoints and stated with every claim.

A checkpoint trained without weight decay (or too briefly for e^{−2ηλt} to act) may fail
this: the verdict is about the checkpoint, not the code. :func:`pretrained_claims` is
the pure part (gap matrices in, claims out); :func:`run_experiment` reads the checkpoint.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .. import plots
from ..inspect import (
    FalsePositives,
    Layout,
    PermutationTest,
    false_positive_rate,
    inspect_checkpoint,
    passes,
    permutation_test,
    unit_shapes,
    unit_statistics,
)
from ._common import Claim, Context, fmt

NAME = "pretrained"
PAIRS = ("qk", "vo")
# The claims whose verdict can be pass (each has a mutant in tests/).
CLAIMS = tuple(f"pretrained.{pair}_balance" for pair in PAIRS)
PAIR_NAMES = {"qk": "key–query", "vo": "value–output"}
SOURCE = "paper (empirical): balance of pretrained heads; T4"

# Significance level of each claim: the conventional 1%; with the two claims of one
# checkpoint, at most 2% family-wise when nothing is balanced.
ALPHA = 0.01
# Effect margin: the true pairs' median gap at most half the null pairings'. Unrelated
# factors of the same sizes (and a random initialisation) give effect ≈ 1; under T4 the
# gap shrinks as e^{−2ηλt}, so half is one half-life, ηλt = ln 2 / 2, far less than a
# training run with weight decay provides (η = 3e-4, λ = 0.1 over 5·10⁵ steps: ηλt = 15).
MARGIN = 0.5
# Null pairings per test (seeded; all of them when there are at most N_PERM + 1):
# smallest p 1/(N_PERM + 1) = 0.001, ten times below ALPHA.
N_PERM = 999
PERM_SEED = 0
# Random-initialised checkpoints per pair on which the verdict's false-positive rate is
# measured, and the largest rate at which the verdict is still reported as a test.
FP_SEEDS = 100
FP_MAX = 0.05

STAT_TEXT = {
    "balance_gap_rel": "relative Gram gap ‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + ‖BᵀB‖_F)",
    "rotary_gap_rel": "rotary-block energy gap ‖e_A − e_B‖ / ½(‖e_A‖ + ‖e_B‖), "
    "e_j = ‖X[:, j]‖² + ‖X[:, j + rot/2]‖²",
    "nonrotary_gap_rel": "Gram gap of the non-rotary dimensions",
}
STAT_SHORT = {
    "balance_gap_rel": "relative Gram gap",
    "rotary_gap_rel": "rotary-block energy gap",
    "nonrotary_gap_rel": "non-rotary Gram gap",
}


def false_positives(
    layout: Layout, n_layers: int, *, n_seeds: int = FP_SEEDS, n_perm: int = N_PERM
) -> dict[str, FalsePositives]:
    """Per pair, how often the verdict passes on ``n_seeds`` random-initialised
    checkpoints with ``layout``'s units over ``n_layers`` layers (weights iid N(0, s²);
    Grams drawn from their exact Wishart law, see
    :func:`rankflow.inspect.false_positive_rate`)."""
    shapes = unit_shapes(layout, n_layers)
    return {
        pair: false_positive_rate(
            shapes[pair],
            _statistics(pair, layout)[0],
            alpha=ALPHA,
            margin=MARGIN,
            n_seeds=n_seeds,
            n_perm=n_perm,
            seed=PERM_SEED,
        )
        for pair in PAIRS
    }


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _statistics(pair: str, layout: Layout) -> tuple[str, ...]:
    rot = layout.rotary_dim if pair == "qk" else 0
    return unit_statistics(pair, rot, layout.head_dim)


def _decide(pair: str, test: PermutationTest, fp: FalsePositives | None, layout: Layout):
    """The verdict and, for an observation, why the claim is not tested."""
    if pair == "qk" and layout.qk_norm:
        return "observation", "q and k are normalised per head (qk-norm): not a product"
    if test.p_min > ALPHA:
        n = test.n_pairings
        count = f"{n}" if n is not None else f"10^{test.log10_pairings:.1f}"
        return "observation", (
            f"too few pairings to test: {count} distinct layer-stratified pairings "
            f"({_n(test.n_layers, 'layer')} × {test.n_units}! each), smallest attainable "
            f"p = {fmt(test.p_min, 3)} > α = {ALPHA}"
        )
    if fp is not None and fp.rate > FP_MAX:
        return "observation", (
            f"false-positive rate {fp.rate:.0%} on random initialisations exceeds "
            f"{FP_MAX:.0%}: the verdict is not trusted at this shape"
        )
    if not np.isfinite(test.effect):
        return "observation", "no effect size: the null pairings have zero gap"
    return ("pass" if passes(test, ALPHA, MARGIN) else "fail"), ""


def _test_text(test: PermutationTest) -> str:
    how = (
        f"all {_n(test.n_perm, 'other pairing')}"
        if test.exact
        else f"{test.n_perm} of 10^{test.log10_pairings:.1f} pairings drawn, seed {PERM_SEED}"
    )
    return (
        f"median {fmt(test.observed, 3)} against {fmt(test.null_median, 3)} with B permuted "
        f"within layers (effect {fmt(test.effect, 3)}), p = {fmt(test.p, 3)} ({how})"
    )


def _measurement(pair, tests, layout, why) -> str:
    stats = list(tests)
    main = tests[stats[0]]
    unit = "groups" if layout.group_size > 1 else "heads"
    text = f"Over {_n(main.n_layers, 'layer')} × {main.n_units} {unit}, {STAT_SHORT[stats[0]]}: "
    text += _test_text(main)
    for stat in stats[1:]:
        what = (
            f"Gram gap of the non-rotary dimensions {layout.rotary_dim}..{layout.head_dim}"
            if stat == "nonrotary_gap_rel"
            else "Full Gram gap (not predicted under rotary)"
        )
        text += f". {what}: {_test_text(tests[stat])}"
    return text + (f". Not tested: {why}." if why else ".")


def _tolerance(fp: FalsePositives | None) -> str:
    text = (
        f"pass iff p ≤ α = {ALPHA} and effect ≤ {MARGIN} (α: the conventional 1%, per "
        "claim; margin: true gap at most half the null's, one half-life of T4's e^{−2ηλt}; "
        "module constants "
        "of rankflow.reproduce.pretrained). Permutation test: B permuted within each layer, "
        "statistic the median gap over units (ties by the mean), "
        f"p = (1 + #null ≤ observed)/(1 + n). "
    )
    if fp is None:
        return text + "False-positive rate: not measured in this call."
    if fp.n_seeds == 0:
        return text + "False-positive rate: 0 (the test cannot reach α at this shape)."
    return text + (
        f"False-positive rate on {fp.n_seeds} random-initialised checkpoints of this shape "
        f"(weights iid N(0, s²), Grams drawn exactly by the Bartlett decomposition, "
        f"{fp.n_perm} pairings each): {fp.n_pass}/{fp.n_seeds} = {fp.rate:.0%} "
        f"(required ≤ {FP_MAX:.0%}; p ≤ α alone in {fp.n_significant}/{fp.n_seeds})."
    )


def _rows(pair, tests, verdict, fp) -> list[dict]:
    rows = []
    for i, (stat, t) in enumerate(tests.items()):
        rows.append(
            {
                "pair": pair,
                "statistic": stat,
                "role": "verdict" if i == 0 else "reported",
                "n_layers": t.n_layers,
                "n_units": t.n_units,
                "log10_pairings": t.log10_pairings,
                "exact": t.exact,
                "n_perm": t.n_perm,
                "seed": PERM_SEED,
                "observed_median": t.observed,
                "null_median": t.null_median,
                "effect": t.effect,
                "p": t.p,
                "p_min": t.p_min,
                "alpha": ALPHA,
                "margin": MARGIN,
                "verdict": verdict if i == 0 else "",
                # the false-positive rate belongs to the verdict's statistic only
                "fp_seeds": fp.n_seeds if fp and i == 0 else 0,
                "fp_pass": fp.n_pass if fp and i == 0 else np.nan,
                "fp_rate": fp.rate if fp and i == 0 else np.nan,
                "fp_significant": fp.n_significant if fp and i == 0 else np.nan,
                "fp_n_perm": fp.n_perm if fp and i == 0 else 0,
            }
        )
    return rows


def pretrained_claims(
    pair_gaps: Mapping[tuple[str, str], np.ndarray],
    layout: Layout,
    *,
    false_positives: Mapping[str, FalsePositives] | None = None,
    n_perm: int = N_PERM,
    seed: int = PERM_SEED,
) -> tuple[list[Claim], pd.DataFrame]:
    """The claims ``pretrained.qk_balance`` and ``pretrained.vo_balance`` and the table
    ``pretrained_permutation``, from ``Inspection.pair_gaps`` ((pair, statistic) →
    (L, U, U) gap matrices, the diagonals the true pairs) of a checkpoint with
    ``layout``; pure (no files). ``false_positives``: per pair, the verdict's measured
    false-positive rate (:func:`false_positives`), stated in the claim; None: not stated.
    """
    claims, rows = [], []
    for pair in PAIRS:
        stats = [s for s in _statistics(pair, layout) if (pair, s) in pair_gaps]
        if not stats:
            raise ValueError(f"pretrained_claims: no {pair} gap matrices in pair_gaps")
        tests = {
            s: permutation_test(pair_gaps[pair, s], n_perm=n_perm, seed=seed, statistic=s)
            for s in stats
        }
        fp = None if false_positives is None else false_positives.get(pair)
        verdict, why = _decide(pair, tests[stats[0]], fp, layout)
        claims.append(
            Claim(
                experiment=NAME,
                name=f"pretrained.{pair}_balance",
                source=SOURCE,
                statement=f"In a model trained with weight decay the {PAIR_NAMES[pair]} "
                "factors of each head (GQA: group) are balanced, AᵀA ≈ BᵀB"
                + (", per rotary block" if stats[0] == "rotary_gap_rel" else "")
                + ": closer than those of different heads of the same layer.",
                prediction=f"median {STAT_TEXT[stats[0]]} of the true pairs significantly "
                "(p ≤ α) and clearly (effect ≤ margin) below that of pairings with B "
                "permuted within each layer",
                measurement=_measurement(pair, tests, layout, why),
                tolerance=_tolerance(fp),
                verdict=verdict,
                figure="pretrained_scatter.png",
            )
        )
        rows += _rows(pair, tests, verdict, fp)
    return claims, pd.DataFrame(rows)


def run_experiment(ctx: Context) -> None:
    out = ctx.out / "runs" / "inspect"
    res = inspect_checkpoint(
        ctx.checkpoint, out=out, figures=plots.inspection_figures, progress=False
    )
    ctx.table("pretrained_heads", res.heads)
    for name in ("scatter", "layers"):
        if (out / f"{name}.png").is_file():
            shutil.copyfile(out / f"{name}.png", ctx.figures / f"pretrained_{name}.png")
    lay = res.layout
    ctx.notes.append(
        f"Checkpoint `{res.meta['name']}`: {lay.arch}, {lay.n_layers} layers, "
        f"{lay.n_heads} heads; summary in `runs/inspect/summary.md`; permutation tests in "
        "`tables/pretrained_permutation.csv`."
    )
    fps = false_positives(lay, len(res.meta["layers"]))
    claims, table = pretrained_claims(res.pair_gaps, lay, false_positives=fps)
    ctx.table("pretrained_permutation", table)
    ctx.claims.extend(claims)
