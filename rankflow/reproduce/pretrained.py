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
this: the verdict is about the checkpoint, not the code. Beside the verdict each claim
gives the graded finding (balanced, partially balanced, not detected), the effect's
bootstrap interval and the training reference (:mod:`rankflow.inspect`'s findings; the
``reference`` experiment makes the reference), so that a fail says whether the pairs
are partially balanced or show nothing. :func:`pretrained_claims` is
the pure part (gap matrices in, claims out); :func:`run_experiment` reads the checkpoint.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .. import plots
from ..inspect import (
    ALPHA,
    FP_MAX,
    FP_SEEDS,
    MARGIN,
    N_PERM,
    PERM_SEED,
    FalsePositives,
    Layout,
    PermutationTest,
    effect_interval,
    false_positives,
    grade,
    inspect_checkpoint,
    passes,
    permutation_test,
    reference_text,
    unit_statistics,
)
from ._common import Claim, Context, fmt

NAME = "pretrained"
PAIRS = ("qk", "vo")
# The claims whose verdict can be pass (each has a mutant in tests/).
CLAIMS = tuple(f"pretrained.{pair}_balance" for pair in PAIRS)
PAIR_NAMES = {"qk": "key–query", "vo": "value–output"}
SOURCE = "paper (empirical): balance of pretrained heads; T4"
# ALPHA (1% per claim), MARGIN (effect ≤ 0.5), N_PERM (999 null pairings, seed
# PERM_SEED), FP_SEEDS (100 random initialisations) and FP_MAX (5%): those of
# rankflow inspect's findings (rankflow.inspect._findings), so that the claim's verdict
# and the graded finding read one test.
__all__ = [
    "ALPHA",
    "FP_MAX",
    "FP_SEEDS",
    "MARGIN",
    "false_positives",
    "pretrained_claims",
    "run_experiment",
]

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


def _finding_text(pair: str, test: PermutationTest, interval: tuple[float, float]) -> str:
    """The graded finding, the effect's interval and the training reference, in words."""
    lo, hi = interval
    finding = grade(test)
    words = {
        "balanced": "each head's factors at most half as far apart as those of different "
        "heads, significantly",
        "partially balanced": f"each head's factors significantly (p ≤ {ALPHA}) closer than "
        f"those of different heads, but by less than the margin {MARGIN}",
        "not detected": "the true pairs are not distinguishable from pairings of different heads",
        "too few pairings": f"the test cannot reach p ≤ {ALPHA} at this shape",
    }[finding]
    text = (
        f" Graded finding: **{finding}** ({words}); effect {fmt(test.effect, 3)}, 95% "
        f"bootstrap interval {fmt(lo, 3)}–{fmt(hi, 3)} (heads resampled within layers)."
    )
    return text + " Training reference: " + reference_text(pair, test.statistic, test.effect)


def _rows(pair, tests, verdict, fp, interval=(np.nan, np.nan)) -> list[dict]:
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
                "finding": grade(t),
                "effect_lo": interval[0] if i == 0 else np.nan,
                "effect_hi": interval[1] if i == 0 else np.nan,
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
    n_boot: int = 999,
) -> tuple[list[Claim], pd.DataFrame]:
    """The claims ``pretrained.qk_balance`` and ``pretrained.vo_balance`` and the table
    ``pretrained_permutation``, from ``Inspection.pair_gaps`` ((pair, statistic) →
    (L, U, U) gap matrices, the diagonals the true pairs) of a checkpoint with
    ``layout``; pure (no files). ``false_positives``: per pair, the verdict's measured
    false-positive rate (:func:`false_positives`), stated in the claim; None: not stated.
    Each claim's measurement also gives the graded finding (:func:`rankflow.inspect.grade`),
    the effect's bootstrap interval over ``n_boot`` replicates and the training reference.
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
        interval = effect_interval(pair_gaps[pair, stats[0]], n_boot=n_boot, seed=seed)
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
                measurement=_measurement(pair, tests, layout, why)
                + _finding_text(pair, tests[stats[0]], interval),
                tolerance=_tolerance(fp),
                verdict=verdict,
                figure="pretrained_scatter.png",
                one_sided="true pairs closer than permuted pairings (a one-sided "
                "permutation test); a checkpoint carries no training history, so no rate "
                "can be checked two-sided",
            )
        )
        rows += _rows(pair, tests, verdict, fp, interval)
    return claims, pd.DataFrame(rows)


def run_experiment(ctx: Context) -> None:
    out = ctx.out / "runs" / "inspect"
    res = inspect_checkpoint(
        ctx.checkpoint, out=out, figures=plots.inspection_figures, progress=False
    )
    ctx.table("pretrained_heads", res.heads)
    ctx.table("pretrained_findings", res.findings)
    for name in ("scatter", "layers", "findings"):
        if (out / f"{name}.png").is_file():
            shutil.copyfile(out / f"{name}.png", ctx.figures / f"pretrained_{name}.png")
    lay = res.layout
    ctx.notes.append(
        f"Checkpoint `{res.meta['name']}`: {lay.arch}, {lay.n_layers} layers, "
        f"{lay.n_heads} heads; summary in `runs/inspect/summary.md`; permutation tests in "
        "`tables/pretrained_permutation.csv`; graded findings per pair and layer in "
        "`tables/pretrained_findings.csv` and `figures/pretrained_findings.png`."
    )
    fps = false_positives(lay, len(res.meta["layers"]))
    claims, table = pretrained_claims(res.pair_gaps, lay, false_positives=fps)
    ctx.table("pretrained_permutation", table)
    ctx.claims.extend(claims)
