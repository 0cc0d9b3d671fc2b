"""Per-group and per-factor learning-rate multipliers of the attention family (issue #16):
one step of sgd, momentum and adamw equals the hand-written scaled update (decay
included, as PyTorch's per-group lr), a sweep over multipliers compiles once and leaves
the tables of unit multipliers as they were, and under gradient flow a pair whose
factors have multipliers c_A ≠ c_B balances in the scaled metric
``E = AᵀA/c_A − BᵀB/c_B`` (``dE/dt = −2ηλD``, exactly), not as T4's ``dD/dt = −2ηλD``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow.attention as ra
from rankflow import theory
from rankflow.attention import config as C
from rankflow.attention.flow import gradient_flow_field
from rankflow.attention.optimizers import factor_of, group_of, per_leaf_lam, per_leaf_lr
from rankflow.attention.tasks import make_task

TINY = {
    "x64": True,
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8, "qk_bias": True},
    "task": {"kind": "char_lm", "seq_len": 8, "val_size": 4, "max_chars": 4000},
    "dynamics": {"batch": 4},
    "train": {"decay": ["qk", "vo", "mlp", "norm"], "lam_vo": 0.3},
}
LR = {"qk": 0.5, "vo": 2.0, "mlp": 0.25, "embed": 1.5, "norm": 0.75}
LR.update({"q": 3.0, "k": 1.0, "v": 0.1, "o": 0.6})
ETA, MU, B1, B2, EPS = 0.05, 0.3, 0.9, 0.999, 1e-8


@pytest.fixture(scope="module")
def setup():
    """A tiny model's parameters (q and k with biases; v and o a pure product), one
    batch, its gradients."""
    point = C.expand(C.resolve(TINY))[0]
    task = make_task(point)
    model = ra.Model(ra.model_spec(point, task))
    data = {"train": jnp.asarray(task.splits()["train"])}
    params = model.init(jax.random.PRNGKey(0))
    batch = task.sample(jax.random.PRNGKey(1), 4, data, jnp.float64)
    loss = ra.loss_fn(model, task)
    return point, params, batch, loss, jax.jit(jax.grad(loss))(params, batch)


def _hyper(point):
    hyper = {"eta": ETA, "mu": MU}
    hyper.update({f"lam_{g}": point["train"][f"lam_{g}"] for g in ra.GROUPS})
    hyper.update({f"lr_{u}": c for u, c in LR.items()})
    return hyper


def _by_hand(kind: str, path, p, g, lam: float):
    """The first step of ``kind`` on one leaf, written out: θ − c·η(u + λθ)."""
    c = LR[group_of(path)] * (LR[factor_of(path)] if factor_of(path) else 1.0)
    if kind == "sgd":
        u = g
    elif kind == "momentum":
        u = MU * g  # M ← (1 − μ)·0 + μg
    else:  # Adam's first step, debiased: m̂ = g, v̂ = g²
        u = g / (jnp.abs(g) + EPS)
    return p - c * ETA * (u + lam * p)


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adamw"])
def test_one_step_equals_the_hand_written_scaled_update(setup, kind):
    point, params, _, _, grads = setup
    decay = point["train"]["decay"]
    opt = ra.make_optimizer(kind, params, _hyper(point), decay, b1=B1, b2=B2, eps=EPS)
    updates, _ = opt.update(grads, opt.init(params), params)
    lam = per_leaf_lam(params, C.lam_of(point), decay)
    expected = jax.tree_util.tree_map_with_path(
        lambda path, p, g, l: _by_hand(kind, path, p, g, l), params, grads, lam
    )
    got = jax.tree.map(lambda p, u: p + u, params, updates)
    errs = jax.tree.leaves(jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), got, expected))
    assert max(float(e) for e in errs) <= 1e-12
    # The value projection alone moves at c = lr_vo·lr_v = 0.2 of η: W_V's step is
    # 0.2/1.2 of W_O's for the same u (wrong: the group's multiplier only).
    w_v = params["blocks"][0]["attn"]["W_V"]
    step_v = got["blocks"][0]["attn"]["W_V"] - w_v
    assert not np.allclose(
        step_v, -LR["vo"] * ETA * (grads["blocks"][0]["attn"]["W_V"] + 0.3 * w_v), rtol=1e-6, atol=0
    )


def test_multipliers_per_leaf():
    point = C.expand(C.resolve(TINY))[0]
    task = make_task(point)
    params = ra.Model(ra.model_spec(point, task)).init(jax.random.PRNGKey(0))
    lr = per_leaf_lr(params, LR)
    attn = lr["blocks"][0]["attn"]
    assert attn["W_Q"] == attn["b_Q"] == 0.5 * 3.0 and attn["W_K"] == 0.5
    assert attn["W_V"] == pytest.approx(2.0 * 0.1) and attn["W_O"] == pytest.approx(1.2)
    mlp = jax.tree.leaves(lr["blocks"][0]["mlp"])
    assert mlp and all(c == 0.25 for c in mlp)


def _vo_field(setup, lam_vo: float):
    """The vo factors of every head and their time derivatives under the flow."""
    point, params, batch, loss, _ = setup
    hyper = _hyper(point)
    lam = {g: point["train"][f"lam_{g}"] for g in ra.GROUPS} | {"vo": lam_vo}
    lam_tree = per_leaf_lam(params, lam, point["train"]["decay"])
    lr_tree = per_leaf_lr(params, {u: hyper[f"lr_{u}"] for u in LR})
    layers = point["attention"]["layers"]

    @jax.jit
    def go(params):
        dparams = gradient_flow_field(loss)(0.0, params, (batch, ETA, lam_tree, lr_tree))
        vo = lambda p: ra.head_factors(p, layers)["vo"]  # noqa: E731
        return jax.jvp(vo, (params,), (dparams,))

    (A, B), (dA, dB) = go(params)
    return A, B, dA, dB


def _sym(X, dX):
    """d/dt of XᵀX per head."""
    return jnp.einsum("lhdi,lhdj->lhij", dX, X) + jnp.einsum("lhdi,lhdj->lhij", X, dX)


def _rel(x, y):
    return float(jnp.max(jnp.linalg.norm(x - y, axis=(-2, -1)) / jnp.linalg.norm(y, axis=(-2, -1))))


@pytest.mark.parametrize("lam_vo", [0.0, 0.3])
def test_T11_scaled_balance_under_gradient_flow_with_unequal_multipliers(setup, lam_vo):
    A, B, dA, dB = _vo_field(setup, lam_vo)
    c_A, c_B = LR["vo"] * LR["v"], LR["vo"] * LR["o"]
    AtA = jnp.einsum("lhdi,lhdj->lhij", A, A)
    BtB = jnp.einsum("lhdi,lhdj->lhij", B, B)
    dE = _sym(A, dA) / c_A - _sym(B, dB) / c_B
    dD = _sym(A, dA) - _sym(B, dB)
    rate = jax.vmap(jax.vmap(lambda a, b: theory.scaled_balance_rate(a, b, ETA, lam_vo)))(A, B)
    if lam_vo == 0:
        # E is conserved; D is not (the cross terms no longer cancel).
        scale = float(jnp.max(jnp.abs(_sym(A, dA))))
        assert float(jnp.max(jnp.abs(dE))) <= 1e-12 * scale
        assert float(jnp.max(jnp.abs(dD))) > 1e-3 * scale
    else:
        assert _rel(dE, rate) <= 1e-10
        # Wrong: T4's law for D, or E decaying at its own rate −2ηλE.
        assert _rel(dD, -2 * ETA * lam_vo * (AtA - BtB)) > 1e-2
        assert _rel(dE, -2 * ETA * lam_vo * (AtA / c_A - BtB / c_B)) > 1e-2


@pytest.mark.slow
def test_multiplier_sweep_compiles_once_and_unit_multipliers_add_no_column():
    cfg = {
        **TINY,
        "attention": {**TINY["attention"], "qk_bias": False, "vo_bias": False},
        "dynamics": {**TINY["dynamics"], "kind": "sgd", "eta": 0.1},
        "train": {**TINY["train"], "eval_every": 2},
        "save": {"t1": 4},
    }
    key = C.structure_key(C.expand(C.resolve(cfg))[0])
    before = ra.TRACE_COUNTS[key]
    swept = ra.run({**cfg, "sweep": {"train.lr_v": [1.0, 0.1]}})
    assert ra.TRACE_COUNTS[key] == before + 1  # the multipliers are traced
    assert list(swept.loss["train.lr_v"].unique()) == [1.0, 0.1]
    assert not any(c.startswith("train.lr_") and c != "train.lr_v" for c in swept.loss.columns)
    # A single run of unit multipliers (another batch size: its own compilation).
    plain = ra.run(cfg)
    assert not any(c.startswith("train.lr_") for c in plain.loss.columns)
    first = swept.loss[swept.loss["train.lr_v"] == 1.0]["val_loss"].to_numpy()
    np.testing.assert_array_equal(first, plain.loss["val_loss"].to_numpy())
    slow = swept.loss[swept.loss["train.lr_v"] == 0.1]["val_loss"].to_numpy()
    assert not np.array_equal(slow, first)
