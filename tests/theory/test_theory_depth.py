"""Checks of rankflow.theory's depth-L results (T12, T13 of docs/theory.md), float64.

Each exact identity is checked at rounding level, and beside it the plausible wrong
version (a missing contraction, a sign swap, the depth-2 formula on a middle pair, a
depth-dependent rate, the exponent 1 in place of 2/L, soft-thresholding at L ≥ 3, the
threshold where stationary points appear) is shown to miss by orders of magnitude.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import max_abs
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow import theory
from rankflow.core.problems import Problem


def _problem(kind, m=5, n=4):
    if kind == "diagonal":
        problem = Problem("diagonal", 3, 3, 2, 0, (1.0, 0.5, 0.0))
    else:
        problem = Problem(kind, m, n, 2, 60, (1.0, 0.5))
    data = jax.jit(lambda k: problem.make_data(k, 0.1, jnp.float64))(jax.random.PRNGKey(0))
    return problem, data


def _factors(seed, dims, scale=0.7):
    """Random factors ``W_j`` of shape ``dims[j] × dims[j−1]`` (dims = d_0 … d_L)."""
    rng = np.random.default_rng(seed)
    return tuple(
        jnp.asarray(scale * rng.normal(size=(dims[j], dims[j - 1]))) for j in range(1, len(dims))
    )


def _total_loss(problem, data, lam):
    return lambda fs: problem.loss(theory.product(fs), data) + lam * theory.depth_l2_penalty(fs)


# --- the setting: depth 2 is the pair (A, B) -----------------------------------------------


def test_T12_T13_depth_two_is_the_pair():
    A, B = _factors(0, (3, 5))[0], _factors(1, (3, 4))[0]
    fs = theory.pair_to_factors(A, B)
    assert max_abs(theory.product(fs), A @ B.T) == 0.0
    (D,) = theory.depth_balances(fs)
    assert max_abs(D, theory.balance(A, B)) <= 1e-14
    assert float(theory.depth_l2_penalty(fs)) == pytest.approx(float(theory.l2_penalty(A, B)))
    W = A @ B.T
    assert float(theory.schatten_penalty(W, 2)) == pytest.approx(
        float(theory.nuclear_norm(W)), rel=1e-14
    )
    assert float(theory.depth_penalty_gap(fs)) == pytest.approx(
        float(theory.t1_gap(A, B)), rel=1e-12
    )
    G = _factors(2, (4, 5))[0]
    gd = theory.gd_depth_balance_step(fs, theory.depth_gradients(fs, G), 0.3, 0.1)[0]
    assert max_abs(gd, theory.gd_balance_step(A, B, G, 0.3, 0.1)) <= 1e-13


def _pairwise(problem, data, eta, lam):
    """For factors fs: per pair (D_j, dD_j/dt along GF, T12's dD_j/dt, D_j after one real
    GD step, T12's GD prediction), every gradient by autodiff; and (the autodiff factor
    gradients, :func:`theory.depth_gradients` of ∇_W L)."""
    data_grad = jax.grad(lambda fs: problem.loss(theory.product(fs), data))

    @jax.jit
    def run(fs):
        grads = data_grad(fs)
        velocity = tuple(-eta * (g + lam * W) for W, g in zip(fs, grads))
        Ds, dDs = jax.jvp(theory.depth_balances, (fs,), (velocity,))
        _, gf = jax.jvp(lambda t: theory.gf_depth_balance(Ds, eta, lam, t), (0.0,), (1.0,))
        stepped = tuple(W + v for W, v in zip(fs, velocity))
        gd = theory.gd_depth_balance_step(fs, grads, eta, lam)
        G = jax.grad(problem.loss)(theory.product(fs), data)
        chain = theory.depth_gradients(fs, G)
        return (Ds, dDs, gf, theory.depth_balances(stepped), gd), (grads, chain)

    return run


@pytest.mark.parametrize(
    "kind",
    # The identities hold for any loss of the product; two kinds by default, all four slow.
    ["sensing", "completion"]
    + [pytest.param(k, marks=pytest.mark.slow) for k in ("diagonal", "regression")],
)
def test_T12_gf_derivative_and_gd_step_per_pair_every_kind(kind):
    """L = 3 and 4, every pair: d/dt D_j along dW_j/dt = −η(∇_j + λW_j) is T12's
    −2ηλD_j to 1e-12 (a depth-dependent rate −LηλD_j misses), and one real GD step
    gives T12's D_j′ to 1e-10 (dropping (1−ηλ)² or swapping the sign of the η² term
    misses). The factor gradients of the chain rule match autodiff to 1e-13."""
    problem, data = _problem(kind)
    m, n = problem.shape
    eta, lam = 0.3, 0.1
    c = (1 - eta * lam) ** 2
    run = _pairwise(problem, data, eta, lam)
    for dims in ((n, 3, 6, m), (n, 2, 5, 3, m)):
        L = len(dims) - 1
        pairs, (grads, chain) = run(_factors(4, dims))
        for g, g_chain in zip(grads, chain):
            assert max_abs(g, g_chain) <= 1e-13 * max_abs(g)
        for D, dD, gf, D1, gd in zip(*pairs):
            assert max_abs(dD, gf) <= 1e-12 * max_abs(D)
            assert max_abs(dD, -L * eta * lam * D) > 1e-3 * max_abs(D)
            scale = max_abs(D1)
            assert max_abs(gd, D1) <= 1e-10 * scale
            assert max_abs(gd - (c - 1) * D, D1) > 1e-3 * scale  # no (1 − ηλ)²
            swapped = c * D - (gd - c * D)  # η²(∇_j∇_jᵀ − ∇_{j+1}ᵀ∇_{j+1})
            assert max_abs(swapped, D1) > 1e-6 * scale


@pytest.mark.slow
@pytest.mark.parametrize("dims", [(4, 3, 6, 5), (4, 2, 5, 3, 5)])
def test_T12_gf_pairwise_decay_along_integrated_flow(dims):
    """Adaptive Tsit5 (rtol 1e-11) on sensing, L = 3, 4, to 2ηλt = 3: every pair's
    ‖D_j(t)‖_F = e^{−2ηλt}‖D_j(0)‖_F to 1e-6 relative; the rate LηλD_j misses."""
    problem, data = _problem("sensing")
    eta, lam, T = 1.0, 0.1, 15.0
    fs0 = _factors(5, dims, scale=0.5)
    fs0 = (2.0 * fs0[0],) + fs0[1:-1] + (fs0[-1] / 2.0,)
    grad = jax.grad(_total_loss(problem, data, lam))
    ts = jnp.linspace(0.0, T, 16)

    @jax.jit
    def solve(fs0):
        term = diffrax.ODETerm(lambda t, fs, args: jax.tree.map(lambda g: -eta * g, grad(fs)))
        sol = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), 0.0, T, 0.05, fs0,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-13),
            max_steps=100_000,
        )  # fmt: skip
        norms = lambda fs: jnp.stack([jnp.linalg.norm(D) for D in theory.depth_balances(fs)])
        return jax.vmap(norms)(sol.ys)

    gaps = np.asarray(solve(fs0))  # (time, pair)
    pred = np.asarray(theory.gf_balance_gap(gaps[0], eta, lam, ts))
    assert np.max(np.abs(gaps / pred - 1.0)) <= 1e-6
    wrong = np.asarray(theory.gf_balance_gap(gaps[0], eta * len(fs0) / 2, lam, ts))
    assert np.max(np.abs(gaps / wrong - 1.0)) > 0.1


# --- T12: gradient descent ---------------------------------------------------------------


def test_T12_gd_depth_two_formula_fails_on_a_middle_pair():
    """T5 applied to the middle pair of L = 4 as if W = W_3W_2 (G in place of the pair's
    own gradient) gets D_2′ wrong; the depth-L identity gets it to 1e-10."""
    problem, data = _problem("sensing", m=4, n=4)
    eta, lam = 0.3, 0.1

    @jax.jit
    def run(fs):
        G = jax.grad(problem.loss)(theory.product(fs), data)
        grads = theory.depth_gradients(fs, G)
        stepped = tuple(W - eta * (g + lam * W) for W, g in zip(fs, grads))
        right = theory.gd_depth_balance_step(fs, grads, eta, lam)[1]
        wrong = theory.gd_balance_step(fs[2], fs[1].T, G, eta, lam)
        return theory.depth_balances(stepped)[1], right, wrong

    D1, right, wrong = run(_factors(7, (4, 4, 4, 4, 4)))
    assert max_abs(right, D1) <= 1e-10 * max_abs(D1)
    assert max_abs(wrong, D1) > 1e-4 * max_abs(D1)


@pytest.mark.slow
def test_T12_gd_pairwise_along_trajectory():
    problem, data = _problem("completion")
    eta, lam = 0.2, 0.05
    grad = jax.grad(lambda fs: problem.loss(theory.product(fs), data))

    @jax.jit
    def advance(fs):
        grads = grad(fs)
        pred = theory.gd_depth_balance_step(fs, grads, eta, lam)
        fs = tuple(W - eta * (g + lam * W) for W, g in zip(fs, grads))
        return fs, pred, theory.depth_balances(fs)

    fs = _factors(8, (4, 6, 2, 5), scale=0.5)
    for _ in range(30):
        fs, pred, actual = advance(fs)
        for P, D1 in zip(pred, actual):
            assert max_abs(P, D1) <= 1e-10 * max_abs(D1)


# --- T13: the penalty against the Schatten term -------------------------------------------

PAD = 7  # zero-padding every factor to PAD × PAD keeps both penalties: one compile per L


@jax.jit
def _penalties(fs):
    return theory.depth_l2_penalty(fs), theory.schatten_penalty(theory.product(fs), len(fs))


@st.composite
def factor_lists(draw):
    L = draw(st.integers(2, 4))
    dims = draw(st.lists(st.integers(1, PAD), min_size=L + 1, max_size=L + 1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    fs = []
    for j in range(1, L + 1):
        W = 10.0 ** draw(st.floats(-2.0, 2.0)) * rng.normal(size=(dims[j], dims[j - 1]))
        if draw(st.booleans()):
            W[:, rng.random(dims[j - 1]) < 0.4] = 0.0
        fs.append(W)
    return fs


@given(factor_lists())
@settings(max_examples=60, deadline=None)
def test_T13_penalty_at_least_schatten(fs):
    padded = tuple(
        jnp.asarray(np.pad(W, ((0, PAD - W.shape[0]), (0, PAD - W.shape[1])))) for W in fs
    )
    pen, sch = (float(x) for x in _penalties(padded))
    assert pen >= sch - 1e-12 * max(pen, 1e-300)


@given(
    st.integers(2, 4),
    st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=12, deadline=None)
def test_T13_equality_iff_balanced_on_rescaled_family(L, logs, seed):
    """Balanced factors rescaled by c_j with Πc_j = 1: D_j = (c_{j+1}² − c_j²)S^{2/L}, and
    the gap is exactly ½(Σc_j² − L)Σσ_i^{2/L} (AM–GM: zero iff every c_j = 1)."""
    rng = np.random.default_rng(seed)
    W = jnp.asarray(rng.normal(size=(5, 4)) @ rng.normal(size=(4, 4)))
    fs = theory.balanced_factors(W, (6, 4, 5)[: L - 1], key=jax.random.PRNGKey(seed % 1000))
    logc = np.asarray(logs[:L]) - np.mean(logs[:L])
    c = np.exp(logc)
    scaled = tuple(cj * Wj for cj, Wj in zip(c, fs))
    S = float(np.sum(np.linalg.svd(np.asarray(W), compute_uv=False) ** (2.0 / L)))
    gap = float(theory.depth_penalty_gap(scaled))
    assert gap == pytest.approx(0.5 * (np.sum(c**2) - L) * S, rel=1e-9, abs=1e-11 * S)
    assert max_abs(theory.product(scaled), W) <= 1e-12 * max_abs(W)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_T13_balanced_factors_attain_equality(L):
    rng = np.random.default_rng(L)
    W = jnp.asarray(3.0 * rng.normal(size=(5, 3)) @ rng.normal(size=(3, 4)))  # rank 3
    widths = (3, 7, 4)[: L - 1]
    fs = theory.balanced_factors(W, widths, key=jax.random.PRNGKey(1))
    assert [Wj.shape for Wj in fs] == list(zip(widths + (5,), (4,) + widths))
    assert max_abs(theory.product(fs), W) <= 1e-12 * max_abs(W)
    for D in theory.depth_balances(fs):
        assert max_abs(D) <= 1e-12 * max_abs(W) ** (2 / L)
    pen = float(theory.depth_l2_penalty(fs))
    assert abs(float(theory.depth_penalty_gap(fs))) <= 1e-12 * pen
    # The exponent 1 in place of 2/L: (L/2)Σσ exceeds the penalty of balanced factors
    # whose singular values are above 1, so that "bound" fails.
    s = np.linalg.svd(np.asarray(W), compute_uv=False)
    if L > 2:
        assert pen < 0.5 * L * np.sum(s) - 1e-3 * pen


# --- T13: the scalar problem ---------------------------------------------------------------


def _grid_minimum(s, lam, L, w_max):
    w = np.linspace(0.0, w_max, 400_001)
    f = 0.5 * (w - s) ** 2 + 0.5 * lam * L * w ** (2.0 / L)
    return w[np.argmin(f)], float(np.min(f))


@pytest.mark.parametrize("L", [2, 3, 4, 6])
@pytest.mark.parametrize("lam", [0.05, 0.3])
def test_T13_scalar_minimiser_against_brute_force(L, lam):
    s_star = float(theory.schatten_threshold(lam, L).s)
    ss = np.concatenate([np.linspace(0.0, 2.0, 21), s_star * np.array([0.9, 0.999, 1.001, 1.1])])
    w = np.asarray(theory.schatten_scalar_minimiser(jnp.asarray(ss), lam, L))
    for s, wi in zip(ss, w):
        w_grid, f_grid = _grid_minimum(s, lam, L, w_max=max(2.0 * s, 1e-3))
        f = float(theory.schatten_scalar_objective(wi, s, lam, L))
        assert f <= f_grid + 1e-12
        assert abs(wi - w_grid) <= 2 * max(2.0 * s, 1e-3) / 400_000 or abs(s / s_star - 1) < 0.01
        if wi > 0:
            assert abs(float(theory.schatten_scalar_stationarity(wi, s, lam, L))) <= 1e-12


def test_T13_soft_thresholding_at_depth_two():
    ss = jnp.linspace(0.0, 2.0, 101)
    assert max_abs(theory.schatten_scalar_minimiser(ss, 0.3, 2), jnp.maximum(ss - 0.3, 0.0)) == 0
    assert float(theory.schatten_threshold(0.3, 2).s) == 0.3


@pytest.mark.parametrize("L", [3, 4, 5])
def test_T13_jump_threshold(L):
    """At s*: f(w*) = f(0) and w* is stationary; just below the minimiser is 0, just
    above it is ≈ w* > 0 (a jump). Wrong: soft-thresholding, and the smaller threshold
    where the nonzero stationary points first appear (0 is still the global minimum)."""
    lam = 0.2
    s_star, w_star = (float(x) for x in theory.schatten_threshold(lam, L))
    f = lambda w, s: float(theory.schatten_scalar_objective(w, s, lam, L))
    assert f(w_star, s_star) == pytest.approx(f(0.0, s_star), rel=1e-13)
    assert abs(float(theory.schatten_scalar_stationarity(w_star, s_star, lam, L))) <= 1e-14
    below, above = np.asarray(
        theory.schatten_scalar_minimiser(
            jnp.array([s_star * (1 - 1e-9), s_star * (1 + 1e-9)]), lam, L
        )
    )
    assert below == 0.0 and above == pytest.approx(w_star, rel=1e-5) and w_star > 0.1
    # Soft-thresholding at L ≥ 3 is not the minimiser: just above s* it is worse.
    s = 1.01 * s_star
    w = float(theory.schatten_scalar_minimiser(s, lam, L))
    assert f(max(s - lam, 0.0), s) > f(w, s) + 1e-4
    # Where w + λw^{2/L−1} is smallest, nonzero stationary points appear: below s*.
    p = 2.0 / L - 1.0
    w_m = (lam * (L - 2) / L) ** (L / (2.0 * (L - 1)))
    s_appear = w_m + lam * w_m**p
    assert s_appear < s_star
    s = 0.5 * (s_appear + s_star)
    lo, hi = w_m, s  # the larger stationary point there, by bisection on (w_m, s)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid + lam * mid**p < s else (lo, mid)
    assert f(lo, s) > f(0.0, s) + 1e-6
    assert float(theory.schatten_scalar_minimiser(s, lam, L)) == 0.0


def test_T12_T13_dtypes_kept():
    fs = tuple(W.astype(jnp.float32) for W in _factors(9, (3, 4, 2, 3)))
    assert all(D.dtype == jnp.float32 for D in theory.depth_balances(fs))
    assert theory.depth_penalty_gap(fs).dtype == jnp.float32
    assert theory.schatten_scalar_minimiser(jnp.float32(1.0), 0.1, 3).dtype == jnp.float32
    Ds = theory.gf_depth_balance(theory.depth_balances(fs), 0.5, 0.1, jnp.array([0.0, 1.0]))
    assert Ds[0].shape == (2, 4, 4) and Ds[0].dtype == jnp.float32
    with pytest.raises(ValueError, match="depth"):
        theory.schatten_penalty(jnp.eye(2), 1)
