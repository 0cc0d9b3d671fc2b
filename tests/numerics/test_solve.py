"""rankflow.numerics.solve.setup and solve, and rankflow.core.optimizers.iterate: the one
diffrax set-up and the one optimizer loop every continuous and discrete run goes through."""

import jax.numpy as jnp
import numpy as np
import optax
from helpers import tree_allclose

from rankflow.attention.flow import integrate
from rankflow.core.optimizers import iterate
from rankflow.numerics.solve import setup, solve


def growth(t, y, args):
    """dy/dt = y: y(t) = eᵗ y(0)."""
    return y


def test_adaptive_solve_stops_at_a_blow_up_and_reports_the_saves_not_reached():
    ts = np.arange(6.0)
    free = solve(growth, jnp.ones(3), None, setup({}, ts))
    assert bool(jnp.all(free.reached)) and not bool(free.max_steps_hit)
    assert np.allclose(free.ys[:, 0], np.exp(ts), rtol=1e-4)
    stopped = solve(growth, jnp.ones(3), None, setup({"diverge_norm": 100.0}, ts))
    # e⁴ ≈ 55 < 100 < e⁵: every save up to t = 4 is reached, t = 5 is not.
    assert stopped.reached.tolist() == [True] * 5 + [False]
    assert not bool(stopped.max_steps_hit)
    assert np.allclose(stopped.ys[:5], free.ys[:5])


def test_adaptive_solve_out_of_steps_is_max_steps_hit():
    out = solve(growth, jnp.ones(2), None, setup({"max_steps": 3}, np.asarray([0.0, 50.0])))
    assert out.reached.tolist() == [True, False] and bool(out.max_steps_hit)


def test_attention_gradient_flow_has_the_blow_up_event():
    """A loss that pushes the parameters out exponentially: with ``diverge_norm`` the
    attention flow stops there, as the core flows do."""
    loss = lambda params, batch: -jnp.sum(params["w"] ** 2)  # noqa: E731
    args = (loss, {"w": jnp.zeros(())}, 1.0, {"w": jnp.ones(3)}, {}, np.arange(6.0))
    observe = lambda params: jnp.max(params["w"])  # noqa: E731
    assert bool(jnp.all(integrate(*args, observe).reached))
    out = integrate(*args, observe, solver={"diverge_norm": 100.0})  # e^{2t} > 100 at t ≈ 2.3
    assert out.reached.tolist() == [True] * 3 + [False] * 3


def test_fixed_steps_bound_the_whole_run_by_max_steps():
    fixed = {"method": "euler", "adaptive": False, "max_steps": 2}
    out = solve(growth, jnp.ones(2), None, setup(fixed, np.arange(5.0)))
    assert out.reached.tolist() == [True, True, True, False, False]
    assert out.max_steps_hit.tolist() == [False, False, False, True, True]
    assert np.allclose(out.ys[:3, 0], 2.0 ** np.arange(3))  # Euler, dt = 1: y ← 2y


def test_iterate_saves_after_the_given_steps_evenly_spaced_or_not():
    """GD on ½‖θ‖², η = ½: θ_k = 2⁻ᵏ θ_0, whatever the spacing of the saves."""
    opt = optax.sgd(0.5)
    grads = lambda theta, k: theta  # noqa: E731
    theta0 = jnp.ones(2)
    for steps in ([0, 3, 6, 9], [2, 4, 6], [0, 1, 5, 6]):
        out = iterate(opt, grads, theta0, np.asarray(steps), lambda theta: theta[0])
        assert tree_allclose(out.ys, 0.5 ** np.asarray(steps, float), rtol=1e-12)
        assert bool(jnp.all(out.reached)) and not bool(jnp.any(out.max_steps_hit))


def test_iterate_passes_the_step_index():
    seen = iterate(
        optax.sgd(1.0),
        lambda theta, k: -jnp.full_like(theta, k, dtype=theta.dtype),
        jnp.zeros(1),
        np.asarray([0, 2, 4]),
        lambda theta: theta[0],
    )
    assert seen.ys.tolist() == [0.0, 1.0, 6.0]  # θ after k steps: 0 + 1 + … + (k − 1)


def test_setup_builds_the_diffrax_objects_from_the_solver_section():
    """Adaptive SDE: a PID controller (clipped onto the schedule's kinks), a
    VirtualBrownianTree of tolerance 1e-3·min(dt, t1 − t0) with the solver's Lévy area;
    fixed steps: ConstantStepSize, an UnsafeBrownianPath and DirectAdjoint."""
    import diffrax
    import jax

    from rankflow.numerics.solve import Setup

    key, ts = jax.random.PRNGKey(0), np.arange(5.0)
    section = {"method": "shark", "rtol": 1e-4, "atol": 1e-6, "pcoeff": 0.3, "dt": 0.5}
    adaptive = setup(section, ts, key=key, jump_ts=[2.0], watched=lambda y: y)
    assert isinstance(adaptive, Setup) and adaptive.adaptive and adaptive.dt0 is None
    assert isinstance(adaptive.controller, diffrax.ClipStepSizeController)
    assert adaptive.controller.controller.pcoeff == 0.3
    assert adaptive.event is None  # no diverge_norm in the section
    tree = adaptive.brownian((2,))
    like = diffrax.VirtualBrownianTree(0.0, 4.0, tol=1e-3 * 0.5, shape=(2,), key=key)
    assert isinstance(tree, diffrax.VirtualBrownianTree) and tree.tol == like.tol
    assert tree.levy_area is diffrax.SpaceTimeLevyArea
    assert isinstance(adaptive.adjoint, diffrax.RecursiveCheckpointAdjoint)
    fixed = setup({**section, "adaptive": False, "diverge_norm": 1.0}, ts, key=key)
    assert fixed.dt0 == 0.5 and isinstance(fixed.controller, diffrax.ConstantStepSize)
    assert fixed.event is None  # fixed steps show a blow-up at the saves
    assert isinstance(fixed.brownian((2,)), diffrax.UnsafeBrownianPath)
    assert isinstance(fixed.adjoint, diffrax.DirectAdjoint)
    shared = setup({**section, "adaptive": False}, ts, key=key, brownian_tol=2**-8)
    like = diffrax.VirtualBrownianTree(0.0, 4.0, tol=2**-8, shape=(2,), key=key)
    assert shared.brownian((2,)).tol == like.tol
    ode = setup({}, ts)
    assert ode.brownian is None and isinstance(ode.solver, diffrax.Tsit5)
    assert isinstance(ode.controller, diffrax.PIDController)
