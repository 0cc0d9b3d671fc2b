"""T11's schedule helpers of ``rankflow.theory``: ``gd_scheduled_etas`` (η_k from optax's
own schedules) matches ``rankflow.numerics.schedules`` at every step, and
``gd_scheduled_bracket`` bounds the departure of GD's balance decay from
Π(1 − η_jλ)² on hand-made GD runs (numpy, float64), with equality for scalars, where the
η² term is aligned with D."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rankflow import theory
from rankflow.numerics.schedules import Schedule, eta_at


@pytest.mark.parametrize("kind", ["warmup_cosine", "linear"])
@pytest.mark.parametrize("w", [0.0, 7.0, 30.0, 50.0, 60.0])
def test_T11_gd_scheduled_etas_match_the_schedules(kind, w):
    sch = Schedule(kind, w, 0.2, 50.0)
    ks = np.arange(70)
    with jax.enable_x64(True):
        ours = np.asarray(eta_at(ks.astype(np.float64), 0.3, sch))
    ref = theory.gd_scheduled_etas(0.3, ks, sch)
    assert ref.dtype == np.float64
    np.testing.assert_allclose(ref, ours, rtol=0, atol=1e-15)
    # The wrong versions a claim must tell apart: one step off, the peak η throughout.
    assert np.max(np.abs(theory.gd_scheduled_etas(0.3, ks + 1, sch) - ours)) > 1e-3
    assert np.max(np.abs(theory.gd_scheduled_etas(0.3, ks, None) - ours)) > 0.2


@pytest.mark.parametrize("kind", ["wsd", "wsd_cosine"])
@pytest.mark.parametrize("w, d", [(0.0, 10.0), (7.0, 13.0), (20.0, 30.0)])
def test_T11_gd_scheduled_etas_match_the_wsd_schedules(kind, w, d):
    """The same for warmup–stable–decay (optax's join of warmup, constant and tail);
    wrong versions: the tail starting at the warmup's end (no stable part), one step off."""
    sch = Schedule(kind, w, 0.2, 50.0, decay=d)
    ks = np.arange(70)
    with jax.enable_x64(True):
        ours = np.asarray(eta_at(ks.astype(np.float64), 0.3, sch))
    ref = theory.gd_scheduled_etas(0.3, ks, sch)
    np.testing.assert_allclose(ref, ours, rtol=0, atol=1e-15)
    assert np.max(np.abs(theory.gd_scheduled_etas(0.3, ks + 1, sch) - ours)) > 1e-3
    early = Schedule(kind, w, 0.2, 50.0, decay=50.0 - w)  # decays from the warmup's end
    if d < 50.0 - w:
        assert np.max(np.abs(theory.gd_scheduled_etas(0.3, ks, early) - ours)) > 1e-2


def test_T11_gd_scheduled_etas_constant():
    assert theory.gd_scheduled_etas(0.1, [0, 5], Schedule()).tolist() == [0.1, 0.1]
    assert theory.gd_scheduled_etas(0.1, np.zeros((2, 3), int), None).shape == (2, 3)


def _gd_run(A, B, S, etas, lam):
    """GD on ½‖ABᵀ − S‖² + (λ/2)(‖A‖² + ‖B‖²) with step sizes ``etas``: the factors and
    gradients before each step, and D at every step."""
    As, Bs, Gs, Ds = [], [], [], [A.T @ A - B.T @ B]
    for eta in etas:
        G = A @ B.T - S
        As.append(A), Bs.append(B), Gs.append(G)
        A, B = A - eta * (G @ B + lam * A), B - eta * (G.T @ A + lam * B)
        Ds.append(A.T @ A - B.T @ B)
    return np.array(As), np.array(Bs), np.array(Gs), np.array(Ds)


def test_T5_T11_scheduled_bracket_bounds_the_departure():
    rng = np.random.default_rng(0)
    A, B, S = rng.normal(size=(6, 3)), 0.5 * rng.normal(size=(4, 3)), rng.normal(size=(6, 4))
    lam = 0.3
    etas = theory.gd_scheduled_etas(0.1, np.arange(80), Schedule("warmup_cosine", 10, 0.1, 80))
    As, Bs, Gs, Ds = _gd_run(A, B, S, etas, lam)
    gap = np.linalg.norm(Ds, axis=(1, 2))
    dep = np.log(gap / gap[0]) - np.log(theory.gd_scheduled_contraction(
        0.1, lam, np.arange(81), Schedule("warmup_cosine", 10, 0.1, 80)))  # fmt: skip
    low, high = theory.gd_scheduled_bracket(As, Bs, Gs, etas, lam)
    assert low.shape == high.shape == (81,) and low[0] == high[0] == 0.0
    assert np.all(low <= dep + 1e-12) and np.all(dep <= high + 1e-12)
    assert np.all(np.diff(low) <= 0) and np.all(np.diff(high) >= 0)
    # The product not squared leaves the bound.
    half = np.log(gap / gap[0]) - 0.5 * np.log(theory.gd_scheduled_contraction(
        0.1, lam, np.arange(81), Schedule("warmup_cosine", 10, 0.1, 80)))  # fmt: skip
    assert np.any((half < low) | (half > high))


def test_T5_T11_scheduled_bracket_is_tight_for_scalars():
    """r = m = n = 1: D and the η² term are scalars, so each step's departure is exactly one
    end of its bound (the η² term has the sign of −D here: the lower end)."""
    etas = np.linspace(0.0, 0.2, 30)
    As, Bs, Gs, Ds = _gd_run(np.array([[2.0]]), np.array([[0.5]]), np.array([[0.3]]), etas, 0.5)
    low, high = theory.gd_scheduled_bracket(As, Bs, Gs, etas, 0.5)
    lead = np.concatenate([[0.0], np.cumsum(2 * np.log(1 - etas * 0.5))])
    dep = np.log(np.abs(Ds[:, 0, 0]) / abs(Ds[0, 0, 0])) - lead
    np.testing.assert_allclose(dep, low, rtol=0, atol=1e-12)
