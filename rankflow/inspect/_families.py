"""Attention naming and layout of the supported model families, and the per-head
factors of THEORY.md ("Attention layers") cut out of a layer's stored tensors.

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

ARCHS = ("bert", "gpt2", "llama", "vit")

# config.json model_type → family. Only types whose attention uses the family's tensor
# names exactly; anything else is refused unless --arch says which naming to use.
MODEL_TYPES = {
    "bert": ("bert", "roberta", "xlm-roberta", "camembert", "electra"),
    "gpt2": ("gpt2",),
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
    "llama": r"layers\.)(?P<i>\d+)\.self_attn\.q_proj\.weight",
    "vit": r"encoder\.layer\.)(?P<i>\d+)\.attention\.attention\.query\.weight",
}
EXAMPLES = {
    "bert": "bert.encoder.layer.0.attention.self.query.weight",
    "gpt2": "h.0.attn.c_attn.weight",
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
_GPT2 = {"qkv": "attn.c_attn", "o": "attn.c_proj"}
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
_DEFAULT_HEAD_DIM = {"bert": 64, "gpt2": 64, "llama": 128, "vit": 64}


@dataclass(frozen=True)
class Layout:
    """Architecture and head layout of a checkpoint.

    ``rotary_dim``: leading dimensions of each q/k head that rotary embeddings rotate
    (0: no rotary), paired in HF's ``rotate_half`` layout, j with j + rotary_dim/2.
    ``qk_norm``: q and k are normalised per head (Qwen3, OLMo2, Gemma 3), which breaks
    the pure product form. ``source``: where the head count came from.
    """

    arch: str  # bert | gpt2 | llama | vit
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
    (H·d_h, D); biases ``(H·d_h,)`` / ``(H_kv·d_h,)`` or ``None``."""

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
    ``qkv o`` (GPT-2), each with a ``_bias`` twin (which may be absent)."""
    base = f"{layout.stack}{i}."
    if layout.arch == "gpt2":
        roles = _GPT2
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
    """A layer's tensors (role → array, as read) in ``(in, out)`` orientation."""
    if layout.arch == "gpt2":
        w, b = tensors["qkv"], tensors.get("qkv_bias")
        width = layout.n_heads * layout.head_dim
        Wq, Wk, Wv = (w[:, j * width : (j + 1) * width] for j in range(3))
        bq, bk, bv = (
            (None,) * 3 if b is None else (b[j * width : (j + 1) * width] for j in range(3))
        )
        Wo = tensors["o"]
    else:
        Wq, Wk, Wv, Wo = (tensors[r].T for r in ("q", "k", "v", "o"))
        bq, bk, bv = (tensors.get(r + "_bias") for r in ("q", "k", "v"))
    return LayerWeights(Wq, Wk, Wv, Wo, bq, bk, bv, layout.head_dim)


# --- detection -----------------------------------------------------------------------


def _query_name(arch: str, stack: str, i: int) -> str:
    if arch == "gpt2":
        return f"{stack}{i}.{_GPT2['qkv']}.weight"
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


def infer_layout(ckpt: Checkpoint, arch: str = "auto", heads: int | None = None) -> Layout:
    """The architecture (``arch``, or config.json's ``model_type``, or the tensor names)
    and head layout (``heads``, or config.json, or the family's usual head dimension,
    which the returned ``source`` says was assumed)."""
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
    stacks = found[arch]
    if len(stacks) > 1:
        raise InspectError(
            f"{ckpt.path}: several {arch} layer stacks ({', '.join(sorted(stacks))}); "
            "inspecting more than one attention stack is not supported"
        )
    stack, indices = next(iter(stacks.items()))
    n_layers = max(indices) + 1
    keys = _CONFIG_KEYS.get(arch, _CONFIG_KEYS["default"])
    if ckpt.config is not None:
        want = _config_int(ckpt, keys["n_layers"], required=False) or n_layers
    else:
        want = n_layers
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

    q_name = _query_name(arch, stack, 0)
    q_shape = ckpt.shapes[q_name]
    if len(q_shape) != 2:
        raise InspectError(f"{ckpt.describe(q_name)} has shape {q_shape}; expected a matrix")
    # GPT-2's Conv1D is (in, out) with q, k, v side by side; nn.Linear is (out, in).
    d_in, q_width = (q_shape[0], q_shape[1] // 3) if arch == "gpt2" else (q_shape[1], q_shape[0])
    cfg = ckpt.config
    d_model = _config_int(ckpt, keys["d_model"], required=True) if cfg is not None else d_in
    if heads is not None:
        if heads <= 0 or q_width % heads:
            raise InspectError(
                f"--heads {heads}: does not divide the query width {q_width} of "
                f"{ckpt.describe(q_name)}"
            )
        n_heads, head_dim, source = heads, q_width // heads, "--heads"
    elif cfg is not None:
        n_heads = _config_int(ckpt, keys["n_heads"], required=True)
        source = ckpt.config_path.name
        head_dim = _config_int(ckpt, "head_dim", required=False) if arch == "llama" else None
        if head_dim is None:
            if d_model % n_heads:
                raise InspectError(
                    f"{ckpt.config_path}: {keys['n_heads']} = {n_heads} does not divide "
                    f"the width {keys['d_model']} = {d_model}"
                )
            head_dim = d_model // n_heads
    else:
        head_dim = _DEFAULT_HEAD_DIM[arch]
        if q_width % head_dim:
            raise InspectError(
                f"{ckpt.path}: no config.json to give the number of heads, and the usual "
                f"{arch} head dimension {head_dim} does not divide the query width "
                f"{q_width}; pass --heads"
            )
        n_heads, source = q_width // head_dim, f"assumed head dimension {head_dim}: no config.json"
    n_kv_heads = n_heads
    if arch == "llama":
        cfg_kv = None
        if cfg is not None and heads is None:
            cfg_kv = _config_int(ckpt, "num_key_value_heads", required=False)
        if cfg_kv is not None:
            n_kv_heads = cfg_kv
        else:
            k_name = _query_name(arch, stack, 0).replace("q_proj", "k_proj")
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
    rotary_dim = 0
    if arch == "llama":
        factor = (ckpt.config or {}).get("partial_rotary_factor", 1.0)
        rotary_dim = int(head_dim * float(factor)) // 2 * 2
    qk_norm = any(f"{stack}0.{n}" in ckpt.shapes for n in _QK_NORM)
    return Layout(
        arch=arch,
        model_type=model_type,
        stack=stack,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        qk_norm=qk_norm,
        source=source,
    )
