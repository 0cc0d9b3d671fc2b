"""`rankflow inspect`: synthetic checkpoints of each family, written with the real
safetensors writer, with known answers (exactly balanced heads, a planted imbalance,
grouped-query attention, rotary blocks, biases), and bad input.

The writer here is independent of the reader: it follows each family's stored
convention (nn.Linear (out, in), GPT-2 Conv1D (in, out)) from the per-head factors, so
a wrong transpose or split in `rankflow.inspect` breaks the exact answers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from helpers import (
    FAMILIES,
    PREFIX,
    Spec,
    build,
    make_factors,
    rotate_planes,
    write_checkpoint,
)
from safetensors.numpy import save_file

from rankflow import cli
from rankflow.inspect import (
    Factor,
    InspectError,
    canonical,
    inspect_checkpoint,
    load_inspection,
    open_checkpoint,
    pair_statistics,
    parse_layers,
    theory_rows,
)
from rankflow.inspect._families import check_shapes, infer_layout

# --- exact answers for every family ----------------------------------------------------


@pytest.mark.parametrize("arch", FAMILIES)
def test_factors_recovered_with_the_right_transposes(tmp_path, arch):
    """The per-head factors cut from the stored tensors are exactly those written:
    W_Q^h = W[h·d_h:(h+1)·d_h, :]ᵀ for nn.Linear, columns of c_attn for GPT-2,
    W_O^h = rows of the (in, out) output matrix."""
    kw = {"kv_heads": 2} if arch == "llama" else {}
    path, spec, factors = build(tmp_path, arch=arch, bias=True, **kw)
    ckpt = open_checkpoint(path)
    layout = infer_layout(ckpt)
    assert (layout.arch, layout.n_heads, layout.n_kv_heads, layout.head_dim) == (
        arch,
        spec.heads,
        spec.kv,
        spec.head_dim,
    )
    names = check_shapes(ckpt, layout, [1])[1]
    tensors = ckpt.read(names.values())
    lw = canonical(layout, {role: tensors[n] for role, n in names.items()})
    f = factors[1]
    for h in range(spec.heads):
        np.testing.assert_array_equal(lw.query(h), f["Q"][h])
        np.testing.assert_array_equal(lw.output_t(h), f["O"][h].T)
    for g in range(spec.kv):
        np.testing.assert_array_equal(lw.key(g), f["K"][g])
        np.testing.assert_array_equal(lw.value(g), f["V"][g])


@pytest.mark.parametrize("arch", FAMILIES)
def test_balanced_heads_exact_and_null_is_not(tmp_path, arch):
    """Exactly balanced heads: relative gap < 1e-6, Gram correlation 1 (all entries and
    off-diagonal), frob_minus_nuc ≈ 0 (T1); the null pairing is far from balanced."""
    kw = {"kv_heads": 2} if arch == "llama" else {}
    path, spec, _ = build(tmp_path, arch=arch, **kw)
    res = inspect_checkpoint(path)
    t = theory_rows(res.heads)
    assert len(t) == spec.layers * spec.kv * 2
    assert (t["balance_gap_rel"] < 1e-6).all()
    assert np.allclose(t["gram_corr"], 1.0, atol=1e-9, rtol=0)
    assert np.allclose(t["gram_corr_offdiag"], 1.0, atol=1e-9, rtol=0)
    assert (t["frob_minus_nuc_rel"].abs() < 1e-9).all()
    assert (t["null_balance_gap_rel"] > 0.1).all()
    assert (t["null_gram_corr_offdiag"] < 0.99).all()
    assert (t["null_frob_minus_nuc_rel"] > 1e-3).all()
    assert (t["rank"] == spec.head_dim).all() and (t["effective_rank"] <= spec.head_dim).all()


@pytest.mark.parametrize("arch", FAMILIES)
def test_planted_imbalance_found_in_its_layer_and_head(tmp_path, arch):
    kw = {"kv_heads": 2} if arch == "llama" else {}
    plant = ((1, 2, "qk"), (2, 1, "vo"))
    path, spec, _ = build(tmp_path, arch=arch, plant=plant, **kw)
    t = theory_rows(inspect_checkpoint(path).heads)
    G = spec.heads // spec.kv
    col = "group" if G > 1 else "head"
    bad = t["balance_gap_rel"] > 1e-3
    found = set(zip(t.loc[bad, "layer"], t.loc[bad, col], t.loc[bad, "pair"]))
    assert found == {(layer, h // G, pair) for layer, h, pair in plant}
    assert (t.loc[~bad, "balance_gap_rel"] < 1e-6).all()
    # A non-scalar rescaling also decorrelates the Grams; the product is unchanged.
    assert (t.loc[bad, "gram_corr_offdiag"] < 0.999).all()
    assert (t.loc[bad, "frob_minus_nuc"] > 1e-6).all()


@pytest.mark.parametrize(
    "arch, old, new",
    [
        ("bert", "bert.", ""),  # sentence-transformers MiniLM: no model prefix
        ("gpt2", "h.", "transformer.h."),  # GPT2LMHeadModel
        ("vit", "vit.", ""),  # DINOv2-style
        ("llama", "model.", "model.language_model."),
    ],
)
def test_other_prefixes(tmp_path, arch, old, new):
    from safetensors.numpy import load_file

    path, _, _ = build(tmp_path, arch=arch, plant=((2, 1, "qk"),))
    f = path / "model.safetensors"
    t = load_file(f)
    save_file({(new + k[len(old) :] if k.startswith(old) else k): v for k, v in t.items()}, f)
    res = inspect_checkpoint(path)
    assert res.layout.stack == new + PREFIX[arch][len(old) :]
    t = theory_rows(res.heads)
    worst = t.loc[t["balance_gap_rel"].idxmax()]
    assert (worst["layer"], worst["head"], worst["pair"]) == (2, 1, "qk")


def test_roberta_prefix_and_model_type(tmp_path):
    path, spec, _ = build(tmp_path, arch="bert", model_type="roberta", plant=((0, 3, "vo"),))
    res = inspect_checkpoint(path)
    assert res.layout.stack == "roberta.encoder.layer." and res.layout.model_type == "roberta"
    t = theory_rows(res.heads)
    worst = t.loc[t["balance_gap_rel"].idxmax()]
    assert (worst["layer"], worst["head"], worst["pair"]) == (0, 3, "vo")


# --- grouped-query attention and rotary blocks -----------------------------------------


def test_gqa_groups_balance_not_single_heads(tmp_path):
    """H = 8 query heads on H_kv = 2 key/value heads: Σ_{i∈g} W_Q^iᵀW_Q^i = W_KᵀW_K and
    W_VᵀW_V = Σ_{i∈g} W_O^i W_O^iᵀ hold exactly; a single query head against the shared
    key is not balanced (its Gram is about 1/4 of the key's)."""
    path, spec, factors = build(tmp_path, arch="llama", heads=8, kv_heads=2, d_model=64)
    h = inspect_checkpoint(path).heads
    groups, single = h[h["unit"] == "group"], h[h["unit"] == "head"]
    assert groups["theory"].all() and not single["theory"].any()
    assert len(groups) == 3 * 2 * 2 and len(single) == 3 * 8 * 2
    assert (groups["balance_gap_rel"] < 1e-6).all()
    assert (groups["m"][groups["pair"] == "qk"] == 4 * 64).all()
    assert (single["balance_gap_rel"] > 0.5).all()
    # head h uses key/value head h // 4; the null partner is in the next group
    assert (single["group"] == single["head"] // 4).all()
    assert (single["null_partner"] // 4 != single["group"]).all()
    # group Gram = sum of the member heads' Grams, against the recomputed statistics
    f = factors[0]
    A = np.vstack(f["Q"][:4])
    ref = pair_statistics(A, f["K"][0], rotary_dim=spec.head_dim)
    row = groups[(groups["layer"] == 0) & (groups["group"] == 0) & (groups["pair"] == "qk")]
    for k in ("balance_gap", "nuclear_norm", "l2_penalty", "effective_rank", "rotary_gap_rel"):
        assert row[k].iloc[0] == pytest.approx(ref[k], rel=1e-10, abs=1e-14)


def test_rotary_block_balance_uses_rotate_half_pairs(tmp_path):
    """Rotating W_K within each rotary plane (j, j + d_h/2) keeps the block energies
    ‖W[:, j]‖² + ‖W[:, j + d_h/2]‖² (what weight decay balances under rotary) but breaks
    the full Gram balance; rotating within (2j, 2j+1) (interleaved) does not keep them."""
    spec = Spec(arch="llama", heads=4, kv_heads=4, d_model=64)
    d = spec.head_dim
    rng = np.random.default_rng(5)
    for name, planes, rotary_ok in (
        ("half", [(j, j + d // 2) for j in range(d // 2)], True),
        ("interleaved", [(2 * j, 2 * j + 1) for j in range(d // 2)], False),
    ):
        factors = make_factors(spec)
        for f in factors:
            f["K"] = [rotate_planes(K, planes, rng) for K in f["K"]]
        path = write_checkpoint(tmp_path / name, spec, factors)
        qk = inspect_checkpoint(path).heads.query("pair == 'qk'")
        assert (qk["balance_gap_rel"] > 0.05).all()
        if rotary_ok:
            assert (qk["rotary_gap_rel"] < 1e-12).all()
            assert np.allclose(qk["rotary_corr"], 1.0, atol=1e-12)
        else:
            assert (qk["rotary_gap_rel"] > 1e-3).all()
    vo = inspect_checkpoint(path).heads.query("pair == 'vo'")
    assert vo["rotary_gap_rel"].isna().all()  # rotary acts on q and k only


def test_partial_rotary_and_qk_norm_flag(tmp_path):
    path, spec, _ = build(
        tmp_path, arch="llama", d_model=64, heads=4, extra_config={"partial_rotary_factor": 0.5}
    )
    assert inspect_checkpoint(path).layout.rotary_dim == spec.head_dim // 2
    path, _, _ = build(tmp_path, name="bert", arch="bert")
    assert inspect_checkpoint(path).layout.rotary_dim == 0
    # Qwen3-style per-head q/k norms: flagged, since the key–query product form breaks
    path, _, _ = build(tmp_path, name="qwen3", arch="llama", model_type="qwen3")
    from safetensors.numpy import load_file

    t = load_file(path / "model.safetensors")
    t["model.layers.0.self_attn.q_norm.weight"] = np.ones(8)
    save_file(t, path / "model.safetensors")
    res = inspect_checkpoint(path)
    assert res.layout.qk_norm and any("qk-norm" in n for n in res.meta["notes"])


# --- biases, dtypes, shards, layer selection -------------------------------------------


@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_biases_flagged_and_left_out_of_the_factors(tmp_path, arch):
    """Biases (BERT, GPT-2's c_attn.bias, Qwen2-style q/k/v biases) are read, flagged in
    the `bias` column and the notes, and do not enter the weight statistics."""
    a, _, _ = build(tmp_path, name="plain", arch=arch)
    b, _, _ = build(tmp_path, name="bias", arch=arch, bias=True)
    ra, rb = inspect_checkpoint(a), inspect_checkpoint(b)
    assert not ra.heads["bias"].any() and rb.heads["bias"].all()
    assert any("biases" in n for n in rb.meta["notes"])
    stats = ["balance_gap", "nuclear_norm", "gram_corr_offdiag", "null_balance_gap"]
    pd.testing.assert_frame_equal(ra.heads[stats], rb.heads[stats])


@pytest.mark.parametrize(
    "dtype, tol", [(np.float32, 1e-6), (np.float16, 3e-3), (ml_dtypes.bfloat16, 3e-2)]
)
def test_half_precision_checkpoints(tmp_path, dtype, tol):
    path, _, _ = build(tmp_path, arch="llama", dtype=dtype, kv_heads=2)
    t = theory_rows(inspect_checkpoint(path).heads)
    assert (t["balance_gap_rel"] < tol).all()
    assert (t["null_balance_gap_rel"] > 0.1).all()


def test_sharded_index_equals_single_file(tmp_path):
    one, _, _ = build(tmp_path, name="one", arch="llama", kv_heads=2, plant=((2, 0, "qk"),))
    many, _, _ = build(
        tmp_path, name="many", arch="llama", kv_heads=2, plant=((2, 0, "qk"),), shards=3
    )
    a = inspect_checkpoint(one).heads
    for path in (many, many / "model.safetensors.index.json"):
        pd.testing.assert_frame_equal(a, inspect_checkpoint(path).heads)
    assert len(open_checkpoint(many).files) == 3


def test_single_file_path_and_layer_selection(tmp_path):
    path, _, _ = build(tmp_path, arch="gpt2", layers=5)
    res = inspect_checkpoint(path / "model.safetensors", layers="0,2-3,-1", scatter=["3:1"])
    assert sorted(res.heads["layer"].unique()) == [0, 2, 3, 4]
    assert set(zip(res.grams["layer"], res.grams["index"])) == {(3, 1)}
    assert parse_layers([-1, "1-2", 1], 5) == [1, 2, 4]
    for bad in ("5", "3-1", "x"):
        with pytest.raises(InspectError, match="--layers"):
            parse_layers(bad, 5)


def test_no_config_json_names_and_heads(tmp_path):
    """Without config.json the family comes from the tensor names; the head count from
    --heads, or else from the family's usual head dimension, with a warning."""
    path, spec, _ = build(tmp_path, arch="vit", d_model=128, heads=2, config=False)
    guessed = inspect_checkpoint(path)
    assert guessed.layout.arch == "vit" and guessed.layout.head_dim == 64
    assert any(n.startswith("WARNING") for n in guessed.meta["notes"])
    assert (theory_rows(guessed.heads)["balance_gap_rel"] < 1e-6).all()
    told = inspect_checkpoint(path, heads=4)
    assert told.layout.head_dim == 32 and told.layout.source == "--heads"
    # llama: the key/value heads follow from k_proj's rows
    path, spec, _ = build(tmp_path, name="ll", arch="llama", heads=4, kv_heads=2, config=False)
    lay = inspect_checkpoint(path, heads=4).layout
    assert (lay.n_heads, lay.n_kv_heads) == (4, 2)


# --- statistics against rankflow.core.observables (T1, T2) ----------------------------------


def test_pair_statistics_match_observables_and_theory():
    import jax.numpy as jnp

    from rankflow.core.observables import observables

    rng = np.random.default_rng(3)
    for m, n, r in ((12, 9, 4), (5, 7, 6), (20, 20, 3)):
        A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
        B[:, 0] = 0.0  # rank-deficient product
        s = pair_statistics(A, B, rank_tol=1e-3)
        ref = observables(jnp.asarray(A), jnp.asarray(B), jnp.asarray(0.0), jnp.asarray(0.0), 1e-3)
        for k in ("l2_penalty", "nuclear_norm", "frob_minus_nuc", "balance_gap"):
            assert s[k] == pytest.approx(float(ref[k]), rel=1e-10)
        for k in ("balance_trace", "balance_nuclear", "effective_rank", "stable_rank", "rank"):
            assert s[k] == pytest.approx(float(ref[k]), rel=1e-10)
        assert 0 <= s["frob_minus_nuc"] <= 0.5 * s["balance_nuclear"] + 1e-12  # T1, T2
    X = [rng.standard_normal((6, 3)) for _ in range(3)]
    stacked, direct = Factor.stack([Factor.of(x) for x in X]), Factor.of(np.vstack(X))
    np.testing.assert_allclose(stacked.gram, direct.gram, rtol=1e-12)
    np.testing.assert_allclose(stacked.S.T @ stacked.S, direct.gram, rtol=1e-12, atol=1e-12)


# --- outputs, the command, figures -----------------------------------------------------


def test_cli_writes_tables_figures_and_summary(tmp_path, capsys):
    path, _, _ = build(tmp_path, arch="llama", heads=8, kv_heads=2, d_model=64, bias=True)
    out = tmp_path / "out"
    assert cli.main(["inspect", str(path), "--out", str(out), "--scatter", "0:5", "2:0"]) == 0
    printed = capsys.readouterr().out
    assert "key–query" in printed and "Grouped-query attention" in printed
    heads, grams, meta = load_inspection(out)
    assert meta["outputs"] == [
        "heads.parquet",
        "heads.csv",
        "grams.parquet",
        "summary.md",
        "findings.parquet",
        "findings.csv",
        "scatter.png",
        "layers.png",
        "findings.png",
    ]
    pd.testing.assert_frame_equal(
        heads, pd.read_csv(out / "heads.csv"), check_dtype=False, rtol=1e-12
    )
    assert set(zip(grams["layer"], grams["unit"], grams["index"])) == {
        (0, "group", 1),
        (2, "group", 0),
    }
    for fig in ("scatter.png", "layers.png"):
        assert (out / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*.tmp"))


def test_plots_from_tables_only(tmp_path):
    path, _, _ = build(tmp_path, arch="bert", plant=((1, 1, "qk"),))
    res = inspect_checkpoint(path, out=tmp_path / "o", figures=False)
    from rankflow import plots

    fig = plots.inspect_scatter_figure(res.grams, res.heads)
    assert len(fig.axes) == 2 * 3
    assert "layer 0, head 0: key–query" in [ax.get_title() for ax in fig.axes]
    fig = plots.inspect_layers_figure(res.heads)
    assert len(fig.axes) == 3 * 2


# --- bad input -------------------------------------------------------------------------


def _error(tmp_path, path, match, **kw):
    out = tmp_path / "out_err"
    with pytest.raises(InspectError, match=match):
        inspect_checkpoint(path, out=out, **kw)
    assert not out.exists()  # nothing written


def test_missing_and_unreadable_files(tmp_path):
    _error(tmp_path, tmp_path / "nope", "no such file")
    (tmp_path / "empty").mkdir()
    _error(tmp_path, tmp_path / "empty", "no .safetensors file")
    (tmp_path / "w.txt").write_bytes(b"x")
    _error(tmp_path, tmp_path / "w.txt", "not a checkpoint")
    (tmp_path / "g.safetensors").write_bytes(b"this is not a safetensors file at all")
    _error(tmp_path, tmp_path / "g.safetensors", "g.safetensors: not a readable safetensors")


def test_truncated_file_names_the_file(tmp_path):
    path, _, _ = build(tmp_path, arch="bert")
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])
    _error(tmp_path, path, f"{f}: .*truncated")


def test_missing_shard_and_tensor_in_index(tmp_path):
    path, _, _ = build(tmp_path, arch="llama", shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    (path / "model-00002-of-00002.safetensors").unlink()
    _error(tmp_path, path, "shard model-00002-of-00002.safetensors .* does not exist")
    index["weight_map"] = {"ghost.weight": "model-00001-of-00002.safetensors"}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    _error(tmp_path, path, "'ghost.weight' is not in its shard")


def test_shapes_that_do_not_match_the_config(tmp_path):
    path, spec, _ = build(tmp_path, arch="llama", heads=4, kv_heads=2)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, num_key_value_heads=4)))
    _error(tmp_path, path, r"'model.layers.0.self_attn.k_proj.weight' in .*model.safetensors"
           r" has shape \(16, 32\); .* needs \(32, 32\)")  # fmt: skip
    (path / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=5)))
    _error(tmp_path, path, "says 5 layers; the tensors hold 3")
    (path / "config.json").write_text(json.dumps(dict(cfg, num_attention_heads=5)))
    _error(tmp_path, path, "num_attention_heads = 5 does not divide the width hidden_size = 32")
    (path / "config.json").write_text(json.dumps(dict(cfg, num_key_value_heads=3)))
    _error(tmp_path, path, "3 key/value heads do not divide 4 query heads")
    path, _, _ = build(tmp_path, name="g", arch="gpt2")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, n_embd=48, n_head=4)))
    _error(tmp_path, path, r"'h.0.attn.c_attn.weight' .* has shape \(32, 96\).* needs \(48, 144\)")


def test_unknown_architecture(tmp_path):
    path, _, _ = build(tmp_path, arch="llama")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, model_type="clip")))
    _error(tmp_path, path, "unknown architecture model_type='clip'.*pass --arch")
    assert inspect_checkpoint(path, arch="llama").layout.arch == "llama"
    _error(tmp_path, path, "no bert attention tensors", arch="bert")
    _error(tmp_path, path, "unknown architecture 't5'", arch="t5")
    save_file({"encoder.block.0.layer.0.SelfAttention.q.weight": np.ones((4, 4))},
              tmp_path / "t5.safetensors")  # fmt: skip
    _error(tmp_path, tmp_path / "t5.safetensors", "unknown architecture: no attention tensors")


def test_unsupported_dtype_names_the_tensor(tmp_path):
    spec = Spec(arch="bert", layers=2)
    path = write_checkpoint(tmp_path / "q", spec, make_factors(spec))
    from safetensors.numpy import load_file

    t = load_file(path / "model.safetensors")
    name = "bert.encoder.layer.1.attention.self.key.weight"
    t[name] = t[name].astype(np.int8)
    save_file(t, path / "model.safetensors")
    _error(tmp_path, path, f"'{name}' in .* has dtype I8")


def test_failure_while_writing_leaves_no_finished_marker(tmp_path, monkeypatch):
    path, _, _ = build(tmp_path, arch="bert")
    out = tmp_path / "out"
    inspect_checkpoint(path, out=out, figures=False)
    assert (out / "inspect.json").exists()
    from rankflow import plots

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(plots.inspect, "inspect_layers_figure", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        inspect_checkpoint(path, out=out, figures=plots.inspection_figures)
    assert not (out / "inspect.json").exists() and not list(out.glob(".*.tmp"))
    with pytest.raises(InspectError, match="not a finished"):
        load_inspection(out)


def test_cli_error_exit_code(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "missing: no such file" in capsys.readouterr().err


# --- memory: one layer at a time -------------------------------------------------------

# Inspect, then print this process's own peak RSS (VmHWM). Not the parent's wait4
# ru_maxrss: Linux carries the parent's (pytest's) peak into the child at fork.
_MEASURE = textwrap.dedent(
    """
    import sys
    from rankflow.inspect import inspect_checkpoint
    inspect_checkpoint(sys.argv[1], out=sys.argv[2], figures=False, progress=False)
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    print(int(hwm) * 1024)
    """
)


def write_big_bert(folder: Path, layers: int, d_model: int, dtype=np.float32) -> int:
    """A BERT-shaped checkpoint of random attention weights; returns its size in bytes.
    Written with one layer's tensors in memory per shard-free file: the whole dict is
    needed by save_file, so callers keep `layers · 4 · D²` floats at hand."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for i in range(layers):
        p = f"bert.encoder.layer.{i}.attention."
        for stem in ("self.query", "self.key", "self.value", "output.dense"):
            tensors[f"{p}{stem}.weight"] = rng.standard_normal((d_model, d_model), dtype=dtype)
    save_file(tensors, folder / "model.safetensors")
    del tensors
    cfg = {"model_type": "bert", "hidden_size": d_model, "num_attention_heads": d_model // 64}
    (folder / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=layers)))
    return (folder / "model.safetensors").stat().st_size


def peak_rss_bytes(path: Path, out: Path) -> int:
    """Peak resident memory of a fresh process inspecting ``path``."""
    res = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(res.stdout.split()[-1])


@pytest.mark.slow
def test_memory_does_not_grow_with_the_checkpoint(tmp_path):
    """A 100 MB checkpoint (24 layers) peaks within a few MB of a 2-layer one: the
    layers are read one at a time and each file is unmapped after every layer."""
    small = write_big_bert(tmp_path / "small", layers=2, d_model=512)
    big = write_big_bert(tmp_path / "big", layers=24, d_model=512)
    base = peak_rss_bytes(tmp_path / "small", tmp_path / "o1")
    peak = peak_rss_bytes(tmp_path / "big", tmp_path / "o2")
    growth = peak - base
    print(f"checkpoint {big / 2**20:.0f} MB: peak RSS {peak / 2**20:.0f} MB, "
          f"{growth / 2**20:.1f} MB above the {small / 2**20:.0f} MB one")  # fmt: skip
    assert growth < 0.25 * (big - small)


@pytest.mark.slow
def test_memory_1gb_checkpoint(tmp_path):
    """A ~1 GB float32 checkpoint peaks well below its size."""
    size = write_big_bert(tmp_path / "big", layers=64, d_model=1024)
    peak = peak_rss_bytes(tmp_path / "big", tmp_path / "o")
    print(f"checkpoint {size / 2**30:.2f} GiB: peak RSS {peak / 2**20:.0f} MiB "
          f"({peak / size:.2f} of the file)")  # fmt: skip
    assert peak < 0.5 * size


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_pytorch_bin_equals_safetensors(tmp_path, dtype):
    """A ``pytorch_model.bin`` (``torch.save`` of a state dict) gives exactly the heads
    table of a safetensors file holding the same tensors, bfloat16 included. Needs torch
    (the ``torch`` extra), which the test extras do not install: skipped there; run here
    with torch 2.13.0 (CPU)."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file
    from safetensors.torch import save_file

    ckpt, _, _ = build(tmp_path, name="src", arch="gpt2", plant=((1, 0, "vo"),))
    tensors = load_file(str(ckpt / "model.safetensors"))
    state = {k: torch.from_numpy(v.copy()).to(getattr(torch, dtype)) for k, v in tensors.items()}
    folders = {}
    for kind in ("bin", "st"):
        folders[kind] = tmp_path / kind
        folders[kind].mkdir()
        shutil.copy(ckpt / "config.json", folders[kind] / "config.json")
    torch.save(state, folders["bin"] / "pytorch_model.bin")
    save_file(state, str(folders["st"] / "model.safetensors"))
    heads = {kind: inspect_checkpoint(folder).heads for kind, folder in folders.items()}
    pd.testing.assert_frame_equal(heads["st"], heads["bin"])
    assert heads["bin"]["balance_gap"].max() > 1.0  # the planted head is there
