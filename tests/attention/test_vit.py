"""The vision transformer and its offline image task (rankflow.attention, issue #16):
seeded images, balanced classes, patches, bidirectional attention, the per-head factor
observables and decay groups carried over, and training that beats chance only when
the labels mean something."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow.attention as ra
from rankflow.attention import config as C
from rankflow.attention.images import linear_baseline, patchify, render, unpatchify
from rankflow.attention.model import Attention, ModelSpec
from rankflow.attention.optimizers import group_tree, mask
from rankflow.attention.tasks import accuracy

# An 8×8 image task of 4 classes and a one-layer ViT, D = 8, two heads: float64.
TINY = {
    "x64": True,
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 5, "mlp_ratio": 2},
    "task": {
        "kind": "images",
        "image": 8,
        "patch": 4,
        "classes": 4,
        "train_size": 64,
        "val_size": 32,
        "pixel_noise": 0.1,
    },
    "dynamics": {"batch": 16},
    "train": {"eval_every": 2},
    "save": {"t1": 4},
}


def _point(**sections):
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for sec, body in sections.items():
        cfg[sec] = {**cfg[sec], **body} if isinstance(body, dict) else body
    return C.expand(C.resolve(cfg))[0]


def _model(point):
    task = ra.make_task(point)
    return ra.Model(ra.model_spec(point, task)), task


# -- the image task -----------------------------------------------------------------------


def test_images_are_deterministic_by_seed_and_differ_across_seeds():
    a = render(3, 40, size=12, classes=5, noise=0.2)
    b = render(3, 40, size=12, classes=5, noise=0.2)
    c = render(4, 40, size=12, classes=5, noise=0.2)
    assert a[0].dtype == np.float32 and a[0].shape == (40, 12, 12) and a[1].dtype == np.int32
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert np.mean(np.abs(a[0] - c[0])) > 0.1
    assert not np.array_equal(a[1], c[1])


@pytest.mark.parametrize("n, classes", [(100, 10), (103, 7), (37, 2)])
def test_classes_are_balanced(n, classes):
    _, labels = render(0, n, size=8, classes=classes, noise=0.0)
    counts = np.bincount(np.asarray(labels), minlength=classes)
    assert counts.sum() == n and len(counts) == classes
    assert counts.max() - counts.min() <= 1


def test_the_task_sets_are_fixed_and_distinct():
    point = _point()
    task = ra.make_task(point)
    train, val = task.images("train"), task.images("val")
    assert train[0].shape == (64, 8, 8) and val[0].shape == (32, 8, 8)
    # Validation images are drawn from their own key, not a slice of the training set.
    assert not np.any([np.array_equal(v, t) for v in val[0][:4] for t in train[0]])
    batch = task.eval_set("train", jnp.float64)
    np.testing.assert_array_equal(batch["inputs"], train[0][:32])
    np.testing.assert_array_equal(batch["targets"][:, 0], train[1][:32])


def test_patchify_matches_a_hand_written_loop_and_inverts():
    x = np.arange(2 * 12 * 12, dtype=np.float64).reshape(2, 12, 12)
    p = 4
    hand = np.stack(
        [
            np.stack(
                [
                    x[b, i : i + p, j : j + p].reshape(-1)
                    for i in range(0, 12, p)
                    for j in range(0, 12, p)
                ]
            )
            for b in range(2)
        ]
    )
    got = np.asarray(patchify(jnp.asarray(x), p))
    assert got.shape == (2, 9, 16)
    np.testing.assert_array_equal(got, hand)
    np.testing.assert_array_equal(np.asarray(unpatchify(jnp.asarray(got), p)), x)
    # The wrong reshape (no swap of the patch-row and column-block axes) differs.
    assert not np.array_equal(np.reshape(x, (2, 9, 16)), hand)


# -- the model ----------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_bidirectional_attention_is_permutation_equivariant(causal):
    """Without positions, bidirectional attention commutes with any permutation of the
    tokens (to 1e-12); the causal mask breaks that (the wrong model for images)."""
    from flax import nnx

    spec = ModelSpec(
        D=8,
        H=2,
        layers=1,
        context=6,
        mlp_ratio=2,
        vocab=0,
        d_in=0,
        d_out=1,
        x64=True,
        causal=causal,
    )
    with jax.enable_x64(True):
        attn = Attention(spec, rngs=nnx.Rngs(0))
        x = jax.random.normal(jax.random.PRNGKey(1), (3, 6, 8), jnp.float64)
        perm = np.array([4, 0, 5, 2, 1, 3])
        err = float(jnp.max(jnp.abs(attn(x[:, perm]) - attn(x)[:, perm])))
    if causal:
        assert err > 1e-3
    else:
        assert err < 1e-12


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_vit_outputs_and_parameters(pooling):
    point = _point(attention={"pooling": pooling})
    model, task = _model(point)
    assert model.spec.image == 8 and model.spec.patch == 4 and not model.spec.causal
    with jax.enable_x64(True):
        params = model.init(jax.random.PRNGKey(0))
        images = jnp.asarray(task.images("val")[0][:5], jnp.float64)
        logits = model.apply(params, images)
    assert logits.shape == (5, 1, 4)
    assert ("cls" in params["embed"]) == (pooling == "cls")
    assert params["pos"].shape == (5, 8)


def test_decay_groups_cover_every_vit_parameter_exactly_once():
    model, _ = _model(_point())
    with jax.enable_x64(True):
        params = model.init(jax.random.PRNGKey(0))
    groups = dict(
        ("/".join(str(getattr(k, "key", k)) for k in path), g)
        for path, g in jax.tree_util.tree_leaves_with_path(group_tree(params))
    )
    assert groups["embed/proj/kernel"] == groups["embed/proj/bias"] == "embed"
    assert groups["embed/cls"] == groups["pos"] == groups["unembed/kernel"] == "embed"
    assert groups["blocks/0/attn/W_Q"] == groups["blocks/0/attn/W_K"] == "qk"
    assert groups["blocks/0/attn/W_V"] == groups["blocks/0/attn/W_O"] == "vo"
    assert groups["blocks/0/mlp/fc_in/kernel"] == "mlp" and groups["ln_f/scale"] == "norm"
    counts = sum(np.asarray(jax.tree.leaves(mask(params, g)), int) for g in ra.GROUPS)
    assert np.all(counts == 1) and len(counts) == len(groups)


def test_vit_head_observables_equal_hand_computed_ones():
    point = _point(attention={"layers": 2})
    model, _ = _model(point)
    with jax.enable_x64(True):
        params = model.init(jax.random.PRNGKey(2), 1.3)
        factors = ra.head_factors(params, 2)
        obs = jax.jit(lambda f: ra.head_observables(f, 1e-3))(factors)
    for l in range(2):
        attn = params["blocks"][l]["attn"]
        for h in range(2):
            pairs = {
                "qk": (attn["W_Q"][h], attn["W_K"][h]),
                "vo": (attn["W_V"][h], attn["W_O"][h].T),
            }
            for i, pair in enumerate(ra.PAIRS):
                A, B = (np.asarray(m) for m in pairs[pair])
                W = A @ B.T
                s = np.linalg.svd(W, compute_uv=False)[:4]
                p = s / s.sum()
                gap = np.linalg.norm(A.T @ A - B.T @ B)
                np.testing.assert_allclose(obs["sv"][l, h, i], s, rtol=1e-10)
                np.testing.assert_allclose(obs["balance_gap"][l, h, i], gap, rtol=1e-10)
                np.testing.assert_allclose(
                    obs["effective_rank"][l, h, i], np.exp(-np.sum(p * np.log(p))), rtol=1e-10
                )
                np.testing.assert_allclose(
                    obs["nuclear_norm"][l, h, i], np.linalg.norm(W, "nuc"), rtol=1e-10
                )
    # The value-output pair is (W_V, W_Oᵀ): taking W_O untransposed would be another
    # matrix (its Gram is D×D, not d_h×d_h), so the pairing is not interchangeable.
    assert attn["W_O"].shape == (2, 4, 8)


# -- training -----------------------------------------------------------------------------


def _train(point, labels, steps):
    """Full-batch AdamW (λ = 0) on the training images with the given labels, in
    float32; (first loss, last loss, validation accuracy). One compilation serves every
    label set of the same size."""
    model, task = _model(point)
    with jax.enable_x64(False):
        images = jnp.asarray(task.images("train")[0])
        val = task.eval_set("val", jnp.float32)
        loss = ra.loss_fn(model, task)
        params = model.init(jax.random.PRNGKey(0))
        hyper = {"eta": 1e-2, "mu": 0.1, **{f"lam_{g}": 0.0 for g in ra.GROUPS}}
        opt = ra.make_optimizer("adamw", params, hyper, [])
        step = ra.train_step(loss, opt)

        @jax.jit
        def run(labels):
            batch = {
                "inputs": images,
                "targets": labels[:, None],
                "weights": jnp.ones((len(images), 1)),
            }

            def body(carry, _):
                p, s = carry
                p, s, value = step(p, s, batch)
                return (p, s), value

            (p, _), values = jax.lax.scan(body, (params, opt.init(params)), None, length=steps)
            return values[0], values[-1], accuracy(model.apply(p, val["inputs"]), val)

        return [float(v) for v in run(jnp.asarray(labels, jnp.int32))]


# 12×12 images of 4 noiseless shapes, 9 patches, D = 16, float32.
TRAINABLE = {
    "x64": False,
    "attention": {"D": 16, "context": 10},
    "task": {"image": 12, "train_size": 1024, "val_size": 256, "pixel_noise": 0.0},
}


@pytest.mark.slow
def test_training_beats_chance_and_shuffled_labels_do_not():
    """Full-batch AdamW, 200 steps on 1,024 images of 4 classes: the loss falls and the
    validation accuracy (256 images) is far above chance; the same run with the
    training labels shuffled (the mutant) stays at chance on validation, within 4
    binomial standard errors."""
    point = _point(**TRAINABLE)
    labels = ra.make_task(point).images("train")[1]
    first, last, acc = _train(point, labels, 200)
    shuffled = np.random.default_rng(0).permutation(labels)
    _, _, acc_shuffled = _train(point, shuffled, 200)
    se = np.sqrt(0.25 * 0.75 / 256)
    assert last < 0.5 * first
    assert acc > 0.25 + 6 * se, acc
    assert abs(acc_shuffled - 0.25) < 4 * se, acc_shuffled
    # The ViT beats the linear baseline of the same images.
    base = ra.make_task(point).baselines()
    assert base["chance"] == 0.25
    assert acc > base["linear_val"] + 4 * se, (acc, base)


@pytest.mark.slow
def test_a_short_training_run_lowers_the_loss_and_beats_chance():
    """60 full-batch steps on 256 images: the training loss falls by a third and the
    validation accuracy is above chance by more than 3 binomial standard errors."""
    point = _point(**{**TRAINABLE, "task": {**TRAINABLE["task"], "train_size": 256}})
    first, last, acc = _train(point, ra.make_task(point).images("train")[1], 60)
    assert last < 0.67 * first
    assert acc > 0.25 + 3 * np.sqrt(0.25 * 0.75 / 256), acc


def test_linear_baseline_converges_and_separates_separable_data():
    """On data whose classes are a linear function of the pixels it fits (≥ 99%) and
    generalises (≥ 95%), with a final gradient norm ~0 (converged)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((800, 3, 3))
    y = np.argmax(x.reshape(800, -1)[:, :3], axis=1)
    out = linear_baseline((x[:600], y[:600]), (x[600:], y[600:]), 3, l2=1e-6, iterations=200)
    assert out["linear_train"] >= 0.99 and out["linear_val"] >= 0.95, out
    assert out["chance"] == 1 / 3 and out["grad_norm"] < 1e-8


@pytest.mark.slow
def test_a_tiny_run_reports_accuracy_in_the_loss_table():
    res = ra.run(dict(TINY, sweep={"seed": [0, 1]}))
    loss = res.loss
    assert {"train_accuracy", "val_accuracy"} <= set(loss.columns)
    assert len(loss) == 2 * 3 and (loss["status"] == "ok").all()
    assert loss["val_accuracy"].between(0, 1).all()
    # Accuracies are multiples of 1/32 (val) and 1/32 (train-eval: the first 32 images).
    np.testing.assert_allclose((loss["val_accuracy"] * 32) % 1, 0, atol=1e-9)
    heads = res.heads
    assert set(heads["pair"]) == {"qk", "vo"} and len(heads) == 2 * 3 * 1 * 2 * 2
