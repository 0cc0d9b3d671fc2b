"""End to end: configs → compiled programs → tables, checked against exact theory (T4,
T8's Euler identity) and for structure (one compilation per sweep, divergence)."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.core import config as C
from rankflow.core import problems, vocabulary
from rankflow.core.dynamics.vector_fields import gradient_flow_field
from rankflow.core.observables import OBSERVABLES
from rankflow.core.optimizers import gd
from rankflow.core.problems import init_factors, make_problem
from rankflow.core.program import TRACE_COUNTS, program_for

ROOT = Path(__file__).resolve().parents[2]


def quartic_plus_quadratic(W):
    """A non-quadratic custom loss: the T4 identity must not care."""
    return 0.25 * jnp.sum(W**4) + 0.5 * jnp.sum((W - 0.3) ** 2)


PROBLEMS = {
    "diagonal": {"kind": "diagonal", "singular_values": [0.3, 0.7, 1.0]},
    "sensing": {"kind": "sensing", "m": 5, "n": 4, "rank": 2, "samples": 60, "noise": 0.1},
    "completion": {"kind": "completion", "m": 5, "n": 4, "rank": 2, "samples": 30},
    "regression": {"kind": "regression", "m": 3, "n": 5, "rank": 2, "samples": 40, "noise": 0.1},
    "codiagonal": {
        "kind": "codiagonal",
        "m": 3,
        "n": 4,
        "rank": 2,
        "samples": 40,
        "noise": 0.1,
        "input_variances": [2.0, 1.0, 0.5, 0.25],
    },
    "custom": {"kind": "custom", "m": 4, "n": 3, "loss": quartic_plus_quadratic},
}


def test_every_registered_problem_kind_is_here():
    """The kinds above are the registry's, in its order: a kind registered in
    rankflow.core.problems and missing here fails (its identities are then untested)."""
    assert list(PROBLEMS) == list(problems.PROBLEMS)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(k, marks=pytest.mark.slow) if k in ("completion", "regression") else k
        for k in PROBLEMS
    ],
)
def test_T4_balance_gap_decays_exactly_under_gradient_flow(kind):
    eta, lams = 0.5, [0.0, 0.02, 0.05]
    df = rankflow.run(
        {
            "x64": True,
            "problem": PROBLEMS[kind],
            "model": {"r": 3},
            "init": {"kind": "imbalanced", "scale": 0.5, "imbalance": 1.5},
            "dynamics": {"kind": "gradient_flow", "eta": eta},
            "solver": {"method": "tsit5", "rtol": 1e-10, "atol": 1e-12},
            "save": {"t1": 40.0, "num": 11},
            "sweep": {"dynamics.lam": lams},
        }
    )
    assert (df["status"] == "ok").all()
    for lam, run in df.groupby("dynamics.lam"):
        gap0 = run["balance_gap"].iloc[0]
        assert gap0 == pytest.approx(1.5, rel=1e-12)
        predicted = gap0 * np.exp(-2 * eta * lam * run["t"].to_numpy())
        np.testing.assert_allclose(run["balance_gap"], predicted, rtol=1e-6)
    # The data loss does move: the identity is not a trivially frozen state.
    assert df.groupby("run_id")["loss"].agg(np.ptp).min() > 1e-3


def test_T4_fails_for_a_wrong_rate():
    """The tolerance above separates e^{-2ηλt} from e^{-ηλt} by orders of magnitude."""
    df = rankflow.run(
        {
            "x64": True,
            "init": {"kind": "imbalanced", "imbalance": 1.0},
            "dynamics": {"lam": 0.05, "eta": 0.5},
            "solver": {"rtol": 1e-10, "atol": 1e-12},
            "save": {"t1": 40, "num": 5},
        }
    )
    wrong = df["balance_gap"].iloc[0] * np.exp(-0.5 * 0.05 * df["t"])
    assert np.max(np.abs(df["balance_gap"] / wrong - 1)) > 0.1


def _one_step_setup():
    cfg = C.resolve({"x64": True, "problem": PROBLEMS["sensing"], "model": {"r": 3}})
    problem = make_problem(cfg)
    with jax.enable_x64(True):
        key = jax.random.PRNGKey(3)
        data = problem.make_data(key, jnp.float64(0.1), jnp.float64)
        theta = init_factors("gaussian", key, problem, data, 3, 0.7, 0.0, jnp.float64)
    return problem, data, theta


def test_gd_is_one_euler_step_of_gradient_flow():
    problem, data, theta = _one_step_setup()
    eta, lam = 0.3, 0.07
    field = gradient_flow_field(problem)
    euler = jax.tree.map(
        lambda th, f: th + 1.0 * f, theta, field(0.0, theta, (data, {"eta": eta, "lam": lam}))
    )
    opt = gd(eta, lam)
    grads = jax.grad(lambda th: problem.loss(th[0] @ th[1].T, data))(theta)
    updates, _ = opt.update(grads, opt.init(theta), theta)
    stepped = optax.apply_updates(theta, updates)
    for a, b in zip(stepped, euler):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(stepped[0] - theta[0])) > 1e-3  # the step is not trivial


@pytest.mark.slow
def test_gd_table_equals_fixed_step_euler_flow_table():
    base = {
        "x64": True,
        "problem": PROBLEMS["regression"],
        "model": {"r": 3},
        "dynamics": {"eta": 0.2},
        "save": {"t1": 50, "num": 11},
        "sweep": {"dynamics.lam": [0.0, 0.1], "seed": [0, 1]},
    }
    a = rankflow.run(base | {"dynamics": {"kind": "gd", "eta": 0.2}})
    b = rankflow.run(
        base
        | {
            "dynamics": {"kind": "gradient_flow", "eta": 0.2},
            "solver": {"method": "euler", "dt": 1.0},
        }
    )
    cols = list(OBSERVABLES) + ["sv_1", "sv_2", "sv_3"]
    np.testing.assert_allclose(a[cols].to_numpy(), b[cols].to_numpy(), rtol=1e-12, atol=1e-12)


def test_sweep_over_50_lambdas_compiles_once():
    cfg = {
        "problem": {"kind": "diagonal"},
        "dynamics": {"kind": "gd", "eta": 0.1},
        "save": {"t1": 37, "num": 38},  # a structure no other test uses
        "sweep": {"dynamics.lam": list(np.linspace(0.0, 0.2, 50))},
    }
    key = program_for(C.expand(C.resolve(cfg))[0]).key
    assert TRACE_COUNTS[key] == 0
    df = rankflow.run(cfg)
    assert df["run_id"].nunique() == 50 and df["dynamics.lam"].nunique() == 50
    assert TRACE_COUNTS[key] == 1
    rankflow.run(cfg | {"sweep": {"dynamics.lam": list(np.linspace(0.3, 0.5, 50))}})
    assert TRACE_COUNTS[key] == 1  # new values, same program
    # Numeric axes of every kind share the program too.
    rankflow.run(cfg | {"sweep": {"dynamics.eta": [0.05] * 25 + [0.1] * 25}})
    assert TRACE_COUNTS[key] == 1


def test_sweep_is_a_product_with_columns_and_run_ids():
    df = rankflow.run(
        {
            "dynamics": {"kind": "gd"},
            "save": {"t1": 10, "num": 3},
            "sweep": {"dynamics.lam": [0.0, 0.1], "seed": [0, 1, 2], "model.r": [2, 5]},
        }
    )
    assert df["run_id"].nunique() == 12 and len(df) == 36
    first = df.groupby("run_id").first()
    assert list(first["dynamics.lam"]) == [0.0] * 6 + [0.1] * 6
    assert list(first["seed"]) == [0, 0, 1, 1, 2, 2] * 2
    assert list(first["model.r"]) == [2, 5] * 6
    assert first.loc[first["model.r"] == 2, "sv_3"].isna().all()  # r = 2: two sv only
    for col in ["run_id", "t", "status", "path", "dynamics.kind", "problem.kind", *OBSERVABLES]:
        assert col in df.columns
    assert set(df["status"]) == {"ok"}


def test_same_seed_same_table_and_float32_by_default():
    cfg = {
        "problem": PROBLEMS["sensing"],
        "model": {"r": 3},
        "save": {"t1": 20, "num": 5},
        "sweep": {"seed": [0, 1]},
    }
    a, b = rankflow.run(cfg), rankflow.run(cfg)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a[a.seed == 0]["loss"], a[a.seed == 1]["loss"])
    program = program_for(C.expand(C.resolve(cfg))[0])
    assert program.dtype == jnp.float32
    # x64 changes the precision, not the random problem: results agree to float32.
    c = rankflow.run(cfg | {"x64": True})
    np.testing.assert_allclose(a["loss"], c["loss"], rtol=1e-4)
    assert not np.array_equal(a["loss"], c["loss"])


def test_problem_seed_fixes_the_data_across_init_seeds():
    cfg = {
        "problem": PROBLEMS["sensing"] | {"seed": 7},
        "model": {"r": 3},
        "init": {"kind": "spectral", "scale": 0.5},
        "save": {"t1": 10, "num": 2},
        "sweep": {"seed": [0, 1]},
    }
    df = rankflow.run(cfg)
    t0 = df[df.t == 0]
    # Spectral init depends on the data only: same data ⇒ same start, whatever the seed.
    np.testing.assert_allclose(t0["loss"].iloc[0], t0["loss"].iloc[1], rtol=1e-6)


def test_gd_divergence_is_recorded_and_other_runs_unaffected(tmp_path):
    cfg = {
        "dynamics": {"kind": "gd"},
        "init": {"scale": 1.0},
        "save": {"t1": 100, "num": 11},
        "sweep": {"dynamics.eta": [0.1, 3.0]},
    }
    df = rankflow.run(cfg, out=tmp_path)
    ok, bad = df[df["dynamics.eta"] == 0.1], df[df["dynamics.eta"] == 3.0]
    assert (ok["status"] == "ok").all() and ok["loss"].notna().all()
    status = list(bad["status"])
    first = status.index("diverged")
    assert 0 < first and all(s == "diverged" for s in status[first:])
    assert bad["loss"].iloc[first:].isna().all() and bad["loss"].iloc[:first].notna().all()
    # The same run alone gives the same rows: runs of a sweep do not interact.
    alone = rankflow.run(cfg | {"sweep": {"dynamics.eta": [0.1]}})
    np.testing.assert_array_equal(alone["loss"], ok["loss"])
    pd.testing.assert_frame_equal(rankflow.load(tmp_path), df)


def finite_time_blowup(W):
    return -0.5 * jnp.sum(W**2)


def test_flow_blowup_stops_at_event_and_max_steps_is_recorded():
    # With λ = 0, dθ/dt ~ θ³ blows up in finite time; the event at diverge_norm stops
    # the solve (float32 cannot resolve t close enough to the blow-up time to see 1e6).
    base = {
        "problem": {"kind": "custom", "m": 3, "n": 3, "loss": finite_time_blowup},
        "model": {"r": 2},
        "init": {"scale": 1.0},
        "save": {"t1": 50, "num": 11},
        "dynamics": {"lam": 0.0},
        "solver": {"diverge_norm": 100.0},
    }
    df = rankflow.run(base | {"sweep": {"init.scale": [0.01, 1.5]}})
    small, big = df[df["init.scale"] == 0.01], df[df["init.scale"] == 1.5]
    assert (small["status"] == "ok").all()
    assert big["status"].iloc[0] == "ok" and big["status"].iloc[-1] == "diverged"
    df = rankflow.run(
        base | {"solver": {"max_steps": 3, "diverge_norm": 100.0}, "init": {"scale": 0.01}}
    )
    assert df["status"].iloc[0] == "ok" and df["status"].iloc[-1] == "max_steps"


# Three examples in the default run (diagonal_gd, sensing, compare_sgd); the rest ~10 s each on
# 2 cores, in the slow run.
SLOW_EXAMPLES = (
    "completion",
    "compare_gd",
    "compare_momentum",
    "custom",
    "demo",
    "diagonal_flow",
    "regression",
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_EXAMPLES else n
        for n in sorted(p.stem for p in (ROOT / "sims").glob("*.toml"))
    ],
)
def test_sims_examples_write_valid_tables(name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / name
    cfg = C.resolve(ROOT / "sims" / f"{name}.toml")
    # Shortened horizon: this checks the pipeline, the examples' physics is tested above.
    t1 = 10 if cfg["dynamics"]["kind"] in vocabulary.DISCRETE_DYNAMICS else 10.0
    assert (
        cli.main(
            [
                "run",
                str(ROOT / "sims" / f"{name}.toml"),
                "--out",
                str(out),
                "--set",
                f"save.t1={t1}",
                "--set",
                "save.num=6",
            ]
        )
        == 0
    )
    df = rankflow.load(out)
    assert len(df) == df["run_id"].nunique() * 6
    assert df[list(OBSERVABLES)].notna().all().all() and (df["status"] == "ok").all()
    meta = (out / "config.json").read_text()
    assert '"versions"' in meta and '"jax"' in meta
    assert math.isclose(df["t"].max(), t1)


@pytest.mark.slow
def test_T3_gradient_flow_reaches_the_nuclear_norm_minimiser_on_sensing():
    from rankflow import theory

    lam = 0.1
    cfg = {
        "x64": True,
        "problem": {"kind": "sensing", "m": 6, "n": 5, "rank": 2, "samples": 200, "noise": 0.2},
        "model": {"r": 4},  # r ≥ rank of the minimiser
        "init": {"kind": "gaussian", "scale": 0.3},
        "dynamics": {"kind": "gradient_flow", "eta": 1.0, "lam": lam},
        "solver": {"rtol": 1e-11, "atol": 1e-13},
        "save": {"ts": [0, 1000, 2000]},
    }
    df = rankflow.run(cfg)
    problem = make_problem(C.resolve(cfg))
    with jax.enable_x64(True):
        data_key = jax.random.fold_in(jax.random.PRNGKey(0), 0)  # the run's data (seed 0)
        data = problem.make_data(data_key, jnp.float64(0.2), jnp.float64)
        res = theory.nuclear_minimiser(problem, data, lam)
        assert bool(res.converged)
        s_star = np.linalg.svd(np.asarray(res.W), compute_uv=False)
        f_star = float(problem.loss(res.W, data)) + lam * s_star.sum()
    final = df.iloc[-1]
    assert s_star[2] < 1e-12 and final["rank"] == 2  # weight decay removed two directions
    np.testing.assert_allclose(final[["sv_1", "sv_2"]].to_numpy(float), s_star[:2], rtol=1e-8)
    assert final["star_loss"] == pytest.approx(f_star, rel=1e-10)
    assert final["l2_loss"] == pytest.approx(f_star, rel=1e-10)  # balanced: L_L2 = L_* (T1)
    assert df.iloc[0]["star_loss"] > f_star + 0.1  # it started far away


def test_T3_diagonal_limit_is_soft_thresholding():
    s, lam = [0.05, 0.3, 0.6, 1.0], 0.1
    df = rankflow.run(
        {
            "x64": True,
            "problem": {"kind": "diagonal", "singular_values": s},
            "init": {"kind": "gaussian", "scale": 0.3},
            "dynamics": {"kind": "gradient_flow", "eta": 1.0, "lam": lam},
            "solver": {"rtol": 1e-11, "atol": 1e-13},
            "save": {"ts": [0, 1500]},
        }
    )
    svt = np.maximum(np.sort(s)[::-1] - lam, 0.0)
    final = df.iloc[-1][["sv_1", "sv_2", "sv_3", "sv_4"]].to_numpy(float)
    np.testing.assert_allclose(final, svt, atol=1e-9)
