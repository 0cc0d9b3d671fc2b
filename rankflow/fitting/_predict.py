"""The theory's decay rate of a balance gap, from a run's own parameters (docs/theory.md).

Every number here is read from :mod:`rankflow.theory`; nothing is re-derived. A
:class:`Prediction` is a per-step rate of ``‖D‖`` (``low == high`` for an exact law, a
bracket otherwise), the theory item it comes from, and, for dynamics with no closed
rate, the reason there is none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import theory

__all__ = ["NO_PREDICTION", "Prediction", "predict"]

# Dynamics without a closed balancing rate, and why (said in the table and the legend).
NO_PREDICTION = {
    "adamw": "AdamW: the update is not a gradient",
    "adam_l2": "Adam with L2: the update is not a gradient",
    "momentum_coupled": "coupled momentum: T7 gives no closed rate",
    "momentum_flow_coupled": "coupled momentum flow: T7 gives no closed rate",
    "stochastic_momentum_flow": "noisy momentum flow: no closed rate (T6/T7)",
}
GF_KINDS = ("gradient_flow",)
GD_KINDS = ("gd", "sgd", "sgd_gaussian")
MOMENTUM_KINDS = ("momentum", "momentum_flow")


@dataclass(frozen=True)
class Prediction:
    """A predicted per-step decay rate of ``‖D‖`` in ``[low, high]`` (``exact``: one
    value, ``low == high``); ``source`` names the theory item (``"T5"``) and ``law`` says
    it in words; NaN rates and ``law`` the reason where there is no prediction.

    Examples:
        >>> from rankflow.fitting import Prediction, predict
        >>> p = predict("gradient_flow", 0.5, 0.1)  # T4: 2ηλ = 0.1, one value
        >>> p.low == p.high == 0.1, p.exact, p.available
        (True, True, True)
        >>> predict("adam_l2", 1e-3, 0.1).available  # no closed rate: NaN bounds
        False
    """

    low: float
    high: float
    source: str
    law: str
    exact: bool = False

    @property
    def available(self) -> bool:
        return bool(np.isfinite(self.low))


def _none(reason: str) -> Prediction:
    return Prediction(float("nan"), float("nan"), "none", f"no prediction ({reason})")


def predict(
    kind: str,
    eta: float,
    lam: float,
    *,
    mu: float | None = None,
    noise: str | None = None,
    sigma: float = 0.0,
    shape: tuple[int, int] | None = None,
) -> Prediction:
    """The rate at which ``‖D‖`` of one factor pair (any depth pair, T12; any head) decays
    per step under dynamics ``kind`` with learning rate ``eta`` and decoupled decay
    ``lam``; ``mu`` momentum's EMA weight, ``noise``/``sigma`` the noise model and its
    std, ``shape`` ``(m, n)`` of W (T9's exact law needs ``m = n``).

    - ``gradient_flow`` (T4, exact): ``2ηλ``; the stochastic flow with parameter or
      minibatch noise: T4's rate for the mean (T6, T10; a path floors at T6's ``sgf_floor``);
      with gradient noise at ``m = n`` (T9, exact): ``2ηλ + η²σ²m``;
    - ``gd``, ``sgd``, ``sgd_gaussian`` (T5): ``[−log(1−ηλ)², −log(1−2ηλ)]``, the
      leading law's rate at the low end (:func:`rankflow.theory.gd_rate_bracket`);
    - ``momentum``, ``momentum_flow`` (T7): the orbit rate
      (:func:`rankflow.theory.momentum_orbit_rate`);
    - others (:data:`NO_PREDICTION`): none, with the reason.

    Examples:
        >>> from rankflow.fitting import predict
        >>> p = predict("gd", 0.1, 0.5)  # ηλ = 0.05
        >>> round(p.low, 6), round(p.high, 6), p.source
        (0.102587, 0.105361, 'T5')
        >>> predict("adamw", 1e-3, 0.1).law
        'no prediction (AdamW: the update is not a gradient)'
    """
    eta, lam = float(eta), float(lam)
    base = 2 * eta * lam
    if kind in NO_PREDICTION:
        return _none(NO_PREDICTION[kind])
    if lam == 0:
        return Prediction(0.0, 0.0, "T4/T5", "λ = 0: D conserved (up to GD's O(η²) term)")
    if kind in GF_KINDS or (kind == "stochastic_flow" and noise != "gradient"):
        law = "T4: 2ηλ" if kind in GF_KINDS else "T6/T10: 2ηλ for the mean; a path floors"
        return Prediction(base, base, "T4" if kind in GF_KINDS else "T6", law, exact=True)
    if kind == "stochastic_flow":
        if shape is None or shape[0] != shape[1]:
            return _none("gradient noise at m ≠ n: T9's drift has no closed rate")
        r = base + eta**2 * float(sigma) ** 2 * shape[0]
        return Prediction(r, r, "T9", "T9: 2ηλ + η²σ²m (m = n)", exact=True)
    if kind in MOMENTUM_KINDS:
        if not (mu and mu > 0):
            return _none("momentum without μ")
        r = float(theory.momentum_orbit_rate(eta, lam, mu)) * base
        return Prediction(r, r, "T7", "T7: the decoupled momentum flow's orbit rate")
    if kind in GD_KINDS:
        low, high = (float(x) * base for x in theory.gd_rate_bracket(eta, lam))
        return Prediction(low, high, "T5", "T5: [−log(1−ηλ)², −log(1−2ηλ)] per step")
    return _none(f"no theory for dynamics {kind!r}")
