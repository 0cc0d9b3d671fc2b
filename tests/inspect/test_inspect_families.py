"""GPT-NeoX (Pythia) and OLMo/OLMo-2 layouts: planted balance recovered head by head,
partial rotary's statistics, the qk-norm and clip notes; and the wrong-layout mutant
(Pythia's fused q|k|v read as (3, H, d_h) instead of per head) failing the same check."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import Spec, make_factors
from safetensors.numpy import save_file

from rankflow.inspect import _families as families
from rankflow.inspect import inspect_checkpoint, unit_statistics


def write_neox(folder, spec: Spec, factors, rotary_pct=0.25, bias=False):
    """Pythia naming: query_key_value (3·H·d_h, D) with rows (H, 3, d_h), dense (D, H·d_h)."""
    H, d, D = spec.heads, spec.head_dim, spec.d_model
    rng = np.random.default_rng(1)
    tensors = {"gpt_neox.embed_in.weight": rng.standard_normal((50, D))}
    for i, f in enumerate(factors):
        rows = np.stack([np.stack([f["Q"][h].T, f["K"][h].T, f["V"][h].T]) for h in range(H)])
        p = f"gpt_neox.layers.{i}.attention."
        tensors[p + "query_key_value.weight"] = rows.reshape(3 * H * d, D)
        tensors[p + "dense.weight"] = np.vstack(f["O"]).T
        if bias:
            tensors[p + "query_key_value.bias"] = rng.standard_normal(3 * H * d)
        tensors[f"gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight"] = rng.standard_normal((4 * D, D))
    folder.mkdir(parents=True)
    save_file(
        {k: np.ascontiguousarray(v) for k, v in tensors.items()}, folder / "model.safetensors"
    )
    cfg = {"model_type": "gpt_neox", "hidden_size": D, "num_attention_heads": H,
           "num_hidden_layers": spec.layers, "rotary_pct": rotary_pct}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


PLANT = ((0, 1, "qk"), (1, 2, "vo"), (2, 0, "qk"))


def _gaps(res):
    t = res.heads[res.heads["theory"]]
    return {(r.layer, r.head, r.pair): r.balance_gap_rel for r in t.itertuples()}


def _planted_found(gaps):
    """Exactly the planted heads are unbalanced; every other gap is at rounding."""
    big = {k for k, v in gaps.items() if v > 1e-3}
    small = all(v < 1e-12 for k, v in gaps.items() if k not in big)
    return big == set(PLANT) and small


def test_neox_planted_balance_recovered(tmp_path):
    spec = Spec(arch="llama", layers=3, heads=4, d_model=32, plant=PLANT)
    path = write_neox(tmp_path / "pythia", spec, make_factors(spec), bias=True)
    res = inspect_checkpoint(path)
    lay = res.layout
    assert (lay.arch, lay.n_heads, lay.head_dim, lay.rotary_dim) == ("gpt_neox", 4, 8, 2)
    assert _planted_found(_gaps(res))
    assert res.heads["bias"].any()  # the fused bias is read and flagged
    assert any("biases" in n for n in res.meta["notes"])


def test_neox_partial_rotary_statistics(tmp_path):
    """rotary_pct = 0.5: rotary_dim = d_h/2, and the verdict's partial-rotary statistics
    (rotary block, full Gram, non-rotary sub-block) are the ones tested; the non-rotary
    sub-block of a balanced head balances to rounding."""
    spec = Spec(arch="llama", layers=2, heads=2, d_model=32)
    path = write_neox(tmp_path / "p", spec, make_factors(spec), rotary_pct=0.5)
    res = inspect_checkpoint(path)
    assert res.layout.rotary_dim == 8
    stats = unit_statistics("qk", res.layout.rotary_dim, res.layout.head_dim)
    assert stats == ("rotary_gap_rel", "balance_gap_rel", "nonrotary_gap_rel")
    qk = res.heads.query("pair == 'qk'")
    assert (qk["nonrotary_gap_rel"] < 1e-12).all() and (qk["rotary_gap_rel"] < 1e-12).all()
    assert set(res.pair_gaps) >= {("qk", s) for s in stats}


def test_wrong_neox_layout_fails_the_planted_check(tmp_path, monkeypatch):
    """Mutant: the fused rows read as (3, H, d_h) (GPT-2's order) mix q, k and v of
    different heads; the planted pattern is no longer recovered."""
    spec = Spec(arch="llama", layers=3, heads=4, d_model=32, plant=PLANT)
    path = write_neox(tmp_path / "pythia", spec, make_factors(spec))

    def wrong(layout, w, b):
        H, d = layout.n_heads, layout.head_dim
        return tuple(w[j * H * d : (j + 1) * H * d].T for j in range(3)) + (None,) * 3

    monkeypatch.setattr(families, "_neox_split", wrong)
    assert not _planted_found(_gaps(inspect_checkpoint(path)))


def test_bad_rotary_pct_names_the_field(tmp_path):
    spec = Spec(arch="llama", layers=1, heads=2, d_model=16)
    path = write_neox(tmp_path / "p", spec, make_factors(spec), rotary_pct=1.5)
    with pytest.raises(Exception, match=r"config.json: rotary_pct = 1.5"):
        inspect_checkpoint(path)


def _olmo(tmp_path, name, model_type, norm_width=None, **extra):
    from helpers import write_checkpoint

    spec = Spec(arch="llama", layers=3, heads=4, d_model=32, plant=PLANT, model_type=model_type,
                extra_config=extra)  # fmt: skip
    path = write_checkpoint(tmp_path / name, spec, make_factors(spec))
    if norm_width:
        from safetensors.numpy import load_file

        t = load_file(path / "model.safetensors")
        for i in range(spec.layers):
            for n in ("q_norm", "k_norm"):
                t[f"model.layers.{i}.self_attn.{n}.weight"] = np.ones(norm_width)
        save_file(t, path / "model.safetensors")
    return inspect_checkpoint(path)


def test_olmo_and_olmo2(tmp_path):
    res = _olmo(tmp_path, "olmo", "olmo", clip_qkv=8.0)
    assert res.layout.arch == "llama" and not res.layout.qk_norm
    assert _planted_found(_gaps(res))
    assert any("clip_qkv" in n for n in res.meta["notes"])
    # OLMo-2: q_norm/k_norm over the whole projection (H·d_h wide), not per head
    res = _olmo(tmp_path, "olmo2", "olmo2", norm_width=32)
    assert res.layout.qk_norm
    note = next(n for n in res.meta["notes"] if "qk-norm" in n)
    assert "whole projection" in note and "not predicted" in note
    assert _planted_found(_gaps(res))  # the weights' own balance is still measured
    res = _olmo(tmp_path, "qwen3", "qwen3", norm_width=8)
    assert "per head" in next(n for n in res.meta["notes"] if "qk-norm" in n)
