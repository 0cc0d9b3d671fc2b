"""The geometry-changing kinds on optax 0.2.8's own optimizers (issue #43 item 1): sign_gd,
signum, lion, muon, schedule_free_adamw, with decay ``ηλ`` per step in every kind.

(1) each kind's step equals optax's optimizer built here, its decay set as the convention
    says (``weight_decay = λ`` where optax multiplies it by the learning rate; the decay
    ``−ηλθ`` added to sign_sgd's and signum's, which have none), step for step on a real
    gradient in float64 (1e-12, 30 steps); on a zero gradient the factors decay as the kind
    declares (GD's ``(1 − ηλ)^k``; schedule-free's own recursion), and the wrong mappings,
    the per-step decay λ (``weight_decay = λ/η``) and η²λ (``weight_decay = ηλ``), fail
    that check; a scheduled η_k decays by ``1 − η_kλ`` per step;
(2) each kind runs through ``rankflow.run`` (the contract covers diagonal at depth 2 in
    both dtypes; here sensing at depth 3 per kind; the full matrix of problems, dtypes and
    depths is ``-m slow``);
(3) a bad config is the one-line ConfigError naming the field; ``rankflow compare``
    refuses them (no flow counterpart).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.contrib._muon import _DEFAULT_NS_COEFFS, orthogonalize_via_newton_schulz

import rankflow
from rankflow.config.fields import ConfigError
from rankflow.core import config as C
from rankflow.core.dynamics import DYNAMICS, laws
from rankflow.core.dynamics.vector_fields import factor_grads
from rankflow.core.problems.base import make_problem

jax.config.update("jax_enable_x64", True)

KINDS = ["sign_gd", "signum", "lion", "muon", "schedule_free_adamw"]
ETA, LAM, MU, STEPS = 0.3, 0.2, 0.1, 30
HYPER = {"eta": ETA, "lam": LAM, "sigma": 0.0, "mu": MU}


def with_decay(base, eta, wd):
    """optax's ``base`` (its updates already ``−η·u``) plus the decoupled decay ``−η·wd·θ``,
    written out."""

    def update(g, state, params):
        u, state = base.update(g, state, params)
        return jax.tree.map(lambda ui, p: ui - eta * wd * p, u, params), state

    return optax.GradientTransformation(base.init, update)


# optax's own optimizer of each kind at learning rate eta and decay strength wd (the
# convention: wd = λ).
REFERENCE = {
    "sign_gd": lambda eta, wd: with_decay(optax.sign_sgd(eta), eta, wd),
    "signum": lambda eta, wd: with_decay(optax.signum(eta, beta=1.0 - MU), eta, wd),
    "lion": lambda eta, wd: optax.lion(eta, weight_decay=wd),
    "muon": lambda eta, wd: optax.contrib.muon(eta, weight_decay=wd),
    "schedule_free_adamw": lambda eta, wd: optax.contrib.schedule_free_adamw(eta, weight_decay=wd),
}
WRONG = {"per-step λ": LAM / ETA, "η²λ": ETA * LAM}


def _sensing():
    cfg = C.resolve({"problem": {"kind": "sensing", "m": 4, "n": 3, "rank": 2, "samples": 24}})
    problem = make_problem(cfg)
    data = problem.make_data(jax.random.PRNGKey(1), jnp.float64(0.0), jnp.float64)
    return factor_grads(problem), data


def _theta0():
    ka, kb = jax.random.split(jax.random.PRNGKey(3))
    return (
        jax.random.normal(ka, (4, 2), jnp.float64),
        jax.random.normal(kb, (3, 2), jnp.float64),
    )


def _path(opt, grads, steps=STEPS):
    """θ_0 … θ_steps under ``opt`` with gradients ``grads(θ)``."""
    theta = _theta0()
    state, out = opt.init(theta), [theta]
    step = jax.jit(opt.update)
    for _ in range(steps):
        updates, state = step(grads(theta), state, theta)
        theta = optax.apply_updates(theta, updates)
        out.append(theta)
    return out


def _zeros(theta):
    return jax.tree.map(jnp.zeros_like, theta)


def _assert_paths_equal(got, want, what):
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(
                np.asarray(x), np.asarray(y), rtol=1e-12, atol=1e-12, err_msg=f"{what}, step {k}"
            )


def check_zero_loss_decay(kind, opt):
    """θ_k = c(k)·θ_0 on zero gradients, c the kind's declared zero_loss_decay."""
    path = _path(opt, _zeros)
    for k, theta in enumerate(path):
        c = kind.zero_loss_decay(float(k), ETA, LAM, MU)
        for got, start in zip(theta, path[0], strict=True):
            np.testing.assert_allclose(
                np.asarray(got), c * np.asarray(start), rtol=1e-10, atol=0,
                err_msg=f"{kind.name}: θ_{k} is not {c:.12g}·θ_0 on a zero gradient",
            )  # fmt: skip


@pytest.mark.parametrize("name", KINDS)
def test_the_step_is_optaxs_with_decay_lambda(name):
    grads, data = _sensing()
    kind = DYNAMICS[name]
    g = lambda theta: grads(theta, data)  # noqa: E731
    got = _path(kind.optimizer(ETA, HYPER, jax.random.PRNGKey(0)), g)
    _assert_paths_equal(got, _path(REFERENCE[name](ETA, LAM), g), f"{name} vs optax")
    moved = np.abs(np.asarray(got[-1][0]) - np.asarray(got[0][0])).max()
    assert moved > 0.1  # a real gradient moved the factors
    direction = kind.direction(HYPER)
    if direction is not None:  # the attention family's chain: direction, decay, lr
        chained = optax.chain(
            direction, optax.add_decayed_weights(LAM), optax.scale_by_learning_rate(ETA)
        )
        _assert_paths_equal(_path(chained, g), got, f"{name}: its direction chained")


@pytest.mark.parametrize("name", KINDS)
def test_decay_is_eta_lambda_per_step_and_the_wrong_mappings_fail(name):
    kind = DYNAMICS[name]
    assert kind.no_closed_decay is None
    if name == "schedule_free_adamw":
        assert kind.zero_loss_decay == laws.schedule_free_decay
    else:  # the direction is 0 on a zero gradient: GD's decay
        assert kind.zero_loss_decay == laws.gd_decay
    check_zero_loss_decay(kind, kind.optimizer(ETA, HYPER, jax.random.PRNGKey(0)))
    check_zero_loss_decay(kind, REFERENCE[name](ETA, LAM))
    for wd in WRONG.values():  # the per-step decay λ, and η²λ
        with pytest.raises(AssertionError, match="on a zero gradient"):
            check_zero_loss_decay(kind, REFERENCE[name](ETA, wd))


@pytest.mark.parametrize("name", [k for k in KINDS if k != "schedule_free_adamw"])
def test_a_scheduled_eta_decays_by_one_minus_eta_k_lambda(name):
    schedule = lambda k: ETA * (1.0 - jnp.asarray(k, jnp.float64) / 40)  # noqa: E731
    path = _path(DYNAMICS[name].optimizer(schedule, HYPER, jax.random.PRNGKey(0)), _zeros, 10)
    for k in range(10):
        for a, b in zip(path[k + 1], path[k], strict=True):
            np.testing.assert_allclose(
                np.asarray(a), (1.0 - float(schedule(k)) * LAM) * np.asarray(b), rtol=1e-12
            )


def test_muon_orthogonalises_zero_to_zero_and_schedule_free_decays_at_y():
    for shape in [(4, 2), (2, 4), (3, 3)]:
        z = orthogonalize_via_newton_schulz(jnp.zeros(shape), jnp.asarray(_DEFAULT_NS_COEFFS))
        assert np.all(np.asarray(z) == 0.0)
    # Schedule-free by hand at η = 0.3, λ = 0.2, b1 = 0.9: z_1 = x_1 = y_1 = 0.94;
    # z_2 = 0.94 − 0.06·0.94 = 0.8836, x_2 = (0.94 + 0.8836)/2, y_2 = 0.9x_2 + 0.1z_2.
    assert laws.schedule_free_decay(1, ETA, LAM) == pytest.approx(0.94, rel=1e-15)
    assert laws.schedule_free_decay(2, ETA, LAM) == pytest.approx(0.90898, rel=1e-14)
    assert laws.schedule_free_decay(2, ETA, LAM) != pytest.approx(laws.gd_decay(2, ETA, LAM))


def _run(name, problem, x64, depth):
    problem = {
        "diagonal": {"kind": "diagonal", "m": 3, "n": 3},
        "sensing": {"kind": "sensing", "m": 3, "n": 3, "rank": 1, "samples": 16},
    }[problem]
    df = rankflow.run({
        "x64": x64, "problem": problem, "model": {"r": 2, "depth": depth},
        "dynamics": {"kind": name, "eta": 0.1, "lam": 0.05}, "save": {"t1": 10, "num": 3},
    })  # fmt: skip
    assert len(df) == 3 and set(df["dynamics.kind"]) == {name}
    assert set(df["status"]) == {"ok"}
    assert np.isfinite(df[["loss", "sv_1"]].to_numpy()).all()
    assert df["loss"].iloc[-1] < df["loss"].iloc[0]  # it moved, downhill


@pytest.mark.parametrize("name", KINDS)
def test_runs_on_sensing_at_depth_3(name):
    _run(name, "sensing", x64=KINDS.index(name) % 2 == 0, depth=3)


@pytest.mark.slow
@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("x64", [True, False], ids=["f64", "f32"])
@pytest.mark.parametrize("problem", ["diagonal", "sensing"])
@pytest.mark.parametrize("name", KINDS)
def test_runs_everywhere(name, problem, x64, depth):
    _run(name, problem, x64, depth)


def test_a_bad_config_names_its_field():
    with pytest.raises(ConfigError, match=r"^dynamics\.sigma: must be 0 for lion") as e:
        C.resolve({"dynamics": {"kind": "lion", "sigma": 0.1}})
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"^dynamics\.mu: discrete momentum"):
        C.resolve({"dynamics": {"kind": "signum", "mu": 1.5}})
    with pytest.raises(ConfigError, match=r"^dynamics\.paths: muon is deterministic"):
        C.resolve({"dynamics": {"kind": "muon", "paths": 2}})


def test_compare_refuses_them():
    for name in KINDS:
        assert DYNAMICS[name].flow is None
        with pytest.raises(ConfigError, match=f"compare needs a discrete optimizer .*got {name!r}"):
            rankflow.compare.compare({"dynamics": {"kind": name}})
