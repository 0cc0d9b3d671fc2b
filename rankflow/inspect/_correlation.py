"""A second test per pair: is each unit's AᵀA correlated with its own BᵀB, entry by entry?

The gap test (:mod:`._permutation`) asks whether the true pairs are closer to balance
(``AᵀA = BᵀB``) than pairings of different units. A pair can fail it and still have
structure: all-MiniLM-L6-v2's value–output pairs have a median off-diagonal Gram
correlation of −0.43 in layer 0 against ≈ 0 for the null pairing. This test measures
that correlation and its significance; it says nothing about balance (a negative
correlation is the opposite of ``AᵀA = BᵀB``'s off-diagonal agreement).

Statistic: per unit, ``r_u`` = Pearson r of the off-diagonal entries (i < j) of
``A_uᵀA_u`` and ``B_uᵀB_u`` (the heads table's ``gram_corr_offdiag``; the diagonal is
left out because its entries are all positive and far larger than the off-diagonal ones,
so with it any two Grams correlate: MiniLM's null pairings read a median 0.91–0.92); the
statistic is the median of ``r_u`` over the L·U units (ties broken by the mean), as for the
gap.

Null: the pairing the correlation measures is entry (i, j) of unit u's A-Gram with entry
(i, j) of the *same* unit's B-Gram, i.e. hidden dimension i of A_u with hidden dimension
i of B_u (the index summed over in ``A_u B_uᵀ``). The B of another unit of the same layer
lives in an unrelated hidden basis, so pairing A_u with B_{π(u)} breaks exactly that
correspondence, keeping each Gram's own structure and the layer's scale: the
layer-stratified pairings of the gap test (:func:`~._permutation.null_statistics`, the
same draws), here two-sided, ``p = min(1, 2·min(p_low, p_high))``; its smallest value is
``2/(1 + n)`` for n null pairings. Valid because the units of a layer are exchangeable at
initialisation and under training (the model is symmetric under relabelling them).

Effect interval: the median ``r_u`` with a percentile bootstrap over units within layers
(:func:`corr_interval`). Not a Fisher-z interval: for one unit of iid Gaussian factors the
off-diagonal entries are uncorrelated and Fisher's ``1/√(k − 3)``, k = r(r − 1)/2, is the
spread of ``r_u`` (measured: 0.0446 against 0.0450 at m = 384, r = 32), but the quantity
reported is a median over units, and trained units differ from each other far more than
that (MiniLM's layer-0 value–output heads: −0.53 to −0.23). A Fisher-z interval from the
pooled L·U·k entry pairs treats them as one iid sample and ignores that spread; in a
trained Gram, entries sharing a row (i, j) and (i, k) also co-vary through column i of the
factor, so there are fewer independent pairs than k. The bootstrap resamples the units,
the test's exchangeable units (``tests/inspect/test_gram_correlation.py`` measures both
intervals' coverage on a heterogeneous population).

Several layers: one test per layer and pair; the per-layer p-values are Holm-adjusted
over the layers of a pair (:func:`holm`), and per-layer statements use the adjusted p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._permutation import GRAM_CORR, null_size, null_statistics, observed_statistic

__all__ = ["CORR_FINDINGS", "CorrTest", "corr_finding", "corr_interval", "corr_test", "holm"]

# p ≤ α: by the sign of the median r and of its interval; then p > α, or no p.
SIGNED = ("negative", "positive", "mixed sign")
CORR_FINDINGS = SIGNED + ("not detected", "too few pairings", "not computed")


@dataclass(frozen=True)
class CorrTest:
    """The Gram-correlation test of one pair over L layers × U units (see the module
    docstring). ``observed``: median over the units of the true pairs' off-diagonal Gram
    r; ``null_median``, ``null_lo``, ``null_hi``: the null pairings' median statistic
    and its 2.5% and 97.5% quantiles (the null's 95% range); ``p``: two-sided
    permutation p; ``p_min``: the smallest p the test can give; ``n_perm``: null
    pairings used (all non-identity ones when ``exact``).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import corr_test
        >>> corrs = np.zeros((2, 5, 5)) - 0.5 * np.eye(5)  # true pairs −0.5, others 0
        >>> t = corr_test(corrs)
        >>> t.observed, t.null_median, t.p == t.p_min, round(t.p_min, 4)
        (-0.5, 0.0, True, 0.002)
    """

    statistic: str
    n_layers: int
    n_units: int
    observed: float
    null_median: float
    null_lo: float
    null_hi: float
    p: float
    p_min: float
    n_perm: int
    exact: bool


def corr_test(corrs: np.ndarray, *, n_perm: int = 999, seed: int = 0) -> CorrTest:
    """Two-sided layer-stratified permutation test of the median off-diagonal Gram
    correlation of the true pairs, the diagonals of ``corrs`` (L, U, U) (``corrs[l, u,
    v]``: unit u's A-Gram against unit v's B-Gram, :func:`pairwise_corr_offdiag`),
    against pairings of each A with a permutation of its layer's B. The null pairings are
    those of the gap test at the same ``n_perm`` and ``seed``. NaN in ``corrs`` (a
    constant Gram) gives p = NaN: no finding.

    Examples:
        Independent Grams (no pairing): not significant; a planted correlation is.

        >>> import numpy as np
        >>> from rankflow.inspect import corr_test
        >>> rng = np.random.default_rng(0)
        >>> round(corr_test(rng.normal(0, 0.1, (3, 6, 6))).p, 2) > 0.01
        True
        >>> planted = rng.normal(0, 0.1, (3, 6, 6)) + 0.4 * np.eye(6)
        >>> t = corr_test(planted)
        >>> t.p, round(t.observed, 1)
        (0.002, 0.4)
    """
    corrs = np.asarray(corrs, dtype=np.float64)
    L, U, _ = corrs.shape
    nan = float("nan")
    if not np.isfinite(corrs).all() or U < 2:
        _, n = null_size(L, U, n_perm)
        return CorrTest(GRAM_CORR, L, U, nan, nan, nan, nan, nan, min(1.0, 2 / (1 + n)), n, False)
    obs_med, obs_mean = observed_statistic(corrs)
    med, mean, exact = null_statistics(corrs, n_perm=n_perm, seed=seed)
    n = len(med)
    low = (med < obs_med) | ((med == obs_med) & (mean <= obs_mean))
    high = (med > obs_med) | ((med == obs_med) & (mean >= obs_mean))
    p_low, p_high = (1.0 + low.sum()) / (1.0 + n), (1.0 + high.sum()) / (1.0 + n)
    lo, hi = np.quantile(med, [0.025, 0.975])
    return CorrTest(
        statistic=GRAM_CORR,
        n_layers=L,
        n_units=U,
        observed=obs_med,
        null_median=float(np.median(med)),
        null_lo=float(lo),
        null_hi=float(hi),
        p=float(min(1.0, 2.0 * min(p_low, p_high))),
        p_min=float(min(1.0, 2.0 / (1.0 + n))),
        n_perm=n,
        exact=bool(exact),
    )


def corr_interval(
    corrs: np.ndarray, *, n_boot: int = 999, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median true-pair correlation, units
    resampled with replacement within each layer (the strata of the test).

    ``corrs``: (L, U, U) as for :func:`corr_test`; only the diagonals are used.
    ``(nan, nan)`` with one unit per layer or a NaN on a diagonal.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import corr_interval
        >>> corrs = np.zeros((2, 8, 8))
        >>> corrs[:, np.arange(8), np.arange(8)] = np.linspace(-0.6, -0.2, 16).reshape(2, 8)
        >>> lo, hi = corr_interval(corrs)
        >>> -0.6 <= lo < -0.4 < hi <= -0.2
        True
    """
    corrs = np.asarray(corrs, dtype=np.float64)
    L, U, _ = corrs.shape
    true = corrs[:, np.arange(U), np.arange(U)]  # (L, U)
    if U < 2 or not np.isfinite(true).all():
        return float("nan"), float("nan")
    rng = np.random.default_rng([seed, 2])
    idx = rng.integers(0, U, size=(n_boot, L, U))
    medians = np.median(true[np.arange(L)[None, :, None], idx].reshape(n_boot, -1), axis=1)
    lo, hi = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of m tests: the k-th smallest p times
    (m − k + 1), made non-decreasing in that order, at most 1. A test is rejected at
    family-wise level α when its adjusted p ≤ α. NaN stays NaN and does not count in m.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import holm
        >>> holm(np.array([0.01, 0.04, 0.03, 0.5])).round(3).tolist()
        [0.04, 0.09, 0.09, 0.5]
    """
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    scaled = p[order] * (m - np.arange(m))
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled)) if m else scaled
    return out


def corr_finding(
    observed: float, p: float, p_min: float, alpha: float, interval=(np.nan, np.nan)
) -> str:
    """The Gram-correlation finding: ``negative``/``positive`` when p ≤ alpha and the
    bootstrap ``interval`` lies on that side of 0; ``mixed sign`` when p ≤ alpha but the
    interval holds 0 (the true pairs differ from the null pairings, but the units'
    correlations do not agree in sign: the median's sign depends on which units the
    model has); ``not detected`` (p > alpha); ``too few pairings`` (p_min > alpha);
    ``not computed`` (NaN: a constant Gram).

    Examples:
        >>> from rankflow.inspect import corr_finding
        >>> corr_finding(-0.42, 0.0002, 0.0002, 0.01, (-0.47, -0.36))
        'negative'
        >>> corr_finding(0.07, 0.001, 0.0002, 0.01, (-0.09, 0.13))  # significant, sign unclear
        'mixed sign'
        >>> corr_finding(0.01, 0.4, 0.0002, 0.01, (-0.02, 0.04))
        'not detected'
    """
    if p_min > alpha:
        return "too few pairings"
    if not np.isfinite(p):
        return "not computed"
    if p > alpha:
        return "not detected"
    lo, hi = interval
    if observed < 0 and hi < 0:
        return "negative"
    if observed > 0 and lo > 0:
        return "positive"
    return "mixed sign"
