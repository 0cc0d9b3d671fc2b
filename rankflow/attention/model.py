"""A decoder-only transformer in flax NNX whose heads are factor pairs.

Per layer, attention keeps the per-head factors as separate parameters,
``W_Q, W_K, W_V ∈ R^{H×D×d_h}`` and ``W_O ∈ R^{H×d_h×D}`` (docs/theory.md, "Attention
layers"): head h sees ``x`` only through ``W_Q^h W_K^hᵀ`` (key-query, D×D, rank ≤ d_h)
and ``W_V^h W_O^h`` (value-output). Biases on q, k (``qk_bias``) and on v and the output
(``vo_bias``) are off by default: they break that product form.

Blocks are pre-LayerNorm (``x + attn(LN(x))``, ``x + mlp(LN(x))``), the MLP is
``Linear → GELU → Linear`` with biases, the mask causal, positions a learned table of
``context`` rows; the unembedding is untied (its own matrix) or tied (the token
embedding's transpose). Vector tasks read ``R^{d_in}`` in and ``R^{d_out}`` out through
linear maps in place of the embeddings.

:class:`VisionTransformer` is the image model: the same blocks with the mask off
(bidirectional), a linear patch embedding of the flattened ``p×p`` patches (with a
class token when pooling is ``cls``), learned positions, a final LayerNorm, pooling
(the class token's output, or the mean over patches) and a linear classifier head.
Its patch embedding, class token, positions and head are named ``embed``, ``pos`` and
``unembed`` like the sequence model's, so every parameter group carries over.

For the training code the model is a pure function of a parameter pytree (a nested
dict of arrays, ``nnx.to_pure_dict`` of the model's state): :class:`Model` holds the
graph and maps ``(params, inputs) → outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, PRNGKeyArray

from .images import patchify

__all__ = [
    "Attention",
    "Block",
    "Model",
    "ModelSpec",
    "PatchEmbed",
    "Transformer",
    "VisionTransformer",
    "model_spec",
]

Params = dict[str, Any]


@dataclass(frozen=True)
class ModelSpec:
    """Static hyperparameters of the transformer."""

    D: int  # width of the residual stream
    H: int  # heads per layer
    layers: int  # transformer blocks
    context: int  # rows of the position table: the longest sequence
    mlp_ratio: int  # MLP hidden width / D
    vocab: int  # token ids 0 … vocab−1; 0 for vector inputs
    d_in: int  # width of vector inputs; 0 for tokens
    d_out: int  # output width: vocabulary, or 1 for regression
    tied: bool = False  # unembedding = token embeddingᵀ
    qk_bias: bool = False  # biases b_Q, b_K ∈ R^{H×d_h}
    vo_bias: bool = False  # biases b_V ∈ R^{H×d_h}, b_O ∈ R^D
    bias_scale: float = 0.0  # std of the initial attention biases
    x64: bool = False
    causal: bool = True  # attention mask: causal, or none (bidirectional)
    image: int = 0  # side of the square input images; 0 for sequence tasks
    patch: int = 0  # side of the square patches
    pooling: str = "cls"  # image models: class token ("cls") or mean over patches

    @property
    def d_h(self) -> int:
        return self.D // self.H

    @property
    def dtype(self):
        return jnp.float64 if self.x64 else jnp.float32

    @property
    def patches(self) -> int:
        """Patches per image (0 for sequence models)."""
        return (self.image // self.patch) ** 2 if self.image else 0


def model_spec(point, task) -> ModelSpec:
    """The :class:`ModelSpec` of a resolved attention config and its task."""
    a = point["attention"]
    return ModelSpec(
        D=a["D"],
        H=a["H"],
        layers=a["layers"],
        context=a["context"],
        mlp_ratio=a["mlp_ratio"],
        vocab=task.vocab,
        d_in=task.d_in,
        d_out=task.d_out,
        tied=a["tied_embedding"],
        qk_bias=a["qk_bias"],
        vo_bias=a["vo_bias"],
        bias_scale=a["bias_scale"],
        x64=point["x64"],
        causal=a["causal"] if a["causal"] is not None else not task.image,
        image=task.image,
        patch=task.patch,
        pooling=a["pooling"],
    )


class Attention(nnx.Module):
    """Multi-head attention (causal, or bidirectional with ``spec.causal`` off) with
    per-head factor parameters.

    ``W_Q, W_K, W_V`` (H×D×d_h) and ``W_O`` (H×d_h×D) start N(0, init_scale²/D)
    (``init_scale``: the config's ``init.scale``).
    """

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, init_scale=1.0):
        D, H, d_h, dtype = spec.D, spec.H, spec.d_h, spec.dtype
        std = init_scale / np.sqrt(D)

        def normal(shape, scale):
            return scale * jax.random.normal(rngs.params(), shape, dtype)

        self.W_Q = nnx.Param(normal((H, D, d_h), std))
        self.W_K = nnx.Param(normal((H, D, d_h), std))
        self.W_V = nnx.Param(normal((H, D, d_h), std))
        self.W_O = nnx.Param(normal((H, d_h, D), std))
        if spec.qk_bias:
            self.b_Q = nnx.Param(normal((H, d_h), spec.bias_scale))
            self.b_K = nnx.Param(normal((H, d_h), spec.bias_scale))
        if spec.vo_bias:
            self.b_V = nnx.Param(normal((H, d_h), spec.bias_scale))
            self.b_O = nnx.Param(normal((D,), spec.bias_scale))
        self.qk_bias, self.vo_bias, self.d_h = spec.qk_bias, spec.vo_bias, d_h
        self.causal = spec.causal

    def __call__(
        self,
        x_BxTxD: Float[Array, "B T D"],
        probe_qk_HxDxD: Float[Array, "H D D"] | None = None,
        probe_vo_HxDxD: Float[Array, "H D D"] | None = None,
    ) -> Float[Array, "B T D"]:
        """The probes, when given, are added to each head's products ``W_Q^h W_K^hᵀ`` and
        ``W_V^h W_O^h``: the gradient with respect to a probe at 0 is the gradient of the
        loss with respect to that product (``G`` of docs/theory.md)."""
        B, T, D = x_BxTxD.shape
        q_BxHxTxd = jnp.einsum("btd,hde->bhte", x_BxTxD, self.W_Q[...])
        k_BxHxTxd = jnp.einsum("btd,hde->bhte", x_BxTxD, self.W_K[...])
        v_BxHxTxd = jnp.einsum("btd,hde->bhte", x_BxTxD, self.W_V[...])
        if self.qk_bias:
            q_BxHxTxd = q_BxHxTxd + self.b_Q[...][None, :, None, :]
            k_BxHxTxd = k_BxHxTxd + self.b_K[...][None, :, None, :]
        if self.vo_bias:
            v_BxHxTxd = v_BxHxTxd + self.b_V[...][None, :, None, :]
        scores_BxHxTxT = jnp.einsum("bhte,bhse->bhts", q_BxHxTxd, k_BxHxTxd)
        if probe_qk_HxDxD is not None:
            scores_BxHxTxT = scores_BxHxTxT + jnp.einsum(
                "btd,hde,bse->bhts", x_BxTxD, probe_qk_HxDxD, x_BxTxD
            )
        scores_BxHxTxT = scores_BxHxTxT / np.sqrt(self.d_h)
        if self.causal:
            causal_TxT = jnp.tril(jnp.ones((T, T), bool))
            neg = jnp.finfo(scores_BxHxTxT.dtype).min
            scores_BxHxTxT = jnp.where(causal_TxT[None, None], scores_BxHxTxT, neg)
        att_BxHxTxT = jax.nn.softmax(scores_BxHxTxT, axis=-1)
        z_BxHxTxd = jnp.einsum("bhts,bhse->bhte", att_BxHxTxT, v_BxHxTxd)
        out_BxTxD = jnp.einsum("bhte,hed->btd", z_BxHxTxd, self.W_O[...])
        if probe_vo_HxDxD is not None:
            out_BxTxD = out_BxTxD + jnp.einsum(
                "bhts,bsd,hde->bte", att_BxHxTxT, x_BxTxD, probe_vo_HxDxD
            )
        if self.vo_bias:
            out_BxTxD = out_BxTxD + self.b_O[...][None, None, :]
        return out_BxTxD


class MLP(nnx.Module):
    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        kw = {"dtype": spec.dtype, "param_dtype": spec.dtype, "rngs": rngs}
        self.fc_in = nnx.Linear(spec.D, spec.mlp_ratio * spec.D, **kw)
        self.fc_out = nnx.Linear(spec.mlp_ratio * spec.D, spec.D, **kw)

    def __call__(self, x_BxTxD):
        return self.fc_out(jax.nn.gelu(self.fc_in(x_BxTxD)))


class Block(nnx.Module):
    """Pre-LayerNorm block: ``x + attn(LN₁(x))``, then ``x + mlp(LN₂(x))``."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, init_scale=1.0):
        kw = {"dtype": spec.dtype, "param_dtype": spec.dtype, "rngs": rngs}
        self.ln1 = nnx.LayerNorm(spec.D, **kw)
        self.attn = Attention(spec, rngs=rngs, init_scale=init_scale)
        self.ln2 = nnx.LayerNorm(spec.D, **kw)
        self.mlp = MLP(spec, rngs=rngs)

    def __call__(self, x_BxTxD, probe_qk=None, probe_vo=None):
        x_BxTxD = x_BxTxD + self.attn(self.ln1(x_BxTxD), probe_qk, probe_vo)
        return x_BxTxD + self.mlp(self.ln2(x_BxTxD))


class _Trunk(nnx.Module):
    """What both models share after their embedding: learned positions (``pos``), the
    ``layers`` blocks and the final LayerNorm (``ln_f``)."""

    def _init_trunk(self, spec: ModelSpec, rngs: nnx.Rngs, init_scale) -> None:
        D, dtype = spec.D, spec.dtype
        self.pos = nnx.Param(
            jax.random.normal(rngs.params(), (spec.context, D), dtype) / np.sqrt(D)
        )
        self.blocks = nnx.List(
            [Block(spec, rngs=rngs, init_scale=init_scale) for _ in range(spec.layers)]
        )
        self.ln_f = nnx.LayerNorm(D, dtype=dtype, param_dtype=dtype, rngs=rngs)

    def _trunk(self, x_BxTxD, probes: dict[str, Array] | None):
        """The blocks (each with its layer's probes, if any), then the final LayerNorm."""
        for l, block in enumerate(self.blocks):
            pq = None if probes is None else probes["qk"][l]
            pv = None if probes is None else probes["vo"][l]
            x_BxTxD = block(x_BxTxD, pq, pv)
        return self.ln_f(x_BxTxD)


class Transformer(_Trunk):
    """Token (or vector) embedding + learned positions, ``layers`` blocks, a final
    LayerNorm and the unembedding (or read-out)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, init_scale=1.0):
        D, dtype = spec.D, spec.dtype
        kw = {"dtype": dtype, "param_dtype": dtype, "rngs": rngs}
        if spec.vocab:
            self.embed = nnx.Embed(spec.vocab, D, **kw)  # entries N(0, 1/D)
        else:
            self.embed = nnx.Linear(spec.d_in, D, use_bias=False, **kw)
        self._init_trunk(spec, rngs, init_scale)
        if not spec.tied:
            self.unembed = nnx.Linear(D, spec.d_out, use_bias=False, **kw)
        self.tied = spec.tied

    def __call__(self, inputs, probes: dict[str, Array] | None = None) -> Float[Array, "B T V"]:
        """``inputs``: token ids (B, T) or vectors (B, T, d_in); ``probes``: optional
        ``{"qk": (layers, H, D, D), "vo": (layers, H, D, D)}`` (see :class:`Attention`).
        Returns logits (B, T, vocab) or predictions (B, T, d_out)."""
        T = inputs.shape[1]
        x_BxTxD = self.embed(inputs) + self.pos[...][:T][None]
        x_BxTxD = self._trunk(x_BxTxD, probes)
        return self.embed.attend(x_BxTxD) if self.tied else self.unembed(x_BxTxD)


class PatchEmbed(nnx.Module):
    """A linear map of each flattened ``p×p`` patch to ``R^D`` (with bias), and the
    class token (``cls``, D entries N(0, 1/D)) prepended when pooling is ``cls``."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        kw = {"dtype": spec.dtype, "param_dtype": spec.dtype, "rngs": rngs}
        self.proj = nnx.Linear(spec.patch * spec.patch, spec.D, **kw)
        if spec.pooling == "cls":
            self.cls = nnx.Param(
                jax.random.normal(rngs.params(), (spec.D,), spec.dtype) / np.sqrt(spec.D)
            )
        self.patch, self.with_cls = spec.patch, spec.pooling == "cls"

    def __call__(self, images_BxSxS: Float[Array, "B S S"]) -> Float[Array, "B T D"]:
        x_BxNxD = self.proj(patchify(images_BxSxS, self.patch))
        if not self.with_cls:
            return x_BxNxD
        B, _, D = x_BxNxD.shape
        cls_Bx1xD = jnp.broadcast_to(self.cls[...][None, None], (B, 1, D))
        return jnp.concatenate([cls_Bx1xD, x_BxNxD], axis=1)


class VisionTransformer(_Trunk):
    """Patch embedding (+ class token) + learned positions, ``layers`` bidirectional
    blocks, a final LayerNorm, pooling and a linear classifier head (``unembed``)."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs, init_scale=1.0):
        D, dtype = spec.D, spec.dtype
        kw = {"dtype": dtype, "param_dtype": dtype, "rngs": rngs}
        self.embed = PatchEmbed(spec, rngs=rngs)
        self._init_trunk(spec, rngs, init_scale)
        self.unembed = nnx.Linear(D, spec.d_out, use_bias=False, **kw)
        self.pooling = spec.pooling

    def __call__(self, images, probes: dict[str, Array] | None = None) -> Float[Array, "B 1 K"]:
        """``images``: (B, S, S); ``probes`` as for :class:`Transformer`. Returns the
        class logits as one position, (B, 1, classes), the layout of a sequence task's
        outputs with the label at its only position."""
        x_BxTxD = self.embed(images)
        x_BxTxD = x_BxTxD + self.pos[...][: x_BxTxD.shape[1]][None]
        x_BxTxD = self._trunk(x_BxTxD, probes)
        if self.pooling == "cls":
            pooled_BxD = x_BxTxD[:, 0]
        else:
            pooled_BxD = jnp.mean(x_BxTxD, axis=1)
        return self.unembed(pooled_BxD)[:, None, :]


class Model:
    """The transformer of a :class:`ModelSpec` as pure functions of a parameter pytree
    (a nested dict of arrays: ``params["blocks"][l]["attn"]["W_Q"]`` …)."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        # Image specs get the vision transformer, sequence specs the decoder.
        self.network = VisionTransformer if spec.image else Transformer
        with jax.enable_x64(spec.x64):
            abstract = nnx.eval_shape(lambda: self.network(spec, rngs=nnx.Rngs(0)))
        self.graphdef, self._template = nnx.split(abstract)

    def init(self, key: PRNGKeyArray, init_scale=1.0) -> Params:
        """Fresh parameters (jittable, vmappable in ``key`` and ``init_scale``)."""
        model = self.network(self.spec, rngs=nnx.Rngs(key), init_scale=init_scale)
        return nnx.to_pure_dict(nnx.state(model))

    def module(self, params: Params) -> Transformer | VisionTransformer:
        state = jax.tree.map(lambda x: x, self._template)
        nnx.replace_by_pure_dict(state, params)
        return nnx.merge(self.graphdef, state)

    def apply(self, params: Params, inputs, probes=None):
        return self.module(params)(inputs, probes)

    def zero_probes(self, dtype=None) -> dict[str, Array]:
        s = self.spec
        shape = (s.layers, s.H, s.D, s.D)
        return {p: jnp.zeros(shape, dtype or s.dtype) for p in ("qk", "vo")}
