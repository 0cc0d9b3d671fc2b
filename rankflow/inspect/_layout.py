"""The head layout of a checkpoint (:class:`Layout`) and the tensor names of each
supported family's attention inside one layer (the shared naming of :mod:`._families`
and :mod:`._detect`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ARCHS", "FUSED", "SEPARATE", "Layout", "query_name"]

ARCHS = ("bert", "gpt2", "gpt_neox", "llama", "vit")

# Tensor names inside layer i (after f"{stack}{i}."), by role.
SEPARATE = {
    "bert": ("attention.self.query", "attention.self.key", "attention.self.value",
             "attention.output.dense"),
    "vit": ("attention.attention.query", "attention.attention.key",
            "attention.attention.value", "attention.output.dense"),
    "llama": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
}  # fmt: skip
# Fused q|k|v projections: GPT-2's Conv1D side by side, GPT-NeoX's nn.Linear per head.
FUSED = {
    "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj"},
    "gpt_neox": {"qkv": "attention.query_key_value", "o": "attention.dense"},
}


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


def query_name(arch: str, stack: str, i: int) -> str:
    """The name of layer ``i``'s query weight (the fused q|k|v weight where fused)."""
    if arch in FUSED:
        return f"{stack}{i}.{FUSED[arch]['qkv']}.weight"
    return f"{stack}{i}.{SEPARATE[arch][0]}.weight"
