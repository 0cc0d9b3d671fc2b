"""Balance statistics of one factor pair ``(A, B)``, ``W = ABᵀ``, in numpy float64.

Everything a pair statistic needs is each factor's Gram matrix ``G = XᵀX`` (r×r): the
balance compares Grams, and with a square root ``S`` of the Gram (``SᵀS = G``, here
``S = Λ^{1/2}Uᵀ`` from ``G = UΛUᵀ``) one has ``X = PS`` for a partial isometry P, so
the singular values of ``ABᵀ`` are those of the small ``S_A S_Bᵀ``. A :class:`Factor`
holds both, so each head's factors are cut, cast and reduced once, then paired with
their true partner and the null one.

Why not a QR of X: on tall factors (D×d_h, D in the thousands) the Gram and an r×r
eigendecomposition are 5–15× cheaper than Householder QR. The price is precision on
singular values far below the largest: a singular value σ of W is accurate to about
ε·σ_1²/σ (ε = 2.2e-16), so ``nuclear_norm`` and ``frob_minus_nuc`` carry an absolute
error of order √ε·σ_1 per vanishing singular value — far below any imbalance that a
trained checkpoint shows, and exact-to-rounding on well-conditioned heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["STATISTICS", "Factor", "pair_statistics", "pearson"]

# Per-pair statistics, in table order (docs/theory.md names where it has one).
STATISTICS = (
    "gram_a_norm",  # ‖AᵀA‖_F
    "gram_b_norm",  # ‖BᵀB‖_F
    "balance_gap",  # ‖AᵀA − BᵀB‖_F
    "balance_gap_rel",  # balance_gap / ½(‖AᵀA‖_F + ‖BᵀB‖_F)
    "balance_trace",  # tr(AᵀA − BᵀB)
    "balance_nuclear",  # ‖AᵀA − BᵀB‖_*
    "gram_corr",  # Pearson r of the entries (i ≤ j) of AᵀA and BᵀB
    "gram_corr_offdiag",  # the same over i < j
    "l2_penalty",  # ½(‖A‖_F² + ‖B‖_F²)
    "nuclear_norm",  # ‖ABᵀ‖_*
    "frob_minus_nuc",  # l2_penalty − nuclear_norm ≥ 0 (T1)
    "frob_minus_nuc_rel",  # frob_minus_nuc / l2_penalty
    "effective_rank",  # exp(entropy of s/Σs) of W = ABᵀ
    "stable_rank",  # ‖W‖_F² / ‖W‖_2²
    "rank",  # number of singular values > rank_tol · s_1
    "rotary_gap_rel",  # ‖e_A − e_B‖ / ½(‖e_A‖ + ‖e_B‖), e: rotary block energies
    "rotary_corr",  # Pearson r of e_A and e_B
    "nonrotary_gap_rel",  # balance_gap_rel of the Gram sub-block [rot:, rot:] (partial rotary)
)


@dataclass(frozen=True)
class Factor:
    """``gram = XᵀX`` and a square root ``S`` of it (``SᵀS = gram``), both r×r, of a
    factor ``X`` (m×r).

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import Factor
        >>> X = np.random.default_rng(0).standard_normal((6, 2))
        >>> f = Factor.of(X)
        >>> f.gram.shape, bool(np.allclose(f.S.T @ f.S, X.T @ X))
        ((2, 2), True)
        >>> bool(np.allclose(Factor.stack([f, f]).gram, 2 * X.T @ X))  # [X; X]
        True
    """

    gram: np.ndarray
    S: np.ndarray

    @classmethod
    def of_gram(cls, gram: np.ndarray) -> Factor:
        gram = 0.5 * (gram + gram.T)  # exactly symmetric for eigh
        lam, U = np.linalg.eigh(gram)
        return cls(gram=gram, S=np.sqrt(np.clip(lam, 0.0, None))[:, None] * U.T)

    @classmethod
    def of(cls, X: np.ndarray) -> Factor:
        X = np.asarray(X, dtype=np.float64)
        return cls.of_gram(X.T @ X)

    @classmethod
    def stack(cls, factors: list[Factor]) -> Factor:
        """The factor of the factors stacked vertically, ``[X_1; X_2; …]``, whose Gram
        is the sum of their Grams."""
        return cls.of_gram(np.sum([f.gram for f in factors], axis=0))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; NaN for fewer than two points or a constant vector."""
    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    if x.size < 2:
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    den = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.dot(x, y) / den) if den > 0 else float("nan")


def _relative(diff: float, a: float, b: float) -> float:
    scale = 0.5 * (a + b)
    return diff / scale if scale > 0 else float("nan")


def block_energies(gram: np.ndarray, rotary_dim: int) -> np.ndarray:
    """Per rotary block j < rotary_dim/2: ``‖X[:, j]‖² + ‖X[:, j + rotary_dim/2]‖²``
    (HF ``rotate_half`` pairs dimension j with j + rotary_dim/2)."""
    half = rotary_dim // 2
    diag = np.diag(gram)
    return diag[:half] + diag[half : 2 * half]


def pair_statistics(
    a: Factor | np.ndarray,
    b: Factor | np.ndarray,
    *,
    rank_tol: float = 1e-3,
    rotary_dim: int = 0,
) -> dict[str, float]:
    """The :data:`STATISTICS` of the pair ``A`` (m×r), ``B`` (n×r), as floats.

    ``rotary_dim > 0`` adds the rotary-block balance (docs/theory.md, "Rotary embeddings"):
    only the block energies ``e[j] = ‖A[:, j]‖² + ‖A[:, j']‖²`` (j' = j + rotary_dim/2)
    are balanced by weight decay when q and k are rotated; NaN otherwise. With partial
    rotary (``0 < rotary_dim < r``) the dimensions ``rotary_dim..r`` are not rotated, so
    their whole Gram sub-block balances: ``nonrotary_gap_rel``; NaN otherwise.
    Correlations use each entry of the symmetric Grams once (i ≤ j, or i < j).

    Examples:
        ``B = QA`` with Q orthogonal has ``BᵀB = AᵀA``: balanced, and then the penalty
        ½(‖A‖² + ‖B‖²) equals ‖ABᵀ‖_* (T1). ``2QA`` is not balanced:

        >>> import numpy as np
        >>> from rankflow.inspect import pair_statistics
        >>> rng = np.random.default_rng(0)
        >>> A = rng.standard_normal((6, 2))
        >>> Q = np.linalg.qr(rng.standard_normal((6, 6)))[0]
        >>> s = pair_statistics(A, Q @ A)
        >>> bool(s["balance_gap_rel"] < 1e-12), bool(abs(s["frob_minus_nuc_rel"]) < 1e-12)
        (True, True)
        >>> s = pair_statistics(A, 2 * Q @ A)
        >>> round(float(s["balance_gap_rel"]), 3), round(s["frob_minus_nuc_rel"], 3), s["rank"]
        (1.2, 0.2, 2.0)
    """
    a = a if isinstance(a, Factor) else Factor.of(a)
    b = b if isinstance(b, Factor) else Factor.of(b)
    Ga, Gb = a.gram, b.gram
    r = Ga.shape[0]
    D = Ga - Gb
    na, nb = np.linalg.norm(Ga), np.linalg.norm(Gb)
    gap = float(np.linalg.norm(D))
    upper, strict = np.triu_indices(r), np.triu_indices(r, k=1)
    s = np.linalg.svd(a.S @ b.S.T, compute_uv=False)
    nuclear = float(s.sum())
    l2 = 0.5 * float(np.trace(Ga) + np.trace(Gb))
    top = float(s[0]) if s.size else 0.0
    if nuclear > 0:
        p = s[s > 0] / nuclear
        eff = float(np.exp(-np.sum(p * np.log(p))))
    else:
        eff = 0.0
    out = {
        "gram_a_norm": float(na),
        "gram_b_norm": float(nb),
        "balance_gap": gap,
        "balance_gap_rel": _relative(gap, na, nb),
        "balance_trace": float(np.trace(D)),
        "balance_nuclear": float(np.abs(np.linalg.eigvalsh(D)).sum()),
        "gram_corr": pearson(Ga[upper], Gb[upper]),
        "gram_corr_offdiag": pearson(Ga[strict], Gb[strict]),
        "l2_penalty": l2,
        "nuclear_norm": nuclear,
        "frob_minus_nuc": l2 - nuclear,
        "frob_minus_nuc_rel": (l2 - nuclear) / l2 if l2 > 0 else float("nan"),
        "effective_rank": eff,
        "stable_rank": float(np.sum(s**2) / top**2) if top > 0 else 0.0,
        "rank": float(np.sum(s > rank_tol * top)),
        "rotary_gap_rel": float("nan"),
        "rotary_corr": float("nan"),
        "nonrotary_gap_rel": float("nan"),
    }
    if rotary_dim:
        ea, eb = block_energies(Ga, rotary_dim), block_energies(Gb, rotary_dim)
        diff = float(np.linalg.norm(ea - eb))
        out["rotary_gap_rel"] = _relative(diff, np.linalg.norm(ea), np.linalg.norm(eb))
        out["rotary_corr"] = pearson(ea, eb)
    if 0 < rotary_dim < r:
        sa, sb = Ga[rotary_dim:, rotary_dim:], Gb[rotary_dim:, rotary_dim:]
        diff = float(np.linalg.norm(sa - sb))
        out["nonrotary_gap_rel"] = _relative(diff, np.linalg.norm(sa), np.linalg.norm(sb))
    return out
