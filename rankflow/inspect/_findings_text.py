"""The text of graded findings (:func:`~._findings.balance_findings`): per pair the
verdict, what it means, the effect with its interval, the false-positive rate and the
Gram-correlation test, and a legend of the settings, for ``summary.md``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._findings import ALPHA, LEVEL, MARGIN, N_BOOT, N_PERM, PAIR_NAMES, PERM_SEED

__all__ = ["findings_text"]


def _fmt(x: float, digits: int = 3) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


def _meaning(row: pd.Series) -> str:
    finding = row["finding"]
    effect = f"effect {_fmt(row['effect'])} [{_fmt(row['effect_lo'])}, {_fmt(row['effect_hi'])}]"
    if finding == "balanced":
        return (
            f"{effect}: each head's factors are at most half as far apart as those of "
            "different heads, and significantly so: the fingerprint the paper predicts"
        )
    if finding == "partially balanced":
        return (
            f"{effect}: each head's factors are closer to balance than those of different "
            f"heads (p ≤ {ALPHA}), but by less than the margin {MARGIN}"
        )
    if finding == "not detected":
        return (
            f"{effect}: true pairs are not distinguishable from pairings of different "
            "heads at this significance level"
        )
    return f"{effect}: too few heads per layer for the test to reach p ≤ {ALPHA}"


def findings_text(findings: pd.DataFrame) -> str:
    """The findings as a markdown section: per pair the finding, effect with interval,
    p, the false-positive rates, what it means in words and the training reference; a
    table of the per-layer findings.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import Layout, balance_findings, findings_text
        >>> lay = Layout("gpt2", "gpt2", "h.", 2, 20, 5, 5, 4, 0, False, "doc")
        >>> gaps = np.ones((2, 5, 5)) - 0.2 * np.eye(5)  # effect 0.8
        >>> pair_gaps = {("qk", "balance_gap_rel"): gaps}
        >>> text = findings_text(balance_findings(pair_gaps, lay, fp_seeds=0, n_boot=99))
        >>> print(text.splitlines()[4][:62])
        - **key–query: partially balanced**; p = 0.001 over 2 layers ×
    """
    if findings.empty:
        return ""
    lines = ["## Balance findings", ""]
    lines.append(
        f"Layer-stratified permutation test (B permuted within layers, {N_PERM} pairings "
        f"drawn, seed {PERM_SEED}, or all when fewer); effect = the true pairs' median gap "
        "over the null pairings' (1: chance, 0: exact balance), with its "
        f"{LEVEL:.0%} bootstrap interval (heads resampled within layers, {N_BOOT} "
        f"replicates); finding: balanced (p ≤ {ALPHA}, effect ≤ {MARGIN}), partially "
        f"balanced (p ≤ {ALPHA}), not detected (p > {ALPHA})."
    )
    lines.append("")
    for _, row in findings[findings["scope"] == "all"].iterrows():
        name = PAIR_NAMES[row["pair"]]
        fp = ""
        if row["fp_seeds"]:
            fp = (
                f" On {row['fp_seeds']} random initialisations of these shapes p ≤ {ALPHA} "
                f"in {row['fp_detect_rate']:.0%} and balanced in {row['fp_pass_rate']:.0%}."
            )
        note = f" ({row['note']})" if row["note"] else ""
        lines.append(
            f"- **{name}: {row['finding']}**{note}; p = {_fmt(row['p'])} over "
            f"{row['n_layers']} layers × {row['n_units']} units; {_meaning(row)}.{fp}"
        )
        if row["reference"]:
            lines.append(f"  Training reference: {row['reference']}")
        if "corr_finding" in row and row["corr_finding"] != "not computed":
            lines.append(f"  {_corr_sentence(row)}")
    per_layer = findings[findings["scope"] == "layer"]
    if len(per_layer):
        lines += ["", _corr_legend(per_layer)] if "corr_p" in per_layer else []
        head = f"{'layer':>5}  {'pair':<12} {'effect [95%]':>22} {'p':>7}  {'finding':<18}"
        head += f" {'r_off [95%]':>20} {'null 95%':>16} {'p_Holm':>7}  r_off finding"
        lines += ["", "```", head]
        for _, row in per_layer.iterrows():
            eff = f"{_fmt(row['effect'])} [{_fmt(row['effect_lo'])}, {_fmt(row['effect_hi'])}]"
            lines.append(
                f"{row['layer']:>5}  {PAIR_NAMES[row['pair']]:<12} {eff:>22} "
                f"{_fmt(row['p']):>7}  {row['finding']:<18} {_corr_cells(row)}"
            )
        lines.append("```")
    return "\n".join(lines) + "\n"


def _r(x: float, digits: int = 2) -> str:
    """A correlation in fixed point."""
    return "nan" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def _corr_cells(row: pd.Series) -> str:
    """The per-layer table's Gram-correlation cells: r_off [95%], null range, p_Holm."""
    if row.get("corr_finding", "not computed") == "not computed":
        return f"{'':>20} {'':>16} {'':>7}  not computed"
    r = f"{_r(row['corr_observed'])} [{_r(row['corr_lo'])}, {_r(row['corr_hi'])}]"
    null = f"[{_r(row['corr_null_lo'], 3)}, {_r(row['corr_null_hi'], 3)}]"
    return f"{r:>20} {null:>16} {_fmt(row['corr_p_holm'], 2):>7}  {row['corr_finding']}"


def _corr_sentence(row: pd.Series) -> str:
    """What the Gram-correlation test of one pair over all layers measured, in words."""
    name = PAIR_NAMES[row["pair"]]
    units = row["n_layers"] * row["n_units"]
    n = int(row["corr_n_perm"])
    floor = ", the smallest this test gives" if row["corr_p"] <= row["corr_p_min"] else ""
    return (
        f"**{name} Gram correlation: {row['corr_finding']}**; median off-diagonal r "
        f"{_r(row['corr_observed'])} [{_r(row['corr_lo'])}, {_r(row['corr_hi'])}] over "
        f"{units} units ({LEVEL:.0%} bootstrap interval), two-sided permutation "
        f"p = {_fmt(row['corr_p'], 2)} ({n} pairings{floor}); the null pairings' median "
        f"{_r(row['corr_null_median'], 3)}, their 95% range "
        f"[{_r(row['corr_null_lo'], 3)}, {_r(row['corr_null_hi'], 3)}]."
    )


def _corr_legend(per_layer: pd.DataFrame) -> str:
    """How the per-layer table's Gram-correlation columns were computed, and how many
    tests the Holm adjustment covers."""
    n = per_layer.groupby("pair", sort=False).size()
    counts = ", ".join(f"{k} tests for {PAIR_NAMES[p]}" for p, k in n.items())
    return (
        "r_off: the median over the layer's units of the Pearson r of the off-diagonal "
        "entries of AᵀA and BᵀB, with its 95% bootstrap interval (units resampled), beside "
        "the 95% range of the same median over the null pairings (B of another unit of the "
        "layer); p_Holm: the two-sided permutation p, Holm-adjusted over the layers of each "
        f"pair ({counts}); negative/positive: p_Holm ≤ {ALPHA} and the interval on that "
        f"side of 0; mixed sign: p_Holm ≤ {ALPHA} and the interval holds 0. "
        "It measures whether each unit's two Grams co-vary entry by entry, not balance."
    )
