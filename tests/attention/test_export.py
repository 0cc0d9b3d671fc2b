"""rankflow's attention models exported as Hugging Face checkpoints, read back by
``rankflow inspect``: the per-head balance gaps and singular values inspect finds in an
export equal the training table's for that run, step, layer, head and pair (to
float32 rounding), and a wrong head split fails that comparison."""

from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import rankflow.attention as ra
from rankflow.attention import export as export_lib
from rankflow.attention.model import Model, ModelSpec
from rankflow.cli import main
from rankflow.config.fields import ConfigError
from rankflow.inspect import canonical, infer_layout, inspect_checkpoint, open_checkpoint

# Tiny SGD run, λ > 0, constant η: 2 seeds in one vmapped batch, saves every 2 steps,
# exports every 4. float32 (the default), as exports usually are.
CONFIG = {
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
    "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4, "val_size": 8},
    "dynamics": {"kind": "sgd", "eta": 0.1, "lam": 1.0, "batch": 4},
    "train": {"eval_every": 2, "export_every": 4},
    "save": {"t1": 8},
    "sweep": {"seed": [0, 1]},
}
# Columns both tables have, with the same definition (docs/theory.md's observables table).
SHARED = ("balance_gap", "balance_trace", "l2_penalty", "nuclear_norm", "frob_minus_nuc")
# float32 parameters, observables in float32 (training) and float64 (inspect): measured
# relative differences up to 1.2e-6 (singular values, relative to the largest).
RTOL = 1e-5


def _config(**train):
    cfg = {k: dict(v) for k, v in CONFIG.items()}
    cfg["train"].update(train)
    return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "run"
    return out, ra.run(_config(), out=out)


def _exports(out: Path) -> list[tuple[int, int, Path]]:
    folders = sorted((out / "export").glob("run_*/step_*"))
    return [(int(f.parent.name[4:]), int(f.name[5:]), f) for f in folders]


def _heads_sv(folder: Path) -> dict[tuple[int, int, str], np.ndarray]:
    """Singular values of every head's two products, cut out of the export by
    inspect's own layout (infer_layout, canonical)."""
    ckpt = open_checkpoint(folder)
    layout = infer_layout(ckpt)
    tensors = load_file(str(folder / "model.safetensors"))
    out = {}
    for layer in range(layout.n_layers):
        base = f"{layout.stack}{layer}."
        lw = canonical(
            layout,
            {
                "qkv": tensors[base + "attn.c_attn.weight"],
                "o": tensors[base + "attn.c_proj.weight"],
            },
        )
        for h in range(layout.n_heads):
            for pair, (a, b) in (
                ("qk", (lw.query(h), lw.key(h))),
                ("vo", (lw.value(h), lw.output_t(h))),
            ):
                out[layer, h, pair] = np.linalg.svd(a @ b.T, compute_uv=False)[: a.shape[1]]
    return out


def _mismatch(out: Path, heads) -> float:
    """Largest relative difference, over every export, head and pair, between what
    inspect reads from the export and the training table's row."""
    worst = 0.0
    for run, step, folder in _exports(out):
        got = inspect_checkpoint(folder).heads
        svs = _heads_sv(folder)
        want = heads[(heads.run_id == run) & (heads.t == step)]
        assert len(got) == len(want) > 0
        for _, row in want.iterrows():
            g = got[
                (got.layer == row.layer) & (got["head"] == row["head"]) & (got.pair == row.pair)
            ]
            for c in SHARED:
                worst = max(worst, abs(g[c].item() - row[c]) / abs(row[c]))
            sv = np.array([row[f"sv_{j + 1}"] for j in range(len(svs[0, 0, "qk"]))])
            have = svs[int(row.layer), int(row["head"]), row.pair]
            worst = max(worst, float(np.max(np.abs(have - sv)) / sv[0]))
    return worst


@pytest.mark.slow
def test_exports_one_folder_per_run_and_step(trained):
    out, res = trained
    found = {(run, step) for run, step, _ in _exports(out)}
    assert found == {(r, s) for r in (0, 1) for s in (0, 4, 8)}
    for _, _, folder in _exports(out):
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert not list((out / "export").rglob(".*"))  # no temporary left


@pytest.mark.slow
def test_inspected_gaps_and_singular_values_equal_the_training_table(trained):
    out, res = trained
    heads = res.heads
    # SGD with λ > 0 moves the gaps: the comparison is not of constants.
    g = heads[(heads.run_id == 0) & (heads.pair == "qk")].groupby("t").balance_gap.sum()
    assert g[8] < 0.9 * g[0]
    assert _mismatch(out, heads) < RTOL
    info = inspect_checkpoint(_exports(out)[0][2])
    assert info.layout.arch == "gpt2" and not info.heads.bias.any()


def _interleaved(W_HxDxd):
    """Wrong: heads interleaved (head index fastest) in the fused columns."""
    H, D, d = W_HxDxd.shape
    return np.transpose(W_HxDxd, (1, 2, 0)).reshape(D, H * d)


def _per_head_transposed(W_HxDxd):
    """Wrong: each head's block written transposed (d_h × D blocks read as D × d_h)."""
    H, D, d = W_HxDxd.shape
    return np.transpose(W_HxDxd, (0, 2, 1)).reshape(H, D, d).transpose(1, 0, 2).reshape(D, H * d)


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [_interleaved, _per_head_transposed])
def test_a_wrong_head_split_fails_the_comparison(trained, tmp_path, monkeypatch, wrong):
    _, right = trained
    monkeypatch.setattr(export_lib, "_heads_in_out", wrong)
    out = tmp_path / "run"
    res = ra.run(_config(), out=out)  # the same compiled program; only the export differs
    assert _mismatch(out, res.heads) > 1e-2


@pytest.mark.slow
def test_cli_export_every_writes_the_exports(trained, tmp_path):
    # The fixture's structure (2 seeds, exports every 4): its compiled program is reused.
    toml = tmp_path / "c.toml"
    toml.write_text(
        "[attention]\nD = 8\nH = 2\nlayers = 1\ncontext = 8\n"
        '[task]\nkind = "associative_recall"\npairs = 3\nkeys = 4\nvalues = 4\nval_size = 8\n'
        '[dynamics]\nkind = "sgd"\neta = 0.1\nlam = 1.0\nbatch = 4\n'
        "[train]\neval_every = 2\n[save]\nt1 = 8\n"
        "[sweep]\nseed = [0, 1]\n"
    )
    out = tmp_path / "out"
    argv = ["attention", "train", str(toml), "--out", str(out), "--export-every", "4", "--quiet"]
    assert main(argv) == 0
    assert [(r, s) for r, s, _ in _exports(out)] == [(r, s) for r in (0, 1) for s in (0, 4, 8)]
    a = load_file(str(out / "export/run_1/step_00000008/model.safetensors"))
    b = load_file(str(trained[0] / "export/run_1/step_00000008/model.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "train, message",
    [
        ({"export_every": 3}, "train.export_every: must be a multiple of train.eval_every = 2"),
        ({"export_every": 16}, "divide save.t1 = 8"),
        ({"export_every": -4}, "train.export_every"),
    ],
)
def test_export_off_the_save_grid_is_one_line_naming_the_field(train, message):
    with pytest.raises(ConfigError, match=message) as e:
        ra.resolve(_config(**train))
    assert "\n" not in str(e.value)


def test_export_over_the_memory_limit_is_refused_before_anything_runs(tmp_path, monkeypatch):
    # 2 runs × 3 exports × the model's parameters × 4 bytes: above a 1 kB limit.
    monkeypatch.setattr(export_lib, "MAX_EXPORT_BYTES", 1000)
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"2 runs × 3 exports × [\d,]+ parameters") as e:
        ra.run(_config(), out=out)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_export_needs_a_results_directory():
    with pytest.raises(ConfigError, match="train.export_every: .* pass --out"):
        ra.run(_config())


@pytest.mark.slow
def test_a_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    real, calls = export_lib.hf_config, []

    def failing(spec, extra=None):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(spec, extra)

    monkeypatch.setattr(export_lib, "hf_config", failing)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        ra.run(_config(), out=out)
    assert not out.exists()  # a sweep that finished no chunk leaves no directory


def test_write_checkpoint_replaces_atomically_and_cleans_up_on_failure(tmp_path, monkeypatch):
    folder = tmp_path / "run_0" / "step_00000000"
    config = {"model_type": "gpt2"}
    export_lib.write_checkpoint(folder, {"w": np.ones((2, 2), np.float32)}, config)
    export_lib.write_checkpoint(folder, {"w": np.zeros((2, 2), np.float32)}, config)
    assert np.all(load_file(str(folder / "model.safetensors"))["w"] == 0)

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", broken)
    with pytest.raises(OSError):
        export_lib.write_checkpoint(folder, {"w": np.full((2, 2), 2, np.float32)}, config)
    assert np.all(load_file(str(folder / "model.safetensors"))["w"] == 0)  # old one kept
    assert sorted(p.name for p in folder.parent.iterdir()) == ["step_00000000"]


def _numpy_heads(params, spec: ModelSpec) -> dict[tuple[int, int, str], dict[str, float]]:
    """The shared columns of every head, in numpy float64 from the model's own
    per-head factors (W_Q^h, W_K^h; W_V^h, W_O^hᵀ)."""
    out = {}
    for l in range(spec.layers):
        attn = {k: np.asarray(v, np.float64) for k, v in params["blocks"][l]["attn"].items()}
        for h in range(spec.H):
            for pair, (A, B) in (
                ("qk", (attn["W_Q"][h], attn["W_K"][h])),
                ("vo", (attn["W_V"][h], attn["W_O"][h].T)),
            ):
                l2 = 0.5 * (np.sum(A * A) + np.sum(B * B))
                nuc = np.linalg.svd(A @ B.T, compute_uv=False).sum()
                out[l, h, pair] = {
                    "balance_gap": np.linalg.norm(A.T @ A - B.T @ B),
                    "balance_trace": np.trace(A.T @ A - B.T @ B),
                    "l2_penalty": l2,
                    "nuclear_norm": nuc,
                    "frob_minus_nuc": l2 - nuc,
                }
    return out


def _direct(spec: ModelSpec, tmp_path: Path):
    """Export one freshly initialised model (float64) and return inspect's heads and the
    largest relative difference from the model's own per-head factors."""
    # Random entries in the model's pytree layout (from shapes: no eager init to pay).
    shapes = jax.eval_shape(lambda: Model(spec).init(jax.random.PRNGKey(0)))
    rng = np.random.default_rng(3)
    params = jax.tree.map(lambda x: rng.standard_normal(x.shape) / 3, shapes)
    folder = tmp_path / "m"
    export_lib.write_checkpoint(
        folder, export_lib.hf_tensors(params, spec), export_lib.hf_config(spec)
    )
    got = inspect_checkpoint(folder).heads
    worst = 0.0
    for (l, h, pair), want in _numpy_heads(params, spec).items():
        g = got[(got.layer == l) & (got["head"] == h) & (got.pair == pair)]
        for c, v in want.items():
            worst = max(worst, abs(g[c].item() - v) / abs(v))
    return got, worst


VIT = dict(
    D=8, H=2, layers=2, context=5, mlp_ratio=2, vocab=0, d_in=0, d_out=3,
    image=4, patch=2, causal=False, x64=True,
)  # fmt: skip
GPT2 = dict(
    D=8, H=2, layers=2, context=6, mlp_ratio=3, vocab=7, d_in=0, d_out=7,
    qk_bias=True, vo_bias=True, bias_scale=0.1, x64=True,
)  # fmt: skip


@pytest.mark.parametrize("kind", ["vit", "gpt2"])
@pytest.mark.parametrize("wrong", [_interleaved, _per_head_transposed])
def test_a_wrong_head_split_of_a_direct_export_fails(tmp_path, monkeypatch, kind, wrong):
    monkeypatch.setattr(export_lib, "_heads_in_out", wrong)
    with jax.enable_x64(True):
        _, worst = _direct(ModelSpec(**(VIT if kind == "vit" else GPT2)), tmp_path)
    assert worst > 1e-2


def test_vit_export_reads_back_with_the_same_heads(tmp_path):
    spec = ModelSpec(**VIT)
    with jax.enable_x64(True):
        got, worst = _direct(spec, tmp_path)
    assert worst < 1e-12
    cfg = open_checkpoint(tmp_path / "m").config
    assert cfg["model_type"] == "vit" and cfg["num_attention_heads"] == 2


def test_gpt2_export_of_an_untied_model_with_biases_reads_back(tmp_path):
    spec = ModelSpec(**GPT2)
    with jax.enable_x64(True):
        got, worst = _direct(spec, tmp_path)
    assert worst < 1e-12 and got.bias.all()
    names = load_file(str(tmp_path / "m" / "model.safetensors"))
    assert names["lm_head.weight"].shape == (7, 8)
    assert names["transformer.h.1.mlp.c_fc.weight"].shape == (8, 24)
