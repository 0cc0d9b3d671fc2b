"""The theory's decay rate of a balance gap, from a run's own parameters (docs/theory.md).

Every number here is read from :mod:`rankflow.theory`; nothing is re-derived. A
:class:`Prediction` is a per-step rate of ``‖D‖`` (``low == high`` for an exact law, a
bracket otherwise), the theory item it comes from, and, for dynamics with no closed
rate, the reason there is none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.dynamics import DYNAMICS, KindMap, KindNames

__all__ = ["NO_PREDICTION", "Prediction", "predict"]


# Dynamics without a closed balancing rate, and why (said in the table and the legend):
# each registered kind's ``no_balance_law``, read live.
NO_PREDICTION = KindMap(
    KindNames(lambda k: k.no_balance_law is not None), lambda k: k.no_balance_law
)


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

    Each law is the registered kind's
    (:meth:`rankflow.core.dynamics.kind.DynamicsKind.balance_law`).

    Examples:
        >>> from rankflow.fitting import predict
        >>> p = predict("gd", 0.1, 0.5)  # ηλ = 0.05
        >>> round(p.low, 6), round(p.high, 6), p.source
        (0.102587, 0.105361, 'T5')
        >>> predict("adamw", 1e-3, 0.1).law
        'no prediction (AdamW: the update is not a gradient)'
    """
    eta, lam = float(eta), float(lam)
    dynamics = DYNAMICS.get(kind)
    if dynamics is not None and dynamics.no_balance_law:
        return _none(dynamics.no_balance_law)
    if lam == 0:
        return Prediction(0.0, 0.0, "T4/T5", "λ = 0: D conserved (up to GD's O(η²) term)")
    if dynamics is None:
        return _none(f"no theory for dynamics {kind!r}")
    law = dynamics.balance_law(eta, lam, mu=mu, noise=noise, sigma=sigma, shape=shape)
    return _none(law) if isinstance(law, str) else Prediction(*law)
