"""Which family a checkpoint is and its head layout (:func:`infer_layout`), from
config.json where there is one, else from the tensor names and shapes (and ``--heads``).
"""

from __future__ import annotations

import re

from ._checkpoint import Checkpoint, InspectError
from ._layout import ARCHS, Layout, query_name

__all__ = ["EXAMPLES", "MODEL_TYPES", "infer_layout"]

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
            f"({min(indices)}–{max(indices)}), e.g. no {query_name(arch, stack, missing[0])!r}"
            if missing
            else f"{ckpt.path}: {said}the tensors hold {n_layers} (up to "
            f"{query_name(arch, stack, n_layers - 1)!r})"
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
        k_name = query_name("llama", stack, 0).replace("q_proj", "k_proj")
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
        q_rows = ckpt.shapes.get(query_name("llama", stack, 0), (0,))[0]
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
    q_name = query_name(arch, stack, 0)
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
    rotary_dim = _rotary_dim(ckpt, arch, head_dim)
    # Positional, in the order of Layout's fields.
    return Layout(arch, model_type, stack, n_layers, d_model, n_heads, n_kv_heads, head_dim,
                  rotary_dim, qk_norm, source, notes)  # fmt: skip
