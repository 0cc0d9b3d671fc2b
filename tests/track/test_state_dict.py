"""``rankflow.track`` on PyTorch / Hugging Face state_dicts: the rows equal those of
``rankflow inspect`` on the same tensors written as safetensors beside config.json (one
layout table serves both), a wrong orientation differs, torch tensors and modules go the
same way, the Tracker writes them as a results directory, and bad input is one line.

The state_dicts hold real Hugging Face names and shapes (GPT-2's Conv1D ``(in, out)``
under ``transformer.``, Llama's nn.Linear ``(out, in)`` with grouped-query attention
under ``model.``), random float32 tensors, written by tests/helpers.py's writer.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import Spec, config_of, make_factors, write_checkpoint
from safetensors.numpy import load_file

import rankflow
from rankflow.config.fields import ConfigError
from rankflow.inspect import ID_COLUMNS, STATISTICS, inspect_checkpoint
from rankflow.track import COLUMNS, Tracker, state_dict_rows

SPECS = {
    "gpt2": Spec(arch="gpt2", layers=2, heads=4, d_model=32, bias=True, dtype=np.float32),
    "llama": Spec(arch="llama", layers=2, heads=4, kv_heads=2, d_model=32, dtype=np.float32),
}
# Hugging Face's model classes prefix the stack: GPT2LMHeadModel "transformer.",
# LlamaForCausalLM "model." (already the helpers' prefix).
PREFIX = {"gpt2": "transformer.", "llama": ""}
SHARED = list(ID_COLUMNS) + list(STATISTICS) + [f"null_{s}" for s in STATISTICS]


def state_dict(tmp_path, arch: str, seed: int = 0) -> tuple[dict, dict, object]:
    """(state_dict of random tensors with the model's names, config, the checkpoint
    folder of the same tensors): random, not balanced, factors."""
    spec = SPECS[arch]
    rng = np.random.default_rng(seed)
    factors = [
        {k: [rng.standard_normal(x.shape) for x in xs] for k, xs in f.items()}
        for f in make_factors(spec, seed)
    ]
    folder = write_checkpoint(tmp_path / f"{arch}-{seed}", spec, factors)
    tensors = load_file(folder / "model.safetensors")
    sd = {PREFIX[arch] + k: v for k, v in tensors.items()}
    return sd, config_of(spec), folder


def save(tmp_path, sd: dict, config: dict, name: str):
    """``sd`` as safetensors beside ``config`` as config.json."""
    from safetensors.numpy import save_file

    folder = tmp_path / name
    folder.mkdir()
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("arch", SPECS)
def test_rows_equal_inspect_on_the_same_tensors_as_a_checkpoint(tmp_path, arch):
    sd, config, _ = state_dict(tmp_path, arch)
    ours = state_dict_rows(sd, config=config)
    theirs = inspect_checkpoint(save(tmp_path, sd, config, "saved"), findings=False).heads
    assert list(ours.columns) == SHARED
    assert len(ours) == len(theirs) == {"gpt2": 2 * 2 * 4, "llama": 2 * 2 * (2 + 4)}[arch]
    pd.testing.assert_frame_equal(ours, theirs[SHARED], check_exact=False, rtol=1e-10)
    assert (ours["balance_gap_rel"] > 0.05).all()  # random factors: far from balanced


def test_c_proj_transposed_gives_other_value_output_rows(tmp_path):
    """GPT-2's c_proj read as nn.Linear (out, in) instead of Conv1D (in, out) swaps W_O's
    rows for its columns: the key–query rows stay, the value–output rows all differ."""
    sd, config, _ = state_dict(tmp_path, "gpt2")
    wrong = {k: v.T.copy() if k.endswith("attn.c_proj.weight") else v for k, v in sd.items()}
    right, bad = state_dict_rows(sd, config=config), state_dict_rows(wrong, config=config)
    qk, vo = right["pair"] == "qk", right["pair"] == "vo"
    pd.testing.assert_frame_equal(right[qk], bad[qk])
    gap, gap_bad = right.loc[vo, "balance_gap_rel"], bad.loc[vo, "balance_gap_rel"]
    assert (np.abs(gap.to_numpy() - gap_bad.to_numpy()) > 1e-3 * gap.to_numpy()).all()


class FakeTensor:
    """torch.Tensor as the tracker sees it: shape, dtype, detach().cpu().numpy()."""

    def __init__(self, x: np.ndarray):
        self.x, self.shape, self.dtype = x, x.shape, f"torch.{x.dtype}"

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.x


class FakeModel:
    """A Hugging Face model as the tracker sees it: state_dict() and config.to_dict()."""

    def __init__(self, sd: dict, config: dict):
        self.sd, self.config = sd, type("Config", (), {"to_dict": lambda _: dict(config)})()

    def state_dict(self):
        return {k: FakeTensor(v) for k, v in self.sd.items()}


def test_duck_typed_tensors_and_model_give_the_same_rows(tmp_path):
    """Without torch: objects with torch's faces go the torch way, with the same rows,
    the model's own config, and in the Tracker without declaring anything."""
    sd, config, _ = state_dict(tmp_path, "llama")
    want = state_dict_rows(sd, config=config)
    tensors = {k: FakeTensor(v) for k, v in sd.items()}
    pd.testing.assert_frame_equal(state_dict_rows(tensors, config=config), want)
    pd.testing.assert_frame_equal(state_dict_rows(FakeModel(sd, config)), want)
    got = Tracker(None).log(0, FakeModel(sd, config))
    np.testing.assert_array_equal(got["balance_gap"], want["balance_gap"])


def test_torch_tensors_and_module_give_the_same_rows(tmp_path):
    torch = pytest.importorskip("torch")
    sd, config, _ = state_dict(tmp_path, "llama")
    want = state_dict_rows(sd, config=config)
    tensors = {k: torch.from_numpy(v).requires_grad_() for k, v in sd.items()}
    pd.testing.assert_frame_equal(state_dict_rows(tensors, config=config), want)

    class Model(torch.nn.Module):  # a Hugging Face model's two faces: tensors and config
        def __init__(self):
            super().__init__()
            for k, v in sd.items():
                self.register_buffer(k.replace(".", "__"), torch.from_numpy(v))
            self.config = type("Config", (), {"to_dict": lambda _: dict(config)})()

        def state_dict(self):
            return {k.replace("__", "."): v for k, v in super().state_dict().items()}

    pd.testing.assert_frame_equal(state_dict_rows(Model()), want)
    bf16 = {k: v.detach().to(torch.bfloat16) for k, v in tensors.items()}
    rounded = {k: v.float().numpy() for k, v in bf16.items()}  # bfloat16 → float32: exact
    pd.testing.assert_frame_equal(
        state_dict_rows(bf16, config=config), state_dict_rows(rounded, config=config)
    )


def test_tracker_writes_state_dict_rows_that_rankflow_load_reads(tmp_path):
    sd0, config, _ = state_dict(tmp_path, "gpt2", seed=0)
    sd10, _, _ = state_dict(tmp_path, "gpt2", seed=1)
    out = tmp_path / "run"
    with Tracker(out, every=10, model_config=config) as tracker:
        for step, sd in ((0, sd0), (5, sd0), (10, sd10)):
            tracker.log(step, sd)
    df = rankflow.load(out)
    assert sorted(df["t"].unique()) == [0, 10]
    first = ["t", "layer", "head", "pair", "status", *COLUMNS]
    assert list(df.columns[2 : 2 + len(first)]) == first  # after run_id, path
    assert set(df["status"]) == {"ok"} and set(df["pair"]) == {"qk", "vo"}
    for step, sd in ((0, sd0), (10, sd10)):
        want = state_dict_rows(sd, config=config)
        got = df[df["t"] == step].reset_index(drop=True)
        np.testing.assert_allclose(got[list(COLUMNS)], want[list(COLUMNS)], rtol=1e-12)
        np.testing.assert_array_equal(got["head"], want["head"])
    assert json.loads((out / "config.json").read_text())["config"]["params"] == "state_dict"


def test_tracker_gqa_rows_are_one_unit_per_layer_pair_head(tmp_path):
    """Llama with 2 key/value heads for 4 query heads: group rows keep qk/vo with their
    group as ``head``, per-head rows become qk_head/vo_head."""
    sd, config, _ = state_dict(tmp_path, "llama")
    df = Tracker(None, model_config=config).log(0, sd)
    assert not df.duplicated(["layer", "pair", "head"]).any()
    groups = df[df["pair"] == "qk"]
    assert set(groups["unit"]) == {"group"} and groups["head"].tolist() == [0, 1] * 2
    assert sorted(df.loc[df["pair"] == "vo_head", "head"].unique()) == [0, 1, 2, 3]


def test_no_attention_tensors_is_one_line_and_no_folder(tmp_path):
    sd = {"encoder.block.0.weight": np.ones((4, 4), np.float32)}
    with pytest.raises(ConfigError) as err:
        state_dict_rows(sd)
    msg = str(err.value)
    assert "\n" not in msg and "no attention tensors" in msg and "h.0.attn.c_attn" in msg

    out = tmp_path / "run"
    tracker = Tracker(out, every=1)
    with pytest.raises(ConfigError) as err:
        tracker.log(0, sd)
    msg = str(err.value)
    assert "\n" not in msg and "no factor pairs" in msg and "no attention tensors" in msg
    assert not out.exists()


def test_a_diverged_state_dict_is_recorded_not_fatal(tmp_path):
    """A weight turning NaN after a finite measurement: the tracker records the step's
    rows as diverged (every statistic NaN), as the JAX path does, and training goes on."""
    sd, config, _ = state_dict(tmp_path, "gpt2", seed=0)
    bad = dict(sd)
    name = next(k for k in sd if k.endswith("attn.c_attn.weight"))
    bad[name] = np.full_like(sd[name], np.nan)
    tracker = Tracker(None, every=1, model_config=config)
    tracker.log(0, sd)
    rows = tracker.log(1, bad)
    assert set(rows["status"]) == {"diverged"} and rows[list(COLUMNS)].isna().all().all()
    assert len(rows) == len(tracker.table[tracker.table["t"] == 0])


def test_a_tracker_folder_written_again_holds_only_the_new_rows(tmp_path):
    sd, config, _ = state_dict(tmp_path, "gpt2", seed=0)
    out = tmp_path / "run"
    with Tracker(out, every=1, model_config=config) as tracker:
        for step in (0, 1, 2):
            tracker.log(step, sd)
    with Tracker(out, every=1, model_config=config, config={"second": True}) as tracker:
        tracker.log(7, sd)
    df = rankflow.load(out)
    assert sorted(df["t"].unique()) == [7]
    assert json.loads((out / "config.json").read_text())["config"]["second"] is True
