"""The text of an inspection: which rows docs/theory.md predicts to balance, the notes on
a checkpoint's layout, and ``summary.md``'s per-layer medians beside the null pairing's."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._families import Layout

__all__ = ["PAIRS", "PAIR_NAMES", "fmt", "layout_notes", "summarize", "theory_rows"]

PAIRS = ("qk", "vo")
PAIR_NAMES = {"qk": "key–query", "vo": "value–output"}


def theory_rows(heads: pd.DataFrame) -> pd.DataFrame:
    """The rows whose balance docs/theory.md predicts: heads of multi-head attention,
    key/value groups of grouped-query attention.

    Examples:
        >>> import pandas as pd
        >>> from rankflow.inspect import theory_rows
        >>> heads = pd.DataFrame({"unit": ["group", "head"], "theory": [True, False]})
        >>> theory_rows(heads)["unit"].tolist()  # GQA: the group is, its heads are not
        ['group']
    """
    return heads[heads["theory"]]


def fmt(x: float) -> str:
    return "nan" if not np.isfinite(x) else f"{x:.3g}"


def summarize(heads: pd.DataFrame, layout: Layout, meta: dict) -> str:
    """Per-layer medians over the theory units, beside the null pairing's."""
    t = theory_rows(heads)
    unit = "groups" if layout.group_size > 1 else "heads"
    index_col = "group" if layout.group_size > 1 else "head"
    rotary = layout.rotary_dim > 0
    partial = 0 < layout.rotary_dim < layout.head_dim
    rot, d = layout.rotary_dim, layout.head_dim
    nrot = f"; nrot = gap of the non-rotary Gram block (dims {rot}..{d})" if partial else ""
    lines = [
        f"# rankflow inspect: {meta['checkpoint']}",
        "",
        f"{layout.arch} ({layout.model_type or 'no model_type'}), {layout.n_layers} layers, "
        f"D = {layout.d_model}, {layout.n_heads} heads"
        + (f", {layout.n_kv_heads} key/value heads" if layout.group_size > 1 else "")
        + f", d_h = {layout.head_dim} (heads from {layout.source})",
        "",
    ]
    lines += [f"- {note}" for note in meta["notes"]]
    lines += [
        "",
        f"Medians over the {unit} of each layer; [null pairing: A of one {unit[:-1]} with B "
        "of the next]. gap = ‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + ‖BᵀB‖_F); r_off = Pearson r of "
        "the off-diagonal Gram entries; fmn = (½(‖A‖²+‖B‖²) − ‖ABᵀ‖_*) / ½(‖A‖²+‖B‖²); "
        "max gap (at) = the largest gap and its "
        f"{index_col} (h3: head 3, g3: group 3); erank = effective rank of ABᵀ (of d_h = "
        f"{layout.head_dim})" + ("; rot = rotary-block gap" if rotary else "") + nrot + ".",
        "",
    ]
    head = f"{'layer':>5}  {'pair':<12} {'gap [null]':>20} {'max gap (at)':>18} "
    head += f"{'r_off [null]':>20} {'fmn [null]':>20} {'erank':>6}"
    head += f" {'rot [null]':>20}" if rotary else ""
    head += f" {'nrot [null]':>20}" if partial else ""
    lines += ["```", head]
    for (layer, pair), g in t.groupby(["layer", "pair"], sort=True):

        def cell(col, g=g):
            return f"{fmt(g[col].median())} [{fmt(g['null_' + col].median())}]"

        worst = g.loc[g["balance_gap_rel"].fillna(-np.inf).idxmax()]
        at = f"{fmt(worst['balance_gap_rel'])} ({unit[0]}{worst[index_col]})"
        line = f"{layer:>5}  {PAIR_NAMES[pair]:<12} {cell('balance_gap_rel'):>20} {at:>18} "
        line += f"{cell('gram_corr_offdiag'):>20} {cell('frob_minus_nuc_rel'):>20} "
        line += f"{fmt(g['effective_rank'].median()):>6}"
        if rotary:
            line += f" {cell('rotary_gap_rel'):>20}" if pair == "qk" else ""
        if partial and pair == "qk":
            line += f" {cell('nonrotary_gap_rel'):>20}"
        lines.append(line)
    lines.append("```")
    lines.append("")
    for pair in PAIRS:
        g = t[t["pair"] == pair]
        if len(g):
            lines.append(
                f"All layers, {PAIR_NAMES[pair]}: median gap {fmt(g['balance_gap_rel'].median())}"
                f" (null {fmt(g['null_balance_gap_rel'].median())}), median r_off "
                f"{fmt(g['gram_corr_offdiag'].median())} "
                f"(null {fmt(g['null_gram_corr_offdiag'].median())}), over {len(g)} {unit}."
            )
    return "\n".join(lines) + "\n"


def layout_notes(layout: Layout, heads: pd.DataFrame) -> list[str]:
    """The notes of an inspection: how its layout was found, grouped-query and rotary
    attention, the family's own notes, biases."""
    notes = []
    if layout.source.startswith("assumed"):
        notes.append(
            f"WARNING: {layout.source}; the head count {layout.n_heads} is a guess "
            "(pass --heads, or put config.json beside the weights)."
        )
    if layout.group_size > 1:
        notes.append(
            f"Grouped-query attention, {layout.group_size} query heads per key/value head: "
            "rows with unit = group (theory = True) compare Σ_i W_Q^iᵀW_Q^i with W_KᵀW_K "
            "and W_VᵀW_V with Σ_i W_O^i W_O^iᵀ over the group; unit = head rows pair each "
            "query head with the shared key/value head and are not predicted to balance."
        )
    if layout.rotary_dim:
        notes.append(
            f"Rotary embeddings on the first {layout.rotary_dim} of {layout.head_dim} q/k "
            "dimensions (rotate_half pairs j with j + rotary_dim/2): weight decay balances "
            "the block energies ‖W_Q[:, j]‖² + ‖W_Q[:, j']‖² − (same for W_K) "
            "(rotary_gap_rel), not the whole key–query Gram."
        )
    notes += list(layout.notes)  # the family's: qk-norm, clipping
    for pair in PAIRS:
        if heads.loc[heads["pair"] == pair, "bias"].any():
            notes.append(
                f"{PAIR_NAMES[pair]} projections have biases: the product form holds only "
                "approximately (docs/theory.md); statistics use the weight matrices alone."
            )
    return notes
