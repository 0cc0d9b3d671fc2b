"""rankflow's attention models written as Hugging Face checkpoints, which
``rankflow inspect`` (and ``transformers``) read.

``train.export_every = K`` writes, for every run and every step 0, K, 2K, …, t1 at
which the run is ok, one folder::

    DIR/export/run_{run_id}/step_{step:08d}/model.safetensors
                                            config.json

in the naming of ``GPT2LMHeadModel`` for the decoder (token tasks) and of
``ViTForImageClassification`` for the vision model (class-token pooling). Every
tensor is stored as the model holds it (float32, or float64 under ``x64``):

- GPT-2 (``Conv1D``, stored ``(in, out)``): ``transformer.h.{l}.attn.c_attn.weight`` is
  ``[Wq | Wk | Wv]`` (D, 3·H·d_h) with ``Wq[:, h·d_h:(h+1)·d_h] = W_Q^h``, and
  ``attn.c_proj.weight`` (H·d_h, D) has rows ``h·d_h:(h+1)·d_h = W_O^h``;
  ``ln_1``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``, ``wte``, ``wpe``, ``ln_f``, and
  ``lm_head.weight`` when the unembedding is untied.
- ViT (``nn.Linear``, stored ``(out, in)``): ``vit.encoder.layer.{l}.attention.
  attention.query.weight`` is ``Wqᵀ`` (so head h is rows ``h·d_h:(h+1)·d_h``), likewise
  key and value; ``attention.output.dense.weight`` is ``Woᵀ``; the patch embedding is
  a ``Conv2d`` of one channel whose kernel is the linear map of a row-major patch.

Biases the model does not have are written as zeros where the architecture always
has them (GPT-2's attention and ViT's output projection), so that
``transformers`` loads every tensor and computes the same function; the activations
are the tanh GELU (``gelu_new``), the LayerNorms' ε that of flax (1e-6).

A folder is written to a hidden temporary folder beside it and renamed into place:
a reader sees a complete export or none.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..config.fields import ConfigError
from .model import Model, ModelSpec

__all__ = [
    "EXPORT",
    "MAX_EXPORT_BYTES",
    "check_export_memory",
    "export_path",
    "export_runs",
    "hf_config",
    "hf_tensors",
    "parameter_count",
    "write_checkpoint",
]

EXPORT = "export"
# The stacked parameters one chunk may hold (runs × exports × parameters × bytes):
# they stay in memory until the chunk is written.
MAX_EXPORT_BYTES = 2**30


def export_path(root: str | Path, run_id: int, step: int) -> Path:
    """``root/run_{run_id}/step_{step:08d}``."""
    return Path(root) / f"run_{run_id}" / f"step_{step:08d}"


def _np(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x))


def _heads_in_out(W_HxDxd: np.ndarray) -> np.ndarray:
    """Per-head factors (H, D, d_h) side by side as one ``(in, out)`` matrix (D, H·d_h),
    head h in columns h·d_h:(h+1)·d_h (the layout of HF's ``split_heads``)."""
    H, D, d = W_HxDxd.shape
    return np.transpose(W_HxDxd, (1, 0, 2)).reshape(D, H * d)


def _attention(attn: Mapping[str, Any], spec: ModelSpec) -> dict[str, np.ndarray]:
    """One layer's attention in ``(in, out)`` orientation: ``q k v`` (D, H·d_h), ``o``
    (H·d_h, D) and their biases (zeros where the model has none)."""
    H, d, D = spec.H, spec.d_h, spec.D
    out = {r: _heads_in_out(np.asarray(attn[f"W_{r.upper()}"])) for r in "qkv"}
    out["o"] = np.asarray(attn["W_O"]).reshape(H * d, D)
    zeros = np.zeros(H * d, out["q"].dtype)
    for r in "qkv":
        b = attn.get(f"b_{r.upper()}")
        out[f"{r}_bias"] = zeros if b is None else np.asarray(b).reshape(H * d)
    b_o = attn.get("b_O")
    out["o_bias"] = np.zeros(D, zeros.dtype) if b_o is None else np.asarray(b_o)
    return out


def _norms_and_mlp(
    t: dict[str, Any], prefix: str, blk: Mapping[str, Any], names: tuple[str, ...], transpose: bool
) -> None:
    """Put a block's two LayerNorms and its MLP's two linear maps into ``t`` under
    ``prefix`` + their Hugging Face ``names`` (ln1, ln2, fc_in, fc_out), the MLP weights
    transposed when ``transpose``."""
    ln1, ln2, fc_in, fc_out = names
    for ours, theirs in (("ln1", ln1), ("ln2", ln2)):
        t[prefix + theirs + ".weight"] = blk[ours]["scale"]
        t[prefix + theirs + ".bias"] = blk[ours]["bias"]
    for ours, theirs in (("fc_in", fc_in), ("fc_out", fc_out)):
        kernel = blk["mlp"][ours]["kernel"]
        t[prefix + theirs + ".weight"] = np.asarray(kernel).T if transpose else kernel
        t[prefix + theirs + ".bias"] = blk["mlp"][ours]["bias"]


def _gpt2(params: Mapping[str, Any], spec: ModelSpec) -> dict[str, np.ndarray]:
    t: dict[str, Any] = {
        "transformer.wte.weight": params["embed"]["embedding"],
        "transformer.wpe.weight": params["pos"],
        "transformer.ln_f.weight": params["ln_f"]["scale"],
        "transformer.ln_f.bias": params["ln_f"]["bias"],
    }
    if not spec.tied:
        t["lm_head.weight"] = np.asarray(params["unembed"]["kernel"]).T
    for l in range(spec.layers):
        blk, p = params["blocks"][l], f"transformer.h.{l}."
        a = _attention(blk["attn"], spec)
        t[p + "attn.c_attn.weight"] = np.concatenate([a["q"], a["k"], a["v"]], axis=1)
        t[p + "attn.c_attn.bias"] = np.concatenate([a["q_bias"], a["k_bias"], a["v_bias"]])
        t[p + "attn.c_proj.weight"] = a["o"]
        t[p + "attn.c_proj.bias"] = a["o_bias"]
        # Conv1D MLP weights: (in, out), as ours.
        _norms_and_mlp(t, p, blk, ("ln_1", "ln_2", "mlp.c_fc", "mlp.c_proj"), transpose=False)
    return t


def _vit(params: Mapping[str, Any], spec: ModelSpec) -> dict[str, np.ndarray]:
    D, p = spec.D, spec.patch
    kernel = np.asarray(params["embed"]["proj"]["kernel"])  # (p·p, D), row-major patches
    e = "vit.embeddings."
    t: dict[str, Any] = {
        e + "cls_token": np.asarray(params["embed"]["cls"]).reshape(1, 1, D),
        e + "position_embeddings": np.asarray(params["pos"])[None, : spec.patches + 1],
        e + "patch_embeddings.projection.weight": kernel.T.reshape(D, 1, p, p),
        e + "patch_embeddings.projection.bias": params["embed"]["proj"]["bias"],
        "vit.layernorm.weight": params["ln_f"]["scale"],
        "vit.layernorm.bias": params["ln_f"]["bias"],
        "classifier.weight": np.asarray(params["unembed"]["kernel"]).T,
        "classifier.bias": np.zeros(spec.d_out, kernel.dtype),
    }
    for l in range(spec.layers):
        blk, q = params["blocks"][l], f"vit.encoder.layer.{l}."
        a = _attention(blk["attn"], spec)
        for r, name in (("q", "query"), ("k", "key"), ("v", "value")):
            t[q + f"attention.attention.{name}.weight"] = a[r].T  # nn.Linear: (out, in)
            if spec.qk_bias or spec.vo_bias:
                t[q + f"attention.attention.{name}.bias"] = a[r + "_bias"]
        t[q + "attention.output.dense.weight"] = a["o"].T
        t[q + "attention.output.dense.bias"] = a["o_bias"]
        names = ("layernorm_before", "layernorm_after", "intermediate.dense", "output.dense")
        _norms_and_mlp(t, q, blk, names, transpose=True)  # nn.Linear: (out, in)
    return t


def hf_tensors(params: Mapping[str, Any], spec: ModelSpec) -> dict[str, np.ndarray]:
    """One model's parameter pytree (``Model.init``'s layout, numpy or jax leaves) as
    the tensors of its Hugging Face checkpoint: name → contiguous array."""
    if not spec.vocab and not spec.image:
        raise ConfigError("train.export_every: vector-input models have no Hugging Face export")
    t = _vit(params, spec) if spec.image else _gpt2(params, spec)
    return {k: _np(v) for k, v in t.items()}


def hf_config(spec: ModelSpec, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``config.json`` of a model's export (``transformers``' GPT-2 or ViT keys,
    which ``rankflow.inspect.infer_layout`` reads); ``extra`` goes under ``"rankflow"``."""
    dtype = "float64" if spec.x64 else "float32"
    if spec.image:
        cfg: dict[str, Any] = {
            "model_type": "vit",
            "architectures": ["ViTForImageClassification"],
            "hidden_size": spec.D,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.H,
            "intermediate_size": spec.mlp_ratio * spec.D,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "layer_norm_eps": 1e-6,
            "image_size": spec.image,
            "patch_size": spec.patch,
            "num_channels": 1,
            "qkv_bias": bool(spec.qk_bias or spec.vo_bias),
            "id2label": {str(i): str(i) for i in range(spec.d_out)},
            "label2id": {str(i): i for i in range(spec.d_out)},
        }
    else:
        cfg = {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": spec.vocab,
            "n_positions": spec.context,
            "n_embd": spec.D,
            "n_layer": spec.layers,
            "n_head": spec.H,
            "n_inner": spec.mlp_ratio * spec.D,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-6,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "tie_word_embeddings": bool(spec.tied),
        }
    cfg["torch_dtype"] = dtype
    if extra:
        cfg["rankflow"] = dict(extra)
    return cfg


def write_checkpoint(folder: str | Path, tensors: Mapping[str, np.ndarray], config) -> None:
    """Write ``folder/model.safetensors`` and ``folder/config.json`` atomically: into a
    hidden temporary folder beside it, renamed into place (replacing an older export of
    the same step); on any failure nothing new is left behind."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        save_file(dict(tensors), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        if folder.exists():  # a chunk run again: its old export goes
            old = Path(
                tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old")
            )
            os.replace(folder, old / folder.name)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def export_runs(
    root: str | Path,
    run_ids: Sequence[int],
    steps: Sequence[int],
    params,
    ok: np.ndarray,
    spec: ModelSpec,
    extra: Sequence[Mapping[str, Any]],
) -> list[Path]:
    """Write every run's exports: ``params`` a pytree with leaves (runs, exports, …),
    ``ok`` (runs, exports) whether the run is ok at that step (diverged steps are not
    written), ``extra[i]`` run i's provenance for config.json. Returns the folders."""
    written = []
    for i, run_id in enumerate(run_ids):
        for j, step in enumerate(steps):
            if not ok[i, j]:
                continue
            one = jax.tree.map(lambda x, i=i, j=j: np.asarray(x[i, j]), params)
            folder = export_path(root, int(run_id), int(step))
            info = {**extra[i], "run_id": int(run_id), "step": int(step)}
            write_checkpoint(folder, hf_tensors(one, spec), hf_config(spec, info))
            written.append(folder)
    return written


def parameter_count(spec: ModelSpec) -> int:
    """Number of parameters of the model of ``spec`` (from shapes only)."""
    model = Model(spec)
    with jax.enable_x64(spec.x64):
        shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0)))
    return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))


def check_export_memory(spec: ModelSpec, runs: int, exports: int, what: str) -> int:
    """The bytes of one chunk's stacked exports (``runs`` × ``exports`` × parameters);
    raises ``ConfigError`` (one line) above :data:`MAX_EXPORT_BYTES`."""
    count = parameter_count(spec)
    nbytes = runs * exports * count * (8 if spec.x64 else 4)
    if nbytes > MAX_EXPORT_BYTES:
        raise ConfigError(
            f"train.export_every: {what}: {runs} runs × {exports} exports × {count:,} "
            f"parameters = {nbytes / 2**30:.2f} GiB held at once, above the limit of "
            f"{MAX_EXPORT_BYTES / 2**30:.2f} GiB; export less often or pass a smaller --chunk"
        )
    return nbytes
