"""Attention naming and layout of the supported model families, and the per-head
factors of docs/theory.md ("Attention layers") cut out of a layer's stored tensors (the
layout itself: :mod:`._layout`; inferring it from a checkpoint: :mod:`._detect`).

Convention: every factor acts on the input, ``q = x W_Q^h`` with ``W_Q^h ∈ R^{D×d_h}``.
PyTorch ``nn.Linear`` stores ``(d_out, d_in)``, so for a linear query projection of
shape ``(H·d_h, D)`` head h's factor is ``weight[h·d_h:(h+1)·d_h, :].T``; GPT-2's
``Conv1D`` stores ``(d_in, d_out)`` and needs no transpose. Each layer is first brought
to one canonical ``(in, out)`` orientation (:class:`LayerWeights`), and every family
shares the slicing from there:

- ``W_Q^h = Wq[:, h·d_h:(h+1)·d_h]`` (D×d_h), ``W_K^g``, ``W_V^g`` likewise with the
  key/value head ``g = h // (H/H_kv)`` (HF ``repeat_kv``);
- ``W_O^h = Wo[h·d_h:(h+1)·d_h, :]`` (d_h×D), so the value–output pair is
  ``A = W_V^g``, ``B = W_O^hᵀ`` (``= o_proj.weight[:, h·d_h:(h+1)·d_h]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checkpoint import FLOAT_DTYPES, Checkpoint, InspectError
from ._detect import infer_layout as infer_layout
from ._layout import ARCHS as ARCHS
from ._layout import FUSED, SEPARATE
from ._layout import Layout as Layout

__all__ = ["ARCHS", "Layout", "LayerWeights", "infer_layout", "layer_tensor_names"]


@dataclass(frozen=True)
class LayerWeights:
    """One layer's attention weights in ``(in, out)`` orientation, stored dtype (views
    of the arrays read). ``Wq``: (D, H·d_h), ``Wk``/``Wv``: (D, H_kv·d_h), ``Wo``:
    (H·d_h, D); biases ``(H·d_h,)`` / ``(H_kv·d_h,)`` or ``None``.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import LayerWeights
        >>> W = np.arange(32.0).reshape(4, 8)  # D = 4, two heads of d_h = 4
        >>> lw = LayerWeights(W, W, W, W.T, None, None, None, head_dim=4)
        >>> lw.query(1).shape, bool((lw.query(1) == W[:, 4:]).all()), lw.output_t(1).shape
        ((4, 4), True, (4, 4))
    """

    Wq: np.ndarray
    Wk: np.ndarray
    Wv: np.ndarray
    Wo: np.ndarray
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    head_dim: int

    def _cols(self, W: np.ndarray, i: int) -> np.ndarray:
        d = self.head_dim
        return W[:, i * d : (i + 1) * d].astype(np.float64)

    def query(self, h: int) -> np.ndarray:
        """``W_Q^h`` (D×d_h, float64)."""
        return self._cols(self.Wq, h)

    def key(self, g: int) -> np.ndarray:
        """``W_K^g`` (D×d_h, float64)."""
        return self._cols(self.Wk, g)

    def value(self, g: int) -> np.ndarray:
        """``W_V^g`` (D×d_h, float64)."""
        return self._cols(self.Wv, g)

    def output_t(self, h: int) -> np.ndarray:
        """``W_O^hᵀ`` (D×d_h, float64), the B factor of the value–output pair."""
        d = self.head_dim
        return self.Wo[h * d : (h + 1) * d, :].T.astype(np.float64)


def layer_tensor_names(layout: Layout, i: int) -> dict[str, str]:
    """Role → tensor name in layer ``i``. Roles: ``q k v o`` (separate projections) or
    ``qkv o`` (GPT-2, GPT-NeoX), each with a ``_bias`` twin (which may be absent).

    Examples:
        >>> from rankflow.inspect import Layout, layer_tensor_names
        >>> lay = Layout("gpt2", "gpt2", "h.", 2, 8, 2, 2, 4, 0, False, "config.json")
        >>> layer_tensor_names(lay, 1)["qkv"], layer_tensor_names(lay, 1)["o_bias"]
        ('h.1.attn.c_attn.weight', 'h.1.attn.c_proj.bias')
    """
    base = f"{layout.stack}{i}."
    if layout.arch in FUSED:
        roles = FUSED[layout.arch]
    else:
        roles = dict(zip(("q", "k", "v", "o"), SEPARATE[layout.arch]))
    names = {}
    for role, stem in roles.items():
        names[role] = f"{base}{stem}.weight"
        names[role + "_bias"] = f"{base}{stem}.bias"
    return names


def _expected_shapes(layout: Layout) -> dict[str, tuple[int, ...]]:
    D, H, Hkv, d = layout.d_model, layout.n_heads, layout.n_kv_heads, layout.head_dim
    if layout.arch == "gpt2":  # Conv1D: (in, out)
        return {"qkv": (D, 3 * H * d), "qkv_bias": (3 * H * d,), "o": (H * d, D), "o_bias": (D,)}
    if layout.arch == "gpt_neox":  # nn.Linear: (out, in), rows [h, (q|k|v), d_h]
        return {"qkv": (3 * H * d, D), "qkv_bias": (3 * H * d,), "o": (D, H * d), "o_bias": (D,)}
    return {  # nn.Linear: (out, in)
        "q": (H * d, D),
        "k": (Hkv * d, D),
        "v": (Hkv * d, D),
        "o": (D, H * d),
        "q_bias": (H * d,),
        "k_bias": (Hkv * d,),
        "v_bias": (Hkv * d,),
        "o_bias": (D,),
    }


def _layout_text(layout: Layout) -> str:
    kv = f", {layout.n_kv_heads} key/value heads" if layout.n_kv_heads != layout.n_heads else ""
    return (
        f"D = {layout.d_model}, {layout.n_heads} heads{kv} of dimension {layout.head_dim} "
        f"({layout.source})"
    )


def check_shapes(ckpt: Checkpoint, layout: Layout, layers: list[int]) -> dict[int, dict]:
    """For every layer: role → tensor name of the tensors present, after checking each
    shape against the layout (from the headers; nothing is read)."""
    expected = _expected_shapes(layout)
    out = {}
    for i in layers:
        present = {}
        for role, name in layer_tensor_names(layout, i).items():
            if name not in ckpt.shapes:
                if role.endswith("_bias"):
                    continue
                raise InspectError(
                    f"{ckpt.path}: no tensor {name!r} (layer {i} of {layout.n_layers}, "
                    f"{layout.arch} naming)"
                )
            shape, dtype = ckpt.shapes[name], ckpt.dtypes[name]
            if dtype not in FLOAT_DTYPES:
                raise InspectError(
                    f"{ckpt.describe(name)} has dtype {dtype}: only {', '.join(FLOAT_DTYPES)} "
                    "weights can be inspected (quantized or FP8 checkpoints are not supported)"
                )
            if shape != expected[role]:
                orient = "(in, out) Conv1D" if layout.arch == "gpt2" else "(out, in) linear"
                raise InspectError(
                    f"{ckpt.describe(name)} has shape {shape}; {_layout_text(layout)} needs "
                    f"{expected[role]} ({orient} weights)"
                )
            present[role] = name
        out[i] = present
    return out


def canonical(layout: Layout, tensors: dict[str, np.ndarray]) -> LayerWeights:
    """A layer's tensors (role → array, as read) in ``(in, out)`` orientation.

    Examples:
        GPT-2's fused ``c_attn`` weight ``[W_Q | W_K | W_V]`` (D × 3·H·d_h) split:

        >>> import numpy as np
        >>> from rankflow.inspect import Layout, canonical
        >>> lay = Layout("gpt2", "gpt2", "h.", 1, 4, 2, 2, 2, 0, False, "config.json")
        >>> qkv = np.arange(48.0).reshape(4, 12)
        >>> lw = canonical(lay, {"qkv": qkv, "o": np.eye(4)})
        >>> lw.Wq.shape, bool((lw.Wk == qkv[:, 4:8]).all()), bool((lw.key(1) == qkv[:, 6:8]).all())
        ((4, 4), True, True)
    """
    if layout.arch == "gpt2":
        w, b = tensors["qkv"], tensors.get("qkv_bias")
        width = layout.n_heads * layout.head_dim
        Wq, Wk, Wv = (w[:, j * width : (j + 1) * width] for j in range(3))
        bq, bk, bv = (
            (None,) * 3 if b is None else (b[j * width : (j + 1) * width] for j in range(3))
        )
        Wo = tensors["o"]
    elif layout.arch == "gpt_neox":
        Wq, Wk, Wv, bq, bk, bv = _neox_split(layout, tensors["qkv"], tensors.get("qkv_bias"))
        Wo = tensors["o"].T
    else:
        Wq, Wk, Wv, Wo = (tensors[r].T for r in ("q", "k", "v", "o"))
        bq, bk, bv = (tensors.get(r + "_bias") for r in ("q", "k", "v"))
    return LayerWeights(Wq, Wk, Wv, Wo, bq, bk, bv, layout.head_dim)


def _neox_split(layout: Layout, w: np.ndarray, b: np.ndarray | None) -> tuple:
    """GPT-NeoX's fused ``query_key_value`` (3·H·d_h, D) into ``Wq, Wk, Wv`` (D, H·d_h)
    and their biases: HF views the output as (H, 3·d_h) per token and chunks each head's
    3·d_h into q, k, v, so the rows are laid out (H, 3, d_h), not (3, H, d_h)."""
    H, d = layout.n_heads, layout.head_dim
    w4 = w.reshape(H, 3, d, -1)
    Ws = tuple(w4[:, j].reshape(H * d, -1).T for j in range(3))
    bs = (None,) * 3 if b is None else tuple(b.reshape(H, 3, d)[:, j].reshape(-1) for j in range(3))
    return Ws + bs
