"""The window detector on synthetic gaps with known breakpoints (floor, rounding, slower
phase, none, a faster transient), and the wrong detections shown to fail: without
hysteresis a noisy law breaks at a noise spike; without the rounding check a gap at
the rounding level is called a floor; a detector that skips every off-law start hides a
slower law; a wrong law (ηλ, 4ηλ) is fitted over the whole run and fails its verdict."""

from __future__ import annotations

import numpy as np
import pytest

from rankflow import fitting
from rankflow.fitting import _window, find_window, fit_series, predict

ETA, LAM = 0.1, 0.1
P = predict("gd", ETA, LAM)  # T5: rate in [0.020101, 0.020203] per step
K = np.arange(0.0, 2000.0, 10.0)
LAW = (1 - ETA * LAM) ** (2 * K)  # T5's leading law, at the bracket's low end


def _noisy(y, rel, seed=0):
    return y * np.exp(rel * np.random.default_rng(seed).standard_normal(y.size))


def test_none_the_law_to_the_end_of_run():
    w = find_window(K, LAW, P.low, P.high)
    assert (w.start, w.stop, w.end) == (0, K.size, "end of run")
    row = fit_series(K, LAW, P)
    assert row["verdict"] == "pass" and row["rate"] == pytest.approx(P.low, rel=1e-12)


def test_floor_ends_the_window_at_the_known_break():
    """A noisy law reaching a noise floor at k = 1000: the window ends at most five saves
    before it and never after, named floor, and the fit over it passes (over the whole
    run it fails)."""
    y = _noisy(np.maximum(LAW, LAW[100]), 0.02)
    w = find_window(K, y, P.low, P.high)
    assert w.end == "floor" and 1000 - 50 <= K[w.stop - 1] <= 1000, w  # never past it
    assert fit_series(K, y, P)["verdict"] == "pass"
    assert fit_series(K, y, P, t_max=K[-1])["verdict"] == "fail"  # the floor fitted too


def test_slower_phase_named_with_its_own_rate():
    """Rate 2ηλ·(1 − ηλ)-law to k = 800, then 0.2 of it: 'slower phase', its rate fitted."""
    logy = np.where(K <= 800, np.log(LAW), np.log(LAW[80]) - 0.2 * P.low * (K - 800))
    row = fit_series(K, np.exp(logy), P)
    assert row["end"] == "slower phase" and 800 - 50 <= row["t_max"] <= 800, row
    assert row["verdict"] == "pass"
    assert row["slow_rate"] == pytest.approx(0.2 * P.low, rel=0.01)  # from half a local fit early


def test_rounding_named_and_the_mutant_without_it_is_not():
    """A law reaching the float64 rounding level of factors of size 1 (‖A‖² + ‖B‖² = 2):
    below ROUNDING·eps·2 the gap is rounding noise; the window ends there, 'rounding'.
    With the rounding check off (eps = 0, the mutant) it is called a floor."""
    eps = np.finfo(np.float64).eps
    rounding = 3e-16 * np.abs(np.random.default_rng(1).standard_normal(K.size)) + 1e-16
    y = np.maximum(np.exp(-0.05 * K), rounding)
    p = predict("gradient_flow", 0.5, 0.05)  # exact 2ηλ = 0.05
    w = find_window(K, y, p.low, p.high, scale=2.0, eps=eps)
    assert w.end == "rounding" and y[w.stop - 1] > 100 * eps * 2 >= y[w.stop], w
    assert find_window(K, y, p.low, p.high, scale=2.0, eps=0.0).end != "rounding"


def test_faster_transient_skipped_but_a_slower_start_is_not():
    """GD's first steps from a random start decay faster: left out. A start slower than
    the law is a departure, fitted (the mutant that skips it would pass a wrong law)."""
    fast = LAW * (1 + 5 * np.exp(-K / 15))
    row = fit_series(K, fast, P)
    assert row["start"] == "transient skipped" and row["verdict"] == "pass"
    slow = np.where(K < 500, np.exp(-0.5 * P.low * K), np.exp(-0.5 * P.low * 500) * LAW / LAW[50])
    assert fit_series(K, slow, P)["verdict"] == "fail"


@pytest.mark.parametrize("factor", [0.5, 2.0])  # ηλ instead of 2ηλ; 4ηλ
def test_wrong_law_fitted_over_the_whole_run_fails(factor):
    wrong = np.exp(-factor * P.low * K)
    row = fit_series(K, wrong, P)
    assert row["verdict"] == "fail" and row["t_min"] == 0 and row["end"] == "end of run", row


def test_without_hysteresis_a_noise_spike_breaks_the_law(monkeypatch):
    """A law with 15% noise per save, no floor: no break; with no hysteresis and no median
    check (the mutant) a single low local rate ends the window early."""
    y = _noisy(LAW, 0.15, seed=3)
    assert find_window(K, y, P.low, P.high).end == "end of run"

    def eager(rates, low, start):
        below = np.flatnonzero(rates[start + 1 :] < low * (1 - _window.DELTA))
        return int(below[0]) + start + 1 if below.size else None

    monkeypatch.setattr(_window, "_break", eager)
    assert find_window(K, y, P.low, P.high).end != "end of run"


def test_verdict_needs_a_finite_standard_error():
    row = fit_series(K[:2], LAW[:2], P)
    assert row["verdict"] == "none" and "SE not finite" in row["tolerance"]
    assert fitting.verdict(P.low, 1e-9, predict("adamw", 1e-3, 0.1))[0] == "none"
