"""Checks of rankflow.theory's noise models (docs/theory.md, T9, T10), one label per test name.

All in float64 (conftest). Exact identities are checked at rounding level; expectations
over noise or minibatches against Monte Carlo means of the actual update, entrywise
within 4 standard errors, and each plausible wrong version (a flipped sign, swapped
dimensions, the parameter-noise model, a wrong batch scaling) is shown to miss by more
than 10 standard errors, so the Monte Carlo checks can tell the right formula from them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankflow import theory

M, N_COL, R = 4, 3, 2  # W is m×n with m ≠ n, so the m and n of T9 cannot be confused
ETA, LAM, SIGMA = 0.3, 0.1, 0.5  # σ ≠ 1 so that σ and σ² differ
DRAWS = 200_000


def _factors(seed, m=M, n=N_COL, r=R):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, r)), rng.normal(size=(n, r)), rng.normal(size=(m, n))


def _z_scores(samples, predicted):
    """Entrywise ``(mean − predicted)/SE`` of ``samples`` (draws × r × r)."""
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    return (samples.mean(axis=0) - np.asarray(predicted)) / se


def _batched_balance(A, B):
    """``AᵀA − BᵀB`` for stacks of factors (draws × m × r, draws × n × r)."""
    return np.einsum("dmr,dms->drs", A, A) - np.einsum("dnr,dns->drs", B, B)


# --- T9: gradient-space noise -------------------------------------------------------------


def _ito_drift_by_hand(A, B, G, eta, lam, sigma):
    """The Itô drift of D for T9's SDE, built term by term without T9's formula.

    Deterministic part: the derivative of D along ``Ȧ = −η(GB + λA)``,
    ``Ḃ = −η(GᵀA + λB)``. Itô part: for dΞ with independent N(0, dt) entries, the
    drift of a quadratic function is the sum over the unit matrices E_kl of its second
    variation, i.e. ``Σ_kl (dA_kl)ᵀ dA_kl − (dB_kl)ᵀ dB_kl`` with ``dA_kl = −ησ E_kl B``,
    ``dB_kl = −ησ E_klᵀ A`` (the cross terms in dΞ have mean zero).
    """
    m, n = G.shape
    A_dot = -eta * (G @ B + lam * A)
    B_dot = -eta * (G.T @ A + lam * B)
    linear = A_dot.T @ A + A.T @ A_dot - B_dot.T @ B - B.T @ B_dot
    ito = np.zeros((A.shape[1],) * 2)
    for k in range(m):
        for l in range(n):
            E = np.zeros((m, n))
            E[k, l] = 1.0
            dA, dB = -eta * sigma * E @ B, -eta * sigma * E.T @ A
            ito += dA.T @ dA - dB.T @ dB
    return linear + ito


def _t9_wrong_drifts(A, B, eta, lam, sigma):
    """Plausible wrong T9 drifts: Itô sign flipped, m and n swapped, parameter noise."""
    m, n = A.shape[0], B.shape[0]
    D = A.T @ A - B.T @ B
    ito = eta**2 * sigma**2 * (m * B.T @ B - n * A.T @ A)
    swapped = eta**2 * sigma**2 * (n * B.T @ B - m * A.T @ A)
    return {
        "sign flipped": -2 * eta * lam * D - ito,
        "m, n swapped": -2 * eta * lam * D + swapped,
        "parameter noise": -2 * eta * lam * D + eta**2 * sigma**2 * (m - n) * np.eye(len(D)),
    }


def test_T9_drift_exact():
    """The drift equals the Itô drift computed term by term, to rounding; each wrong
    version misses by orders of magnitude more."""
    A, B, G = _factors(0)
    drift = np.asarray(theory.gradient_noise_balance_drift(A, B, ETA, LAM, SIGMA))
    exact = _ito_drift_by_hand(A, B, G, ETA, LAM, SIGMA)
    scale = np.abs(exact).max()
    np.testing.assert_allclose(drift, exact, rtol=0, atol=1e-12 * scale)
    for name, wrong in _t9_wrong_drifts(A, B, ETA, LAM, SIGMA).items():
        assert np.abs(wrong - exact).max() > 1e-3 * scale, name
    assert theory.gradient_noise_balance_drift(jnp.asarray(A), B, ETA, LAM, SIGMA).dtype == (
        jnp.float64
    )


def test_T9_drift_euler_maruyama():
    """One Euler–Maruyama step of the SDE from (A, B), tiny dt, many Brownian draws:
    ``E[ΔD]/dt`` matches the drift within 4 SE; the wrong drifts miss by > 10 SE."""
    A, B, G = _factors(1)
    dt = 1e-6
    rng = np.random.default_rng(11)
    dXi = rng.normal(scale=np.sqrt(dt), size=(DRAWS, M, N_COL))
    A1 = A - ETA * (G @ B + LAM * A) * dt - ETA * SIGMA * dXi @ B
    B1 = B - ETA * (G.T @ A + LAM * B) * dt - ETA * SIGMA * np.swapaxes(dXi, 1, 2) @ A
    rate = (_batched_balance(A1, B1) - (A.T @ A - B.T @ B)) / dt
    z = _z_scores(rate, theory.gradient_noise_balance_drift(A, B, ETA, LAM, SIGMA))
    assert np.abs(z).max() < 4, z
    for name, wrong in _t9_wrong_drifts(A, B, ETA, LAM, SIGMA).items():
        assert np.abs(_z_scores(rate, wrong)).max() > 10, name


def test_T9_closed_form_square():
    """At m = n: the closed form is ``gf_balance`` at σ = 0 (bitwise), its t-derivative
    is ``−(2ηλ + η²σ²m) D(t)`` (jacfwd, 1e-12), and the drift function evaluated on any
    square (A, B) is that same ``−(2ηλ + η²σ²m) D`` (since ``m BᵀB − m AᵀA = −mD``), so
    the closed form solves the drift's equation along every path."""
    m = 3
    A, B, _ = _factors(2, m=m, n=m)
    D0 = A.T @ A - B.T @ B
    ts = jnp.linspace(0.0, 50.0, 7)
    np.testing.assert_array_equal(
        theory.gradient_noise_balance(D0, ETA, LAM, 0.0, m, ts), theory.gf_balance(D0, ETA, LAM, ts)
    )
    rate = 2 * ETA * LAM + ETA**2 * SIGMA**2 * m
    closed = jax.jit(lambda t: theory.gradient_noise_balance(D0, ETA, LAM, SIGMA, m, t))
    for t in (0.0, 3.0, 17.5):
        derivative = jax.jacfwd(closed)(jnp.asarray(t))
        np.testing.assert_allclose(derivative, -rate * closed(t), rtol=0, atol=1e-12)
    drift = theory.gradient_noise_balance_drift(A, B, ETA, LAM, SIGMA)
    np.testing.assert_allclose(drift, -rate * D0, rtol=0, atol=1e-12)
    assert theory.gradient_noise_balance(D0, ETA, LAM, SIGMA, m, ts).shape == (7, 2, 2)


def test_T9_step_mean_monte_carlo():
    """GD's one-step D update with gradient ``G + ξ``, ξ ~ N(0, σ²): the Monte Carlo mean
    matches :func:`gradient_noise_step_mean` within 4 SE; dropping the η²σ² term, or
    writing σ for σ², misses by > 10 SE."""
    A, B, G = _factors(3)
    rng = np.random.default_rng(33)
    Gn = G + rng.normal(scale=SIGMA, size=(DRAWS, M, N_COL))
    A1 = A - ETA * (Gn @ B + LAM * A)
    B1 = B - ETA * (np.swapaxes(Gn, 1, 2) @ A + LAM * B)
    D1 = _batched_balance(A1, B1)
    z = _z_scores(D1, theory.gradient_noise_step_mean(A, B, G, ETA, LAM, SIGMA))
    assert np.abs(z).max() < 4, z
    noiseless = np.asarray(theory.gd_balance_step(A, B, G, ETA, LAM))
    sigma_not_squared = noiseless + ETA**2 * SIGMA * (M * B.T @ B - N_COL * A.T @ A)
    for wrong in (noiseless, sigma_not_squared):
        assert np.abs(_z_scores(D1, wrong)).max() > 10


# --- T10: minibatch noise -----------------------------------------------------------------

SAMPLES = 50


def _regression():
    """A small sensing problem ``L_k(W) = ½(⟨X_k, W⟩ − y_k)²`` (N = 50, W 4×3), its
    factors (A, B) away from the optimum, and per-sample gradients ``g_k``."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(SAMPLES, M, N_COL))
    W_star = rng.normal(size=(M, R)) @ rng.normal(size=(R, N_COL))
    y = np.einsum("kij,ij->k", X, W_star) + 0.1 * rng.normal(size=SAMPLES)
    A, B = 0.7 * rng.normal(size=(M, R)), 0.7 * rng.normal(size=(N_COL, R))
    residual = np.einsum("kij,ij->k", X, A @ B.T) - y
    grads = residual[:, None, None] * X
    return X, y, A, B, grads


@jax.jit
def _minibatch_balances(X, y, A, B, batches):
    """D' after the actual SGD step ``θ ← θ − η(∇_θ L_batch + λθ)`` for each row of
    sample indices in ``batches`` (draws × b); ∇_θ by autodiff of the batch loss."""

    def batch_loss(AB, idx):
        pred = jnp.einsum("kij,ij->k", X[idx], AB[0] @ AB[1].T)
        return jnp.mean(0.5 * (pred - y[idx]) ** 2)

    def one(idx):
        gA, gB = jax.grad(batch_loss)((A, B), idx)
        return theory.balance(A - ETA * (gA + LAM * A), B - ETA * (gB + LAM * B))

    return jax.vmap(one)(batches)


def _t10_case(batch, replace, seed):
    X, y, A, B, grads = _regression()
    rng = np.random.default_rng(seed)
    if replace:
        batches = rng.integers(0, SAMPLES, size=(DRAWS, batch))
    else:  # b distinct indices per draw: the first b of a random permutation
        batches = np.argsort(rng.random((DRAWS, SAMPLES)), axis=1)[:, :batch]
    D1 = np.asarray(_minibatch_balances(X, y, A, B, batches))
    gbar = grads.mean(axis=0)
    return A, B, gbar, grads - gbar, D1


@pytest.mark.parametrize("batch", [2, 8])
def test_T10_step_mean_with_replacement(batch):
    """Minibatch SGD's one-step D update on a sensing problem: the Monte Carlo mean over
    batches drawn with replacement matches :func:`minibatch_step_mean` within 4 SE; the
    noise term scaled by 1/b² or without 1/b misses by > 10 SE."""
    A, B, gbar, deltas, D1 = _t10_case(batch, True, seed=100 + batch)
    predicted = theory.minibatch_step_mean(A, B, gbar, deltas, ETA, LAM, batch)
    assert np.abs(_z_scores(D1, predicted)).max() < 4
    noiseless = np.asarray(theory.gd_balance_step(A, B, gbar, ETA, LAM))
    per_b = np.asarray(predicted) - noiseless  # η²/(bN) Σ_k (…)
    for wrong in (noiseless + per_b / batch, noiseless + per_b * batch):
        assert np.abs(_z_scores(D1, wrong)).max() > 10


def test_T10_step_mean_without_replacement():
    """Batches of b = 20 distinct samples of N = 50: the mean matches ``replace=False``
    (noise term × (N − b)/(N − 1) = 30/49) within 4 SE, and the with-replacement formula
    misses by > 10 SE."""
    batch = 20
    A, B, gbar, deltas, D1 = _t10_case(batch, False, seed=7)
    without = theory.minibatch_step_mean(A, B, gbar, deltas, ETA, LAM, batch, replace=False)
    assert np.abs(_z_scores(D1, without)).max() < 4
    with_ = theory.minibatch_step_mean(A, B, gbar, deltas, ETA, LAM, batch)
    assert np.abs(_z_scores(D1, with_)).max() > 10
    assert theory.without_replacement_factor(SAMPLES, batch) == 30 / 49
    assert theory.without_replacement_factor(SAMPLES, 1) == 1.0
    assert theory.without_replacement_factor(SAMPLES, SAMPLES) == 0.0


def test_T10_drift_matches_step_mean_and_T9():
    """The SME drift's noise term is the step mean's (both ``η²/(bN) Σ_k …``, to 1e-12),
    and with isotropic deviations it is T9's drift: the 2mn deviations ``±σ√(bmn) E_kl``
    (E_kl the unit m×n matrices; they sum to 0) give ``(1/(bN)) Σ_k δ_kᵀδ_k = σ² m I_n``
    and ``(1/(bN)) Σ_k δ_kδ_kᵀ = σ² n I_m``, T9's ``E[ξᵀξ]`` and ``E[ξξᵀ]``."""
    _, _, A, B, grads = _regression()
    gbar = grads.mean(axis=0)
    deltas = grads - gbar
    batch = 4
    drift = theory.minibatch_noise_balance_drift(A, B, deltas, ETA, LAM, batch)
    step = theory.minibatch_step_mean(A, B, gbar, deltas, ETA, LAM, batch)
    noiseless = theory.gd_balance_step(A, B, gbar, ETA, LAM)
    D = A.T @ A - B.T @ B
    np.testing.assert_allclose(drift + 2 * ETA * LAM * D, step - noiseless, rtol=0, atol=1e-12)
    units = np.eye(M * N_COL).reshape(M * N_COL, M, N_COL)
    iso = np.concatenate([units, -units]) * SIGMA * np.sqrt(batch * M * N_COL)
    t9 = theory.gradient_noise_balance_drift(A, B, ETA, LAM, SIGMA)
    t10 = theory.minibatch_noise_balance_drift(A, B, iso, ETA, LAM, batch)
    np.testing.assert_allclose(t10, t9, rtol=0, atol=1e-12)
