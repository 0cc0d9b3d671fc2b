# ruff: noqa: F722  (jaxtyping shape strings such as "m r" are not forward references)
"""T8 (and T4–T7 measured): rates and orders fitted to simulations; numpy post-processing."""

from __future__ import annotations

import numpy as np
from jaxtyping import ArrayLike

# --- T8: rates and orders from simulations (numpy post-processing) -------------------------


def _ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y against x and its standard error (NaN for 2 points)."""
    k = x.size
    if k < 2:
        raise ValueError(f"need at least 2 usable points to fit a slope, got {k}")
    xc = x - x.mean()
    sxx = float(np.sum(xc**2))
    if sxx == 0.0:
        raise ValueError("cannot fit a slope: all abscissae are equal")
    slope = float(np.sum(xc * (y - y.mean())) / sxx)
    if k == 2:
        return slope, float("nan")
    residuals = y - y.mean() - slope * xc
    return slope, float(np.sqrt(np.sum(residuals**2) / (k - 2) / sxx))


def _paired(what: str, x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as flat float64 arrays of one size; a ValueError starting with
    ``what`` (the function and the arrays' names) when their sizes differ."""
    x = np.asarray(x, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{what} differ in size: {x.size} vs {y.size}")
    return x, y


def fit_rate(
    t: ArrayLike,
    y: ArrayLike,
    *,
    t_min: float | None = None,
    t_max: float | None = None,
) -> tuple[float, float]:
    """T8 (and T4–T7 measured): the exponential decay rate of ``y(t) ≈ e^{a − rate·t}``.

    Least squares of ``log y`` on ``t`` over the points with ``t_min ≤ t ≤ t_max`` and
    finite ``y > 0`` (others are dropped). ``t`` in steps, so the rate is per step
    (compare with :func:`gf_balance_rate`). Not jittable: numpy post-processing;
    accepts numpy or jax arrays.

    Returns:
      ``(rate, stderr)`` as Python floats; ``stderr`` is the standard error of the slope
      from the residuals (NaN with only two points).

    Examples:
      >>> import numpy as np
      >>> from rankflow.theory import fit_rate, gf_balance_gap, gf_balance_rate
      >>> t = np.arange(0.0, 50.0, 5.0)
      >>> rate, stderr = fit_rate(t, gf_balance_gap(5.0, 0.5, 0.1, t))  # T4's ‖D(t)‖
      >>> round(rate, 4), round(float(gf_balance_rate(0.5, 0.1)), 4)
      (0.1, 0.1)
    """
    t, y = _paired("fit_rate: t and y", t, y)
    keep = np.isfinite(t) & np.isfinite(y) & (y > 0)
    if t_min is not None:
        keep &= t >= t_min
    if t_max is not None:
        keep &= t <= t_max
    slope, stderr = _ols_slope(t[keep], np.log(y[keep]))
    return -slope, stderr


def convergence_order(h: ArrayLike, err: ArrayLike) -> tuple[float, float]:
    """T8: the order p of ``err ≈ C hᵖ``: least-squares slope of ``log err`` on ``log h``.

    Points with non-finite or non-positive h or err are dropped. For GD against GF
    (T8), h is η (at a fixed horizon ηk) and p should be 1.

    Returns:
      ``(order, stderr)`` as Python floats (stderr NaN with only two points).

    Examples:
      >>> import numpy as np
      >>> from rankflow.theory import convergence_order
      >>> eta = np.array([0.1, 0.05, 0.025, 0.0125])  # λ = 1, horizon ηk = 1
      >>> err = np.abs((1 - eta) ** (2 / eta) - np.exp(-2.0))  # GD's (1 − ηλ)^{2k} against GF's
      >>> order, stderr = convergence_order(eta, err)
      >>> round(order, 2)
      1.01
    """
    h, err = _paired("convergence_order: h and err", h, err)
    keep = np.isfinite(h) & np.isfinite(err) & (h > 0) & (err > 0)
    return _ols_slope(np.log(h[keep]), np.log(err[keep]))
