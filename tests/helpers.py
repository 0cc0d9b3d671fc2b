"""What several test modules use: the repository's root, a pytree comparison with
explicit tolerances, the saved states of a single-point core config, relative errors, and
synthetic safetensors checkpoints of each family (written with the real safetensors
writer, independently of ``rankflow.inspect``'s reader: each family's stored convention,
nn.Linear (out, in), GPT-2 Conv1D (in, out), from the per-head factors, so a wrong
transpose or split in the reader breaks the exact answers)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1]


def tree_allclose(x, y, *, rtol=0.0, atol=0.0):
    """Leaf-wise ``np.allclose`` with explicit tolerances (no silent defaults)."""
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    return tx == ty and all(
        np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)
        for a, b in zip(lx, ly)
    )


def states(cfg, paths: int = 1):
    """A single-point core config's saved factors (``save = "states"``): its point, its
    program and the program's output for ``paths`` paths."""
    from rankflow.core import config as C
    from rankflow.core.program import PARAM_KEYS, params_of, program_for

    point = C.expand(C.resolve(cfg))[0]
    program = program_for(point, save="states")
    rows = [params_of(point, p) for p in range(paths)]
    return point, program, program.run({k: np.array([r[k] for r in rows]) for k in PARAM_KEYS})


def max_abs(X, Y=0.0) -> float:
    """max |X − Y|, in numpy."""
    return float(np.max(np.abs(np.asarray(X) - np.asarray(Y))))


# --- synthetic checkpoints -------------------------------------------------------------

FAMILIES = ("bert", "gpt2", "llama", "vit")
PREFIX = {
    "bert": "bert.encoder.layer.",
    "roberta": "roberta.encoder.layer.",
    "vit": "vit.encoder.layer.",
    "gpt2": "h.",
    "llama": "model.layers.",
}


def orthonormal(rng, m, r):
    return np.linalg.qr(rng.standard_normal((m, r)))[0]


def balanced_pair(rng, m_a, m_b, r):
    """A (m_a×r) random, B (m_b×r) with BᵀB = AᵀA exactly (same R, other Q)."""
    A = rng.standard_normal((m_a, r)) / np.sqrt(m_a)
    R = np.linalg.qr(A, mode="r")
    return A, orthonormal(rng, m_b, r) @ R


@dataclass
class Spec:
    arch: str = "bert"
    layers: int = 3
    heads: int = 4
    kv_heads: int | None = None  # GQA when < heads (llama only)
    d_model: int = 32
    bias: bool = False
    # (layer, head, pair): break the balance there, keeping the product A Bᵀ.
    plant: tuple = ()
    dtype: object = np.float64
    config: bool = True
    model_type: str | None = None
    extra_config: dict = field(default_factory=dict)

    @property
    def head_dim(self):
        return self.d_model // self.heads

    @property
    def kv(self):
        return self.kv_heads or self.heads


def make_factors(spec: Spec, seed=0):
    """Per layer: Q[h], K[g], V[g] (D×d_h) and O[h] (d_h×D), balanced per head (MHA) or
    per group (GQA: Σ_i Q_iᵀQ_i = KᵀK, VᵀV = Σ_i O_i O_iᵀ), with planted imbalances."""
    rng = np.random.default_rng(seed)
    D, d, H, Hkv = spec.d_model, spec.head_dim, spec.heads, spec.kv
    G = H // Hkv
    layers = []
    for layer in range(spec.layers):
        Q, O, K, V = [None] * H, [None] * H, [None] * Hkv, [None] * Hkv
        for g in range(Hkv):
            stacked, K[g] = balanced_pair(rng, G * D, D, d)
            V[g], stacked_o = balanced_pair(rng, D, G * D, d)
            for j in range(G):
                Q[g * G + j] = stacked[j * D : (j + 1) * D]
                O[g * G + j] = stacked_o[j * D : (j + 1) * D].T
        for pl, h, pair in spec.plant:
            if pl != layer:
                continue
            M = np.diag(rng.uniform(0.4, 2.5, d))  # A → AM, B → BM⁻ᵀ: same product
            if pair == "qk":
                Q[h], K[h // G] = Q[h] @ M, K[h // G] @ np.linalg.inv(M).T
            else:
                V[h // G], O[h] = V[h // G] @ M, (O[h].T @ np.linalg.inv(M).T).T
        layers.append({"Q": Q, "K": K, "V": V, "O": O})
    return layers


def write_checkpoint(folder: Path, spec: Spec, factors, *, shards: int = 1) -> Path:
    """Tensors in each family's stored layout (plus unrelated tensors), config.json,
    and for shards > 1 a model.safetensors.index.json."""
    rng = np.random.default_rng(1)
    D = spec.d_model
    prefix = PREFIX[spec.model_type if spec.model_type == "roberta" else spec.arch]
    tensors = {}
    for i, f in enumerate(factors):
        Wq, Wk, Wv = (np.hstack(f[k]) for k in ("Q", "K", "V"))  # (in, out)
        Wo = np.vstack(f["O"])  # (H·d_h, D), (in, out)
        p = f"{prefix}{i}."
        if spec.arch == "gpt2":  # Conv1D: (in, out), q|k|v side by side
            tensors[p + "attn.c_attn.weight"] = np.hstack([Wq, Wk, Wv])
            tensors[p + "attn.c_proj.weight"] = Wo
            tensors[p + "attn.bias"] = np.tril(np.ones((1, 1, 8, 8)))  # old causal mask buffer
            tensors[p + "mlp.c_fc.weight"] = rng.standard_normal((D, 4 * D))
            if spec.bias:
                tensors[p + "attn.c_attn.bias"] = rng.standard_normal(3 * D)
                tensors[p + "attn.c_proj.bias"] = rng.standard_normal(D)
            continue
        names = {
            "bert": ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"),
            "vit": ("attention.attention.query", "attention.attention.key",
                    "attention.attention.value", "attention.output.dense"),
            "llama": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                      "self_attn.o_proj"),
        }[spec.arch]  # fmt: skip
        for stem, W in zip(names, (Wq, Wk, Wv, Wo)):
            tensors[f"{p}{stem}.weight"] = W.T  # nn.Linear: (out, in)
            if spec.bias and (spec.arch != "llama" or stem != names[3]):
                tensors[f"{p}{stem}.bias"] = rng.standard_normal(W.shape[1])
        tensors[p + "mlp.weight" if spec.arch == "llama" else p + "output.dense.weight"] = (
            rng.standard_normal((D, 2 * D))
        )
    tensors["embeddings.weight"] = rng.standard_normal((50, D))
    tensors = {k: np.ascontiguousarray(v).astype(spec.dtype) for k, v in tensors.items()}
    folder.mkdir(parents=True, exist_ok=True)
    if shards == 1:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    else:
        names = sorted(tensors)
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: tensors[n] for n in part}, folder / fname)
            weight_map.update(dict.fromkeys(part, fname))
        index = {"metadata": {}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if spec.config:
        (folder / "config.json").write_text(json.dumps(config_of(spec)))
    return folder


def config_of(spec: Spec) -> dict:
    if spec.arch == "gpt2":
        cfg = {"model_type": "gpt2", "n_embd": spec.d_model, "n_head": spec.heads}
        cfg["n_layer"] = spec.layers
    else:
        cfg = {
            "model_type": spec.model_type or spec.arch,
            "hidden_size": spec.d_model,
            "num_attention_heads": spec.heads,
            "num_hidden_layers": spec.layers,
        }
        if spec.arch == "llama":
            cfg["num_key_value_heads"] = spec.kv
    cfg.update(spec.extra_config)
    return cfg


def build(tmp_path, name="ckpt", seed=0, shards=1, **kw):
    spec = Spec(**kw)
    factors = make_factors(spec, seed)
    return write_checkpoint(tmp_path / name, spec, factors, shards=shards), spec, factors


def rotate_planes(X, planes, rng):
    """X with each pair of columns ``planes`` rotated by a random angle."""
    X = X.copy()
    for a, b in planes:
        angle = rng.uniform(0, 2 * np.pi)
        c, s = np.cos(angle), np.sin(angle)
        X[:, [a, b]] = X[:, [a, b]] @ np.array([[c, -s], [s, c]])
    return X
