"""PyTorch and Hugging Face models: a ``state_dict`` measured as ``rankflow inspect``
measures the same tensors saved as a checkpoint, so one layout table (the families of
:mod:`rankflow.inspect`: BERT/RoBERTa/MiniLM, GPT-2, GPT-NeoX, Llama/Mistral/Qwen/OLMo
with grouped-query attention and rotary embeddings, ViT) serves both.

The tensors go through an in-memory :class:`rankflow.inspect.Checkpoint`: the layout is
found from their names and the model's config as inspect finds it, each layer's
attention tensors are converted to numpy (:func:`~._pairs.as_numpy`; torch itself is
never imported here: it is optional) when that layer is reached, and its rows are
:func:`rankflow.inspect.inspect_layer`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..inspect import (
    ID_COLUMNS,
    STATISTICS,
    Checkpoint,
    InspectError,
    LayerWeights,
    Layout,
    canonical,
    infer_layout,
    inspect_layer,
    layer_tensor_names,
)
from ._measure import COLUMNS
from ._pairs import TrackError, as_numpy

__all__ = ["is_torch", "state_dict_layout", "state_dict_rows", "tracker_rows"]


def is_torch(params) -> bool:
    """A ``torch.nn.Module`` (anything with ``state_dict()``) or a mapping holding torch
    tensors (anything with ``detach``): duck typing, since torch is optional."""
    if isinstance(params, Mapping):
        return any(hasattr(v, "detach") for v in params.values())
    return callable(getattr(params, "state_dict", None))


def _to_numpy(x) -> np.ndarray:
    if str(getattr(x, "dtype", "")) == "torch.bfloat16":  # numpy has none; float32 is exact
        x = x.float()
    return as_numpy(x)


def _tensors_and_config(state_dict, config: dict | None) -> tuple[Mapping, dict | None]:
    """A model's ``state_dict()`` and (Hugging Face) ``config.to_dict()``, or the mapping
    as given; an explicit ``config`` wins."""
    if isinstance(state_dict, Mapping):
        return state_dict, config
    if not callable(getattr(state_dict, "state_dict", None)):
        raise TrackError(
            "state_dict: expected a mapping of tensor name → torch tensor or array, a "
            f"torch.nn.Module or a Hugging Face model, got {type(state_dict).__name__}"
        )
    hf = getattr(state_dict, "config", None)
    if config is None and callable(getattr(hf, "to_dict", None)):
        config = hf.to_dict()
    return state_dict.state_dict(), config


def _check_shapes(lw: LayerWeights, layout: Layout, fused: np.ndarray | None, layer: int):
    """Each factor's size against the layout, in the ``(in, out)`` orientation of
    :class:`rankflow.inspect.LayerWeights` (and a fused q|k|v weight's total, which its
    slices alone would not show)."""
    D, H, Hkv, d = layout.d_model, layout.n_heads, layout.n_kv_heads, layout.head_dim
    want = {"W_Q": (D, H * d), "W_K": (D, Hkv * d), "W_V": (D, Hkv * d), "W_O": (H * d, D)}
    got = dict(zip(want, (lw.Wq.shape, lw.Wk.shape, lw.Wv.shape, lw.Wo.shape)))
    if fused is not None and fused.size != 3 * H * d * D:
        got["q|k|v"], want["q|k|v"] = fused.shape, f"3·{H * d}·{D} entries"
    bad = [f"{k} is {got[k]}, not {want[k]}" for k in want if got[k] != want[k]]
    if bad:
        raise InspectError(
            f"state_dict: layer {layer} does not fit D = {D}, {H} heads ({Hkv} key/value) "
            f"of dimension {d} ({layout.source}): {'; '.join(bad)} (as (in, out) matrices)"
        )


def state_dict_layout(
    state_dict, *, config: dict | None = None, arch: str = "auto", heads: int | None = None
) -> tuple[Checkpoint, Layout]:
    """The in-memory checkpoint of ``state_dict`` and its layout, found by
    :func:`rankflow.inspect.infer_layout` from the names and ``config`` (nothing is read
    or converted yet); arguments as :func:`state_dict_rows`'."""
    tensors, config = _tensors_and_config(state_dict, config)
    ckpt = Checkpoint.from_arrays(tensors, config, convert=_to_numpy)
    return ckpt, infer_layout(ckpt, arch=arch, heads=heads)


def state_dict_rows(
    state_dict: Any,
    *,
    config: dict | None = None,
    arch: str = "auto",
    heads: int | None = None,
    rank_tol: float = 1e-3,
) -> pd.DataFrame:
    """The heads table of a PyTorch / Hugging Face model's attention: the rows
    :func:`rankflow.inspect.inspect_checkpoint` gives for the same tensors saved as
    safetensors beside ``config`` as ``config.json`` (its columns
    :data:`rankflow.inspect.ID_COLUMNS`, the statistics and their ``null_`` twins; every
    layer).

    Args:
        state_dict: a mapping of tensor name → ``torch.Tensor`` or numpy array (a
            ``state_dict``), or a ``torch.nn.Module`` / Hugging Face ``PreTrainedModel``
            (its ``state_dict()``, and for Hugging Face its ``config.to_dict()``).
        config: the model's config (``config.json``'s content): architecture and heads.
            Without one the names give the family, and the head count is the family's
            usual head dimension's (as inspect does without ``config.json``).
        arch: as :func:`rankflow.inspect.inspect_checkpoint`'s.
        heads: as :func:`rankflow.inspect.inspect_checkpoint`'s.
        rank_tol: as :func:`rankflow.inspect.inspect_checkpoint`'s.

    Raises a one-line :class:`rankflow.ConfigError` (inspect's errors, naming what was
    expected) when no attention tensors are found, the architecture is unknown, or the
    tensors do not match the config.

    Examples:
        A GPT-2 layer (``c_attn = [W_Q | W_K | W_V]``, stored (in, out)) of two heads
        whose Grams are 1.1·c_h·I (W_Q, W_V) and 0.9·c_h·I (W_K, W_O): each true pair
        has gap 0.2, the null pairs (head h's A, head h+1's B) more.

        >>> import numpy as np
        >>> from rankflow.track import state_dict_rows
        >>> A, B = np.diag([1.1, 1.1, 2.2, 2.2]) ** 0.5, np.diag([0.9, 0.9, 1.8, 1.8]) ** 0.5
        >>> sd = {"transformer.h.0.attn.c_attn.weight": np.hstack([A, B, A]),
        ...       "transformer.h.0.attn.c_proj.weight": B}
        >>> cfg = {"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1}
        >>> df = state_dict_rows(sd, config=cfg)
        >>> df[["layer", "pair", "head", "balance_gap_rel", "null_balance_gap_rel"]].round(3)
           layer pair  head  balance_gap_rel  null_balance_gap_rel
        0      0   qk     0              0.2                 0.483
        1      0   vo     0              0.2                 0.483
        2      0   qk     1              0.2                 0.839
        3      0   vo     1              0.2                 0.839
    """
    if not rank_tol > 0:
        raise TrackError(f"rank_tol: must be > 0, got {rank_tol!r}")
    ckpt, layout = state_dict_layout(state_dict, config=config, arch=arch, heads=heads)
    rows = []
    for layer in range(layout.n_layers):
        names = {
            role: name
            for role, name in layer_tensor_names(layout, layer).items()
            if name in ckpt.shapes or not role.endswith("_bias")  # biases are optional
        }
        read = ckpt.read(names.values())
        roles = {role: read[name] for role, name in names.items()}
        lw = canonical(layout, roles)
        _check_shapes(lw, layout, roles.get("qkv"), layer)
        rows += inspect_layer(lw, layout, layer, rank_tol=rank_tol)[0]
    stats = list(STATISTICS) + [f"null_{s}" for s in STATISTICS]
    return pd.DataFrame(rows)[list(ID_COLUMNS) + stats]


def tracker_rows(step: int, table: pd.DataFrame) -> pd.DataFrame:
    """:func:`state_dict_rows`' table as the tracker's rows: ``t``, ``layer``, ``head``
    (the unit's index: the head, or the key/value group of a GQA group row), ``pair``,
    ``status`` (``diverged`` where a column is not finite), :data:`~._measure.COLUMNS`,
    then inspect's other columns. GQA's per-head rows, which the theory does not predict
    to balance, are pairs ``qk_head``/``vo_head``, so that each (layer, pair, head) is
    one unit of the prediction table."""
    df = table.copy()
    df["head"] = np.where(df["unit"] == "group", df["group"], df["head"])
    df["pair"] = np.where(df["theory"], df["pair"], df["pair"] + "_head")
    finite = np.isfinite(df[list(COLUMNS)].to_numpy(np.float64)).all(axis=1)
    df["status"] = np.where(finite, "ok", "diverged")
    df["t"] = step
    first = ["t", "layer", "head", "pair", "status", *COLUMNS]
    return df[first + [c for c in df.columns if c not in first]]
