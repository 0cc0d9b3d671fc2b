"""One contract over every registered dynamics kind (rankflow.core.dynamics.DYNAMICS,
issue #42 item 3): a new kind joins these tests by registering.

(a) on a zero loss (∇L ≡ 0), without noise, the factors scale as the kind declares
    (``zero_loss_decay``: GD (1−ηλ)^t, flows e^{−ηλt}, coupled momentum its matrix power or
    exponential), in float64 to 1e-10 (a discrete step) and 1e-6 (an adaptive ODE solve);
    a kind without a closed form says why (``no_closed_decay``) and is skipped with it;
(b) its flow counterpart (``rankflow compare``) is a registered continuous kind of the
    same momentum, coupling and randomness;
(c) it runs through ``rankflow.run`` on a tiny problem in float64 and float32.

Mutants: a copy of gd whose decay is 1.5ηλ and a gradient flow with λ doubled fail (a);
kinds with contradictory capabilities are refused at registration.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rankflow
from rankflow.config.fields import ConfigError
from rankflow.core import config as C
from rankflow.core import optimizers, vocabulary
from rankflow.core.dynamics import DYNAMICS, DynamicsKind, register_dynamics, registered
from rankflow.core.dynamics.discrete import GD
from rankflow.core.dynamics.flows import GradientFlow
from rankflow.core.problems import Problem

jax.config.update("jax_enable_x64", True)

KINDS = list(DYNAMICS)
ETA, LAM, MU, STEPS = 0.3, 0.2, 0.4, 25
HYPER = {"eta": ETA, "lam": LAM, "sigma": 0.0, "mu": MU}
ZERO = Problem("custom", 3, 2, 1, 0, (1.0,), custom_loss=lambda W: 0.0 * jnp.sum(W))


def _theta0():
    ka, kb = jax.random.split(jax.random.PRNGKey(3))
    return (
        jax.random.normal(ka, (3, 2), jnp.float64),
        jax.random.normal(kb, (2, 2), jnp.float64),
    )


def _discrete_path(kind):
    """θ_k for k = 0 … STEPS under the kind's optimizer on zero gradients."""
    opt = kind.optimizer(ETA, HYPER, jax.random.PRNGKey(0))
    theta = _theta0()
    state, out = opt.init(theta), [theta]
    zeros = jax.tree.map(jnp.zeros_like, theta)
    update = jax.jit(opt.update)  # Muon's Newton–Schulz is slow op by op
    for _ in range(STEPS):
        updates, state = update(zeros, state, theta)
        theta = optax.apply_updates(theta, updates)
        out.append(theta)
    return np.arange(STEPS + 1), out


def _flow_path(kind):
    """θ(t) at t = 0, 5, …, STEPS: the kind's drift on the zero loss, solved adaptively."""
    ts = np.linspace(0.0, STEPS, 6)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(kind.drift(ZERO)),
        diffrax.Tsit5(),
        0.0,
        float(STEPS),
        0.1,
        kind.initial_state(_theta0()),
        args=({}, {k: jnp.float64(v) for k, v in HYPER.items()}),
        saveat=diffrax.SaveAt(ts=jnp.asarray(ts)),
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-13),
        max_steps=100_000,
    )
    thetas = kind.factors(sol.ys)
    return ts, [jax.tree.map(lambda x, i=i: x[i], thetas) for i in range(len(ts))]


def check_zero_loss_decay(kind):
    """(a): θ(t) = c(t)·θ(0) with the kind's declared c, in float64."""
    ts, path = (_flow_path if kind.continuous else _discrete_path)(kind)
    rtol = 1e-6 if kind.continuous else 1e-10
    theta0 = path[0]
    for t, theta in zip(ts, path, strict=True):
        c = kind.zero_loss_decay(float(t), ETA, LAM, MU)
        for got, start in zip(theta, theta0, strict=True):
            np.testing.assert_allclose(
                np.asarray(got), c * np.asarray(start), rtol=rtol, atol=0,
                err_msg=f"{kind.name}: θ({t:g}) is not {c:.12g}·θ(0) on a zero loss",
            )  # fmt: skip


@pytest.mark.parametrize("name", KINDS)
def test_zero_loss_decay(name):
    kind = DYNAMICS[name]
    if kind.no_closed_decay:
        pytest.skip(f"{name}: {kind.no_closed_decay}")
    check_zero_loss_decay(kind)


@pytest.mark.parametrize("name", KINDS)
def test_flow_counterpart(name):
    kind = DYNAMICS[name]
    if kind.continuous:
        assert kind.flow is None  # a flow is its own counterpart
        return
    if kind.flow is None:
        assert name not in vocabulary.FLOW_OF
        pytest.skip(f"{name}: no flow counterpart (rankflow compare refuses it)")
    flow = DYNAMICS[kind.flow]
    assert flow.continuous and vocabulary.FLOW_OF[name] == flow.name
    for capability in ("momentum", "coupled", "stochastic"):
        assert getattr(flow, capability) == getattr(kind, capability), (name, capability)
    if kind.stochastic:
        assert set(kind.noise_models) <= set(flow.noise_models)


def _run_config(kind, x64):
    d = {"kind": kind.name, "eta": 0.2, "lam": 0.05}
    if kind.takes_sigma:
        d["sigma"] = 0.1
    if kind.momentum:
        d["mu"] = 0.5
    if kind.minibatches:
        d["batch"] = 4
        problem = {"kind": "sensing", "m": 3, "n": 3, "rank": 1, "samples": 16}
    else:
        problem = {"kind": "diagonal", "m": 3, "n": 3}
    return {"x64": x64, "problem": problem, "model": {"r": 2}, "dynamics": d,
            "save": {"t1": 10, "num": 3}}  # fmt: skip


def _precisions():
    """Every kind in both precisions; by default each kind in one of them (alternating
    along the registry, so both precisions run every default time), the other under
    ``slow``: a run compiles its own program, ~2 s a flow."""
    for i, name in enumerate(KINDS):
        for x64 in (True, False):
            marks = [pytest.mark.slow] if x64 == bool(i % 2) else []
            yield pytest.param(name, x64, marks=marks, id=f"{name}-{'f64' if x64 else 'f32'}")


@pytest.mark.parametrize("name, x64", list(_precisions()))
def test_runs(name, x64):
    df = rankflow.run(_run_config(DYNAMICS[name], x64))
    assert len(df) == 3 and set(df["dynamics.kind"]) == {name}
    assert set(df["status"]) == {df["status"].iloc[0]} and df["status"].iloc[0] == "ok"
    assert np.isfinite(df[["loss", "balance_gap", "sv_1"]].to_numpy()).all()
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]  # it moved, downhill


def test_vocabulary_is_the_registry():
    """The vocabulary's tuples are the registry's, in the order they always had."""
    assert vocabulary.DYNAMICS_KINDS == tuple(DYNAMICS)
    assert vocabulary.CONTINUOUS_DYNAMICS == (
        "gradient_flow", "stochastic_flow", "momentum_flow", "momentum_flow_coupled",
        "stochastic_momentum_flow",
    )  # fmt: skip
    assert vocabulary.DISCRETE_DYNAMICS == (
        "gd", "sgd", "sgd_gaussian", "momentum", "momentum_coupled", "adamw", "adam_l2",
        "sign_gd", "signum", "lion", "muon", "schedule_free_adamw",
    )  # fmt: skip
    assert vocabulary.SDE_DYNAMICS == ("stochastic_flow", "stochastic_momentum_flow")
    assert vocabulary.SIGMA_DYNAMICS == vocabulary.SDE_DYNAMICS + ("sgd_gaussian",)
    assert vocabulary.STOCHASTIC_DYNAMICS == vocabulary.SIGMA_DYNAMICS + ("sgd",)
    assert list(vocabulary.FLOW_OF) == ["gd", "sgd_gaussian", "sgd", "momentum", "momentum_coupled"]
    assert dict(vocabulary.NOISE_MODELS_OF) == {
        "stochastic_flow": vocabulary.NOISE_MODELS,
        "stochastic_momentum_flow": vocabulary.NOISE_MODELS,
        "sgd_gaussian": ("parameter", "gradient"),
        "sgd": ("minibatch",),
    }


# --- mutants ----------------------------------------------------------------------------


class GDWrongDecay(GD):
    """gd with its decay 1.5ηλ, still declaring GD's (1−ηλ)^t."""

    name = "gd_wrong_decay"
    flow = "gradient_flow"

    def optimizer(self, learning_rate, hyper, key):
        return optimizers.gd(learning_rate, 1.5 * hyper["lam"])


class FlowDoubleLambda(GradientFlow):
    """gradient flow with λ doubled in its drift, still declaring e^{−ηλt}."""

    name = "gradient_flow_double_lambda"

    def drift(self, problem, schedule=None):
        field = super().drift(problem, schedule)
        return lambda t, y, args: field(t, y, (args[0], args[1] | {"lam": 2 * args[1]["lam"]}))


@pytest.mark.parametrize("mutant", [GDWrongDecay, FlowDoubleLambda])
def test_a_kind_whose_decay_is_off_by_a_factor_fails_the_contract(mutant):
    with registered(mutant) as kind:
        assert mutant.name in vocabulary.DYNAMICS_KINDS  # the vocabulary reads it live
        with pytest.raises(AssertionError, match="on a zero loss"):
            check_zero_loss_decay(kind)
    assert mutant.name not in DYNAMICS


def test_a_registered_kind_is_accepted_by_the_config_live():
    cfg = {"dynamics": {"kind": GDWrongDecay.name}}
    with pytest.raises(ConfigError, match="dynamics.kind: must be one of"):
        C.resolve(cfg)
    with registered(GDWrongDecay):
        assert C.resolve(cfg)["dynamics"]["kind"] == GDWrongDecay.name
        assert GDWrongDecay.name in vocabulary.FLOW_OF  # it names gradient_flow


def _kind(base, **attrs):
    return type("Wrong", (base,), {"name": "wrong_kind", **attrs})


@pytest.mark.parametrize(
    "cls, why",
    [
        (_kind(GD, stochastic=True), "stochastic kinds, and only they, list noise models"),
        (_kind(GD, noise_models=("parameter",)), "stochastic kinds, and only they"),
        (_kind(GD, stochastic=True, noise_models=("shot",)), "noise models are among"),
        (_kind(GD, sde=True, stochastic=True, noise_models=("parameter",)), "an SDE is"),
        (_kind(GD, takes_sigma=True), "a kind taking σ is stochastic"),
        (_kind(GD, flow="gd"), "its flow 'gd' is no registered continuous kind"),
        (_kind(GD, flow="no_such_flow"), "no registered continuous kind"),
        (_kind(GradientFlow, flow="gradient_flow"), "its own continuous counterpart"),
        (_kind(GradientFlow, continuous=False), "a discrete kind implements optimizer"),
        (_kind(GD, zero_loss_decay=DynamicsKind.zero_loss_decay), "zero_loss_decay"),
        (_kind(GD, no_closed_decay="none"), "zero_loss_decay or, without a closed form"),
        (_kind(GD, name="gd"), "registered already"),
    ],
)
def test_contradictory_capabilities_are_refused_at_registration(cls, why):
    with pytest.raises(ValueError, match=why):
        register_dynamics(cls)
    assert "wrong_kind" not in DYNAMICS


def test_only_dynamics_kinds_register():
    with pytest.raises(TypeError, match="not a subclass of DynamicsKind"):
        register_dynamics(int)
