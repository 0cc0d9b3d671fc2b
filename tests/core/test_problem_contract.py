"""One contract over every registered problem kind (``rankflow.core.problems.PROBLEMS``),
as optax's alias tests run one suite over every optimizer: a kind joins by registering.

Each check is a plain function of a kind's class, so that the mutants below (a wrong
gradient, a memory estimate 10× too low, a Lipschitz constant off by 2) and a throwaway
kind registered from this module run through exactly the checks the real kinds pass:

- ``check_gradient``: ``jax.grad`` of the loss against central differences (exact for
  the quadratic losses up to rounding), the per-sample losses' mean and the full batch
  against the loss, minibatch gradients averaging to the full one over a partition, and
  the factor gradients the flows use (:func:`factor_grads`) against ``jax.grad`` of
  ``L(ABᵀ)`` in (A, B);
- ``check_memory``: the kind's data memory estimate (plus the target, which the family
  counts in its m·n part) against XLA's buffers for ``make_data`` (arguments, outputs
  and temporaries of the compiled program: a measured peak), between 0.9× and 4× it;
- ``check_minimiser``: at noise 0 the target minimises the loss (``L(W*) = 0``,
  ``∇L(W*) = 0``) and other points do worse; the Lipschitz constant is the Hessian's
  largest eigenvalue; the T3 minimiser meets the optimality conditions of
  ``L + λ‖·‖_*`` (``‖∇L‖₂ ≤ λ`` and ``⟨−∇L, W⟩ = λ‖W‖_*``), and a kind's own closed-form
  ``minimiser`` (where it has one) equals it;
- ``check_precisions``: 20 GD steps through ``rankflow.run`` in float64 and float32, both
  finite and status ok, agreeing to float32 rounding.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
from rankflow import theory
from rankflow.core import problems
from rankflow.core.dynamics.vector_fields import factor_grads
from rankflow.core.problems import base

# The sizes of the checks: small enough for the Hessian (m·n = 30), and for the memory
# check large enough that the data dwarf XLA's fixed buffers.
SMALL = {"m": 6, "n": 5, "rank": 2, "samples": 60}
LARGE = {"m": 40, "n": 30, "rank": 3, "samples": 4000}


def custom_loss(W):
    """A smooth non-quadratic loss for the ``custom`` kind (no target)."""
    return 0.25 * jnp.sum(W**4) + 0.5 * jnp.sum((W - 0.3) ** 2)


def config_of(cls, sizes=SMALL, **problem):
    """A resolved config of kind ``cls`` (with a loss where the kind takes one)."""
    section = {"kind": cls.name, **sizes, **problem}
    if "loss" in cls.fields:
        section["loss"] = custom_loss
    return rankflow.resolve({"x64": True, "problem": section, "dynamics": {"kind": "gd"}})


def problem_and_data(cls, sizes=SMALL, dtype=jnp.float64, **problem):
    p = config_of(cls, sizes, **problem)["problem"]
    prob = cls.from_config(p)
    data = prob.make_data(jax.random.PRNGKey(3), jnp.asarray(0.1, dtype), dtype)
    return p, prob, data


def _normal(i, shape):
    return jax.random.normal(jax.random.PRNGKey(i), shape, jnp.float64)


# --- the checks ------------------------------------------------------------------------


def check_gradient(cls) -> None:
    with jax.enable_x64(True):
        _, prob, data = problem_and_data(cls)
        W, V = _normal(1, prob.shape), _normal(2, prob.shape)
        loss = lambda W: prob.loss(W, data)  # noqa: E731
        g = jax.grad(loss)(W)
        h = 1e-4
        fd = (loss(W + h * V) - loss(W - h * V)) / (2 * h)
        exact = jnp.vdot(g, V)
        assert abs(fd - exact) <= 1e-7 * (abs(exact) + 1), (cls.name, float(fd), float(exact))
        if cls.has_samples:
            N = prob.samples
            assert jnp.allclose(jnp.mean(prob.sample_losses(W, data)), loss(W), rtol=1e-12)
            assert jnp.allclose(prob.batch_loss(W, data, jnp.arange(N)), loss(W), rtol=1e-12)
            parts = jnp.arange(N).reshape(4, N // 4)  # a partition into 4 minibatches
            mean = sum(jax.grad(prob.batch_loss)(W, data, idx) for idx in parts) / 4
            assert jnp.allclose(mean, g, rtol=1e-10, atol=1e-12), cls.name
        A, B = _normal(4, (prob.m, 3)), _normal(5, (prob.n, 3))
        gA, gB = factor_grads(prob)((A, B), data)
        eA, eB = jax.grad(lambda A, B: loss(A @ B.T), argnums=(0, 1))(A, B)
        assert jnp.allclose(gA, eA, rtol=1e-10) and jnp.allclose(gB, eB, rtol=1e-10)


def measured_data_bytes(prob, x64: bool) -> int:
    """XLA:CPU's bytes for the compiled ``make_data``: arguments, outputs, temporaries."""
    dtype = jnp.float64 if x64 else jnp.float32
    make = jax.jit(lambda key, noise: prob.make_data(key, noise, dtype))
    compiled = make.lower(jax.random.PRNGKey(0), jnp.asarray(0.1, dtype)).compile()
    ma = compiled.memory_analysis()
    return ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes


def check_memory(cls) -> None:
    for x64, item in ((False, 4), (True, 8)):
        with jax.enable_x64(x64):
            p = config_of(cls, LARGE)["problem"]
            prob = cls.from_config(p)
            m, n = cls.shape_of(p)
            estimate = sum(cls.data_memory(p, item).values()) + m * n * item
            measured = measured_data_bytes(prob, x64)
        assert 0.9 * measured - 2**16 <= estimate <= 4 * measured + 2**16, (
            f"{cls.name} (x64={x64}): estimated {estimate:,} bytes, XLA holds {measured:,}"
        )


def check_minimiser(cls) -> None:
    if not cls.has_target:
        pytest.skip(f"{cls.name}: no target, so no known minimiser")
    with jax.enable_x64(True):
        p, prob, data = problem_and_data(cls)
        clean = prob.make_data(jax.random.PRNGKey(3), jnp.asarray(0.0), jnp.float64)
        loss = lambda W: prob.loss(W, clean)  # noqa: E731
        target = clean["target"]
        assert abs(loss(target)) <= 1e-12 and jnp.abs(jax.grad(loss)(target)).max() <= 1e-10
        assert loss(target + 0.1 * _normal(6, prob.shape)) > 1e-4, cls.name
        try:
            lip = theory.lipschitz_constant(prob, data)
        except ValueError:
            return
        H = jax.hessian(lambda w: prob.loss(w.reshape(prob.shape), data))(target.ravel())
        top = jnp.linalg.eigvalsh(H).max()
        assert jnp.allclose(lip, top, rtol=1e-8), (cls.name, float(lip), float(top))
        s1 = jnp.linalg.svd(target, compute_uv=False)[0]
        lam = 0.3 * float(s1)
        W = theory.nuclear_minimiser(prob, data, lam, tol=1e-14, max_iters=50_000).W
        G = -jax.grad(lambda W: prob.loss(W, data))(W)
        nuclear = jnp.linalg.svd(W, compute_uv=False).sum()
        assert jnp.linalg.norm(G, 2) <= lam * (1 + 1e-6), cls.name
        assert jnp.allclose(jnp.vdot(G, W), lam * nuclear, rtol=1e-6, atol=1e-9), cls.name
        own = getattr(prob, "minimiser", None)
        if own is not None:
            assert jnp.allclose(own(data, lam), W, atol=1e-7), cls.name


def check_precisions(cls) -> None:
    cfg = {
        "problem": {"kind": cls.name, **SMALL},
        "dynamics": {"kind": "gd", "eta": 0.05, "lam": 0.05},
        "save": {"t1": 20, "num": 3},
    }
    if "loss" in cls.fields:
        cfg["problem"]["loss"] = custom_loss
    final = {}
    for x64 in (True, False):
        df = rankflow.run({**cfg, "x64": x64})
        assert (df["status"] == "ok").all() and np.isfinite(df["loss"]).all(), (cls.name, x64)
        final[x64] = df["loss"].to_numpy()
    assert np.allclose(final[False], final[True], rtol=1e-4, atol=1e-6), (cls.name, final)


CHECKS = (check_gradient, check_memory, check_minimiser, check_precisions)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("kind", list(problems.PROBLEMS))
def test_every_registered_kind_meets_the_contract(kind, check):
    check(problems.PROBLEMS[kind])


# --- the mutants: each fails the check it breaks -------------------------------------------


def _doubled_gradient(loss):
    """``loss`` with its gradient doubled (a kind's hand-written backward pass, wrong)."""

    @jax.custom_vjp
    def wrong(W, data):
        return loss(W, data)

    def forward(W, data):
        return loss(W, data), (W, data)

    def backward(res, ct):
        W, data = res
        gW, gdata = jax.grad(loss, argnums=(0, 1))(W, data)
        return 2 * ct * gW, jax.tree.map(lambda x: ct * x, gdata)

    wrong.defvjp(forward, backward)
    return wrong


class WrongGradient(problems.Diagonal):
    name = "mutant_wrong_gradient"
    description = "diagonal, its gradient doubled"

    def loss(self, W, data):
        return _doubled_gradient(super().loss)(W, data)


class LowMemory(problems.Sensing):
    name = "mutant_low_memory"
    description = "sensing, its memory estimate 10× too low"

    @classmethod
    def data_memory(cls, p, item):
        return {keys: nbytes // 10 for keys, nbytes in super().data_memory(p, item).items()}


class WrongLipschitz(problems.Regression):
    name = "mutant_wrong_lipschitz"
    description = "regression, its Lipschitz constant doubled"

    def lipschitz_constant(self, data):
        return 2 * super().lipschitz_constant(data)


@pytest.mark.parametrize(
    "mutant, check",
    [
        (WrongGradient, check_gradient),
        (LowMemory, check_memory),
        (WrongLipschitz, check_minimiser),
    ],
    ids=["wrong-gradient", "memory-10x-low", "lipschitz-2x"],
)
def test_the_contract_fails_each_mutant(mutant, check):
    with problems.registered(mutant):
        with pytest.raises(AssertionError):
            check(mutant)
    assert mutant.name not in problems.PROBLEMS


# --- a kind registered from a test module, without touching the package --------------------


class Scaled(problems.Problem):
    """``L = (3/2)‖W − W*‖_F²`` for a random target of rank ``problem.rank``."""

    name = "scaled"
    description = "3/2 ‖W − W*‖_F² for a random W* of rank problem.rank"

    def make_data(self, key, noise, dtype):
        target, _, _ = base.random_target(self, key, dtype)
        return {"target": target}

    def loss(self, W, data):
        return 1.5 * jnp.sum((W - data["target"]) ** 2)

    def lipschitz_constant(self, data):
        return jnp.asarray(3.0, data["target"].dtype)


def test_a_kind_registered_from_a_test_module_runs_everywhere(tmp_path):
    """Registered here, the kind is a ``problem.kind`` for ``rankflow.run`` and
    ``rankflow.compare``, meets the contract, and is gone when unregistered."""
    with problems.registered(Scaled):
        for check in CHECKS:
            check(Scaled)
        cfg = {
            "x64": True,
            "problem": {"kind": "scaled", "m": 4, "n": 3, "rank": 2},
            "model": {"r": 3},
            "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.2},
            "save": {"t1": 1500, "num": 5},
        }
        df = rankflow.run(cfg)
        # GD on (3/2)‖ABᵀ − W*‖² + (λ/2)(‖A‖² + ‖B‖²) reaches T1/T3's minimiser of
        # (3/2)‖W − W*‖² + λ‖W‖_*: W* with its singular values shrunk by λ/3.
        with jax.enable_x64(True):
            prob = Scaled.from_config(rankflow.resolve(cfg)["problem"])
            data = prob.make_data(jax.random.PRNGKey(0), jnp.asarray(0.0), jnp.float64)
        s = np.linalg.svd(np.asarray(data["target"]), compute_uv=False)
        expected = 1.5 * np.sum(np.minimum(s, 0.2 / 3) ** 2) + 0.2 * np.sum(
            np.maximum(s - 0.2 / 3, 0)
        )
        last = df[df["t"] == df["t"].max()].iloc[0]
        assert abs(last["star_loss"] - expected) < 1e-8, (last["star_loss"], expected)
        tables = rankflow.compare.compare(
            {**cfg, "save": {"t1": 40, "num": 5}},
            tmp_path / "cmp",
            overrides={"compare.halvings": 2},
        )
        assert np.isfinite(tables["trajectory"]["distance"]).all()
    assert "scaled" not in problems.PROBLEMS
    with pytest.raises(rankflow.ConfigError, match="problem.kind"):
        rankflow.resolve({"problem": {"kind": "scaled"}})


def test_registration_refuses_a_clash():
    """A second kind with a registered name, or one that is no Problem, is refused."""
    clash = dataclasses.make_dataclass("Clash", [], bases=(problems.Diagonal,), frozen=True)
    with pytest.raises(ValueError, match="registered already"):
        problems.register_problem(clash)
    with pytest.raises(TypeError):
        problems.register_problem(dict)
