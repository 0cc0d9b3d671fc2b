"""Singular-value spectra of attention weights, with a noise edge instead of a tolerance.

Per head: the nonzero singular values of ``W_QK^h = W_Q^h W_K^gᵀ`` and
``W_OV^h = W_V^g W_O^h`` (D×D, rank ≤ d_h); per layer: the full ``W_Q``, ``W_K``, ``W_V``,
``W_O``. Column names follow weightwatcher's so tables can be joined: ``num_evals``,
``spectral_norm`` (λ_max = s_1²), ``stable_rank`` (‖W‖_F² / ‖W‖_2²), ``mp_softrank``
(λ₊ / λ_max, λ₊ the Marchenko–Pastur bulk edge), ``num_spikes``, ``alpha``, ``D`` (the
power-law fit's Kolmogorov–Smirnov distance), ``xmin``, ``num_pl_spikes`` (tail size)
and the ``rand_`` twins of each, measured on the matrix with its entries shuffled.

Noise edge of one m×n matrix Y (n ≤ m, β = n/m), Y = signal + σZ, Z i.i.d. unit entries:
σ is estimated from the median singular value (Gavish & Donoho 2014,
σ̂ = s_med / √(m·μ_β), μ_β the median of the Marchenko–Pastur law of ratio β), which a
few large singular values barely move; the bulk edge is s₊ = σ̂(√m + √n); a singular
value counts as a spike above the finite-size threshold σ̂²(μ_mn + t·σ_mn) of Johnstone
(2001) for the largest eigenvalue of ZᵀZ, t the 99% quantile of Tracy–Widom (β = 1), so
pure noise shows a spike in about 1% of matrices instead of the ~17% that the bare
edge gives.

Per-head products: the factors' noise levels σ_a, σ_b are estimated as above on each
D×d_h factor; if both were noise, the nonzero s² of ABᵀ would follow the free product
of two Marchenko–Pastur laws of ratio c = d_h/D, whose upper edge is
σ_a²σ_b²D²/max_z χ(z), χ(z) = z / ((1+z)(1+cz)²) (the S-transform 1/(1+cz) squared).
Its finite-size margin is taken as the product of the two factors' Tracy–Widom margins
(a heuristic whose false-spike rate the tests measure).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "SPECTRUM_COLUMNS",
    "matrix_spectrum",
    "mp_median",
    "noise_sigma",
    "powerlaw_fit",
    "product_spectrum",
    "spectrum_statistics",
]

# 99% quantile of the Tracy–Widom law for real matrices (β = 1).
TW1_Q99 = 2.0234
# Fewer tail eigenvalues than this: no power-law fit (alpha = NaN).
MIN_TAIL = 10

SPECTRUM_COLUMNS = (
    "m",  # rows (the larger side)
    "n",  # columns
    "num_evals",  # nonzero singular values considered
    "spectral_norm",  # λ_max = s_1²
    "stable_rank",  # Σs² / s_1²
    "mp_sigma",  # σ̂, the noise level per entry (median rule)
    "mp_edge",  # s₊, the bulk edge of the singular values
    "num_spikes",  # singular values above the finite-size threshold
    "mp_softrank",  # s₊² / s_1² (weightwatcher: λ₊ / λ_max)
    "alpha",  # power-law exponent of the eigenvalue tail (CSN maximum likelihood)
    "D",  # its Kolmogorov–Smirnov distance
    "xmin",  # where the tail starts
    "num_pl_spikes",  # eigenvalues in the tail
)


@functools.cache
def mp_median(beta: float) -> float:
    """Median of the Marchenko–Pastur law of ratio ``beta`` ∈ (0, 1], variance 1 (the
    eigenvalues of ZᵀZ/m for Z m×n, n = βm)."""
    from scipy.integrate import quad
    from scipy.optimize import brentq

    lo, hi = (1 - np.sqrt(beta)) ** 2, (1 + np.sqrt(beta)) ** 2

    def density(x):
        return np.sqrt(max((hi - x) * (x - lo), 0.0)) / (2 * np.pi * beta * x)

    def cdf(x):
        return quad(density, lo, x, limit=200)[0]

    return brentq(lambda x: cdf(x) - 0.5, lo, hi, xtol=1e-12)


def _shape(m: int, n: int) -> tuple[int, int]:
    return (m, n) if m >= n else (n, m)


def noise_sigma(s: np.ndarray, m: int, n: int) -> float:
    """σ̂ of an m×n matrix with singular values ``s`` (all min(m, n) of them), by the
    median rule of Gavish & Donoho: s_med / √(m·μ_β), m the larger side.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import noise_sigma
        >>> Z = 0.5 * np.random.default_rng(0).standard_normal((200, 100))  # σ = 0.5
        >>> round(noise_sigma(np.linalg.svd(Z, compute_uv=False), 200, 100), 1)
        0.5
    """
    m, n = _shape(m, n)
    return float(np.median(s) / np.sqrt(m * mp_median(n / m)))


def _tw_threshold(m: int, n: int) -> float:
    """Johnstone's 99% threshold for the largest eigenvalue of ZᵀZ, Z m×n i.i.d. unit
    entries (centring and scale with the half-integer corrections)."""
    a, b = np.sqrt(m - 0.5), np.sqrt(n - 0.5)
    mu, scale = (a + b) ** 2, (a + b) * (1 / a + 1 / b) ** (1 / 3)
    return float(mu + TW1_Q99 * scale)


def powerlaw_fit(evals: np.ndarray, min_tail: int = MIN_TAIL) -> tuple[float, float, float, int]:
    """``(alpha, D, xmin, n_tail)``: the continuous power law p(x) ∝ x^−α on x ≥ xmin
    fitted to the positive ``evals`` by maximum likelihood (α = 1 + n / Σ log(x/xmin)),
    xmin the candidate minimising the Kolmogorov–Smirnov distance D between the tail's
    empirical and fitted distributions (Clauset, Shalizi & Newman 2009, as powerlaw and
    weightwatcher do). NaNs where fewer than ``min_tail`` eigenvalues exist.

    Examples:
        5,000 draws of the Pareto law p(x) ∝ x^−3 on x ≥ 1:

        >>> import numpy as np
        >>> from rankflow.inspect import powerlaw_fit
        >>> x = (1 - np.random.default_rng(0).random(5000)) ** -0.5
        >>> alpha, D, xmin, n_tail = powerlaw_fit(x)
        >>> round(alpha, 1), n_tail > 1000
        (3.0, True)
        >>> powerlaw_fit(np.array([1.0, 2.0, 3.0]))  # too few for a tail
        (nan, nan, nan, 0)
    """
    x = np.sort(np.asarray(evals, dtype=np.float64))
    x = x[x > 0]
    N = len(x)
    if N < min_tail:
        return float("nan"), float("nan"), float("nan"), 0
    best = (np.inf, float("nan"), float("nan"), 0)
    logs = np.log(x)
    for i in range(N - min_tail + 1):
        tail_logs = logs[i:] - logs[i]
        n = N - i
        total = tail_logs.sum()
        if total <= 0:
            continue
        alpha = 1 + n / total
        fit_cdf = 1 - np.exp((1 - alpha) * tail_logs)
        emp_hi = np.arange(1, n + 1) / n
        ks = float(np.max(np.maximum(np.abs(emp_hi - fit_cdf), np.abs(emp_hi - 1 / n - fit_cdf))))
        if ks < best[0]:
            best = (ks, alpha, x[i], n)
    ks, alpha, xmin, n = best
    return float(alpha), float(ks), float(xmin), int(n)


def spectrum_statistics(
    s: np.ndarray, m: int, n: int, sigma: float, edge: float, threshold: float
) -> dict:
    """The :data:`SPECTRUM_COLUMNS` of singular values ``s`` of an m×n matrix whose noise
    level ``sigma``, bulk edge ``edge`` and spike threshold (on s) are given."""  # fmt: skip
    s = np.sort(np.asarray(s, dtype=np.float64))[::-1]
    s = s[s > s[0] * 1e-12] if len(s) and s[0] > 0 else s[:0]
    top = float(s[0]) if len(s) else 0.0
    alpha, ks, xmin, tail = powerlaw_fit(s**2)
    m, n = _shape(m, n)
    return {
        "m": m,
        "n": n,
        "num_evals": len(s),
        "spectral_norm": top**2,
        "stable_rank": float(np.sum(s**2) / top**2) if top else float("nan"),
        "mp_sigma": sigma,
        "mp_edge": edge,
        "num_spikes": int(np.sum(s > threshold)),
        "mp_softrank": edge**2 / top**2 if top else float("nan"),
        "alpha": alpha,
        "D": ks,
        "xmin": xmin,
        "num_pl_spikes": tail,
    }


def _matrix_noise(s: np.ndarray, m: int, n: int) -> tuple[float, float, float]:
    """``(σ̂, bulk edge, spike threshold)`` of an m×n matrix from its singular values."""
    m, n = _shape(m, n)
    sigma = noise_sigma(s, m, n)
    return sigma, sigma * (np.sqrt(m) + np.sqrt(n)), sigma * np.sqrt(_tw_threshold(m, n))


def matrix_spectrum(X: np.ndarray) -> dict:
    """:data:`SPECTRUM_COLUMNS` of one matrix X (m×n), its noise edge by the median rule.

    Examples:
        Noise of σ = 0.5 (bulk edge σ(√200 + √100) ≈ 12) plus one planted direction
        ``2uvᵀ/10``, whose singular value (≈ 25) stands out as the one spike:

        >>> import numpy as np
        >>> from rankflow.inspect import matrix_spectrum
        >>> rng = np.random.default_rng(0)
        >>> Z = 0.5 * rng.standard_normal((200, 100))
        >>> u, v = rng.standard_normal(200), rng.standard_normal(100)
        >>> s = matrix_spectrum(Z + 2 * np.outer(u, v) / 10)
        >>> s["m"], s["n"], s["num_evals"], s["num_spikes"], round(s["mp_sigma"], 1)
        (200, 100, 100, 1, 0.5)
        >>> bool(s["spectral_norm"] ** 0.5 > 2 * s["mp_edge"])
        True
        >>> matrix_spectrum(Z)["num_spikes"]  # the noise alone
        0
    """
    m, n = X.shape
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)
    return spectrum_statistics(s, m, n, *_matrix_noise(s, m, n))


def free_product_edge(c: float) -> float:
    """Upper edge of the free multiplicative convolution of two Marchenko–Pastur laws of
    ratio ``c`` (mean 1): 1/max_z χ(z), χ(z) = z/((1+z)(1+cz)²), attained at the root
    z* = (−c + √(c² + 8c)) / (4c) of 2cz² + cz − 1 = 0."""
    z = (-c + np.sqrt(c * c + 8 * c)) / (4 * c)
    return float((1 + z) * (1 + c * z) ** 2 / z)


def product_spectrum(A: np.ndarray, B: np.ndarray) -> dict:
    """:data:`SPECTRUM_COLUMNS` of W = ABᵀ (A, B: D×r, D ≥ r): its r nonzero singular
    values (those of R_A R_Bᵀ from the QR factors) against the free-product edge of two
    noise factors, each factor's σ by the median rule (module docstring).

    Examples:
        Two noise factors (64×4), then the same with two strong shared directions:

        >>> import numpy as np
        >>> from rankflow.inspect import product_spectrum
        >>> rng = np.random.default_rng(0)
        >>> A, B = rng.standard_normal((64, 4)), rng.standard_normal((64, 4))
        >>> s = product_spectrum(A, B)
        >>> s["m"], s["n"], s["num_evals"], s["num_spikes"]
        (64, 64, 4, 0)
        >>> P = np.eye(64, 4) @ np.diag([40.0, 30.0, 0.0, 0.0])
        >>> product_spectrum(A + P, B + P)["num_spikes"]
        2
    """
    D, r = A.shape
    Ra, Rb = np.linalg.qr(A, mode="r"), np.linalg.qr(B, mode="r")
    s = np.linalg.svd(Ra @ Rb.T, compute_uv=False)
    sa, sb = (np.linalg.svd(R, compute_uv=False) for R in (Ra, Rb))
    noise_a, noise_b = _matrix_noise(sa, D, r), _matrix_noise(sb, D, r)
    sigma = noise_a[0] * noise_b[0]
    edge = sigma * D * np.sqrt(free_product_edge(r / D))
    margin = (noise_a[2] / noise_a[1]) * (noise_b[2] / noise_b[1])
    return spectrum_statistics(s, D, D, sigma, edge, edge * margin)


def shuffled(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """X with its entries permuted uniformly at random (same shape and entries)."""
    return rng.permutation(X.ravel()).reshape(X.shape)
