"""rankflow.numerics.batching: every strategy computes the same runs; the choice is measured
once."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tree_allclose

from rankflow.core import config as config_lib
from rankflow.core.program import PARAM_KEYS, params_of, program_for
from rankflow.numerics import batching

S = jnp.diag(jnp.asarray([1.0, 0.5, 0.25]))


def field(t, theta, args):
    """Gradient flow on ½‖ABᵀ − S‖² with weight decay (float64 under conftest)."""
    A, B = theta
    lam, eta = args
    G = A @ B.T - S
    return -eta * (G @ B + lam * A), -eta * (G.T @ A + lam * B)


def single(p):
    """One adaptive solve: ``p`` holds the start and (λ, η) of one run."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        0.0,
        20.0,
        None,
        (p["A"], p["B"]),
        (p["lam"], p["eta"]),
        saveat=diffrax.SaveAt(ts=jnp.asarray([0.0, 5.0, 20.0])),
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
    )
    return sol.ys


def make_batch(n=6):
    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    return {
        "A": 0.3 * jax.random.normal(ka, (n, 3, 3)),
        "B": 0.3 * jax.random.normal(kb, (n, 3, 3)),
        "lam": jnp.linspace(0.0, 0.1, n),
        "eta": jnp.linspace(0.05, 0.5, n),  # a 10× spread of step counts
    }


@pytest.mark.slow
def test_strategies_agree_float64():
    batch = make_batch()
    outs = {s: jax.jit(batching.batched(single, s))(batch) for s in ("vmap", "map", "chunks:4")}
    for s in ("map", "chunks:4"):
        assert tree_allclose(outs[s], outs["vmap"], rtol=1e-12, atol=1e-14), s


@pytest.mark.slow
def test_choose_is_measured_once_and_cached():
    batching.forget("test-structure")
    batch = make_batch(12)
    choice = batching.choose(single, batch, "test-structure", probe=6, repeats=1)
    assert choice.strategy in choice.seconds_per_run
    assert set(choice.seconds_per_run) == {"vmap", "map"}  # chunks of 8 ≥ the probe
    assert choice.probe == 6
    assert batching.choose(single, batch, "test-structure") is choice
    # A batch of the probe's size runs on the program compiled for the probe.
    small = jax.tree.map(lambda x: x[:6], batch)
    out = batching.run(single, small, "test-structure")
    assert tree_allclose(out, jax.vmap(single)(small), rtol=1e-12, atol=1e-14)
    batching.forget("test-structure")


def test_probe_indices_spread_over_the_batch():
    assert list(batching.probe_indices(5, 8)) == [0, 1, 2, 3, 4]
    idx = batching.probe_indices(64, 8)
    assert idx[0] == 0 and idx[-1] == 63 and len(idx) == 8


def test_member_max_norm_is_the_worst_run():
    y = (jnp.asarray([[3.0, 4.0], [0.0, 1.0]]), jnp.asarray([[0.0], [1.0]]))
    # run 0: sqrt((9 + 16 + 0) / 3); run 1: sqrt(2 / 3)
    assert np.isclose(batching.member_max_norm(y), np.sqrt(25 / 3))
    assert batching.member_max_norm(jnp.asarray(-2.0)) == 2.0


def test_stacked_system_meets_the_tolerance_of_every_run():
    batch = make_batch()
    sol = batching.stacked_ode(
        field,
        diffrax.Tsit5(),
        0.0,
        20.0,
        (batch["A"], batch["B"]),
        (batch["lam"], batch["eta"]),
        rtol=1e-10,
        atol=1e-12,
    )
    stacked = jax.tree.map(lambda y: y[-1], sol.ys)
    alone = jax.tree.map(lambda y: y[:, -1], jax.vmap(single)(batch))
    assert tree_allclose(stacked, alone, rtol=1e-7, atol=1e-9)


def test_program_runs_identically_under_vmap_and_map():
    """A rankflow program's single run (adaptive gradient flow, float64): ``map``
    reproduces ``Program.run``'s vmapped batch."""
    cfg = config_lib.resolve(
        {
            "x64": True,
            "problem": {"kind": "diagonal", "singular_values": [1.0, 0.6, 0.3]},
            "model": {"r": 3},
            "dynamics": {"kind": "gradient_flow", "lam": 0.02, "eta": 0.3},
            "solver": {"method": "tsit5", "adaptive": True, "rtol": 1e-9, "atol": 1e-11},
            "save": {"t1": 13.0, "num": 3},
            "sweep": {"dynamics.eta": [0.05, 0.2, 0.5], "seed": [0, 1]},
        }
    )
    points = config_lib.expand(cfg)
    program = program_for(points[0])
    params = {k: np.array([params_of(p, 0)[k] for p in points]) for k in PARAM_KEYS}
    expected = program.run(params)
    batch = {k: jnp.asarray(v, program._param_dtype(k)) for k, v in params.items()}
    out = jax.jit(batching.sequential(program._single))(batch)
    out = jax.tree.map(np.asarray, out)
    assert tree_allclose(out, expected, rtol=1e-10, atol=1e-12)
