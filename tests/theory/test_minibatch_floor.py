"""T10 floor: minibatch SGD's stationary mean balance E[D] (docs/theory.md, T10 floor),
``theory.minibatch_balance_floor``, exactly against every batch of a small problem and
against rankflow's own sgd run to stationarity (regression, N = 64, b = 4, 8, 16, 32, one
program for the four sizes), with the wrong versions failing: sampling with replacement
(s² = 1/(bN), i.e. the (N − b)/(N − 1) left out), λ for 2λ, no noise term (GD's own η²
term alone)."""

from itertools import combinations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankflow.core import config as C
from rankflow.core.program import params_of, program_for
from rankflow.engine.status import Status
from rankflow.theory import gd_balance_step, minibatch_balance_floor

ETA, LAM, N = 0.1, 0.1, 64
BATCHES = (4, 8, 16, 32)


def _state(seed, m=3, n=2, r=2, samples=5):
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    A = jax.random.normal(keys[0], (m, r), jnp.float64)
    B = jax.random.normal(keys[1], (n, r), jnp.float64)
    g = jax.random.normal(keys[2], (samples, m, n), jnp.float64)  # per-sample gradients
    return A, B, g


def _held_terms_fixed_point(A, B, g, batch, eta, lam):
    """The floor from first principles: the mean of T5's exact step over every batch of
    ``batch`` of the samples drawn without replacement is ``cD + η²(Q + s²M)``; its fixed
    point with the η² part held is ``η²(Q + s²M)/(1 − c)``, c = (1 − ηλ)²."""
    batches = jnp.array(list(combinations(range(g.shape[0]), batch)))
    step = jax.vmap(lambda c: gd_balance_step(A, B, g[c].mean(0), eta, lam))
    mean = step(batches).mean(0)
    c = (1 - eta * lam) ** 2
    return (mean - c * (A.T @ A - B.T @ B)) / (1 - c)


def test_floor_is_the_fixed_point_of_the_exact_one_step_mean_over_every_batch():
    with jax.enable_x64(True):
        for seed, batch in ((0, 2), (1, 3), (2, 1)):
            A, B, g = _state(seed)
            gbar = g.mean(0)
            want = _held_terms_fixed_point(A, B, g, batch, ETA, LAM)
            got = minibatch_balance_floor(
                A, B, gbar, g - g.mean(0, keepdims=True), ETA, LAM, batch, replace=False
            )
            scale = float(jnp.abs(want).max())
            assert float(jnp.abs(got - want).max()) <= 1e-12 * scale
            # Wrong versions: with replacement (batch > 1), λ for 2λ at leading order.
            if batch > 1:
                wr = minibatch_balance_floor(
                    A, B, gbar, g - g.mean(0, keepdims=True), ETA, LAM, batch, replace=True
                )
                assert float(jnp.abs(wr - want).max()) > 1e-3 * scale
            # λ(1 − ηλ) for λ(2 − ηλ) (λ for 2λ at leading order): about twice the floor.
            half_rate = got * (2 - ETA * LAM) / (1 - ETA * LAM)
            assert float(jnp.abs(half_rate - want).max()) > 0.5 * scale


def test_floor_at_a_stationary_point_of_the_full_batch_loss_is_the_noise_term_alone():
    """Where ḠB = −λA and ḠᵀA = −λB (then AᵀA = BᵀB: D = 0), GD's own η² term is
    λ²D = 0 and the floor is η s² M / (λ(2 − ηλ)) (M, s² of T10, without replacement):
    B = RA for a rotation R, Ḡ = −λRᵀ."""
    with jax.enable_x64(True):
        A, _, g = _state(3, m=2, n=2, r=2, samples=6)
        R = jnp.array([[0.6, -0.8], [0.8, 0.6]])
        B, gbar = R @ A, -LAM * R.T
        np.testing.assert_allclose(gbar @ B, -LAM * A, atol=1e-14)
        np.testing.assert_allclose(gbar.T @ A, -LAM * B, atol=1e-14)
        deltas = g - g.mean(0, keepdims=True)
        b, n = 3, 6
        got = minibatch_balance_floor(A, B, gbar, deltas, ETA, LAM, b, replace=False)
        s2 = (n - b) / ((n - 1) * b * n)
        M = sum(B.T @ d.T @ d @ B - A.T @ d @ d.T @ A for d in deltas)
        want = ETA * s2 * M / (LAM * (2 - ETA * LAM))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
        scale = float(jnp.abs(want).max())
        for wrong_s2 in (1 / (b * n), (n - b) / ((n - 1) * b), (n - b) / (n * b * n)):
            wrong = ETA * wrong_s2 * M / (LAM * (2 - ETA * LAM))
            assert float(jnp.abs(got - wrong).max()) > 0.1 * scale


def _stationary_run(paths: int, t1: int, burn: int, saves: int):
    """rankflow's sgd (float64) on regression 6×3, rank 2, r = 3, N = 64, label noise
    0.5, η = λ = 0.1, at the four batch sizes × ``paths`` paths (same data and start,
    their own minibatches): one program (the batch is traced); the factors at ``saves``
    times from ``burn`` to ``t1``. Returns per batch size the time mean of D, of the
    floor at each saved state (right and wrong versions) and of ‖D‖_F, per path."""
    cfg = {
        "x64": True,
        "problem": {"kind": "regression", "m": 6, "n": 3, "rank": 2, "samples": N, "noise": 0.5},
        "model": {"r": 3},
        "init": {"scale": 0.5},
        "dynamics": {"kind": "sgd", "eta": ETA, "lam": LAM, "paths": paths},
        "save": {"ts": [float(t) for t in np.linspace(burn, t1, saves)]},
        "sweep": {"dynamics.batch": list(BATCHES)},
    }
    points = C.expand(C.resolve(cfg))
    program = program_for(points[0], save="states")
    rows = [params_of(points[i], p) for i in range(len(BATCHES)) for p in range(paths)]
    out = program.run({k: np.array([r[k] for r in rows]) for k in rows[0]})
    assert (out["status"] == Status.ok).all()
    data = program.data(rows[0])
    with jax.enable_x64(True):
        A, B = (jnp.asarray(x) for x in out["theta"])  # (runs, saves, ·, r)

        def floors(a, b, batch):  # one state: without and with replacement
            g = jax.jacrev(program.problem.sample_losses)(a @ b.T, data)
            gbar = g.mean(0)
            args = (a, b, gbar, g - g.mean(0, keepdims=True), ETA, LAM, batch)
            return minibatch_balance_floor(*args, False), minibatch_balance_floor(*args, True)

        over_saves = jax.vmap(floors, in_axes=(0, 0, None))
        sizes = jnp.repeat(jnp.asarray(BATCHES, jnp.float64), paths)
        right, replaced = jax.jit(jax.vmap(over_saves))(A, B, sizes)
        D = jnp.einsum("psir,psiq->psrq", A, A) - jnp.einsum("psir,psiq->psrq", B, B)
        per_path = {
            "D": D.mean(1),
            "right": right.mean(1),
            "replace": replaced.mean(1),
            "norm": jnp.linalg.norm(D, axis=(-2, -1)).mean(1),
        }
    return {
        k: np.asarray(v).reshape(len(BATCHES), paths, *v.shape[1:]) for k, v in per_path.items()
    }


def _deviation(measured, predicted):
    """``‖mean over paths of (D̄ − D̄*)‖_F`` and its standard error (the root sum of the
    entries' squared standard errors over paths)."""
    diff = measured - predicted
    se = np.sqrt(np.sum(diff.var(0, ddof=1) / len(diff)))
    return float(np.linalg.norm(diff.mean(0))), float(se)


def check_floor(runs, report=None):
    """The time-mean D of each batch size equals the time mean of the floor at the run's
    states within 4 standard errors plus 3% (the window starts 70 e-folds of 2ηλ after
    the start, its end-minus-start term over the window is the rest); the wrong
    versions are off by more at the larger batches."""
    wrong = {"replace": [], "lam": [], "none": []}
    for i, b in enumerate(BATCHES):
        D, F = runs["D"][i], runs["right"][i]
        floor = float(np.linalg.norm(F.mean(0)))
        dev, se = _deviation(D, F)
        if report is not None:
            report.append(
                (b, float(np.linalg.norm(D.mean(0))), floor, float(runs["norm"][i].mean()), dev, se)
            )
        assert dev <= 4 * se + 0.03 * floor, (
            f"b = {b}: {dev:.3g} off the floor {floor:.3g} (SE {se:.2g})"
        )
        for name, G in (("replace", runs["replace"][i]), ("lam", 2 * F), ("none", 0 * F)):
            dev_w, se_w = _deviation(D, G)
            wrong[name].append(dev_w > 4 * se_w + 0.03 * floor)
    assert wrong["replace"][2:] == [True, True]  # b = 16, 32: (N − b)/(N − 1) = 0.76, 0.51
    assert all(wrong["lam"]) and all(wrong["none"])


def test_sgd_stationary_mean_balance_is_the_floor_at_its_states():
    """8 paths, 2,000 steps, the floor and D averaged over steps 700–2,000 (66 saves)."""
    check_floor(_stationary_run(paths=8, t1=2000, burn=700, saves=66))


@pytest.mark.slow
def test_sgd_stationary_mean_balance_is_the_floor_at_its_states_longer():
    """16 paths, 3,000 steps, averaged over 1,000–3,000 (201 saves)."""
    report = []
    check_floor(_stationary_run(paths=16, t1=3000, burn=1000, saves=201), report)
    for b, mean_norm, floor, norm_mean, dev, se in report:
        print(
            f"b={b} |E D|={mean_norm:.4g} |E D*|={floor:.4g} E|D|={norm_mean:.4g} "
            f"{dev=:.2g} {se=:.2g}"
        )
