"""What the theory says of a dynamics kind, in the form its kind declares it: the balancing
laws (per-step decay rates of ``‖D‖``, from :mod:`rankflow.theory`; nothing re-derived)
and the factors' decay on a zero loss (``∇L ≡ 0``, ``M(0) = 0``, no noise), where
``θ(t) = c(t)·θ(0)``.

Rates take ``λ > 0`` (``λ = 0`` conserves D: ``rankflow.fitting.predict`` says so for
every kind).
"""

from __future__ import annotations

import numpy as np

from ... import theory
from .kind import BalanceLaw

__all__ = [
    "coupled_momentum_decay",
    "coupled_momentum_flow_decay",
    "gd_decay",
    "gd_law",
    "gf_decay",
    "gf_law",
    "gradient_noise_law",
    "momentum_law",
    "schedule_free_decay",
    "sgf_mean_law",
]


def gf_law(eta: float, lam: float) -> BalanceLaw:
    """T4 (exact): ``‖D‖`` decays at ``2ηλ`` per step under gradient flow."""
    base = 2 * eta * lam
    return BalanceLaw(base, base, "T4", "T4: 2ηλ", exact=True)


def sgf_mean_law(eta: float, lam: float) -> BalanceLaw:
    """T6, T10: the mean of D under parameter or minibatch noise decays at T4's ``2ηλ``
    (a path floors at T6's ``sgf_floor``)."""
    base = 2 * eta * lam
    return BalanceLaw(base, base, "T6", "T6/T10: 2ηλ for the mean; a path floors", exact=True)


def gradient_noise_law(
    eta: float, lam: float, sigma: float, shape: tuple[int, int] | None
) -> BalanceLaw | str:
    """T9 (exact at ``m = n``): gradient-space noise adds ``η²σ²m`` to the rate; no closed
    rate at ``m ≠ n``."""
    if shape is None or shape[0] != shape[1]:
        return "gradient noise at m ≠ n: T9's drift has no closed rate"
    base = 2 * eta * lam
    r = base + eta**2 * float(sigma) ** 2 * shape[0]
    return BalanceLaw(r, r, "T9", "T9: 2ηλ + η²σ²m (m = n)", exact=True)


def momentum_law(eta: float, lam: float, mu: float | None) -> BalanceLaw | str:
    """T7: the decoupled momentum flow's orbit rate
    (:func:`rankflow.theory.momentum_orbit_rate`), also discrete momentum's."""
    if not (mu and mu > 0):
        return "momentum without μ"
    base = 2 * eta * lam
    r = float(theory.momentum_orbit_rate(eta, lam, mu)) * base
    return BalanceLaw(r, r, "T7", "T7: the decoupled momentum flow's orbit rate")


def gd_law(eta: float, lam: float) -> BalanceLaw:
    """T5: GD's late rate lies in ``[−log(1−ηλ)², −log(1−2ηλ)]`` per step
    (:func:`rankflow.theory.gd_rate_bracket`)."""
    base = 2 * eta * lam
    low, high = (float(x) * base for x in theory.gd_rate_bracket(eta, lam))
    return BalanceLaw(low, high, "T5", "T5: [−log(1−ηλ)², −log(1−2ηλ)] per step")


def gf_decay(t: float, eta: float, lam: float, mu: float | None = None) -> float:
    """Gradient flow on a zero loss: ``dθ/dt = −ηλθ``, so ``c(t) = e^{−ηλt}`` (T4's
    ``e^{−2ηλt}`` of D is its square); also the decoupled momentum flow's (M stays 0)."""
    return float(np.exp(-eta * lam * t))


def gd_decay(k: float, eta: float, lam: float, mu: float | None = None) -> float:
    """GD on a zero loss: ``θ_{k+1} = (1 − ηλ)θ_k``, so ``c(k) = (1 − ηλ)^k`` (T5's
    ``(1 − ηλ)²`` of D per step is its square); also decoupled momentum's, AdamW's and the
    sign and orthogonalised kinds' (sign_gd, signum, lion, muon), whose directions stay 0
    on zero gradients."""
    return float((1.0 - eta * lam) ** k)


def schedule_free_decay(
    k: float, eta: float, lam: float, mu: float | None = None, b1: float = 0.9
) -> float:
    """Schedule-free AdamW (``optax.contrib.schedule_free_adamw``, its ``b1``) on a zero
    loss, at the iterate ``y`` (where gradients are taken, rankflow's θ): its base step
    is ``z_{k+1} = z_k − ηλ y_k`` (Adam's direction is 0), then ``x_{k+1} = (1 − c_k)x_k +
    c_k z_{k+1}`` with ``c_k = 1/(k+1)`` (constant η, weights η²) and ``y_{k+1} = b1·x_{k+1}
    + (1 − b1)·z_{k+1}``, from ``x_0 = y_0 = z_0 = θ_0``. Every sequence stays a multiple of
    θ_0; ``c(k)`` is y's, iterated (it is not GD's ``(1 − ηλ)^k``: the decay acts at y on
    z, and y averages z's history)."""
    x = y = z = 1.0
    for i in range(int(k)):
        z = z - eta * lam * y
        c = 1.0 / (i + 1)
        x = (1.0 - c) * x + c * z
        y = b1 * x + (1.0 - b1) * z
    return float(y)


def coupled_momentum_decay(k: float, eta: float, lam: float, mu: float) -> float:
    """Coupled momentum on a zero loss: ``M_{k+1} = (1−μ)M_k + μλθ_k``,
    ``θ_{k+1} = θ_k − ηM_{k+1}``, a linear map of ``(θ, M)`` per step:
    ``c(k) = (T^k)₀₀`` with ``T = [[1 − ημλ, −η(1−μ)], [μλ, 1−μ]]`` (``M(0) = 0``)."""
    T = np.array([[1.0 - eta * mu * lam, -eta * (1.0 - mu)], [mu * lam, 1.0 - mu]])
    return float(np.linalg.matrix_power(T, int(k))[0, 0])


def coupled_momentum_flow_decay(t: float, eta: float, lam: float, mu: float) -> float:
    """The coupled momentum flow on a zero loss: ``θ' = −ηM``, ``M' = μ(λθ − M)``, so
    ``c(t) = (e^{tK})₀₀`` with ``K = [[0, −η], [μλ, −μ]]``: for a 2×2 ``K`` of trace
    ``τ = −μ`` and determinant ``δ = ημλ``, ``e^{tK} = e^{τt/2}(cosh(st)·I +
    sinh(st)/s·(K − τI/2))`` with ``s = √(τ²/4 − δ)`` (complex where negative)."""
    tau, det = -mu, eta * mu * lam
    s = np.sqrt(complex(tau**2 / 4 - det))
    sinh_over_s = np.sinh(s * t) / s if s != 0 else t
    return float(np.real(np.exp(tau * t / 2) * (np.cosh(s * t) + sinh_over_s * (0.0 - tau / 2))))
