"""The geometry-changing optimizers of the attention family (sign_gd, signum, lion, muon):
their first steps against optax's own optimizers built by hand, Muon's leaves, a run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest

import rankflow.attention as ra
from rankflow.attention import config as C
from rankflow.attention.optimizers import group_of, muon_dimensions
from rankflow.attention.tasks import make_task
from rankflow.track import Optimizer, predicted_rates

NEW = ("sign_gd", "signum", "lion", "muon")
LAM = 0.3
ETA, MU, B1, B2, EPS = 0.05, 0.3, 0.8, 0.99, 1e-8
# (No q, k biases: their gradient is 0 up to rounding, whose sign sign descent takes.)
# Every group decayed with one λ: optax's muon has one weight_decay per branch and no
# mask on its AdamW branch, so this is the case that its own optimizer can express.
TINY = {
    "x64": True,
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8, "vo_bias": True},
    "task": {"kind": "char_lm", "seq_len": 8, "val_size": 4, "max_chars": 4000},
    "dynamics": {"batch": 4, "lam": LAM},
    "train": {"decay": list(C.GROUPS)},
}


@pytest.fixture(scope="module")
def setup():
    point = C.expand(C.resolve(TINY))[0]
    task = make_task(point)
    model = ra.Model(ra.model_spec(point, task))
    data = {"train": jnp.asarray(task.splits()["train"])}
    params = model.init(jax.random.PRNGKey(0))
    batches = [task.sample(jax.random.PRNGKey(k), 4, data, jnp.float64) for k in range(3)]
    return point, params, batches, jax.jit(jax.grad(ra.loss_fn(model, task)))


def _hyper():
    hyper = {"eta": ETA, "mu": MU}
    hyper.update({f"lam_{g}": LAM for g in C.GROUPS})
    return hyper


def _hand_dims(params):
    """Muon's matrices, written out: each head of W_Q, W_K, W_V (H×D×d_h) and W_O
    (H×d_h×D) with axes (1, 2), the MLP kernels with (0, 1); None elsewhere."""

    def leaf(path, _):
        names = [str(getattr(e, "key", e)) for e in path]
        if names[-1] in ("W_Q", "W_K", "W_V", "W_O"):
            return optax.contrib.MuonDimensionNumbers(1, 2)
        if "mlp" in names and names[-1] == "kernel":
            return optax.contrib.MuonDimensionNumbers(0, 1)
        return None

    return jax.tree_util.tree_map_with_path(leaf, params)


def _by_hand(kind, params):
    """optax's own optimizer of ``kind``, decay ηλ per step (its lr-multiplied
    weight_decay = λ, or −ηλθ added after sign_sgd and signum, which have none)."""
    if kind == "sign_gd":
        return optax.chain(optax.sign_sgd(ETA), optax.add_decayed_weights(-ETA * LAM))
    if kind == "signum":
        return optax.chain(optax.signum(ETA, beta=1 - MU), optax.add_decayed_weights(-ETA * LAM))
    if kind == "lion":
        return optax.lion(ETA, weight_decay=LAM)
    return optax.contrib.muon(
        ETA,
        eps=EPS,
        weight_decay=LAM,
        adam_b1=B1,
        adam_b2=B2,
        adam_weight_decay=LAM,
        muon_weight_dimension_numbers=_hand_dims(params),
    )


def _three_steps(opt, params, batches, grad):
    state = opt.init(params)
    for batch in batches:
        updates, state = opt.update(grad(params, batch), state, params)
        params = optax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("kind", NEW)
def test_three_steps_equal_optax_built_by_hand(setup, kind):
    point, params, batches, grad = setup
    opt = ra.make_optimizer(kind, params, _hyper(), point["train"]["decay"], b1=B1, b2=B2, eps=EPS)
    got = _three_steps(opt, params, batches, grad)
    want = _three_steps(_by_hand(kind, params), params, batches, grad)
    assert all(x.dtype == jnp.float64 for x in jax.tree.leaves(got))
    errs = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), got, want)
    assert max(jax.tree.leaves(errs)) <= 1e-10, errs
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), got, params)
    assert min(jax.tree.leaves(moved)) > 1e-4  # every leaf moved: not a vacuous match


def test_muon_on_head_factors_and_mlp_weights_adamw_elsewhere(setup):
    _, params, _, _ = setup
    dims = muon_dimensions(params)
    assert dims == _hand_dims(params)
    is_dims = lambda x: isinstance(x, optax.contrib.MuonDimensionNumbers)  # noqa: E731
    leaves = jax.tree_util.tree_leaves_with_path(dims, is_leaf=is_dims)
    muon = {group_of(p) for p, d in leaves if d is not None}
    assert muon == {"qk", "vo", "mlp"}
    # optax's own "2-D is Muon" rule differs: embeddings on Muon, the 3-D heads on Adam.
    head = params["blocks"][0]["attn"]["W_Q"]
    assert head.ndim == 3 and params["embed"]["embedding"].ndim == 2
    # Muon's first step on a head (no decay): each head's D×d_h matrix orthogonalised
    # on its own, its singular values near 1 (Newton–Schulz's, ×√(max(1, d_h/D)) = 1).
    _, _, batches, grad = setup
    opt = ra.make_optimizer("muon", params, _hyper(), [], b1=B1, b2=B2, eps=EPS)
    updates, _ = opt.update(grad(params, batches[0]), opt.init(params), params)
    u = updates["blocks"][0]["attn"]["W_Q"] / -ETA
    for h in range(head.shape[0]):
        s = jnp.linalg.svd(u[h], compute_uv=False)
        assert float(s.min()) > 0.5 and float(s.max()) < 1.5, s


def test_per_group_decay_is_eta_lam_per_step_on_muon_and_adamw_leaves(setup):
    """Decayed groups only, each its own λ, on Muon's and Adam's leaves alike: on a zero
    gradient every direction is 0 (Muon's orthogonalised 0, Adam's 0/ε), so one step
    is θ ← (1 − ηλ_g)θ on decayed groups and θ elsewhere."""
    _, params, _, _ = setup
    lam = {"qk": 0.5, "vo": 0.0, "mlp": 0.2, "embed": 0.7, "norm": 0.0}
    decay = ["qk", "mlp", "embed"]
    hyper = {"eta": ETA, "mu": MU, **{f"lam_{g}": lam[g] for g in C.GROUPS}}
    zero = jax.tree.map(jnp.zeros_like, params)
    for kind in NEW:
        opt = ra.make_optimizer(kind, params, hyper, decay, b1=B1, b2=B2, eps=EPS)
        updates, _ = opt.update(zero, opt.init(params), params)
        want = jax.tree_util.tree_map_with_path(
            lambda p, x: -ETA * lam[group_of(p)] * x if group_of(p) in decay else 0 * x, params
        )
        errs = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), updates, want)
        assert max(jax.tree.leaves(errs)) <= 1e-12, (kind, errs)


@pytest.mark.parametrize("kind", NEW)
def test_a_tiny_run_finishes_ok(kind):
    cfg = {**TINY, "dynamics": {"batch": 4, "kind": kind, "eta": 0.01}}
    cfg["save"] = {"t1": 4}
    cfg["train"] = {"eval_every": 2}
    res = ra.run(cfg)
    assert (res.heads["status"] == "ok").all()
    assert len(res.heads) == 3 * 1 * 2 * 2  # saves × layers × heads × pairs


def test_schema_and_track_know_the_new_optimizers():
    for k in NEW:
        C.resolve({**TINY, "dynamics": {"kind": k}})
        low, high, law = predicted_rates(Optimizer(k, eta=0.1, lam=0.1))
        assert law.startswith("no prediction") and low != low  # NaN: no balance law
    with pytest.raises(Exception, match="dynamics.kind"):
        C.resolve({**TINY, "dynamics": {"kind": "schedule_free_adamw"}})
    with pytest.raises(Exception, match="dynamics.mu"):
        C.expand(C.resolve({**TINY, "dynamics": {"kind": "signum", "mu": 1.5}}))


def test_help_lists_the_new_optimizers(capsys):
    from rankflow import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["attention", "train", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "one of: sgd, momentum, adamw, sign_gd, signum, lion, muon, gradient_flow" in text
