"""One layer of ``inspect_checkpoint``: its units (heads, GQA groups), the statistics of
each key–query and value–output pair against its null partner (rows of the heads table),
the Gram entries of the scatter units and the layer's pair-gap matrices (the input of the
permutation and Gram-correlation tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._families import LayerWeights, Layout
from ._permutation import layer_gap_matrices
from ._stats import STATISTICS, Factor, pair_statistics
from ._summary import PAIRS

__all__ = ["gram_rows", "inspect_layer", "layer_rows_and_gaps"]


def _upper_entries(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.triu_indices(G.shape[0])
    return i, j, G[i, j]


def gram_rows(layer, pair, unit, index, partner, a: Factor, b: Factor, b_null: Factor | None):
    """Rows of the ``grams`` table for one unit and pair: the upper-triangle entries of
    A's Gram beside B's (``role = "pair"``) and beside the null partner's (``"null"``)."""
    i, j, ga = _upper_entries(a.gram)
    parts = [("pair", index, b)] + ([("null", partner, b_null)] if b_null is not None else [])
    frames = []
    for role, which, fb in parts:
        frames.append(
            pd.DataFrame(
                {
                    "layer": layer,
                    "pair": pair,
                    "unit": unit,
                    "index": index,
                    "role": role,
                    "b_index": which,
                    "i": i,
                    "j": j,
                    "diagonal": i == j,
                    "gram_a": ga,
                    "gram_b": fb.gram[i, j],
                }
            )
        )
    return frames


@dataclass(frozen=True)
class _Unit:
    """One row source of the heads table: a head or GQA group, its null partner, and
    per pair ``(A, B, B_null, m, n)``."""

    unit: str  # head | group
    index: int
    group: int
    partner: int | None
    theory: bool
    pairs: dict


def _layer_units(lw: LayerWeights, layout: Layout) -> list[_Unit]:
    """The units of one layer (see :func:`inspect_layer`), each factor reduced to its
    :class:`Factor` once."""
    H, Hkv, G = layout.n_heads, layout.n_kv_heads, layout.group_size
    Q = [Factor.of(lw.query(h)) for h in range(H)]
    O = [Factor.of(lw.output_t(h)) for h in range(H)]
    K = [Factor.of(lw.key(g)) for g in range(Hkv)]
    V = [Factor.of(lw.value(g)) for g in range(Hkv)]
    D = layout.d_model
    units = []
    if G == 1:
        for h in range(H):
            p = (h + 1) % H if H > 1 else None
            units.append(
                _Unit("head", h, h, p, True, {
                    "qk": (Q[h], K[h], None if p is None else K[p], D, D),
                    "vo": (V[h], O[h], None if p is None else O[p], D, D),
                })
            )  # fmt: skip
        return units
    for g in range(Hkv):
        p = (g + 1) % Hkv if Hkv > 1 else None
        members = range(g * G, (g + 1) * G)
        Qg = Factor.stack([Q[i] for i in members])
        Og = Factor.stack([O[i] for i in members])
        Op = None if p is None else Factor.stack([O[i] for i in range(p * G, (p + 1) * G)])
        units.append(
            _Unit("group", g, g, p, True, {
                "qk": (Qg, K[g], None if p is None else K[p], G * D, D),
                "vo": (V[g], Og, Op, D, G * D),
            })
        )  # fmt: skip
    for h in range(H):
        g = h // G
        p = (h + G) % H if Hkv > 1 else None
        units.append(
            _Unit("head", h, g, p, False, {
                "qk": (Q[h], K[g], None if p is None else K[p // G], D, D),
                "vo": (V[g], O[h], None if p is None else O[p], D, D),
            })
        )  # fmt: skip
    return units


def _unit_rows(
    units: list[_Unit], layout: Layout, layer: int, bias: dict, rank_tol: float, scatter: set
) -> tuple[list[dict], list[pd.DataFrame]]:
    """Rows of the heads table (statistics of the true and the null pair) and the Gram
    entries of the scatter units."""
    rows, grams = [], []
    nan = dict.fromkeys(STATISTICS, float("nan"))
    for u in units:
        for pair in PAIRS:
            a, b, b_null, m, n = u.pairs[pair]
            rotary = layout.rotary_dim if pair == "qk" else 0
            stats = pair_statistics(a, b, rank_tol=rank_tol, rotary_dim=rotary)
            null = (
                nan
                if b_null is None
                else pair_statistics(a, b_null, rank_tol=rank_tol, rotary_dim=rotary)
            )
            rows.append(
                {
                    "layer": layer,
                    "pair": pair,
                    "unit": u.unit,
                    "head": u.index if u.unit == "head" else -1,
                    "group": u.group,
                    "null_partner": -1 if u.partner is None else u.partner,
                    "theory": u.theory,
                    "bias": bias[pair],
                    "m": m,
                    "n": n,
                    "r": layout.head_dim,
                    **stats,
                    **{f"null_{k}": v for k, v in null.items()},
                }
            )
            if u.theory and u.index in scatter:
                grams += gram_rows(layer, pair, u.unit, u.index, u.partner, a, b, b_null)
    return rows, grams


def _pair_gaps(units: list[_Unit], layout: Layout) -> dict[tuple[str, str], np.ndarray]:
    """``(pair, statistic) → (U, U)`` relative gaps between the A of theory unit u and
    the B of unit v of one layer (:func:`~._permutation.layer_gap_matrices`), from the
    Grams already computed for the heads table."""
    theory = [u for u in units if u.theory]
    grams = {
        pair: tuple(np.stack([u.pairs[pair][i].gram for u in theory]) for i in (0, 1))
        for pair in PAIRS
    }
    return layer_gap_matrices(grams, layout.rotary_dim, layout.head_dim)


def inspect_layer(
    lw: LayerWeights,
    layout: Layout,
    layer: int,
    *,
    rank_tol: float = 1e-3,
    scatter: Iterable[int] = (),
) -> tuple[list[dict], list[pd.DataFrame]]:
    """Rows of the heads table for one layer, and Gram entries for the theory units
    whose index is in ``scatter``.

    Multi-head attention (H_kv = H): one row per head and pair, ``unit = "head"``.
    Grouped-query attention (H_kv < H, G = H/H_kv): per key/value group g a row
    ``unit = "group"`` pairing the stacked query factors ``[W_Q^i; …]`` of the group with
    ``W_K^g`` (Gram ``Σ_i W_Q^iᵀW_Q^i`` against ``W_KᵀW_K``), and ``W_V^g`` with the
    stacked ``[W_O^iᵀ; …]`` (``W_VᵀW_V`` against ``Σ_i W_O^i W_O^iᵀ``): these balance
    under weight decay (docs/theory.md, grouped-query attention; the value–output form by
    the same argument). Per query head a row ``unit = "head"`` pairs W_Q^h with its
    shared W_K^g (and W_V^g with W_O^hᵀ); those are not predicted to balance.
    The null partner is the next unit, cyclically (for GQA head rows: the same
    position in the next group), so that it never shares the true partner.

    Examples:
        Two heads of d_h = 2 whose Grams are 1.1·c_h·I (A) and 0.9·c_h·I (B): gap 0.2.

        >>> import numpy as np
        >>> from rankflow.inspect import LayerWeights, Layout, inspect_layer
        >>> A, B = np.diag([1.1, 1.1, 2.2, 2.2]) ** 0.5, np.diag([0.9, 0.9, 1.8, 1.8]) ** 0.5
        >>> lay = Layout("gpt2", None, "h.", 1, 4, 2, 2, 2, 0, False, "doc")
        >>> rows, grams = inspect_layer(LayerWeights(A, B, A, B, None, None, None, 2), lay, 0)
        >>> [(r["pair"], r["head"], round(float(r["balance_gap_rel"]), 3)) for r in rows]
        [('qk', 0, 0.2), ('vo', 0, 0.2), ('qk', 1, 0.2), ('vo', 1, 0.2)]
    """
    rows, grams, _ = layer_rows_and_gaps(lw, layout, layer, rank_tol, set(scatter))
    return rows, grams


def layer_rows_and_gaps(lw, layout, layer, rank_tol, scatter):
    """:func:`inspect_layer`'s rows and Gram entries, and the layer's pair gaps."""
    units = _layer_units(lw, layout)
    # A bias stored as zeros (rankflow's exports, for GPT-2's fused layout) is none.
    given = lambda b: b is not None and bool(np.any(b))
    bias = {"qk": given(lw.bq) or given(lw.bk), "vo": given(lw.bv)}
    rows, grams = _unit_rows(units, layout, layer, bias, rank_tol, scatter)
    return rows, grams, _pair_gaps(units, layout)
