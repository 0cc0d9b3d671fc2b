"""The dynamics of docs/theory.md against their exact predictions (T6, T7, T8) and against
each other: SGF's mean balance, the momentum-flow identities, momentum flow → gradient
flow as μ grows, each optimizer against a hand-written loop of its update, GD's first
order and the SDE solvers' strong orders, reproducibility of noise, one compilation
per stochastic sweep."""

import functools
import warnings

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from helpers import states

import rankflow
from rankflow import theory
from rankflow.core import config as C
from rankflow.core.dynamics.vector_fields import (
    gradient_flow_field,
    momentum_flow_field,
    noise_term,
)
from rankflow.core.observables import OBSERVABLES
from rankflow.core.problems import init_factors, make_problem
from rankflow.core.program import PARAM_KEYS, TRACE_COUNTS, params_of, program_for
from rankflow.engine.status import Status
from rankflow.numerics.solve import make_solver

SV = ["sv_1", "sv_2", "sv_3"]
COLS = list(OBSERVABLES) + SV


def quartic(W):
    """A non-quadratic custom loss (no data): the identities must hold for any L."""
    return 0.25 * jnp.sum(W**4) + 0.5 * jnp.sum((W - 0.3) ** 2)


def quartic_grad_np(W):
    """∇_W of :func:`quartic`, by hand (numpy), for loops independent of the library."""
    return W**3 + (W - 0.3)


QUARTIC = {"kind": "custom", "m": 4, "n": 3, "loss": quartic}


def _quiet(cfg):
    """rankflow.run without the σ = 0 warning (tested in test_config.py)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="dynamics.sigma = 0")
        return rankflow.run(cfg)


# --- T6: the stochastic gradient flow's mean balance -------------------------------------

# SGF on a 6×3 non-quadratic loss (m ≠ n): the noise drives E[tr D] to r·ησ²(m−n)/(2λ).
SGF_PROBLEM = QUARTIC | {"m": 6, "n": 3}
SGF = {"eta": 0.5, "lam": 0.1, "sigma": 0.4}
SGF_T1 = 16.0


def _sgf_setup():
    """Problem, data and start of the SGF config below at seed 0, rebuilt by hand (the
    program's start key is fold_in(key(seed), 1))."""
    problem = make_problem(C.resolve({"problem": SGF_PROBLEM, "model": {"r": 2}}))
    key = jax.random.fold_in(jax.random.PRNGKey(0), 1)
    theta0 = init_factors("gaussian", key, problem, {}, 2, 0.3, 0.0, jnp.float64)
    return problem, {}, theta0


@functools.cache
def _vbt_sgf(method):
    """SGF solved with rankflow's drift and noise terms, fixed step ``dt`` (traced), on a
    VirtualBrownianTree, so that every step size sees the same Brownian path of a key.
    Returns a jitted ``(dt, T, keys) → (A, B)`` at time T, vmapped over keys."""
    problem, data, theta0 = _sgf_setup()
    hyper = {k: jnp.float64(v) for k, v in SGF.items()}

    def solve(dt, T, key):
        def brownian_for(shape):
            return diffrax.VirtualBrownianTree(
                0.0, T, tol=2.0**-10, shape=shape, key=key, levy_area=diffrax.SpaceTimeLevyArea
            )

        terms = diffrax.MultiTerm(
            diffrax.ODETerm(gradient_flow_field(problem)),
            noise_term("stochastic_flow", theta0, brownian_for),
        )
        sol = diffrax.diffeqsolve(
            terms,
            make_solver(method),
            0.0,
            T,
            dt,
            theta0,
            args=(data, hyper),
            saveat=diffrax.SaveAt(t1=True),
            max_steps=None,
            adjoint=diffrax.DirectAdjoint(),
        )
        return jax.tree.map(lambda x: x[0], sol.ys)

    return jax.jit(jax.vmap(solve, in_axes=(None, None, 0)))


@pytest.mark.slow
def test_T6_sgf_mean_balance_trace_matches_theory_and_the_wrong_sign_fails():
    K = 256
    eta, lam, sigma = SGF["eta"], SGF["lam"], SGF["sigma"]
    df = rankflow.run(
        {
            "x64": True,
            "problem": SGF_PROBLEM,
            "model": {"r": 2},
            "init": {"kind": "gaussian", "scale": 0.3},
            "dynamics": {"kind": "stochastic_flow", "paths": K, **SGF},
            "solver": {"method": "shark", "dt": 0.125},
            "save": {"t1": SGF_T1, "num": 5},
        }
    )
    assert (df["status"] == "ok").all() and df["path"].nunique() == K
    by_t = df.groupby("t")["balance_trace"]
    ts = np.asarray(by_t.mean().index)[1:]
    mean, se = by_t.mean().to_numpy()[1:], by_t.std().to_numpy()[1:] / np.sqrt(K)
    trace0 = df.loc[df.t == 0, "balance_trace"]
    assert trace0.nunique() == 1  # paths share the start
    trace0 = trace0.iloc[0]
    predicted = np.asarray(theory.sgf_mean_balance_trace(trace0, eta, lam, sigma, 6, 3, 2, ts))
    wrong = np.asarray(theory.sgf_mean_balance_trace(trace0, eta, lam, sigma, 3, 6, 2, ts))
    z = (mean - predicted) / se
    z_wrong = (mean - wrong) / se
    assert np.all(np.abs(z) < 4), z
    assert np.all(np.abs(z_wrong) > 10), z_wrong
    # The noise-driven term dominates: the GF prediction (no noise) is far off as well.
    z_gf = (mean - trace0 * np.exp(-2 * eta * lam * ts)) / se
    assert np.all(np.abs(z_gf) > 5), z_gf

    # Discretisation bias is negligible against the Monte Carlo error: on shared Brownian
    # paths, ShARK with this dt and with dt/4 differ in tr D(t1) by far less than SE.
    _, _, (A0, B0) = _sgf_setup()
    assert float(jnp.sum(A0**2) - jnp.sum(B0**2)) == pytest.approx(trace0, rel=1e-12)
    keys = jax.random.split(jax.random.PRNGKey(7), 32)
    solve = _vbt_sgf("shark")
    coarse, fine = solve(0.125, SGF_T1, keys), solve(0.125 / 4, SGF_T1, keys)

    def trace(theta):
        A, B = theta
        return np.sum(np.asarray(A) ** 2, axis=(1, 2)) - np.sum(np.asarray(B) ** 2, axis=(1, 2))

    # |E[Δ]| ≤ E|Δ|: the strong difference bounds the weak bias (and dt/4's own is smaller).
    strong = np.mean(np.abs(trace(coarse) - trace(fine)))
    assert strong < 0.1 * se[-1], (strong, se[-1])


# --- T7: the decoupled momentum flow's balance identities ---------------------------------

MOMENTUM = {"eta": 0.5, "lam": 0.1, "mu": 0.5}


def _momentum_E(theta, M):
    (A, B), (MA, MB) = theta, M
    return MA.T @ A + A.T @ MA - MB.T @ B - B.T @ MB


def _balance(theta):
    A, B = theta
    return A.T @ A - B.T @ B


def test_T7_momentum_balance_rates_along_simulatedstates():
    t1, num = 20.0, 201
    point, program, out = states(
        {
            "x64": True,
            "problem": QUARTIC,
            "model": {"r": 3},
            "init": {"kind": "imbalanced", "scale": 0.5, "imbalance": 1.0},
            "dynamics": {"kind": "momentum_flow", **MOMENTUM},
            "solver": {"method": "tsit5", "rtol": 1e-11, "atol": 1e-13},
            "save": {"t1": t1, "num": num},
        }
    )
    assert (out["status"] == Status.ok).all()
    theta = jax.tree.map(lambda x: jnp.asarray(x[0]), out["theta"])  # (saves, ·, r)
    M = jax.tree.map(lambda x: jnp.asarray(x[0]), out["M"])
    eta, lam, mu = MOMENTUM["eta"], MOMENTUM["lam"], MOMENTUM["mu"]
    field = momentum_flow_field(program.problem)
    hyper = {k: jnp.float64(v) for k, v in MOMENTUM.items()}

    def rates(theta, M):
        v_theta, v_M = field(0.0, (theta, M), ({}, hyper))
        _, dD = jax.jvp(_balance, (theta,), (v_theta,))
        _, dE = jax.jvp(_momentum_E, (theta, M), (v_theta, v_M))
        (A, B), (MA, MB) = theta, M
        return dD, dE, theory.momentum_balance_rates(A, B, MA, MB, eta, lam, mu)

    dD, dE, th = jax.vmap(rates)(theta, M)

    def rel(x, y):
        return float(jnp.linalg.norm(x - y) / jnp.linalg.norm(x))

    assert rel(dD, th.dD_dt) < 1e-8 and rel(dE, th.dE_dt) < 1e-8
    # Not vacuous: E and F matter (dropping −2ηF from dE/dt, or −ηE from dD/dt, fails).
    assert rel(dE, -(mu + eta * lam) * th.E) > 1e-2
    assert rel(dD, -2 * eta * lam * th.D) > 1e-2

    # Integrated: D(t) = e^{−2ηλt} D(0) − η ∫_0^t e^{−2ηλ(t−s)} E(s) ds. The trapezoid
    # rule on saves h = 0.1 apart errs by ≈ (h²/12)·t·max|∂²_s(e^{2ηλs}E)|, about 1e-4
    # here (measured: 4e-5 of max‖D‖); the solver's error (rtol 1e-11) is negligible.
    # 5e-4 of max‖D‖ leaves that margin and is still far below the E term (checked).
    ts = np.asarray(program.ts)
    D = np.asarray(th.D)
    E = np.asarray(th.E)
    c = 2 * eta * lam
    g = np.exp(c * ts)[:, None, None] * E
    integral = np.concatenate(
        [np.zeros((1, 3, 3)), np.cumsum(0.5 * (g[1:] + g[:-1]) * np.diff(ts)[:, None, None], 0)]
    )
    predicted = np.exp(-c * ts)[:, None, None] * (D[0][None] - eta * integral)
    err = np.max(np.abs(D - predicted))
    e_term = np.max(np.abs(eta * np.exp(-c * ts)[:, None, None] * integral))
    assert err < 5e-4 * np.max(np.abs(D)), (err, np.max(np.abs(D)))
    assert e_term > 100 * err, (e_term, err)


# --- momentum flow → gradient flow as μ → ∞ -----------------------------------------------


@pytest.mark.slow
def test_momentum_flow_approaches_gradient_flow_like_one_over_mu():
    mus = [0.5, 2.0, 8.0, 32.0]
    base = {
        "x64": True,
        "problem": QUARTIC,
        "model": {"r": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "solver": {"method": "tsit5", "rtol": 1e-10, "atol": 1e-12},
        "save": {"t1": 20.0, "num": 11},
    }
    dyn = {"eta": 0.5, "lam": 0.1}
    gf = rankflow.run(base | {"dynamics": {"kind": "gradient_flow", **dyn}})
    mom = rankflow.run(
        base | {"dynamics": {"kind": "momentum_flow", **dyn}, "sweep": {"dynamics.mu": mus}}
    )
    cols = SV + ["balance_gap", "loss"]
    ref = gf[cols].to_numpy()
    dist = np.array(
        [np.max(np.abs(mom.loc[mom["dynamics.mu"] == mu, cols].to_numpy() - ref)) for mu in mus]
    )
    assert np.all(np.diff(dist) < 0), dist
    # Roughly 1/μ: the momentum lags the gradient by a time ~ 1/μ.
    ratios = dist[:-1] / dist[1:]
    assert np.all((ratios > 2.5) & (ratios < 6)), ratios
    assert dist[0] > 1e-2  # the slowest momentum is visibly different


# --- exact equalities between dynamics ------------------------------------------------------


@pytest.mark.slow
def test_sgd_gaussian_without_noise_is_gd_and_sgf_without_noise_is_gradient_flow():
    base = {
        "x64": True,
        "problem": QUARTIC,
        "model": {"r": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "save": {"t1": 30, "num": 7},
    }
    dyn = {"eta": 0.1, "lam": 0.05}
    gd = rankflow.run(base | {"dynamics": {"kind": "gd", **dyn}})
    sgd = _quiet(base | {"dynamics": {"kind": "sgd_gaussian", "sigma": 0.0, **dyn}})
    np.testing.assert_allclose(sgd[COLS].to_numpy(), gd[COLS].to_numpy(), rtol=1e-15, atol=0)
    euler = {"method": "euler", "dt": 1.0}
    gf = rankflow.run(base | {"dynamics": {"kind": "gradient_flow", **dyn}, "solver": euler})
    sgf = _quiet(base | {"dynamics": {"kind": "stochastic_flow", **dyn}, "solver": euler})
    np.testing.assert_allclose(sgf[COLS].to_numpy(), gf[COLS].to_numpy(), rtol=1e-15, atol=0)
    # ... and both equal GD (Euler with dt = 1 is one GD step), and something moved.
    np.testing.assert_allclose(gf[COLS].to_numpy(), gd[COLS].to_numpy(), rtol=1e-12, atol=1e-14)
    assert np.ptp(gd["loss"]) > 1e-2


def _hand_loop(kind, theta0, steps, every, eta, lam, mu):
    """docs/theory.md's update rules in numpy on the quartic loss (no library code)."""
    A, B = (np.array(x, np.float64) for x in theta0)
    MA, MB = np.zeros_like(A), np.zeros_like(B)
    VA, VB = np.zeros_like(A), np.zeros_like(B)
    b1, b2, eps = 0.9, 0.999, 1e-8  # optax.adamw's defaults
    saved = [(A.copy(), B.copy())]
    for k in range(1, steps + 1):
        G = quartic_grad_np(A @ B.T)
        gA, gB = G @ B, G.T @ A
        if kind == "momentum":
            MA, MB = (1 - mu) * MA + mu * gA, (1 - mu) * MB + mu * gB
            A, B = A - eta * (MA + lam * A), B - eta * (MB + lam * B)
        elif kind == "momentum_coupled":
            MA = (1 - mu) * MA + mu * (gA + lam * A)
            MB = (1 - mu) * MB + mu * (gB + lam * B)
            A, B = A - eta * MA, B - eta * MB
        elif kind == "adamw":
            MA, MB = b1 * MA + (1 - b1) * gA, b1 * MB + (1 - b1) * gB
            VA, VB = b2 * VA + (1 - b2) * gA**2, b2 * VB + (1 - b2) * gB**2

            c1, c2 = 1 - b1**k, 1 - b2**k  # bias corrections
            A = A - eta * ((MA / c1) / (np.sqrt(VA / c2) + eps) + lam * A)
            B = B - eta * ((MB / c1) / (np.sqrt(VB / c2) + eps) + lam * B)
        else:
            raise ValueError(kind)
        if k % every == 0:
            saved.append((A.copy(), B.copy()))
    return [np.stack(x) for x in zip(*saved)]


@pytest.mark.parametrize("kind", ["momentum", "momentum_coupled", "adamw"])
def test_optimizer_matches_hand_written_update(kind):
    eta, lam, mu, steps, every = 0.1, 0.05, 0.3, 200, 20
    _, _, out = states(
        {
            "x64": True,
            "problem": QUARTIC,
            "model": {"r": 3},
            "init": {"kind": "gaussian", "scale": 0.5},
            "dynamics": {"kind": kind, "eta": eta, "lam": lam, "mu": mu},
            "save": {"t1": steps, "num": steps // every + 1},
        }
    )
    A, B = (x[0] for x in out["theta"])
    hand_A, hand_B = _hand_loop(kind, (A[0], B[0]), steps, every, eta, lam, mu)
    np.testing.assert_allclose(A, hand_A, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(B, hand_B, rtol=1e-12, atol=1e-13)
    assert np.max(np.abs(A[-1] - A[0])) > 0.05  # it moved
    if kind == "momentum":  # the two momentum forms differ: the test can tell them apart
        other_A, _ = _hand_loop("momentum_coupled", (A[0], B[0]), steps, every, eta, lam, mu)
        assert np.max(np.abs(A - other_A)) > 1e-4


def test_hand_adamw_is_optax_adamw():
    """The hand loop's AdamW is optax.adamw(learning_rate=η, weight_decay=λ), stepped by
    hand with optax for 5 steps."""
    eta, lam = 0.1, 0.05
    rng = np.random.default_rng(0)
    theta = (rng.normal(size=(4, 3)) * 0.5, rng.normal(size=(3, 3)) * 0.5)
    opt = optax.adamw(learning_rate=eta, weight_decay=lam)
    params = jax.tree.map(jnp.asarray, theta)
    state = opt.init(params)
    for _ in range(5):
        A, B = params
        G = jnp.asarray(quartic_grad_np(np.asarray(A @ B.T)))
        updates, state = opt.update((G @ B, G.T @ A), state, params)
        params = optax.apply_updates(params, updates)
    hand_A, hand_B = _hand_loop("adamw", theta, 5, 5, eta, lam, 0.0)
    np.testing.assert_allclose(params[0], hand_A[-1], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(params[1], hand_B[-1], rtol=1e-13, atol=1e-14)


@pytest.mark.slow
def test_sgd_with_the_full_batch_is_gd():
    base = {
        "x64": True,
        "problem": {"kind": "sensing", "m": 5, "n": 4, "rank": 2, "samples": 30},
        "model": {"r": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "save": {"t1": 50, "num": 6},
    }
    dyn = {"eta": 0.2, "lam": 0.05}
    gd = rankflow.run(base | {"dynamics": {"kind": "gd", **dyn}})
    full = rankflow.run(base | {"dynamics": {"kind": "sgd", "batch": 30, **dyn}})
    np.testing.assert_allclose(full[COLS].to_numpy(), gd[COLS].to_numpy(), rtol=1e-12, atol=1e-14)
    # A real minibatch is noisy: same seed, different trajectory.
    mini = rankflow.run(base | {"dynamics": {"kind": "sgd", "batch": 10, **dyn}})
    assert np.max(np.abs(mini["loss"].to_numpy() - gd["loss"].to_numpy())) > 1e-4


# --- T8 and the SDE solvers: orders of convergence ----------------------------------------


def _states_sweep(cfg):
    """Trajectories of every point of a numeric sweep (one program): points, output."""
    points = C.expand(C.resolve(cfg))
    program = program_for(points[0], save="states")
    rows = [params_of(p, 0) for p in points]
    return points, program.run({k: np.array([r[k] for r in rows]) for k in PARAM_KEYS})


def test_T8_gd_is_first_order_in_eta_against_gradient_flow():
    # Horizon ηk = T = 4: η = 0.4, 0.2, 0.1, 0.05 take 10, 20, 40, 80 steps. Every run
    # saves at all four step counts (one program per dynamics); run j is read at save j.
    T, etas = 4.0, [0.4, 0.2, 0.1, 0.05]
    base = {
        "x64": True,
        "problem": QUARTIC,
        "model": {"r": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "save": {"ts": [0.0] + [T / eta for eta in etas]},
        "sweep": {"dynamics.eta": etas},
    }
    _, gd = _states_sweep(base | {"dynamics": {"kind": "gd", "lam": 0.1}})
    _, gf = _states_sweep(
        base
        | {
            "dynamics": {"kind": "gradient_flow", "lam": 0.1},
            "solver": {"method": "tsit5", "rtol": 1e-12, "atol": 1e-14},
        }
    )
    errs = []
    for j in range(len(etas)):
        sq = sum(np.sum((a[j, j + 1] - b[j, j + 1]) ** 2) for a, b in zip(gd["theta"], gf["theta"]))
        errs.append(np.sqrt(sq))
    order, _ = theory.convergence_order(etas, errs)
    assert 0.8 < order < 1.2, (order, errs)
    assert np.all(np.diff(errs) < 0), errs


@pytest.mark.slow
def test_sde_strong_order_shark_above_euler_maruyama():
    """Strong error at T = 4 of SGF (rankflow's drift and noise terms) against a fine
    ShARK solution on the same VirtualBrownianTree paths, for dt = 1, ½, ¼, ⅛."""
    T, dts = 4.0, [1.0, 0.5, 0.25, 0.125]
    keys = jax.random.split(jax.random.PRNGKey(1), 32)
    shark, em = _vbt_sgf("shark"), _vbt_sgf("euler")
    ref_A, ref_B = shark(1.0 / 64, T, keys)

    def strong_errors(solve):
        out = []
        for dt in dts:
            A, B = solve(dt, T, keys)
            sq = np.sum((A - ref_A) ** 2, axis=(1, 2)) + np.sum((B - ref_B) ** 2, axis=(1, 2))
            out.append(float(np.mean(np.sqrt(sq))))
        return out

    em_errs, shark_errs = strong_errors(em), strong_errors(shark)
    em_order, _ = theory.convergence_order(dts, em_errs)
    shark_order, _ = theory.convergence_order(dts, shark_errs)
    assert 0.8 < em_order < 1.4, (em_order, em_errs)  # additive noise: EM has order 1
    assert shark_order > em_order + 0.25, (shark_order, em_order, shark_errs)
    assert shark_errs[-1] < em_errs[-1] / 5


# --- noise: reproducibility and paths ---------------------------------------------------------


@pytest.mark.parametrize(
    "dynamics",
    [
        {"kind": "stochastic_flow", "sigma": 0.3},
        {"kind": "sgd_gaussian", "sigma": 0.3},
    ],
)
@pytest.mark.slow
def test_same_seed_same_table_paths_differ_and_path_i_is_the_same_in_bigger_runs(dynamics):
    cfg = {
        "x64": True,
        "problem": QUARTIC,
        "model": {"r": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "dynamics": {"eta": 0.2, "lam": 0.05, "paths": 4, **dynamics},
        "solver": {"method": "euler", "dt": 0.5},
        "save": {"t1": 20, "num": 5},
        "sweep": {"seed": [0, 1]},
    }
    a, b = rankflow.run(cfg), rankflow.run(cfg)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    final = a[a.t == 20]
    for _, run in final.groupby("run_id"):
        assert run["path"].tolist() == [0, 1, 2, 3]
        assert run["loss"].nunique() == 4  # every path its own noise
    # Paths of one run share the start; seeds do not.
    start = a[a.t == 0].groupby("seed")["loss"]
    assert (start.nunique() == 1).all() and start.first().nunique() == 2
    # The noise key of path i is fold_in(fold_in(key(seed), 2), i): a run with fewer
    # paths reproduces the first paths of a bigger one.
    small = rankflow.run(cfg | {"dynamics": cfg["dynamics"] | {"paths": 2}})
    big = a[a.path < 2].reset_index(drop=True)
    np.testing.assert_allclose(small[COLS].to_numpy(), big[COLS].to_numpy(), rtol=1e-13, atol=0)


def test_sweep_over_sigma_and_mu_compiles_once():
    cfg = {
        "problem": QUARTIC,
        "model": {"r": 2},
        "dynamics": {"kind": "stochastic_momentum_flow", "paths": 2},
        "solver": {"method": "euler", "dt": 1.0},
        "save": {"t1": 13.0, "num": 3},  # a structure no other test uses
        "sweep": {"dynamics.sigma": [0.1, 0.2, 0.3], "dynamics.mu": [0.05, 0.1]},
    }
    key = program_for(C.expand(C.resolve(cfg))[0]).key
    assert TRACE_COUNTS[key] == 0
    df = rankflow.run(cfg)
    assert df["run_id"].nunique() == 6 and len(df) == 6 * 2 * 3
    assert TRACE_COUNTS[key] == 1
    rankflow.run(cfg | {"sweep": {"dynamics.sigma": [0.5, 0.6, 0.7], "dynamics.mu": [0.2, 0.3]}})
    assert TRACE_COUNTS[key] == 1  # new values, same program
    # σ and μ reach the noise: final losses differ across the sweep.
    assert df[df.t == 13.0]["loss"].nunique() == 12
