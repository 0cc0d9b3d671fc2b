"""Checks of rankflow.theory against docs/theory.md, one label (T1…T8) per test name.

All in float64 (conftest). Most checks are exact identities, so tolerances are at
rounding level and a wrong constant or sign fails them by many orders of magnitude.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import max_abs
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow import theory
from rankflow.core.problems import Problem

# --- helpers -----------------------------------------------------------------------------

# Every shape needs its own XLA compilation (~0.1 s for svd + eigh), too slow for
# hundreds of hypothesis examples. Padding A and B with zero rows and zero columns up to
# PAD leaves ‖A‖, ‖B‖, the singular values of ABᵀ and the non-zero eigenvalues of
# AᵀA − BᵀB unchanged, so the property tests evaluate the embedded pair with one
# compilation; test_T1_T2_true_shapes checks the embedding against the true shapes.
PAD = 8


@jax.jit
def _gap_bound_penalty(A, B):
    return theory.t1_gap(A, B), theory.t2_bound(A, B), theory.l2_penalty(A, B)


def _embed(A, B):
    A, B = np.asarray(A), np.asarray(B)
    (m, r), n = A.shape, B.shape[0]
    return (
        np.pad(A, ((0, PAD - m), (0, PAD - r))),
        np.pad(B, ((0, PAD - n), (0, PAD - r))),
    )


def _measure(A, B):
    """(t1_gap, t2_bound, l2_penalty) as floats, through the padded embedding."""
    return tuple(float(x) for x in _gap_bound_penalty(*_embed(A, B)))


def _orthonormal(rng, rows, cols):
    Q, _ = np.linalg.qr(rng.normal(size=(rows, max(cols, 1))))
    return Q[:, :cols]


def _numpy_gap_bound(A, B):
    """Independent numpy evaluation of the T1 gap and the T2 bound."""
    pen = 0.5 * (np.sum(A**2) + np.sum(B**2))
    nuc = np.sum(np.linalg.svd(A @ B.T, compute_uv=False))
    bound = 0.5 * np.sum(np.abs(np.linalg.eigvalsh(A.T @ A - B.T @ B)))
    return pen - nuc, bound


shapes = st.tuples(st.integers(1, PAD), st.integers(1, PAD), st.integers(1, PAD))
seeds = st.integers(0, 2**32 - 1)
log_scales = st.floats(-3.0, 3.0)


@st.composite
def factor_pairs(draw):
    """Arbitrary (A, B): scales 1e-3…1e3 each, some rank-deficient or zero."""
    m, n, r = draw(shapes)
    scale_a, scale_b = 10.0 ** draw(log_scales), 10.0 ** draw(log_scales)
    kind = draw(st.sampled_from(["gaussian", "zero_columns", "low_rank", "zero_B"]))
    rng = np.random.default_rng(draw(seeds))
    A = scale_a * rng.normal(size=(m, r))
    B = scale_b * rng.normal(size=(n, r))
    if kind == "zero_columns":
        A[:, rng.random(r) < 0.5] = 0.0
        B[:, rng.random(r) < 0.5] = 0.0
    elif kind == "low_rank":
        # Fewer independent columns than r: A = X C with X of rank k < r.
        ka, kb = rng.integers(0, r, size=2) if r > 1 else (0, 0)
        A = scale_a * rng.normal(size=(m, ka)) @ rng.normal(size=(ka, r))
        B = scale_b * rng.normal(size=(n, kb)) @ rng.normal(size=(kb, r))
    elif kind == "zero_B":
        B = np.zeros_like(B)
    return A, B


@st.composite
def balanced_pairs(draw):
    """Balanced (A, B) = (U√S Q, V√S Q): rank k ≤ min(m, n, r), Q orthogonal r×r."""
    m, n, r = draw(shapes)
    k = draw(st.integers(0, min(m, n, r)))
    scale = 10.0 ** draw(log_scales)
    rng = np.random.default_rng(draw(seeds))
    s = scale * 10.0 ** rng.uniform(-2.0, 2.0, size=k)
    Q = _orthonormal(rng, r, r)
    A = np.pad(_orthonormal(rng, m, k) * np.sqrt(s), ((0, 0), (0, r - k))) @ Q
    B = np.pad(_orthonormal(rng, n, k) * np.sqrt(s), ((0, 0), (0, r - k))) @ Q
    return A, B


def _balanced(rng, m, n, r):
    """A balanced pair of full rank min(m, n, r), and the nuclear norm of ABᵀ."""
    k = min(m, n, r)
    s = rng.uniform(0.5, 2.0, size=k)
    A = np.pad(_orthonormal(rng, m, k) * np.sqrt(s), ((0, 0), (0, r - k)))
    B = np.pad(_orthonormal(rng, n, k) * np.sqrt(s), ((0, 0), (0, r - k)))
    return A, B, float(np.sum(s))


# On this kind of machine every new (op, shape) costs ~30 ms of compilation in eager
# mode, so each test below runs its JAX computation as one jitted function.


@functools.cache
def _problem(kind, samples=60, m=5, n=4, rank=2, noise=0.1, seed=0):
    problem = Problem(kind, m, n, rank, samples, (1.0, 0.5)[:rank])
    make = jax.jit(lambda key: problem.make_data(key, noise, jnp.float64))
    return problem, make(jax.random.PRNGKey(seed))


def _random_factors(seed, m, n, r, scale=0.7):
    rng = np.random.default_rng(seed)
    return jnp.asarray(scale * rng.normal(size=(m, r))), jnp.asarray(
        scale * rng.normal(size=(n, r))
    )


# --- setting -----------------------------------------------------------------------------


def test_setting_quantities_by_hand():
    A = jnp.array([[1.0, 2.0], [0.0, 1.0], [3.0, 0.0]])
    B = jnp.array([[2.0, 0.0], [1.0, 1.0]])
    W = jnp.array([[3.0, 0.0], [0.0, -4.0], [0.0, 0.0]])
    D, penalty, nuclear = jax.jit(
        lambda A, B, W: (theory.balance(A, B), theory.l2_penalty(A, B), theory.nuclear_norm(W))
    )(A, B, W)
    assert np.allclose(D, [[10.0 - 5.0, 2.0 - 1.0], [2.0 - 1.0, 5.0 - 1.0]], rtol=0, atol=0)
    assert float(penalty) == 0.5 * (15.0 + 6.0)
    assert float(nuclear) == pytest.approx(7.0, rel=1e-15)


# --- T1, T2 ------------------------------------------------------------------------------


@settings(deadline=None, max_examples=300)
@given(factor_pairs())
def test_T1_T2_gap_between_zero_and_bound(pair):
    A, B = pair
    gap, bound, pen = _measure(A, B)
    tol = 1e-10 * pen
    assert -tol <= gap <= bound + tol  # T1: gap ≥ 0; T2: gap ≤ ½‖D‖_*
    gap_np, bound_np = _numpy_gap_bound(A, B)
    assert gap == pytest.approx(gap_np, abs=1e-12 * pen)
    assert bound == pytest.approx(bound_np, abs=1e-12 * pen)


@settings(deadline=None, max_examples=15)
@given(factor_pairs())
def test_T1_T2_true_shapes(pair):
    """The unpadded shapes, including r > min(m, n): same values as the embedding."""
    A, B = pair
    gap, bound, pen = (float(x) for x in _gap_bound_penalty(jnp.asarray(A), jnp.asarray(B)))
    tol = 1e-10 * pen
    assert -tol <= gap <= bound + tol
    assert np.allclose((gap, bound, pen), _measure(A, B), rtol=0.0, atol=1e-12 * pen)


@settings(deadline=None, max_examples=200)
@given(balanced_pairs())
def test_T1_gap_zero_on_balanced_factors(pair):
    A, B = pair
    gap, bound, pen = _measure(A, B)
    assert abs(gap) <= 1e-10 * pen
    assert bound <= 1e-10 * pen
    assert max_abs(theory.balance(A, B)) <= 1e-12 * max(pen, 1e-300)


@settings(deadline=None, max_examples=100)
@given(shapes, log_scales, seeds)
def test_T2_equality_for_orthogonal_row_spaces(shape, log_scale, seed):
    """Row spaces of A and B orthogonal (ABᵀ = 0; B = 0 included): gap = bound = penalty."""
    m, n, r = shape
    rng = np.random.default_rng(seed)
    k = int(rng.integers(0, r + 1))
    Q = _orthonormal(rng, r, r)
    A = 10.0**log_scale * rng.normal(size=(m, k)) @ Q[:, :k].T
    B = rng.normal(size=(n, r - k)) @ Q[:, k:].T
    gap, bound, pen = _measure(A, B)
    assert gap == pytest.approx(pen, rel=1e-10)
    assert bound == pytest.approx(pen, rel=1e-10)


@pytest.mark.parametrize("c", [1e-3, 0.1, 0.5, 1.0, 1.5, 20.0, 1e3])
def test_T1_T2_rescaled_balanced_pairs_closed_form(c):
    """(cA, B/c) with (A, B) balanced: gap = ½(c − 1/c)²‖W‖_*, bound = ½|c² − c⁻²|‖W‖_*,
    so gap/bound = |c² − 1|/(c² + 1): above 0.99 once c > √199 ≈ 14.1."""
    A, B, nuc = _balanced(np.random.default_rng(1), 6, 4, 5)
    gap, bound, pen = _measure(c * A, B / c)
    assert gap == pytest.approx(0.5 * (c - 1.0 / c) ** 2 * nuc, abs=1e-12 * pen)
    assert bound == pytest.approx(0.5 * abs(c**2 - c**-2) * nuc, abs=1e-12 * pen)
    if c != 1.0:
        assert gap / bound == pytest.approx(abs(c**2 - 1.0) / (c**2 + 1.0), rel=1e-9)
    if c >= 20.0:
        assert gap / bound > 0.99


@pytest.mark.parametrize("shape", [(5, 5, 3), (8, 3, 5), (3, 7, 8), (6, 6, 6), (2, 2, 2)])
def test_T2_tight_when_one_factor_is_small(shape):
    """Gaussian A, and B = 10⁻³·Gaussian: the bound is attained to within 1%."""
    m, n, r = shape
    for seed in range(20):
        rng = np.random.default_rng(seed)
        A, B = rng.normal(size=(m, r)), 1e-3 * rng.normal(size=(n, r))
        gap, bound, _ = _measure(A, B)
        assert gap / bound > 0.99


def test_T2_not_tight_for_comparable_gaussian_factors():
    """Not tight on typical factors (docs/theory.md, T2): for i.i.d. N(0, 1) A, B the
    ratio gap/bound is typically 0.3–0.7 (here over 200 seeds at 5×5, r = 3: median
    ≈ 0.37, max ≈ 0.68), so "ratios above 0.99 on random instances" needs factors of
    very different sizes (see the two tests above)."""
    ratios = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        gap, bound, _ = _measure(rng.normal(size=(5, 3)), rng.normal(size=(5, 3)))
        ratios.append(gap / bound)
    assert 0.25 < np.median(ratios) < 0.5
    assert max(ratios) < 0.9


def test_T2_gap_is_second_order_near_balance():
    """Near a balanced pair the gap is O(‖D‖²) while the bound is O(‖D‖): the ratio
    tends to 0 linearly in the distance to balance, and gap/‖D‖_F² tends to a constant."""
    rng = np.random.default_rng(2)
    A0, B0, _ = _balanced(rng, 5, 4, 3)
    X = rng.normal(size=A0.shape)
    per_D2 = {}
    for delta in (1e-3, 1e-4):
        A = A0 + delta * X
        gap, bound, _ = _measure(A, B0)
        assert gap / bound < 10.0 * delta
        per_D2[delta] = gap / float(np.sum((A.T @ A - B0.T @ B0) ** 2))
    assert per_D2[1e-4] == pytest.approx(per_D2[1e-3], rel=0.05)


# --- T3 ----------------------------------------------------------------------------------


def test_T3_svt_by_hand():
    W = jnp.array([[3.0, 0.0], [0.0, -1.0]])  # singular values 3 and 1
    assert np.allclose(theory.svt(W, 0.5), [[2.5, 0.0], [0.0, -0.5]], rtol=0, atol=1e-14)
    assert np.allclose(theory.svt(W, 2.0), [[1.0, 0.0], [0.0, 0.0]], rtol=0, atol=1e-14)
    assert np.allclose(theory.svt(W, 5.0), 0.0, rtol=0, atol=0)
    assert np.allclose(theory.svt(W, 0.0), W, rtol=0, atol=1e-14)
    # W = u vᵀ·5 + u' v'ᵀ·1 with u = (3, 4)/5, v = (1, 0, 0); rank-one part survives c = 2.
    u, v = jnp.array([0.6, 0.8]), jnp.array([1.0, 0.0, 0.0])
    u2, v2 = jnp.array([-0.8, 0.6]), jnp.array([0.0, 0.0, 1.0])
    W = 5.0 * jnp.outer(u, v) + jnp.outer(u2, v2)
    expected = 3.0 * jnp.outer(u, v)
    assert np.allclose(theory.svt(W, 2.0), expected, rtol=0, atol=1e-14)


def _denoising_instance():
    rng = np.random.default_rng(3)
    U, V = _orthonormal(rng, 6, 4), _orthonormal(rng, 4, 4)
    s = np.array([3.0, 2.0, 0.5, 0.1])
    lam = 0.7
    S = jnp.asarray((U * s) @ V.T)
    expected = jnp.asarray((U * np.maximum(s - lam, 0.0)) @ V.T)  # SVT_λ(S) by hand
    return S, lam, expected


@pytest.mark.parametrize("accelerated", [True, False])
@pytest.mark.parametrize("step", [1.0, 0.5])
def test_T3_prox_gradient_denoising_is_svt(accelerated, step):
    """L = ½‖W − S‖²: the minimiser of L + λ‖W‖_* is SVT_λ(S) (rank 2 of 4 here)."""
    S, lam, expected = _denoising_instance()
    result = theory.prox_gradient(
        lambda W: W - S, jnp.zeros_like(S), lam, step, accelerated=accelerated, tol=1e-14
    )
    assert bool(result.converged)
    assert max_abs(result.W, expected) <= 1e-10
    assert int(np.sum(np.linalg.svd(np.asarray(result.W), compute_uv=False) > 1e-8)) == 2


def test_T3_prox_gradient_jits_and_keeps_dtype():
    S, lam, expected = _denoising_instance()
    solve = jax.jit(lambda S, lam: theory.prox_gradient(lambda W: W - S, S, lam, 1.0).W)
    assert max_abs(solve(S, lam), expected) <= 1e-10
    W32 = theory.prox_gradient(
        lambda W: W - S.astype(jnp.float32), S.astype(jnp.float32), lam, 1.0, tol=1e-6
    ).W
    assert W32.dtype == jnp.float32


def _assert_nuclear_optimality(G, W, lam, atol):
    """−∇L(W)/λ = U Vᵀ + P, P ⊥ row and column spaces of W, ‖P‖_2 ≤ 1."""
    U, s, Vt = np.linalg.svd(np.asarray(W))
    k = int(np.sum(s > 1e-8 * s[0])) if s[0] > 0 else 0
    U_k, V_k = U[:, :k], Vt[:k].T
    Z = -np.asarray(G) / lam
    proj_u = np.eye(W.shape[0]) - U_k @ U_k.T
    proj_v = np.eye(W.shape[1]) - V_k @ V_k.T
    assert np.max(np.abs(U_k.T @ Z @ V_k - np.eye(k)), initial=0.0) <= atol
    assert np.max(np.abs(proj_u @ Z @ V_k), initial=0.0) <= atol
    assert np.max(np.abs(U_k.T @ Z @ proj_v), initial=0.0) <= atol
    assert np.linalg.norm(proj_u @ Z @ proj_v, 2) <= 1.0 + atol
    return k


@pytest.mark.parametrize(
    "kind, samples, lam",
    [("sensing", 60, 0.05), ("completion", 200, 0.05), ("regression", 200, 0.1)],
)
def test_T3_nuclear_minimiser_optimality(kind, samples, lam):
    """The prox-gradient result satisfies the subgradient condition of L + λ‖·‖_*,
    with a rank strictly between 0 and min(m, n): the nuclear norm cut the rank."""
    problem, data = _problem(kind, samples=samples)
    # And it is a minimum of the convex objective: no random nearby point is lower.
    dWs = 1e-3 * np.random.default_rng(0).normal(size=(5, *problem.shape))
    objective = jax.vmap(lambda W: problem.loss(W, data) + lam * theory.nuclear_norm(W))

    @jax.jit
    def solve(dWs):
        result = theory.nuclear_minimiser(problem, data, lam)
        G = jax.grad(problem.loss)(result.W, data)
        values = objective(result.W[None] + jnp.concatenate([jnp.zeros_like(dWs[:1]), dWs]))
        return result, G, values

    result, G, values = solve(dWs)
    assert bool(result.converged)
    k = _assert_nuclear_optimality(G, result.W, lam, atol=1e-8)
    assert 0 < k < min(problem.shape)
    assert np.all(values[1:] >= values[0])


@pytest.mark.parametrize(
    "kind, samples", [("sensing", 60), ("completion", 200), ("regression", 200)]
)
def test_T3_lipschitz_constant_is_top_hessian_eigenvalue(kind, samples):
    problem, data = _problem(kind, samples=samples)
    m, n = problem.shape
    hessian, constant = jax.jit(
        lambda data: (
            jax.hessian(problem.loss)(jnp.zeros((m, n)), data),
            theory.lipschitz_constant(problem, data),
        )
    )(data)
    top = float(np.max(np.linalg.eigvalsh(np.asarray(hessian).reshape(m * n, m * n))))
    assert float(constant) == pytest.approx(top, rel=1e-10)


def test_T3_lipschitz_constant_diagonal_and_custom():
    problem = Problem("diagonal", 3, 3, 2, 0, (1.0, 0.5, 0.0))
    data = {"target": jnp.diag(jnp.array([1.0, 0.5, 0.0]))}
    assert float(theory.lipschitz_constant(problem, data)) == 1.0
    custom = Problem("custom", 3, 3, 1, 0, (), custom_loss=lambda W: jnp.sum(W**2))
    with pytest.raises(ValueError, match="custom"):
        theory.lipschitz_constant(custom, {})


# --- T4 ----------------------------------------------------------------------------------


def _l2_loss(problem, data, lam):
    def loss(theta):
        A, B = theta
        return problem.loss(A @ B.T, data) + lam * theory.l2_penalty(A, B)

    return loss


def test_T4_gf_balance_derivative_matches_the_flow():
    """d/dt D along dθ/dt = −η∇L_L2(θ) equals d/dt gf_balance at t = 0, for a real loss."""
    problem, data = _problem("sensing")
    eta, lam = 0.3, 0.1

    @jax.jit
    def derivatives(theta):
        grad = jax.grad(_l2_loss(problem, data, lam))(theta)
        velocity = jax.tree.map(lambda g: -eta * g, grad)
        D, dD = jax.jvp(lambda th: theory.balance(*th), (theta,), (velocity,))
        _, dD_pred = jax.jvp(lambda t: theory.gf_balance(D, eta, lam, t), (0.0,), (1.0,))
        return D, dD, dD_pred

    D, dD, dD_pred = derivatives(_random_factors(0, 5, 4, 3))
    assert max_abs(dD, dD_pred) <= 1e-12 * max_abs(D)


def test_T4_gf_balance_along_integrated_flow():
    """Integrate GF by RK4 (dt = 1/80, 1600 steps) from an imbalanced start: D(t),
    ‖D(t)‖_F and the loss-gap bound follow T4 to the integrator's accuracy (~1e-9)."""
    problem, data = _problem("sensing")
    eta, lam, dt, steps = 1.0, 0.1, 0.0125, 1600
    A0, B0 = _random_factors(1, 5, 4, 3, scale=0.3)
    theta0 = (2.0 * A0, B0 / 2.0)
    grad = jax.grad(_l2_loss(problem, data, lam))
    field = lambda th: jax.tree.map(lambda g: -eta * g, grad(th))

    def rk4(th, _):
        add = lambda x, k, h: jax.tree.map(lambda a, b: a + h * b, x, k)
        k1 = field(th)
        k2 = field(add(th, k1, dt / 2))
        k3 = field(add(th, k2, dt / 2))
        k4 = field(add(th, k3, dt))
        th = jax.tree.map(
            lambda x, a, b, c, d: x + dt / 6 * (a + 2 * b + 2 * c + d), th, k1, k2, k3, k4
        )
        return th, th

    @jax.jit
    def solve_and_predict(theta0):
        _, (As, Bs) = jax.lax.scan(rk4, theta0, None, length=steps)
        ts = dt * jnp.arange(1, steps + 1)
        D0 = theory.balance(*theta0)
        Ds = jax.vmap(theory.balance)(As, Bs)
        gaps = jnp.sqrt(jnp.sum(Ds**2, axis=(1, 2)))
        loss_gaps = lam * jax.vmap(theory.t1_gap)(As, Bs)  # L_L2 − L_*
        D0_nuclear = 2.0 * theory.t2_bound(*theta0)
        return (
            D0,
            (Ds, theory.gf_balance(D0, eta, lam, ts)),
            (gaps, theory.gf_balance_gap(jnp.sqrt(jnp.sum(D0**2)), eta, lam, ts)),
            (loss_gaps, theory.gf_loss_gap_bound(D0_nuclear, eta, lam, ts)),
        )

    D0, (Ds, Ds_pred), (gaps, gaps_pred), (loss_gaps, bound) = solve_and_predict(theta0)
    scale = max_abs(D0)
    assert max_abs(Ds, Ds_pred) <= 1e-8 * scale
    assert max_abs(gaps, gaps_pred) <= 1e-8 * scale
    assert np.all(np.asarray(loss_gaps) <= np.asarray(bound) + 1e-12)
    assert float(bound[-1]) < 0.02 * float(bound[0])  # 2ηλt = 4 at the end


def test_T4_shapes_dtypes_and_semigroup():
    D0 = jnp.array([[1.0, 2.0], [2.0, -3.0]])
    eta, lam = 0.5, 0.2
    assert np.array_equal(theory.gf_balance(D0, eta, lam, 0.0), D0)
    ts = jnp.array([0.0, 1.0, 2.5])
    batch = theory.gf_balance(D0, eta, lam, ts)
    assert batch.shape == (3, 2, 2)
    assert np.allclose(batch[2], np.exp(-2 * eta * lam * 2.5) * D0, rtol=1e-15, atol=0)
    D1 = theory.gf_balance(theory.gf_balance(D0, eta, lam, 1.0), eta, lam, 1.5)
    assert np.allclose(D1, batch[2], rtol=1e-14, atol=0)
    assert theory.gf_balance(D0.astype(jnp.float32), eta, lam, 3.0).dtype == jnp.float32
    assert theory.gf_balance_gap(2.0, eta, lam, ts).shape == (3,)
    assert float(theory.gf_contraction(eta, lam)) == pytest.approx(np.exp(-0.2), rel=1e-15)
    assert float(theory.gf_balance_rate(eta, lam)) == pytest.approx(0.2, rel=1e-15)
    assert float(theory.gf_loss_gap_bound(4.0, eta, lam, 0.0)) == pytest.approx(0.4, rel=1e-15)


# --- T5 ----------------------------------------------------------------------------------


def _gd_step(problem, data, eta, lam):
    grad = jax.grad(_l2_loss(problem, data, lam))
    return jax.jit(lambda th: jax.tree.map(lambda x, g: x - eta * g, th, grad(th)))


def test_T5_gd_balance_step_is_exact():
    """One real GD step θ ← θ − η(∇L + λθ), gradients by autodiff of L_L2."""
    problem, data = _problem("sensing")
    eta, lam = 0.3, 0.1
    step = _gd_step(problem, data, eta, lam)

    @jax.jit
    def predict(A, B):
        G = jax.grad(problem.loss)(A @ B.T, data)
        return theory.balance(A, B), theory.gd_balance_step(A, B, G, eta, lam)

    A, B = _random_factors(2, 5, 4, 3)
    D1 = np.asarray(theory.balance(*step((A, B))))
    D, predicted = (np.asarray(x) for x in predict(A, B))
    scale = max_abs(D1)
    assert max_abs(predicted, D1) <= 1e-12 * scale
    # The continuous contraction e^{−2ηλ} in place of (1 − ηλ)² misses by ~1e-3.
    gd, gf = float(theory.gd_contraction(eta, lam)), float(theory.gf_contraction(eta, lam))
    assert max_abs(predicted + (gf - gd) * D, D1) > 1e-6 * scale
    # So does dropping the O(η²) gradient term.
    assert max_abs(gd * D, D1) > 1e-6 * scale


def test_T5_gd_balance_along_trajectory():
    problem, data = _problem("completion", samples=200)
    eta, lam = 0.2, 0.05
    step = _gd_step(problem, data, eta, lam)

    @jax.jit
    def advance(theta):
        A, B = theta
        G = jax.grad(problem.loss)(A @ B.T, data)
        theta = step(theta)
        return theta, theory.gd_balance_step(A, B, G, eta, lam), theory.balance(*theta)

    theta = _random_factors(3, 5, 4, 6)  # r > min(m, n)
    for _ in range(30):
        theta, predicted, D1 = advance(theta)
        assert max_abs(predicted, D1) <= 1e-12 * max_abs(D1)


def test_T5_contraction_tends_to_gf():
    """(1 − ηλ)² = e^{−2ηλ} + O(η²): halving η quarters the difference."""
    lam = 0.5
    diffs = [
        float(theory.gd_contraction(eta, lam) - theory.gf_contraction(eta, lam))
        for eta in (1e-2, 5e-3)
    ]
    assert diffs[0] / diffs[1] == pytest.approx(4.0, rel=1e-2)
    assert float(theory.gd_contraction(0.5, 0.2)) == pytest.approx(0.81, rel=1e-15)
    rate = float(theory.gd_balance_rate(1e-3, lam))
    assert rate == pytest.approx(float(theory.gf_balance_rate(1e-3, lam)), rel=1e-3)


# --- T6 ----------------------------------------------------------------------------------

_D0 = jnp.array([[0.5, 0.1, 0.0], [0.1, -0.2, 0.3], [0.0, 0.3, 1.0]])


def test_T6_lambda_to_zero_is_continuous_and_nan_free():
    eta, sigma, m, n, t = 0.5, 0.3, 7, 4, 12.0
    trace = lambda lam: theory.sgf_mean_balance_trace(1.0, eta, lam, sigma, m, n, 3, t)
    mean_and_slope = jax.jit(
        jax.vmap(
            lambda lam: (
                theory.sgf_mean_balance(_D0, eta, lam, sigma, m, n, t),
                jax.grad(trace)(lam),
            )
        )
    )
    lams = jnp.array([0.0, 1e-9, 7.5e-5, 9e-5, 2e-3])
    means, slopes = (np.asarray(x) for x in mean_and_slope(lams))
    expected = np.asarray(_D0) + eta**2 * sigma**2 * (m - n) * t * np.eye(3)
    assert max_abs(means[0], expected) <= 1e-15
    assert max_abs(means[1], means[0]) <= 1e-7
    assert np.all(np.isfinite(slopes))
    assert slopes[0] == pytest.approx(slopes[1], rel=1e-6)
    # Either side of the switch to the Taylor series (2ηλt = 10⁻³ at λ = 1/12000) and
    # beyond it: d/dλ of the exact formula, by hand, for λ > 0.
    for lam, slope in zip(lams[2:], slopes[2:], strict=True):
        x = 2 * eta * float(lam) * t
        drive = eta**2 * sigma**2 * (m - n) * 3
        dphi = (x * np.exp(-x) + np.expm1(-x)) / x**2  # φ'(x), φ = (1 − e⁻ˣ)/x
        exact = -2 * eta * t * np.exp(-x) + drive * t * dphi * 2 * eta * t
        assert slope == pytest.approx(exact, rel=1e-9)


def test_T6_equal_sides_reduce_to_gf():
    ts = jnp.array([0.0, 1.0, 10.0, 100.0])
    both = jax.jit(
        lambda lam: (
            theory.sgf_mean_balance(_D0, 0.5, lam, 0.3, 5, 5, ts),
            theory.gf_balance(_D0, 0.5, lam, ts),
        )
    )
    for lam in (0.0, 0.05):
        sgf, gf = both(lam)
        assert np.array_equal(sgf, gf)


def test_T6_trace_and_formula():
    eta, lam, sigma, m, n = 0.5, 0.04, 0.3, 3, 8
    ts = jnp.array([0.0, 0.5, 3.0, 40.0, 1e4])
    means, traces = jax.jit(
        lambda ts: (
            theory.sgf_mean_balance(_D0, eta, lam, sigma, m, n, ts),
            theory.sgf_mean_balance_trace(jnp.trace(_D0), eta, lam, sigma, m, n, 3, ts),
        )
    )(ts)
    means = np.asarray(means)
    assert np.allclose(np.trace(means, axis1=1, axis2=2), traces, rtol=1e-14, atol=1e-15)
    # docs/theory.md's form, written out, and its stationary floor ησ²(m−n)/(2λ)·I.
    floor = eta * sigma**2 * (m - n) / (2 * lam)
    decay = np.exp(-2 * eta * lam * np.asarray(ts))[:, None, None]
    expected = decay * np.asarray(_D0) + floor * (1 - decay) * np.eye(3)
    assert np.allclose(means, expected, rtol=1e-13, atol=1e-15)
    assert max_abs(means[-1], floor * np.eye(3)) <= 1e-12


@pytest.mark.parametrize("lam", [0.0, 0.04])
def test_T6_mean_solves_its_ode(lam):
    """d E[D]/dt = −2ηλ E[D] + η²σ²(m − n) I (the drift given by Itô's formula)."""
    eta, sigma, m, n = 0.5, 0.3, 6, 2
    mean = lambda t: theory.sgf_mean_balance(_D0, eta, lam, sigma, m, n, t)
    value_and_rate = jax.jit(jax.vmap(lambda t: jax.jvp(mean, (t,), (jnp.ones_like(t),))))
    means, rates = value_and_rate(jnp.array([0.0, 1e-3, 2.0, 30.0]))
    for mean, rate in zip(np.asarray(means), np.asarray(rates), strict=True):
        expected = -2 * eta * lam * mean + eta**2 * sigma**2 * (m - n) * np.eye(3)
        assert max_abs(rate, expected) <= 1e-14


# --- T7 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("r", [2, 6])
def test_T7_momentum_balance_rates_match_the_flow(r):
    """Against the time derivative (jvp) of D and E along dM/dt = μ(∇L − M),
    dθ/dt = −η(M + λθ), with ∇L from a real loss."""
    problem, data = _problem("sensing")
    eta, lam, mu = 0.7, 0.08, 0.3
    A, B = _random_factors(4, 5, 4, r)
    M_A, M_B = _random_factors(5, 5, 4, r, scale=0.4)

    def field(state):
        A, B, M_A, M_B = state
        G = jax.grad(problem.loss)(A @ B.T, data)
        return (
            -eta * (M_A + lam * A),
            -eta * (M_B + lam * B),
            mu * (G @ B - M_A),
            mu * (G.T @ A - M_B),
        )

    def D_and_E(state):
        A, B, M_A, M_B = state
        E = M_A.T @ A + A.T @ M_A - M_B.T @ B - B.T @ M_B
        return theory.balance(A, B), E

    @jax.jit
    def both(state):
        (D, E), (dD, dE) = jax.jvp(D_and_E, (state,), (field(state),))
        return (D, E, dD, dE), theory.momentum_balance_rates(*state, eta, lam, mu)

    (D, E, dD, dE), rates = both((A, B, M_A, M_B))
    F = np.asarray(M_A).T @ np.asarray(M_A) - np.asarray(M_B).T @ np.asarray(M_B)
    assert max_abs(rates.D, D) <= 1e-14 * max_abs(D)
    assert max_abs(rates.E, E) <= 1e-14 * max_abs(E)
    assert max_abs(rates.F, F) <= 1e-14
    assert max_abs(rates.dD_dt, dD) <= 1e-10 * max_abs(dD)
    assert max_abs(rates.dE_dt, dE) <= 1e-10 * max_abs(dE)


# --- T8: rates, orders, and GD against GF ---------------------------------------------------


def test_T8_fit_rate_exact_exponential():
    t = np.linspace(0.0, 50.0, 51)
    rate, stderr = theory.fit_rate(t, 3.0 * np.exp(-0.25 * t))
    assert isinstance(rate, float) and isinstance(stderr, float)
    assert rate == pytest.approx(0.25, abs=1e-10)
    assert stderr < 1e-10
    # jax arrays, dropped points (0, nan, negative) and a window.
    y = jnp.asarray(np.where(t < 20, np.exp(-1.0 * t), np.exp(-20.0 - 0.1 * (t - 20))))
    y = y.at[45].set(0.0).at[46].set(jnp.nan).at[47].set(-1.0)
    rate, stderr = theory.fit_rate(jnp.asarray(t), y, t_min=20.0)
    assert rate == pytest.approx(0.1, abs=1e-10)
    rate, _ = theory.fit_rate(t, y, t_max=19.0)
    assert rate == pytest.approx(1.0, abs=1e-10)
    with pytest.raises(ValueError):
        theory.fit_rate(t, y, t_min=100.0)


def test_T8_fit_rate_noisy_stderr_is_sensible():
    """Log-normal noise of std 0.05: the slope's standard error is ≈ 0.05/√Σ(t − t̄)²,
    and the true rate lies within a few standard errors."""
    t = np.arange(200.0)
    noise = 0.05
    errors, stderrs = [], []
    for seed in range(50):
        rng = np.random.default_rng(seed)
        y = np.exp(1.0 - 0.1 * t + noise * rng.normal(size=t.size))
        rate, stderr = theory.fit_rate(t, y)
        errors.append(rate - 0.1)
        stderrs.append(stderr)
    expected = noise / np.sqrt(np.sum((t - t.mean()) ** 2))
    assert np.median(stderrs) == pytest.approx(expected, rel=0.1)
    assert np.std(errors) == pytest.approx(expected, rel=0.3)
    assert max(abs(e) / s for e, s in zip(errors, stderrs, strict=True)) < 4.0


def test_T8_convergence_order():
    h = 0.1 * 2.0 ** -np.arange(6)
    order, stderr = theory.convergence_order(h, 3.0 * h**2)
    assert order == pytest.approx(2.0, abs=1e-10) and stderr < 1e-10
    rng = np.random.default_rng(0)
    noisy = 3.0 * h * np.exp(0.02 * rng.normal(size=h.size))
    order, stderr = theory.convergence_order(h, noisy)
    assert abs(order - 1.0) < 4 * stderr + 1e-3 and stderr < 0.05


def test_T8_gd_is_first_order_in_eta():
    """Pure decay (L ≡ 0): GD gives (1 − ηλ)^k θ₀, GF e^{−ηλk} θ₀; at a fixed horizon
    ηk = 10 the gap shrinks like η (order 1), the GD balance contracting by
    gd_contraction per step and the GF one by gf_contraction."""
    lam, horizon = 0.1, 10.0
    etas = np.array([0.1, 0.05, 0.025, 0.0125, 0.00625])
    errs = []
    for eta in etas:
        k = round(horizon / eta)
        gd = float(theory.gd_contraction(eta, lam)) ** (k / 2)
        gf = float(theory.gf_contraction(eta, lam)) ** (k / 2)
        errs.append(abs(gd - gf))
    order, stderr = theory.convergence_order(etas, errs)
    assert order == pytest.approx(1.0, abs=0.02)


# --- T5, T7: the late balancing rates near a balanced minimum --------------------------


def _late_contraction_scalar_gd(eta, lam, s=1.0, steps=4000):
    """GD on ½(ab − s)² + (λ/2)(a² + b²) from an imbalanced start: the per-step ratio of
    D = a² − b² late in the run (float64, numpy)."""
    a, b = 1.3, 0.4
    ds = []
    for _ in range(steps):
        g = a * b - s
        a, b = a - eta * (g * b + lam * a), b - eta * (g * a + lam * b)
        ds.append(a * a - b * b)
    ds = np.abs(np.array(ds))
    k = int(np.argmax(ds < 1e-6 * ds[0])) or len(ds) - 1
    return ds[k] / ds[k - 1]


@pytest.mark.parametrize("eta, lam", [(0.1, 0.05), (0.2, 0.2), (0.5, 0.1)])
def test_t5_gd_late_rate_is_the_top_of_its_bracket(eta, lam):
    """At a balanced minimum of a rank-1 problem every direction that moves D lies on the
    symmetry orbit, where GD contracts D by exactly 1 − 2ηλ per step (the top of
    ``gd_rate_bracket``); GF's rate 2ηλ (ratio 1) and GD's leading factor (1 − ηλ)² miss."""
    c = _late_contraction_scalar_gd(eta, lam)
    low, high = theory.gd_rate_bracket(eta, lam)
    rate = -np.log(c) / (2 * eta * lam)
    assert rate == pytest.approx(high, rel=1e-5)
    assert low < high and abs(rate - 1) > 1e-3 and abs(rate - low) > 1e-3


@pytest.mark.parametrize("x", [0.002, 0.05, 0.1, 0.17])
def test_t7_momentum_orbit_rate_is_the_slow_eigenvalue(x):
    """The orbit rate is the slow eigenvalue of δ' = −η(m + λδ), m' = μ(λδ − m): checked
    against numpy's eigenvalues; 1 + x to first order, not 1 (no momentum) and not
    1 + 2x (coupled decay, whose orbit system is δ' = −ηm, m' = μ(2λδ − m))."""
    eta, lam = 0.1, 0.5
    mu = eta * lam / x
    J = np.array([[-eta * lam, -eta], [mu * lam, -mu]])
    slow = -max(np.linalg.eigvals(J).real)
    ratio = theory.momentum_orbit_rate(eta, lam, mu)
    assert ratio == pytest.approx(slow / (2 * eta * lam), rel=1e-12)
    if x <= 0.05:
        assert x < ratio - 1 < x + 4 * x**2
    coupled = -max(np.linalg.eigvals(np.array([[0, -eta], [2 * mu * lam, -mu]])).real)
    assert abs(coupled / (2 * eta * lam) - ratio) > 0.5 * x


def test_t6_sgf_floor_reduces_to_the_square_formula_at_m_equal_n():
    """The general floor's (m − n)E tr D term vanishes at m = n and moves it otherwise:
    at m = 8, n = 4 (r = 4) with the measured size and trace of the README's point the
    two formulas differ by more than the measurement's 1.5% standard error."""
    square = theory.sgf_floor(0.1, 0.1, 0.1, 4, 6, 6, 2.0, 0.7)
    assert square == pytest.approx(0.1 * 0.01 * 5 * 2.0 / 0.2, rel=1e-15)
    general = theory.sgf_floor(0.1, 0.1, 0.1, 4, 8, 4, 2.0, 0.2)
    assert general / theory.sgf_floor(0.1, 0.1, 0.1, 4, 8, 8, 2.0, 0.2) - 1 > 0.015
