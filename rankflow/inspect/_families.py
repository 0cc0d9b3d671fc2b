"""Attention naming and layout of the supported model families, and the per-head
factors of docs/theory.md ("Attention layers") cut out of a layer's stored tensors.

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

import re
from dataclasses import asdict, dataclass

import numpy as np

from ._checkpoint import FLOAT_DTYPES, Checkpoint, InspectError

__all__ = ["ARCHS", "Layout", "LayerWeights", "infer_layout", "layer_tensor_names"]

ARCHS = ("bert", "gpt2", "gpt_neox", "llama", "vit")

# config.json model_type → family. Only types whose attention uses the family's tensor
# names exactly; anything else is refused unless --arch says which naming to use.
MODEL_TYPES = {
    "bert": ("bert", "roberta", "xlm-roberta", "camembert", "electra"),
    "gpt2": ("gpt2",),
    "gpt_neox": ("gpt_neox",),
    "llama": (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "olmo",
        "olmo2",
        "granite",
        "starcoder2",
    ),
    "vit": ("vit", "deit", "vit_mae", "vit_msn", "dinov2"),
}

# The query weight of each family; ``stack`` is everything before the layer index.
_QUERY = {
    "bert": r"encoder\.layer\.)(?P<i>\d+)\.attention\.self\.query\.weight",
    "gpt2": r"h\.)(?P<i>\d+)\.attn\.c_attn\.weight",
    "gpt_neox": r"layers\.)(?P<i>\d+)\.attention\.query_key_value\.weight",
    "llama": r"layers\.)(?P<i>\d+)\.self_attn\.q_proj\.weight",
    "vit": r"encoder\.layer\.)(?P<i>\d+)\.attention\.attention\.query\.weight",
}
EXAMPLES = {
    "bert": "bert.encoder.layer.0.attention.self.query.weight",
    "gpt2": "h.0.attn.c_attn.weight",
    "gpt_neox": "gpt_neox.layers.0.attention.query_key_value.weight",
    "llama": "model.layers.0.self_attn.q_proj.weight",
    "vit": "vit.encoder.layer.0.attention.attention.query.weight",
}
PATTERNS = {a: re.compile(r"^(?P<stack>(?:.*\.)?" + p + "$") for a, p in _QUERY.items()}

# Tensor names inside layer i (after f"{stack}{i}."), by role.
_SEPARATE = {
    "bert": ("attention.self.query", "attention.self.key", "attention.self.value",
             "attention.output.dense"),
    "vit": ("attention.attention.query", "attention.attention.key",
            "attention.attention.value", "attention.output.dense"),
    "llama": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
}  # fmt: skip
# Fused q|k|v projections: GPT-2's Conv1D side by side, GPT-NeoX's nn.Linear per head.
_FUSED = {
    "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj"},
    "gpt_neox": {"qkv": "attention.query_key_value", "o": "attention.dense"},
}
_QK_NORM = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")

# Where each family's config.json keeps the numbers.
_CONFIG_KEYS = {
    "gpt2": {"d_model": "n_embd", "n_heads": "n_head", "n_layers": "n_layer"},
    "default": {
        "d_model": "hidden_size",
        "n_heads": "num_attention_heads",
        "n_layers": "num_hidden_layers",
    },
}
# Head dimension assumed when there is neither a config.json nor --heads.
_DEFAULT_HEAD_DIM = {"bert": 64, "gpt2": 64, "gpt_neox": 64, "llama": 128, "vit": 64}


@dataclass(frozen=True)
class Layout:
    """Architecture and head layout of a checkpoint.

    ``rotary_dim``: leading dimensions of each q/k head that rotary embeddings rotate
    (0: no rotary), paired in HF's ``rotate_half`` layout, j with j + rotary_dim/2.
    ``qk_norm``: q and k are normalised after projection (per head: Qwen3, Gemma 3;
    across the whole projection: OLMo-2), which breaks the pure product form.
    ``source``: where the head count came from. ``notes``: what the family's attention
    does to the product form beyond the fields above (for the summary).

    Examples:
        Grouped-query attention as in Llama: 8 query heads sharing 2 key/value heads.

        >>> from rankflow.inspect import Layout
        >>> lay = Layout("llama", "llama", "model.layers.", n_layers=2, d_model=64, n_heads=8,
        ...              n_kv_heads=2, head_dim=8, rotary_dim=8, qk_norm=False, source="doc")
        >>> lay.group_size, lay.as_dict()["stack"]
        (4, 'model.layers.')
    """

    arch: str  # bert | gpt2 | gpt_neox | llama | vit
    model_type: str | None  # config.json's model_type, if any
    stack: str  # tensor-name prefix of the layer stack, e.g. "bert.encoder.layer."
    n_layers: int
    d_model: int  # D, the residual width
    n_heads: int  # H, query heads
    n_kv_heads: int  # H_kv, key/value heads (H_kv < H: grouped-query attention)
    head_dim: int  # d_h
    rotary_dim: int
    qk_norm: bool
    source: str
    notes: tuple[str, ...] = ()

    @property
    def group_size(self) -> int:
        """Query heads per key/value head, H / H_kv."""
        return self.n_heads // self.n_kv_heads

    def as_dict(self) -> dict:
        return asdict(self)


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
    if layout.arch in _FUSED:
        roles = _FUSED[layout.arch]
    else:
        roles = dict(zip(("q", "k", "v", "o"), _SEPARATE[layout.arch]))
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


# --- detection -----------------------------------------------------------------------


def _query_name(arch: str, stack: str, i: int) -> str:
    if arch in _FUSED:
        return f"{stack}{i}.{_FUSED[arch]['qkv']}.weight"
    return f"{stack}{i}.{_SEPARATE[arch][0]}.weight"


def _family_of(model_type: str) -> str | None:
    for arch, types in MODEL_TYPES.items():
        if model_type in types:
            return arch
    return None


def _stacks(ckpt: Checkpoint, arch: str) -> dict[str, set[int]]:
    stacks: dict[str, set[int]] = {}
    for name in ckpt.shapes:
        m = PATTERNS[arch].match(name)
        if m:
            stacks.setdefault(m["stack"], set()).add(int(m["i"]))
    return stacks


def _config_int(ckpt: Checkpoint, key: str, required: bool) -> int | None:
    cfg = ckpt.config or {}
    value = cfg.get(key)
    if value is None:
        if required:
            raise InspectError(f"{ckpt.config_path}: no {key!r}")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InspectError(f"{ckpt.config_path}: {key} = {value!r} is not a positive integer")
    return value


def _check_layer_count(ckpt: Checkpoint, arch: str, stack: str, indices: set[int], keys) -> int:
    """The number of layers, after checking the tensors hold every one config.json says."""
    n_layers = max(indices) + 1
    want = n_layers
    if ckpt.config is not None:
        want = _config_int(ckpt, keys["n_layers"], required=False) or n_layers
    missing = sorted(set(range(max(want, n_layers))) - indices)
    if missing or want != n_layers:
        said = f"{ckpt.config_path.name} says {want} layers; " if ckpt.config else ""
        raise InspectError(
            f"{ckpt.path}: {said}the tensors hold {len(indices)} layers "
            f"({min(indices)}–{max(indices)}), e.g. no {_query_name(arch, stack, missing[0])!r}"
            if missing
            else f"{ckpt.path}: {said}the tensors hold {n_layers} (up to "
            f"{_query_name(arch, stack, n_layers - 1)!r})"
        )
    return n_layers


def _find_arch(ckpt: Checkpoint, arch: str) -> tuple[str, str | None, str, set[int]]:
    """``(arch, model_type, stack, layer indices)`` from ``--arch``, config.json's
    model_type and the tensor names, refusing what is unknown or ambiguous."""
    if arch not in ("auto",) + ARCHS:
        raise InspectError(f"unknown architecture {arch!r}; choose auto, {', '.join(ARCHS)}")
    model_type = (ckpt.config or {}).get("model_type")
    if model_type is not None:
        model_type = str(model_type)
        family = _family_of(model_type)
        if arch == "auto":
            if family is None:
                known = "; ".join(f"{a}: {', '.join(t)}" for a, t in MODEL_TYPES.items())
                raise InspectError(
                    f"{ckpt.config_path}: unknown architecture model_type={model_type!r} "
                    f"(supported: {known}); if its attention tensors use one of these "
                    "namings, pass --arch"
                )
            arch = family
        elif family is not None and family != arch:
            raise InspectError(
                f"{ckpt.config_path}: model_type={model_type!r} is a {family} model, "
                f"not {arch} (--arch)"
            )
    found = {a: s for a in ARCHS if (s := _stacks(ckpt, a))}
    if arch == "auto":
        if not found:
            sample = ", ".join(ckpt.names[:5]) or "no tensors"
            raise InspectError(
                f"{ckpt.path}: unknown architecture: no attention tensors named as in "
                f"{', '.join(ARCHS)} ({', '.join(EXAMPLES.values())}); found {sample}"
            )
        if len(found) > 1:
            raise InspectError(
                f"{ckpt.path}: tensor names of several families ({', '.join(found)}); pass --arch"
            )
        arch = next(iter(found))
    if arch not in found:
        raise InspectError(
            f"{ckpt.path}: no {arch} attention tensors (names like {EXAMPLES[arch]!r})"
        )
    if len(found[arch]) > 1:
        raise InspectError(
            f"{ckpt.path}: several {arch} layer stacks ({', '.join(sorted(found[arch]))}); "
            "inspecting more than one attention stack is not supported"
        )
    stack, indices = next(iter(found[arch].items()))
    return arch, model_type, stack, indices


def _query_width(arch: str, q_shape: tuple[int, ...]) -> tuple[int, int]:
    """``(d_in, H·d_h)`` from the stored query (or fused q|k|v) weight's shape."""
    if arch == "gpt2":  # Conv1D (in, out), q|k|v side by side
        return q_shape[0], q_shape[1] // 3
    if arch == "gpt_neox":  # nn.Linear (out, in), (H, 3, d_h) rows
        return q_shape[1], q_shape[0] // 3
    return q_shape[1], q_shape[0]  # nn.Linear (out, in)


def _head_count(ckpt, arch, keys, q_name, q_width, d_model, heads) -> tuple[int, int, str]:
    """``(H, d_h, source)`` from ``--heads``, config.json, or the family's usual d_h."""
    if heads is not None:
        if heads <= 0 or q_width % heads:
            raise InspectError(
                f"--heads {heads}: does not divide the query width {q_width} of "
                f"{ckpt.describe(q_name)}"
            )
        return heads, q_width // heads, "--heads"
    if ckpt.config is not None:
        n_heads = _config_int(ckpt, keys["n_heads"], required=True)
        head_dim = _config_int(ckpt, "head_dim", required=False) if arch == "llama" else None
        if head_dim is None:
            if d_model % n_heads:
                raise InspectError(
                    f"{ckpt.config_path}: {keys['n_heads']} = {n_heads} does not divide "
                    f"the width {keys['d_model']} = {d_model}"
                )
            head_dim = d_model // n_heads
        return n_heads, head_dim, ckpt.config_path.name
    head_dim = _DEFAULT_HEAD_DIM[arch]
    if q_width % head_dim:
        raise InspectError(
            f"{ckpt.path}: no config.json to give the number of heads, and the usual "
            f"{arch} head dimension {head_dim} does not divide the query width "
            f"{q_width}; pass --heads"
        )
    return q_width // head_dim, head_dim, f"assumed head dimension {head_dim}: no config.json"


def _kv_head_count(ckpt, stack, n_heads, head_dim, from_config: bool) -> int:
    """H_kv of a Llama-family layer: config.json's ``num_key_value_heads``, else the rows
    of ``k_proj``."""
    cfg_kv = _config_int(ckpt, "num_key_value_heads", required=False) if from_config else None
    if cfg_kv is not None:
        n_kv_heads = cfg_kv
    else:
        k_name = _query_name("llama", stack, 0).replace("q_proj", "k_proj")
        k_rows = ckpt.shapes.get(k_name, (n_heads * head_dim,))[0]
        if k_rows % head_dim:
            raise InspectError(
                f"{ckpt.describe(k_name)} has {k_rows} rows, not a multiple of the head "
                f"dimension {head_dim}"
            )
        n_kv_heads = k_rows // head_dim
    if n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise InspectError(
            f"{ckpt.config_path or ckpt.path}: {n_kv_heads} key/value heads do not divide "
            f"{n_heads} query heads"
        )
    return n_kv_heads


# config.json key giving the rotated fraction of each head, by family (HF's defaults).
_ROTARY_KEYS = {"llama": ("partial_rotary_factor", 1.0), "gpt_neox": ("rotary_pct", 1.0)}


def _rotary_dim(ckpt: Checkpoint, arch: str, head_dim: int) -> int:
    """Rotated leading dimensions of each q/k head (HF: ``int(d_h · fraction)``, even)."""
    if arch not in _ROTARY_KEYS:
        return 0
    cfg = ckpt.config or {}
    key, default = _ROTARY_KEYS[arch]
    factor = cfg.get(key, cfg.get("partial_rotary_factor", default))
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise InspectError(f"{ckpt.config_path}: {key} = {factor!r} is not in (0, 1]")
    return int(head_dim * float(factor)) // 2 * 2


def _family_notes(ckpt: Checkpoint, stack: str) -> tuple[tuple[str, ...], bool]:
    """Notes on what q/k normalisation or clipping does to the product form, and
    whether q and k are normalised."""
    norm = ckpt.shapes.get(f"{stack}0.{_QK_NORM[0]}") or ckpt.shapes.get(f"{stack}0.{_QK_NORM[1]}")
    notes = []
    if norm is not None:
        q_rows = ckpt.shapes.get(_query_name("llama", stack, 0), (0,))[0]
        whole = len(norm) == 1 and norm[0] == q_rows and q_rows > 0
        scope = "across the whole projection, all heads at once (OLMo-2)" if whole else "per head"
        notes.append(
            f"q and k are normalised {scope} after projection (qk-norm): the logits are "
            "x W_Q diag(g_q g_k) W_Kᵀ xᵀ / (rms(q) rms(k)), unchanged when W_Q or W_K is "
            "scaled, so the key–query pair is not a pure product and its balance is not "
            "predicted (the decay sets ‖W_Q‖, ‖W_K‖ against the step size alone); the "
            "value–output pair is untouched."
        )
    clip = (ckpt.config or {}).get("clip_qkv")
    if clip is not None:
        notes.append(
            f"q, k and v are clipped to ±{clip} (OLMo clip_qkv): where the clip is active "
            "the projections are not linear, and the product form holds only inside it."
        )
    return tuple(notes), norm is not None


def infer_layout(ckpt: Checkpoint, arch: str = "auto", heads: int | None = None) -> Layout:
    """The architecture (``arch``, or config.json's ``model_type``, or the tensor names)
    and head layout (``heads``, or config.json, or the family's usual head dimension,
    which the returned ``source`` says was assumed).

    Examples:
        Without ``config.json`` the tensor names give the family, ``heads`` the heads:

        >>> import tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import infer_layout, open_checkpoint
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({f"h.{i}.attn.{n}.weight": np.zeros((8, k)) for i in (0, 1)
        ...                for n, k in (("c_attn", 24), ("c_proj", 8))}, d + "/model.safetensors")
        ...     lay = infer_layout(open_checkpoint(d), heads=2)
        >>> lay.arch, lay.n_layers, lay.d_model, lay.n_heads, lay.head_dim, lay.source
        ('gpt2', 2, 8, 2, 4, '--heads')
    """
    arch, model_type, stack, indices = _find_arch(ckpt, arch)
    keys = _CONFIG_KEYS.get(arch, _CONFIG_KEYS["default"])
    n_layers = _check_layer_count(ckpt, arch, stack, indices, keys)
    q_name = _query_name(arch, stack, 0)
    q_shape = ckpt.shapes[q_name]
    if len(q_shape) != 2:
        raise InspectError(f"{ckpt.describe(q_name)} has shape {q_shape}; expected a matrix")
    d_in, q_width = _query_width(arch, q_shape)
    cfg = ckpt.config
    d_model = _config_int(ckpt, keys["d_model"], required=True) if cfg is not None else d_in
    n_heads, head_dim, source = _head_count(ckpt, arch, keys, q_name, q_width, d_model, heads)
    n_kv_heads = n_heads
    if arch == "llama":
        from_config = cfg is not None and heads is None
        n_kv_heads = _kv_head_count(ckpt, stack, n_heads, head_dim, from_config)
    notes, qk_norm = _family_notes(ckpt, stack)
    return Layout(
        arch=arch,
        model_type=model_type,
        stack=stack,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        rotary_dim=_rotary_dim(ckpt, arch, head_dim),
        qk_norm=qk_norm,
        source=source,
        notes=notes,
    )
