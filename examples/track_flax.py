"""Track a flax NNX transformer trained with AdamW, with and without weight decay.

A decoder of two ``nnx.MultiHeadAttention`` layers (D = 32, 4 heads of d_h = 8, no
biases, pre-LayerNorm, causal) learns next-token prediction on a synthetic language
drawn from a seed: a second-order Markov chain over 16 tokens (transition logits
3·N(0, 1)), 2,048 sequences of 16 tokens. It is trained twice from the same start by
``optax.adamw`` (η = 3e-3), with weight decay λ = 1 and without (λ = 0), and
``rankflow.track.Tracker`` measures every head's key–query pair (W_Q^h, W_K^h) and
value–output pair (W_V^h, W_O^hᵀ) every k steps, each run into its own results folder.
``rankflow.load`` reads both folders back: at the last step the decayed run's heads are
closer to balance (lower median ``balance_gap_rel``) and of lower effective rank.
AdamW's update is not a gradient, so the theory predicts no decay rate of the gap: the
prediction table says so.

    python examples/track_flax.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import jax
import numpy as np
import optax
from flax import nnx

import rankflow
from rankflow.track import Optimizer, Tracker

VOCAB, T, D, H, LAYERS = 16, 16, 32, 4, 2  # tokens, context, width, heads, layers
SEQUENCES, BATCH = 2048, 64
ETA, LAM = 3e-3, 1.0  # AdamW's learning rate and decoupled decay (the attention ablation's)
FULL = {"steps": 600, "every": 25}
QUICK = {"steps": 200, "every": 20}


class Decoder(nnx.Module):
    """Token embedding + learned positions, ``LAYERS`` causal attention layers
    (``x + attn(LN(x))``), a final LayerNorm and the unembedding."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.pos = nnx.Param(jax.random.normal(rngs.params(), (T, D)) / math.sqrt(D))
        self.norms = nnx.List([nnx.LayerNorm(D, rngs=rngs) for _ in range(LAYERS)])
        self.layers = nnx.List(
            [
                nnx.MultiHeadAttention(H, D, use_bias=False, decode=False, rngs=rngs)
                for _ in range(LAYERS)
            ]
        )
        self.norm_f = nnx.LayerNorm(D, rngs=rngs)
        self.unembed = nnx.Linear(D, VOCAB, use_bias=False, rngs=rngs)

    def __call__(self, tokens_BxT):
        x_BxTxD = self.embed(tokens_BxT) + self.pos[...][None, : tokens_BxT.shape[1]]
        causal = nnx.make_causal_mask(tokens_BxT)
        for norm, attn in zip(self.norms, self.layers, strict=True):
            x_BxTxD = x_BxTxD + attn(norm(x_BxTxD), mask=causal)
        return self.unembed(self.norm_f(x_BxTxD))


def language(seed: int) -> np.ndarray:
    """``SEQUENCES`` sequences of ``T + 1`` tokens of a second-order Markov chain whose
    transition logits (VOCAB, VOCAB, VOCAB) are 3·N(0, 1), all drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((VOCAB, VOCAB, VOCAB))
    cum = np.cumsum(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), axis=-1)
    seq = np.empty((SEQUENCES, T + 1), np.int32)
    seq[:, :2] = rng.integers(0, VOCAB, (SEQUENCES, 2))
    for t in range(2, T + 1):
        u = rng.random(SEQUENCES)[:, None]
        seq[:, t] = np.minimum((cum[seq[:, t - 2], seq[:, t - 1]] < u).sum(-1), VOCAB - 1)
    return seq


@nnx.jit
def train_step(model: Decoder, optimizer: nnx.Optimizer, windows_BxS) -> jax.Array:
    """One AdamW step on the next-token loss of a batch of windows (B, T + 1)."""

    def loss_fn(m):
        logits_BxTxV = m(windows_BxS[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(
            logits_BxTxV, windows_BxS[:, 1:]
        ).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train(lam: float, steps: int, every: int, out: Path, seed: int = 0):
    """Train from the seed's start with ``adamw(ETA, weight_decay=lam)``, tracked every
    ``every`` steps into ``out``; the final loss and the prediction table."""
    model = Decoder(rngs=nnx.Rngs(seed))  # the same start for every λ
    optimizer = nnx.Optimizer(model, optax.adamw(ETA, weight_decay=lam), wrt=nnx.Param)
    step_fn = nnx.cached_partial(train_step, model, optimizer)  # flax's fast loop
    data, rng = language(seed), np.random.default_rng(seed + 1)  # the same batches too
    opt = Optimizer("adamw", eta=ETA, lam=lam)
    with Tracker(out, every=every, optimizer=opt, config={"example": "track_flax"}) as tracker:
        for step in range(steps + 1):
            tracker.log(step, model)  # measures when step % every == 0
            if step < steps:
                loss = step_fn(data[rng.integers(0, SEQUENCES, BATCH)])
        prediction = tracker.prediction()  # close() (the with's end) writes it as well
    return float(loss), prediction


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 steps, every 20 (not 600, 25)")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="results folders")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    runs = {"decay": LAM, "no decay": 0.0}

    summary, losses = {}, {}
    for name, lam in runs.items():
        folder = args.out / f"track_flax_lam{lam:g}"
        losses[name], prediction = train(lam, size["steps"], size["every"], folder)
        df = rankflow.load(folder)  # t, layer, head, pair, balance_gap_rel, effective_rank, …
        last = df[df["t"] == df["t"].max()]
        summary[name] = {
            "balance_gap_rel": float(last["balance_gap_rel"].median()),
            "effective_rank": float(last["effective_rank"].median()),
            "rows": len(df),
        }
        print(f"\n{name} (λ = {lam:g}), {folder}: the prediction table's first rows")
        cols = ["layer", "pair", "head", "steps", "rate", "predicted_low", "source", "agrees"]
        print(prediction[cols].head(4).to_string(index=False, float_format=lambda v: f"{v:.4g}"))

    print(f"\nAdamW η = {ETA}, {size['steps']} steps, tracked every {size['every']}")
    print(f"{'at the last step':<16}  {'λ':>4}  {'loss':>6}  {'gap_rel':>8}  {'eff. rank':>9}")
    for name, lam in runs.items():
        s = summary[name]
        print(
            f"{name:<16}  {lam:>4g}  {losses[name]:>6.3f}  {s['balance_gap_rel']:>8.4f}  "
            f"{s['effective_rank']:>9.3f}"
        )
    numbers = {
        "eta": ETA,
        "lam": LAM,
        "steps": size["steps"],
        "every": size["every"],
        "loss": losses,
        **{k: {n: summary[n][k] for n in runs} for k in ("balance_gap_rel", "effective_rank")},
        "sources": sorted(set(prediction["source"])),
        "agrees_all_nan": bool(np.all(np.isnan(prediction["agrees"].astype(float)))),
        "units": len(prediction),
    }
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
