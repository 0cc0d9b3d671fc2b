"""Every dynamics of the core family gets a prediction from rankflow.theory, or none
with its reason said; the numbers are the theory's (T4, T5, T7, T9), not a plausible
wrong version (T9 without its η²σ²m, momentum at gradient flow's rate)."""

from __future__ import annotations

import pytest

from rankflow import theory
from rankflow.core.vocabulary import DYNAMICS_KINDS
from rankflow.fitting import NO_PREDICTION, predict

ETA, LAM = 0.1, 0.2


@pytest.mark.parametrize("kind", DYNAMICS_KINDS)
def test_every_kind_has_a_prediction_or_says_why_not(kind):
    p = predict(kind, ETA, LAM, mu=0.5, noise="gradient", sigma=0.3, shape=(4, 4))
    if kind in NO_PREDICTION:
        assert not p.available and p.law.startswith("no prediction (") and p.source == "none"
    else:
        assert p.available and p.source in ("T4", "T5", "T6", "T7", "T9"), p


def test_numbers_are_the_theorys():
    base = 2 * ETA * LAM
    low, high = theory.gd_rate_bracket(ETA, LAM)
    assert (predict("sgd", ETA, LAM).low, predict("sgd", ETA, LAM).high) == (
        pytest.approx(float(low) * base, rel=1e-15),
        pytest.approx(float(high) * base, rel=1e-15),
    )
    orbit = float(theory.momentum_orbit_rate(ETA, LAM, 0.5)) * base
    assert predict("momentum", ETA, LAM, mu=0.5).low == pytest.approx(orbit, rel=1e-15)
    assert predict("momentum", ETA, LAM, mu=0.5).low != pytest.approx(base, rel=1e-3)
    t9 = predict("stochastic_flow", ETA, LAM, noise="gradient", sigma=0.3, shape=(4, 4))
    assert t9.exact and t9.low == pytest.approx(base + ETA**2 * 0.09 * 4, rel=1e-15)
    assert t9.low != pytest.approx(base, rel=1e-3)  # the wrong version without η²σ²m
    assert not predict("stochastic_flow", ETA, LAM, noise="gradient", shape=(4, 5)).available
    assert predict("gradient_flow", ETA, LAM).low == predict("gradient_flow", ETA, LAM).high == base
