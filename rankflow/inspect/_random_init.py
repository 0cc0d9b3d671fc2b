"""How often the permutation test (:mod:`._permutation`) would pass on a checkpoint at
random initialisation of the same shapes: its false-positive rate, with the Grams of iid
Gaussian factors drawn from their Wishart law (docs/theory.md, T1/T4: at initialisation
nothing balances the heads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._blas import single_threaded_blas
from ._families import Layout
from ._permutation import (
    NONROTARY,
    ROTARY,
    null_size,
    pairwise_gap_rel,
    passes,
    permutation_test,
)

__all__ = [
    "FalsePositives",
    "UnitShape",
    "false_positive_rate",
    "random_init_gaps",
    "unit_shapes",
    "wishart_grams",
]


@dataclass(frozen=True)
class UnitShape:
    """Shapes of one pair kind's theory units: per layer ``n_units`` pairs of factors
    A (m×r) and B (n×r); ``rotary_dim`` as in :class:`Layout` (key–query only).

    Examples:
        >>> from rankflow.inspect import UnitShape
        >>> UnitShape(n_layers=12, n_units=12, m=768, n=768, r=64)  # GPT-2 small's heads
        UnitShape(n_layers=12, n_units=12, m=768, n=768, r=64, rotary_dim=0)
    """

    n_layers: int
    n_units: int
    m: int
    n: int
    r: int
    rotary_dim: int = 0


def unit_shapes(layout: Layout, n_layers: int | None = None) -> dict[str, UnitShape]:
    """Per pair kind, the theory units of ``layout`` as ``inspect_layer`` forms them:
    heads (m = n = D), or per grouped-query group of G query heads the stacked query
    factor (m = G·D) against the key, and the value against the stacked W_Oᵀ (n = G·D).

    Examples:
        >>> from rankflow.inspect import Layout, unit_shapes
        >>> lay = Layout("llama", "llama", "model.layers.", 2, 16, 4, 2, 4, 4, False, "doc")
        >>> shapes = unit_shapes(lay)  # 4 query heads in 2 groups: G = 2
        >>> shapes["qk"]
        UnitShape(n_layers=2, n_units=2, m=32, n=16, r=4, rotary_dim=4)
        >>> shapes["vo"]
        UnitShape(n_layers=2, n_units=2, m=16, n=32, r=4, rotary_dim=0)
    """
    L = layout.n_layers if n_layers is None else n_layers
    D, G, U, r = layout.d_model, layout.group_size, layout.n_kv_heads, layout.head_dim
    return {
        "qk": UnitShape(L, U, G * D, D, r, layout.rotary_dim),
        "vo": UnitShape(L, U, D, G * D, r, 0),
    }


def wishart_grams(rng: np.random.Generator, m: int, r: int, size: int) -> np.ndarray:
    """``size`` Grams ``XᵀX`` of X (m×r) with iid N(0, 1) entries, (size, r, r).

    Exact in law, in O(r³) each, by the Bartlett decomposition: ``XᵀX = T Tᵀ`` with T
    lower triangular, ``T_ii² ~ χ²(m − i)`` (i = 0…r−1) and ``T_ij ~ N(0, 1)`` below the
    diagonal, for m ≥ r; for m < r X itself is drawn.

    Examples:
        The mean of XᵀX is m·I:

        >>> import numpy as np
        >>> from rankflow.inspect import wishart_grams
        >>> G = wishart_grams(np.random.default_rng(0), m=5, r=2, size=20_000)
        >>> G.shape, bool(np.allclose(G.mean(axis=0), 5 * np.eye(2), atol=0.1))
        ((20000, 2, 2), True)
    """
    if m < r:
        X = rng.standard_normal((size, m, r))
        return np.einsum("smi,smj->sij", X, X)
    T = np.tril(rng.standard_normal((size, r, r)), k=-1)
    idx = np.arange(r)
    T[:, idx, idx] = np.sqrt(rng.chisquare(m - idx, size=(size, r)))
    return T @ np.swapaxes(T, 1, 2)


def _random_features(rng, rows: int, shape: UnitShape, statistic: str) -> np.ndarray:
    """Per unit of one layer, :func:`gram_features` of a factor (rows×r) of iid N(0, 1)
    entries. Scale drops out: every gap statistic is invariant under one common factor
    on both Grams, and at initialisation both factors of a pair share the scale s."""
    U, r, rot = shape.n_units, shape.r, shape.rotary_dim
    if statistic == ROTARY:
        # Columns of X are independent: each diagonal entry of XᵀX is χ²(rows), and a
        # block energy, the sum of two of them, is χ²(2·rows).
        return rng.chisquare(2 * rows, size=(U, rot // 2))
    if statistic == NONROTARY:
        # A principal sub-block of a Wishart matrix is Wishart with the same rows.
        return wishart_grams(rng, rows, r - rot, U).reshape(U, -1)
    return wishart_grams(rng, rows, r, U).reshape(U, -1)


def random_init_gaps(rng: np.random.Generator, shape: UnitShape, statistic: str) -> np.ndarray:
    """The (L, U, U) gap matrices of one random-initialised checkpoint of ``shape``
    (every weight iid N(0, s²)), sampled from the Grams' exact law, no weights needed.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import UnitShape, random_init_gaps
        >>> shape = UnitShape(n_layers=2, n_units=3, m=16, n=16, r=4)
        >>> gaps = random_init_gaps(np.random.default_rng(0), shape, "balance_gap_rel")
        >>> gaps.shape, bool((gaps > 0).all())  # no pairing balanced, the true ones neither
        ((2, 3, 3), True)
    """
    return np.stack(
        [
            pairwise_gap_rel(
                _random_features(rng, shape.m, shape, statistic),
                _random_features(rng, shape.n, shape, statistic),
            )
            for _ in range(shape.n_layers)
        ]
    )


@dataclass(frozen=True)
class FalsePositives:
    """How often the verdict passes on random-initialised checkpoints: ``n_pass`` of
    ``n_seeds`` (``rate``), and ``n_significant`` of them with ``p ≤ alpha`` alone (the
    calibration of p, ≈ alpha); ``n_perm`` null pairings per test; ``n_seeds = 0`` when
    not simulated (a test that cannot reach alpha never passes).

    Examples:
        >>> from rankflow.inspect import FalsePositives
        >>> FalsePositives(n_seeds=20, n_pass=1, n_significant=2, n_perm=99).rate
        0.05
        >>> FalsePositives(0, 0, 0, 0).rate  # not simulated
        0.0
    """

    n_seeds: int
    n_pass: int
    n_significant: int
    n_perm: int

    @property
    def rate(self) -> float:
        return self.n_pass / self.n_seeds if self.n_seeds else 0.0


def false_positive_rate(
    shape: UnitShape,
    statistic: str,
    *,
    alpha: float,
    margin: float,
    n_seeds: int = 100,
    n_perm: int = 999,
    seed: int = 0,
) -> FalsePositives:
    """Run the verdict (:func:`permutation_test`, :func:`passes`) on ``n_seeds``
    random-initialised checkpoints of ``shape`` (seeds ``(seed, k)``), each sampled by
    :func:`random_init_gaps`. Skipped (``n_seeds = 0``) when the test cannot reach
    ``alpha`` at this shape.

    Examples:
        Two layers of three heads (6² = 36 pairings, enumerated) at random
        initialisation: no seed passes the verdict.

        >>> from rankflow.inspect import UnitShape, false_positive_rate
        >>> shape = UnitShape(n_layers=2, n_units=3, m=16, n=16, r=4)
        >>> false_positive_rate(shape, "balance_gap_rel", alpha=0.05, margin=0.5, n_seeds=20)
        FalsePositives(n_seeds=20, n_pass=0, n_significant=0, n_perm=35)
        >>> one = UnitShape(n_layers=1, n_units=2, m=16, n=16, r=4)  # p ≥ 1/2: skipped
        >>> false_positive_rate(one, "balance_gap_rel", alpha=0.05, margin=0.5)
        FalsePositives(n_seeds=0, n_pass=0, n_significant=0, n_perm=0)
    """
    _, n = null_size(shape.n_layers, shape.n_units, n_perm)
    if 1.0 / (1.0 + n) > alpha:
        return FalsePositives(0, 0, 0, 0)
    n_pass = n_sig = used = 0
    # Many small matrix products: OpenBLAS threads cost more than they bring (see _blas).
    with single_threaded_blas():
        for k in range(n_seeds):
            rng = np.random.default_rng([seed, k])
            gaps = random_init_gaps(rng, shape, statistic)
            test = permutation_test(gaps, n_perm=n_perm, seed=k, statistic=statistic)
            used = test.n_perm
            n_sig += test.p <= alpha
            n_pass += passes(test, alpha, margin)
    return FalsePositives(n_seeds, int(n_pass), int(n_sig), used)
