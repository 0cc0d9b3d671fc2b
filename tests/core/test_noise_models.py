"""The noise models' SDEs as rankflow integrates them (docs/theory.md, T9, T10; issue #15).

Float64 throughout. T9 at m = n is checked path by path against the measured strong
error of D at the same step (the reference solve shares each path's Brownian motion);
the m ≠ n identities by Itô's formula from the SDE's own vector fields, to 1e-8; each
with wrong versions that must miss by far more. Heavier measurements (orders, the
Stratonovich limit of Heun) are marked slow.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankflow import theory
from rankflow.core import config as C
from rankflow.core import convergence as cv
from rankflow.core.dynamics import vector_fields as flows
from rankflow.core.program import params_of, program_for

ETA, LAM, SIGMA = 0.5, 0.1, 0.5
T1 = 4.0


def _point(noise="gradient", m=4, n=4, batch=4, samples=20, kind="sensing", t1=T1):
    d = {"kind": "stochastic_flow", "lam": LAM, "eta": ETA, "sigma": SIGMA, "noise": noise}
    if noise == "minibatch":
        d.update(sigma=0.0, batch=batch)
    problem = {"kind": kind, "m": m, "n": n, "rank": 2, "samples": samples, "noise": 0.1}
    cfg = {
        "x64": True,
        "seed": 0,
        "problem": problem,
        "model": {"r": 2},
        "init": {"kind": "imbalanced", "scale": 0.5, "imbalance": 1.0},
        "dynamics": d,
        "solver": {"dt": 0.125},
        "save": {"t1": t1, "num": 5},
    }
    return C.expand(C.resolve(cfg))[0]


def _frob(x):
    return np.sqrt(np.sum(np.asarray(x) ** 2, axis=(-2, -1)))


def _t9(D0, rate, ts):
    """``e^{−rate·t} D(0)`` per path (D0: paths × r × r) at the saves: paths × saves × r × r."""
    return np.exp(-rate * ts)[None, :, None, None] * D0[:, None]


# --- T9 at m = n, path by path -------------------------------------------------------------

DT, DT_REF, PATHS = 2**-9, 2**-11, 16
M = 4
T9_RATE = 2 * ETA * LAM + ETA**2 * SIGMA**2 * M
# Wrong rates: half the Itô term, its sign flipped, no Itô term (the rate of GF, of T6's
# parameter-noise mean at m = n, and of the Stratonovich solution).
WRONG_RATES = {
    "half the Itô term": 2 * ETA * LAM + ETA**2 * SIGMA**2 * M / 2,
    "Itô term sign flipped": 2 * ETA * LAM - ETA**2 * SIGMA**2 * M,
    "no Itô term (GF, T6 mean, Stratonovich)": 2 * ETA * LAM,
}


@pytest.fixture(scope="module")
def t9_paths():
    """Euler–Maruyama at DT and at DT_REF on the same Brownian paths (m = n = 4)."""
    point = _point()
    tol = cv.BROWNIAN_TOL_PER_DT * DT_REF
    return {
        "point": point,
        "dt": cv.solve_paths(point, DT, PATHS, brownian_tol=tol),
        "ref": cv.solve_paths(point, DT_REF, PATHS, brownian_tol=tol),
    }


@pytest.mark.slow  # ~22 s: two tree-driven solves; the reproduce claim noise.t9_pathwise
# checks T9 pathwise in the default run (tests/claims/test_mutants_noise.py)
def test_T9_pathwise_at_m_equal_n_within_the_strong_error(t9_paths):
    """On every path and save, D from Euler–Maruyama equals T9's e^{−(2ηλ+η²σ²m)t} D(0)
    (``theory.gradient_noise_balance``) within 3× the RMS over paths of the measured
    strong error ‖D_dt − D_ref‖ at that save; each wrong rate misses by > 10× it on
    every path."""
    out, ref, ts = t9_paths["dt"], t9_paths["ref"], t9_paths["dt"]["ts"]
    D0 = out["D"][:, 0]
    predicted = np.stack(
        [np.asarray(theory.gradient_noise_balance(D, ETA, LAM, SIGMA, M, ts)) for D in D0]
    )
    strong = np.sqrt(np.mean(_frob(out["D"] - ref["D"]) ** 2, axis=0))  # (saves,)
    deviation = _frob(out["D"] - predicted)  # (paths, saves)
    assert np.all(strong[1:] > 0) and np.all(deviation[:, 1:] <= 3 * strong[1:]), (
        deviation.max(axis=0),
        strong,
    )
    # The reference solve is closer still (its strong error is √8 smaller).
    assert np.all(_frob(ref["D"] - predicted)[:, -1] < deviation[:, -1].max())
    for name, rate in WRONG_RATES.items():
        miss = _frob(out["D"] - _t9(D0, rate, ts))[:, -1]
        assert miss.min() > 10 * strong[-1], (name, miss.min(), strong[-1])


@pytest.mark.slow  # shares the two tree-driven solves of the test above
def test_T9_factors_fluctuate_while_D_follows_it(t9_paths):
    """The factors themselves fluctuate (A differs across paths by far more than the
    strong error) while D follows T9: the identity is pathwise, not a mean."""
    A = t9_paths["dt"]["A"][:, -1]
    spread = np.sqrt(np.mean(np.sum((A - A.mean(axis=0)) ** 2, axis=(-2, -1))))
    strong = np.sqrt(np.mean(_frob(t9_paths["dt"]["D"] - t9_paths["ref"]["D"])[:, -1] ** 2))
    assert spread > 10 * strong, (spread, strong)


# --- m ≠ n: Itô's formula on simulated states ------------------------------------------------


def _states(point, paths=2):
    """The factors at every save of ``paths`` simulated paths, as (A, B) pairs."""
    program = program_for(point, save="states")
    params = {
        k: np.array([params_of(point, p)[k] for p in range(paths)]) for k in params_of(point, 0)
    }
    out = program.run(params)
    A, B = out["theta"]
    return [(A[i, s], B[i, s]) for i in range(paths) for s in range(A.shape[1])]


def _args(point):
    program = program_for(point, save="states")
    data = program.data(params_of(point, 0))
    d = point["dynamics"]
    hyper = {k: jnp.asarray(d[k], jnp.float64) for k in ("lam", "eta", "sigma", "mu")}
    return program.problem, data, hyper


def _noise(point, problem, theta):
    d = point["dynamics"]
    brownian = lambda shape: diffrax.UnsafeBrownianPath(shape, jax.random.PRNGKey(0))  # noqa: E731
    return flows.noise_term(
        "stochastic_flow", theta, brownian, model=d["noise"], problem=problem, batch=d["batch"]
    )


def _ito(point, control_shape):
    """Itô's formula for D at each simulated state: (state, drift, dβ coefficients)."""
    problem, data, hyper = _args(point)
    field = flows.drift_field("stochastic_flow", problem)
    states = _states(point)
    term = _noise(point, problem, states[0])

    @jax.jit
    def ito(y):
        f = lambda th: cv.balance_of(*th)  # noqa: E731
        return cv.ito_generator(f, field, term, 0.0, y, (data, hyper), control_shape)

    out = []
    for y in states:
        drift, coeffs = ito(y)
        out.append((y, np.asarray(drift), np.asarray(coeffs)))
    return out, problem, data


def _rel(x, y):
    return float(np.max(np.abs(np.asarray(x) - np.asarray(y))) / np.max(np.abs(np.asarray(y))))


def test_T9_identity_at_m_ne_n_on_simulated_states():
    """At m = 5 ≠ n = 3: along the gradient-noise SDE the dΞ coefficients of D vanish
    (1e-12 relative to the size of a single term ``ησ·|D'(y)σ_j|`` before cancellation)
    and the drift is ``theory.gradient_noise_balance_drift`` to 1e-8 relative; no Itô
    term, or m and n swapped, miss by > 1e-2."""
    point = _point("gradient", m=5, n=3)
    results, _, _ = _ito(point, (5, 3))
    for (A, B), drift, coeffs in results:
        A, B = np.asarray(A), np.asarray(B)
        scale = ETA * SIGMA * np.linalg.norm(A) * np.linalg.norm(B)
        assert np.max(np.abs(coeffs)) <= 1e-12 * scale
        predicted = theory.gradient_noise_balance_drift(A, B, ETA, LAM, SIGMA)
        assert _rel(drift, predicted) < 1e-8
        D = A.T @ A - B.T @ B
        swapped = -2 * ETA * LAM * D + ETA**2 * SIGMA**2 * (3 * B.T @ B - 5 * A.T @ A)
        assert _rel(drift, -2 * ETA * LAM * D) > 1e-2
        assert _rel(drift, swapped) > 1e-2


def _sensing_deltas(W, data):
    """Per-sample gradients of ``ℓ_k = ½(⟨X_k, W⟩ − y_k)²`` by hand, minus their mean."""
    X, y = np.asarray(data["X"]), np.asarray(data["y"])
    residual = np.einsum("kij,ij->k", X, W) - y
    g = residual[:, None, None] * X
    return g - g.mean(axis=0)


def test_T10_identity_at_m_ne_n_on_simulated_states():
    """Minibatch noise (sensing, m = 5, n = 3, N = 20, b = 4): the dβ coefficients of D
    vanish and the drift is ``theory.minibatch_noise_balance_drift(..., replace=False)``
    (deviations by hand) to 1e-8 relative; the with-replacement scale (off by
    (N−b)/(N−1) = 16/19), no Itô term, a 1/b² or no 1/b batch scaling and the Itô sign
    flipped miss by > 1e-2."""
    point = _point("minibatch", m=5, n=3, batch=4, samples=20)
    results, _, data = _ito(point, (20,))
    for (A, B), drift, coeffs in results:
        A, B = np.asarray(A), np.asarray(B)
        deltas = _sensing_deltas(A @ B.T, data)
        size = ETA * np.max(np.abs(deltas)) * np.linalg.norm(A) * np.linalg.norm(B)
        assert np.max(np.abs(coeffs)) <= 1e-12 * size
        right = theory.minibatch_noise_balance_drift(A, B, deltas, ETA, LAM, 4, replace=False)
        assert _rel(drift, right) < 1e-8
        with_replacement = theory.minibatch_noise_balance_drift(A, B, deltas, ETA, LAM, 4)
        decay = -2 * ETA * LAM * (A.T @ A - B.T @ B)
        ito = np.asarray(right) - decay
        wrong = {
            "with replacement": with_replacement,
            "no Itô term": decay,
            "1/b² batch scaling": decay + ito / 4,
            "no 1/b": decay + 4 * ito,
            "Itô sign flipped": decay - ito,
        }
        for name, w in wrong.items():
            assert _rel(drift, w) > 1e-2, name


@pytest.mark.parametrize(
    "kind",
    ["sensing", pytest.param("completion", marks=pytest.mark.slow), "regression"],
)
def test_minibatch_vf_prod_is_the_materialised_product(kind):
    """FactorNoise's vector–Jacobian ``vf_prod`` equals ``prod(vf(y), dβ)`` built from
    the materialised per-sample deviations, for a random state and control, to 1e-12
    relative."""
    point = _point("minibatch", m=5, n=3, batch=4, samples=20, kind=kind)
    problem, data, hyper = _args(point)
    # Any state will do: the identity is algebraic (no simulation to compile).
    rng = np.random.default_rng(0)
    y = (jnp.asarray(rng.normal(size=(5, 2))), jnp.asarray(rng.normal(size=(3, 2))))
    term = _noise(point, problem, y)
    control = jax.random.normal(jax.random.PRNGKey(1), (problem.samples,), jnp.float64)
    fast = term.vf_prod(0.0, y, (data, hyper), control)
    slow = term.prod(term.vf(0.0, y, (data, hyper)), control)
    for a, b in zip(fast, slow):
        assert _rel(a, b) < 1e-12


# --- solvers: orders and the Stratonovich limit (slow) ---------------------------------------

ORDER_DTS = [2**-2, 2**-3, 2**-4, 2**-5]


@pytest.mark.slow
@pytest.mark.parametrize(
    "noise, order", [("gradient", 0.5), ("parameter", 1.0)], ids=["gradient", "parameter"]
)
def test_euler_maruyama_strong_order(noise, order):
    """Strong order of Euler–Maruyama at t = 4 (64 paths, dt 1/4 … 1/32 against 1/256):
    ½ for gradient noise (multiplicative, not commutative), 1 for parameter noise
    (additive). Within 3 standard errors and 0.15; the other order is excluded."""
    table = cv.errors(_point(noise), ORDER_DTS, 2**-8, 64, method="euler")
    fit = cv.strong_order(table)
    other = 1.5 - order
    assert abs(fit["order"] - order) < max(3 * fit["se"], 0.15), fit
    assert abs(fit["order"] - other) > 5 * fit["se"], fit


@pytest.mark.slow
def test_euler_maruyama_weak_order_on_tr_D():
    """Weak order of Euler–Maruyama for gradient noise at m = n on E[tr D(4)] against its
    exact value e^{−(2ηλ+η²σ²m)t} tr D(0) (1024 paths, dt 1/4 … 1/32): 1 within 3
    standard errors and 0.25."""
    point = _point("gradient")
    table = cv.errors(point, ORDER_DTS, 2**-8, 1024)
    D0 = cv.solve_paths(point, ORDER_DTS[0], 1, brownian_tol=2**-11)["D"][0, 0]
    exact = float(np.trace(theory.gradient_noise_balance(D0, ETA, LAM, SIGMA, M, T1)))
    fit = cv.weak_order(table, exact=exact)
    assert abs(fit["order"] - 1.0) < max(3 * fit["se"], 0.25), fit


def _stratonovich_rate():
    """The rate of D for the Stratonovich SDE with T9's coefficients: the ordinary chain
    rule applies, so the dΞ terms cancel in D as in Itô's case and no quadratic-variation
    term appears: dD = −2ηλD dt. (Its Itô form carries the correction
    ½ Σ_j ∇σ_j·σ_j, whose effect on D is −η²σ²(m BᵀB − n AᵀA), cancelling T9's term.)"""
    return 2 * ETA * LAM


@pytest.mark.slow
@pytest.mark.parametrize("method", ["heun", "midpoint"])
def test_heun_and_midpoint_converge_to_stratonovich_not_T9(method, t9_paths):
    """Passed to ``solve_paths`` directly (the config refuses them), Heun and midpoint on
    T9's SDE at m = n converge to the Stratonovich solution, D(t) = e^{−2ηλt} D(0), within
    3× their own RMS strong error, and miss T9's Itô rate by > 10× it on every path,
    while Euler–Maruyama on the same paths meets T9 (the fast test)."""
    point, ts = t9_paths["point"], t9_paths["dt"]["ts"]
    tol = cv.BROWNIAN_TOL_PER_DT * DT_REF
    out = cv.solve_paths(point, DT, PATHS, brownian_tol=tol, method=method)
    ref = cv.solve_paths(point, DT_REF, PATHS, brownian_tol=tol, method=method)
    strong = np.sqrt(np.mean(_frob(out["D"] - ref["D"]) ** 2, axis=0))
    D0 = out["D"][:, 0]
    assert np.all(_frob(out["D"] - _t9(D0, _stratonovich_rate(), ts))[:, 1:] <= 3 * strong[1:])
    miss = _frob(out["D"] - _t9(D0, T9_RATE, ts))[:, -1]
    assert miss.min() > 10 * strong[-1], (miss.min(), strong[-1])


@pytest.mark.slow
def test_T9_deviation_shrinks_with_the_strong_error():
    """Halving dt twice (1/16 → 1/64, 16 paths, reference 1/512), the RMS deviation of
    Euler's D from T9 at t = 4 shrinks by about √2 per halving, as its strong error does:
    the ratio deviation/strong error stays within [0.5, 2]."""
    point = _point()
    table = cv.errors(point, [2**-4, 2**-5, 2**-6], 2**-9, PATHS)
    tol = cv.BROWNIAN_TOL_PER_DT * 2**-9
    ratios = []
    for dt in (2**-4, 2**-5, 2**-6):
        out = cv.solve_paths(point, dt, PATHS, brownian_tol=tol)
        D0 = out["D"][:, 0]
        deviation = np.sqrt(np.mean(_frob(out["D"] - _t9(D0, T9_RATE, out["ts"]))[:, -1] ** 2))
        last = table[(table["dt"] == dt) & (table["t"] == T1)]["balance_error"]
        ratios.append(deviation / np.sqrt(np.mean(last**2)))
    assert all(0.5 < r < 2 for r in ratios), ratios
    fit = cv.strong_order(table, "balance_error")
    assert abs(fit["order"] - 0.5) < max(3 * fit["se"], 0.2), fit
