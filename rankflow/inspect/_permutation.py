"""Is each head's A closer to balance with its own B than with another head's B?

docs/theory.md, T1/T4: weight decay balances the two factors of a product, ``AᵀA → BᵀB``,
for each theory unit of attention (a head, or a grouped-query group) separately. A
checkpoint shows that fingerprint if the true pairs are more balanced than pairings of
one unit's A with another unit's B. This module tests that with a permutation test over
pairings, in numpy (how often it would pass on random-initialised checkpoints of the
same shapes, its false-positive rate: :mod:`._random_init`).

The null pairings permute the B factors *within each layer* (layer-stratified): scales
of the factors differ between layers far more than between the heads of one layer, so a
cross-layer pairing would mostly measure that scale difference, and any checkpoint with
layer-dependent scales would pass. Within a layer the heads are exchangeable under the
null (at random initialisation exactly so), which is what makes the test calibrated.

Everything the test needs is, per layer, the ``U×U`` matrix of relative gaps between the
A of unit u and the B of unit v (:func:`pairwise_gap_rel`); the inspection keeps those
(O(U²) per layer) instead of the factors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PermutationTest",
    "gram_features",
    "null_size",
    "null_statistics",
    "observed_statistic",
    "layer_gap_matrices",
    "pairwise_corr_offdiag",
    "pairwise_gap_rel",
    "passes",
    "permutation_test",
    "unit_statistics",
]

# Gap statistics of a pair (names as in STATISTICS of the heads table).
GRAM, ROTARY, NONROTARY = "balance_gap_rel", "rotary_gap_rel", "nonrotary_gap_rel"
# The statistic of the second test per pair (the heads table's off-diagonal Gram r).
GRAM_CORR = "gram_corr_offdiag"
# Below this squared relative distance the Gram-expansion ‖a‖² + ‖b‖² − 2⟨a, b⟩ has lost
# most of its digits (cancellation, error ~ε(‖a‖² + ‖b‖²)); such entries are recomputed
# directly, so that a balanced pair reads ~1e-16 and not ~1e-8.
_CANCELLATION = 1e-6
# Null pairings are drawn in chunks of at most this many gap values (memory).
_CHUNK_VALUES = 4_000_000


def unit_statistics(pair: str, rotary_dim: int, head_dim: int) -> tuple[str, ...]:
    """The gap statistics tested for a pair kind, the one that decides the verdict first.

    Key–query with rotary embeddings (docs/theory.md, "Rotary embeddings"): only the
    per-rotary-block energies balance (``rotary_gap_rel``); the full Gram gap is reported
    beside it, and with partial rotary (``rotary_dim < head_dim``) the Gram gap of the
    non-rotary dimensions ``rotary_dim..head_dim``, which nothing rotates, so that the
    whole sub-block balances (``nonrotary_gap_rel``). Otherwise the full Gram gap.

    Examples:
        >>> from rankflow.inspect import unit_statistics
        >>> unit_statistics("qk", rotary_dim=32, head_dim=64)  # partial rotary
        ('rotary_gap_rel', 'balance_gap_rel', 'nonrotary_gap_rel')
        >>> unit_statistics("vo", rotary_dim=32, head_dim=64)  # nothing rotates v or o
        ('balance_gap_rel',)
    """
    if pair == "qk" and rotary_dim:
        return (ROTARY, GRAM) + ((NONROTARY,) if rotary_dim < head_dim else ())
    return (GRAM,)


def gram_features(grams: np.ndarray, statistic: str, rotary_dim: int = 0) -> np.ndarray:
    """Per unit, the vector whose Euclidean distance is the statistic's gap.

    ``grams``: (U, r, r) Gram matrices. ``balance_gap_rel``: the flattened Gram (the
    Frobenius norm is the Euclidean norm of the entries); ``rotary_gap_rel``: the block
    energies ``e_j = G[j, j] + G[j + rot/2, j + rot/2]`` (HF ``rotate_half`` pairs);
    ``nonrotary_gap_rel``: the flattened sub-block ``G[rot:, rot:]``. Returns (U, k).
    """
    grams = np.asarray(grams, dtype=np.float64)
    U = grams.shape[0]
    if statistic == GRAM:
        return grams.reshape(U, -1)
    half = rotary_dim // 2
    if statistic == ROTARY:
        diag = np.diagonal(grams, axis1=1, axis2=2)
        return diag[:, :half] + diag[:, half : 2 * half]
    if statistic == NONROTARY:
        return grams[:, rotary_dim:, rotary_dim:].reshape(U, -1)
    raise ValueError(f"unknown gap statistic {statistic!r}")


def pairwise_gap_rel(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """``gap[u, v] = ‖xa_u − xb_v‖ / ½(‖xa_u‖ + ‖xb_v‖)`` for features (U, k), (V, k).

    On flattened Grams this is ``balance_gap_rel`` of A_u with B_v. Two zero vectors
    (a dead unit paired with a dead unit) are equal, hence balanced: gap 0, not NaN.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import pairwise_gap_rel
        >>> xa = np.array([[1.0, 0.0], [0.0, 0.0]])  # the second unit is dead
        >>> xb = np.array([[1.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
        >>> pairwise_gap_rel(xa, xb).tolist()
        [[0.0, 2.0, 1.0], [2.0, 0.0, 2.0]]
    """
    xa, xb = np.asarray(xa, np.float64), np.asarray(xb, np.float64)
    na2, nb2 = np.einsum("uk,uk->u", xa, xa), np.einsum("vk,vk->v", xb, xb)
    total = na2[:, None] + nb2[None, :]
    d2 = total - 2.0 * (xa @ xb.T)
    for u, v in np.argwhere(d2 <= _CANCELLATION * total):
        d2[u, v] = np.sum((xa[u] - xb[v]) ** 2)
    scale = 0.5 * (np.sqrt(na2)[:, None] + np.sqrt(nb2)[None, :])
    gap = np.sqrt(np.clip(d2, 0.0, None))
    return np.divide(gap, scale, out=np.zeros_like(gap), where=scale > 0)


def pairwise_corr_offdiag(ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """``corr[u, v]``: Pearson r of the off-diagonal entries (i < j) of ``ga[u]`` and
    ``gb[v]``, Grams (U, r, r) and (V, r, r); on the diagonal (u = v) the heads
    table's ``gram_corr_offdiag``. NaN where either vector is constant (r < 3 has at
    most one entry; a dead unit's Gram is 0).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import pairwise_corr_offdiag
        >>> G = np.array([[[2.0, 1, 0], [1, 2, 3], [0, 3, 2]]])  # off-diagonal 1, 0, 3
        >>> pairwise_corr_offdiag(np.concatenate([G, -G]), G).round(6).tolist()
        [[1.0], [-1.0]]
    """
    ga, gb = np.asarray(ga, np.float64), np.asarray(gb, np.float64)
    i, j = np.triu_indices(ga.shape[-1], k=1)
    za, zb = ga[:, i, j], gb[:, i, j]
    za, zb = za - za.mean(axis=1, keepdims=True), zb - zb.mean(axis=1, keepdims=True)
    na, nb = np.linalg.norm(za, axis=1), np.linalg.norm(zb, axis=1)
    den = na[:, None] * nb[None, :]
    return np.divide(za @ zb.T, den, out=np.full(den.shape, np.nan), where=den > 0)


def layer_gap_matrices(
    grams: Mapping[str, tuple[np.ndarray, np.ndarray]], rotary_dim: int, head_dim: int
) -> dict[tuple[str, str], np.ndarray]:
    """One layer's ``(pair, statistic) → (U, U)`` gap matrices, from per pair the Grams
    ``(G_A, G_B)`` of its U theory units, each (U, r, r); the diagonal is the true
    pairing. Per pair also ``(pair, "gram_corr_offdiag")``: the off-diagonal Gram
    correlations of every A with every B (:func:`pairwise_corr_offdiag`), the input of
    the Gram-correlation test (:mod:`._correlation`)."""
    out = {}
    for pair, (ga, gb) in grams.items():
        rot = rotary_dim if pair == "qk" else 0
        for stat in unit_statistics(pair, rot, head_dim):
            out[pair, stat] = pairwise_gap_rel(
                gram_features(ga, stat, rot), gram_features(gb, stat, rot)
            )
        out[pair, GRAM_CORR] = pairwise_corr_offdiag(ga, gb)
    return out


# --- the permutation test --------------------------------------------------------------


@dataclass(frozen=True)
class PermutationTest:
    """A layer-stratified permutation test of one gap statistic (see
    :func:`permutation_test`). ``observed``: median over the units of the true pairs'
    gaps; ``null_median``: median over the null pairings of their median gap;
    ``effect = observed / null_median`` (1: no better than chance pairings, 0: exact
    balance); ``p``: the permutation p-value; ``p_min``: the smallest p the test can
    give; ``n_perm``: null pairings used (all non-identity ones when ``exact``);
    ``log10_pairings``: log10 of the number of distinct pairings, L·log10(U!).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import permutation_test
        >>> test = permutation_test(np.ones((1, 3, 3)) - 0.9 * np.eye(3))  # 1 layer, 3 units
        >>> test.n_pairings, test.exact, test.n_perm, round(test.p_min, 4)
        (6, True, 5, 0.1667)
    """

    statistic: str
    n_layers: int
    n_units: int
    observed: float
    null_median: float
    effect: float
    p: float
    p_min: float
    n_perm: int
    exact: bool
    log10_pairings: float

    @property
    def n_pairings(self) -> int | None:
        """The number of distinct pairings, when it is small enough to write out."""
        if self.log10_pairings > 15:
            return None
        return math.factorial(self.n_units) ** self.n_layers


def null_size(n_layers: int, n_units: int, n_perm: int) -> tuple[bool, int]:
    """``(exact, n)``: whether :func:`permutation_test` enumerates all pairings, and how
    many null pairings it compares with (so that its smallest p is ``1/(1 + n)``)."""
    log10_n = n_layers * math.lgamma(n_units + 1) / math.log(10)
    if log10_n <= math.log10(n_perm + 1) + 1e-9:
        return True, math.factorial(n_units) ** n_layers - 1
    return False, n_perm


def _all_pairings(L: int, U: int) -> np.ndarray:
    """Every layer-stratified pairing, (N, L, U), the identity first."""
    perms = list(itertools.permutations(range(U)))
    return np.array(list(itertools.product(perms, repeat=L)), dtype=np.intp).reshape(-1, L, U)


def _median_mean(gaps: np.ndarray, perms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and mean over all units of ``gaps[l, u, perm[l, u]]``, per pairing."""
    L, U = gaps.shape[:2]
    vals = gaps[np.arange(L)[None, :, None], np.arange(U)[None, None, :], perms]
    vals = vals.reshape(len(perms), L * U)
    return np.median(vals, axis=1), vals.mean(axis=1)


def observed_statistic(values: np.ndarray) -> tuple[float, float]:
    """Median and mean over the L·U units of the true pairs, the diagonals of
    ``values`` (L, U, U): the statistic of :func:`permutation_test` (and of the
    Gram-correlation test, :mod:`._correlation`) at the identity pairing."""
    L, U, _ = values.shape
    ident = np.broadcast_to(np.arange(U), (1, L, U))
    med, mean = _median_mean(values, ident)
    return float(med[0]), float(mean[0])


def null_statistics(
    values: np.ndarray, *, n_perm: int = 999, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(medians, means, exact)`` of :func:`observed_statistic` over the null
    pairings of ``values`` (L, U, U): unit u's A with the B of unit π_l(u) of its layer,
    π_l a permutation per layer. All non-identity pairings when there are at most
    ``n_perm + 1`` (``exact``), else ``n_perm`` drawn (seeded by ``seed``).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import null_statistics
        >>> med, mean, exact = null_statistics(np.ones((1, 3, 3)) - np.eye(3))
        >>> exact, med.tolist()  # 5 non-identity pairings of 3 units: 3 keep one true pair
        (True, [1.0, 1.0, 1.0, 1.0, 1.0])
    """
    values = np.asarray(values, dtype=np.float64)
    L, U, _ = values.shape
    exact, _ = null_size(L, U, n_perm)
    if exact:
        pairings = _all_pairings(L, U)[1:]
        chunks = [pairings[i : i + 256] for i in range(0, len(pairings), 256)]
    else:
        rng = np.random.default_rng(seed)
        step = max(1, _CHUNK_VALUES // max(1, L * U))
        chunks = (
            rng.permuted(np.broadcast_to(np.arange(U), (min(step, n_perm - i), L, U)), axis=2)
            for i in range(0, n_perm, step)
        )
    meds, means = [], []
    for perms in chunks:
        med, mean = _median_mean(values, perms)
        meds.append(med)
        means.append(mean)
    if not meds:
        return np.empty(0), np.empty(0), bool(exact)
    return np.concatenate(meds), np.concatenate(means), bool(exact)


def permutation_test(
    gaps: np.ndarray, *, n_perm: int = 999, seed: int = 0, statistic: str = GRAM
) -> PermutationTest:
    """Test whether the true pairs (the diagonals of ``gaps``, (L, U, U)) are more
    balanced than pairings of each A with a random permutation of the B of its layer.

    Statistic: the median gap over the L·U units, ties broken by the mean. The tie-break
    matters for pairings that keep over half of the true pairs, whose median can equal
    the observed one exactly; the mean tells them apart, so a model whose true gaps are
    all below its mismatched ones reaches the smallest p. Any fixed statistic keeps the
    test exact; the median alone is robust to a minority of odd heads.

    With at most ``n_perm + 1`` distinct pairings all are enumerated (exact test,
    ``p = #{T ≤ T_obs}/N``, the identity counting itself); otherwise ``n_perm`` are drawn
    (seeded) and ``p = (1 + #{T_null ≤ T_obs})/(1 + n_perm)``. Either way p is never
    below ``p_min = 1/(1 + n)``, n the null pairings used.

    Examples:
        One layer of four units whose true pairs (the diagonal) have gap 0.1 against 1
        for every other pairing: all 4! pairings are enumerated and p is the smallest.

        >>> import numpy as np
        >>> from rankflow.inspect import permutation_test
        >>> test = permutation_test(np.ones((1, 4, 4)) - 0.9 * np.eye(4))
        >>> test.exact, test.n_perm, round(test.p, 4), round(test.effect, 2)
        (True, 23, 0.0417, 0.1)
        >>> t = permutation_test(np.ones((3, 6, 6)) - 0.9 * np.eye(6), n_perm=99, seed=0)
        >>> t.exact, t.n_perm, t.p, round(t.log10_pairings, 1)  # 720³ pairings: drawn
        (False, 99, 0.01, 8.6)
    """
    gaps = np.asarray(gaps, dtype=np.float64)
    L, U, _ = gaps.shape
    obs_med, obs_mean = observed_statistic(gaps)
    med, mean, exact = null_statistics(gaps, n_perm=n_perm, seed=seed)
    n = len(med)
    le = (med < obs_med) | ((med == obs_med) & (mean <= obs_mean))
    null_median = float(np.median(med)) if n else float("nan")
    effect = obs_med / null_median if n and null_median > 0 else float("nan")
    return PermutationTest(
        statistic=statistic,
        n_layers=L,
        n_units=U,
        observed=obs_med,
        null_median=null_median,
        effect=effect,
        p=(1.0 + float(le.sum())) / (1.0 + n),
        p_min=1.0 / (1.0 + n),
        n_perm=n,
        exact=bool(exact),
        log10_pairings=L * math.lgamma(U + 1) / math.log(10),
    )


def passes(test: PermutationTest, alpha: float, margin: float) -> bool:
    """The verdict rule: significant (``p ≤ alpha``) and large (``effect ≤ margin``).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import passes, permutation_test
        >>> balanced = permutation_test(np.ones((1, 4, 4)) - 0.9 * np.eye(4))  # p = 1/24
        >>> passes(balanced, alpha=0.05, margin=0.5), passes(balanced, alpha=0.01, margin=0.5)
        (True, False)
        >>> passes(permutation_test(np.ones((1, 4, 4))), alpha=0.05, margin=0.5)  # no signal
        False
    """
    return bool(test.p <= alpha and np.isfinite(test.effect) and test.effect <= margin)
