"""Track a PyTorch model from its ``state_dict``: a GPT-2-named decoder trained by SGD,
with and without weight decay.

A tiny decoder in plain PyTorch (no ``transformers`` needed) whose parameters carry
GPT-2's names and layouts, so that ``model.state_dict()`` reads like a GPT-2 checkpoint:
per layer ``transformer.h.{l}.attn.c_attn.weight``, a Conv1D (D, 3D) holding
``[W_Q | W_K | W_V]`` with the heads as column blocks, and ``attn.c_proj.weight`` (D, D),
W_O. Two attention layers (no MLP), D = 128, 2 heads of d_h = 64; the tracker is given
GPT-2's config keys for them (``model_config``, what ``config.json`` would hold). The
attention projections have no biases, so each head's key–query and value–output
products are exactly factor pairs (with a bias the loss also sees W_Q alone, and the
gap's law has an extra term).

It learns the flax example's synthetic language (a second-order Markov chain over 16
tokens, drawn from a seed) by minibatch SGD, ``torch.optim.SGD(lr=η, weight_decay=λ)``
(``θ ← (1 − ηλ)θ − η g``), once with λ = 0.05 and once without decay, from the same
start and minibatches. ``rankflow.track.Tracker`` takes the ``state_dict`` every k steps
(the tracker's PyTorch path: the tensors are copied to the host and split into heads by
``rankflow inspect``'s layout code) and writes each run's rows into its own results
folder. Both trackers are told the optimizer the run should have,
``Optimizer("sgd", η, λ = 0.05)``: with decay every head's gap decays at T5's rate and
the prediction table agrees; without it the gap is conserved (rate ≈ 0) and every head
disagrees. The scale-free ``balance_gap_rel`` hardly moves in either run at this
horizon: the decay shrinks both factors of the random start alike, which is shrinkage,
not balancing (the absolute gap ``balance_gap`` falls by e^{−2ηλt}).

    python examples/track_torch.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import rankflow
from rankflow.track import Optimizer, Tracker

VOCAB, T, D, H, LAYERS = 16, 8, 128, 2, 2  # d_h = 64
SEQUENCES, BATCH = 1024, 16
ETA, LAM = 0.2, 0.05  # ηλ = 0.01 per step
# What a GPT-2 config.json says of this model: the tracker's layout code reads the heads
# from it (without one it would assume GPT-2's usual d_h = 64, which is this model's too).
GPT2_CONFIG = {"model_type": "gpt2", "n_embd": D, "n_head": H, "n_layer": LAYERS}
FULL = {"steps": 400, "every": 20}
QUICK = {"steps": 100, "every": 10}


class Conv1D(nn.Module):
    """GPT-2's linear layer: ``weight`` (in, out), ``y = x W``; no bias."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_in, d_out) / d_in**0.5)

    def forward(self, x):
        return x @ self.weight


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = Conv1D(D, 3 * D)  # [W_Q | W_K | W_V], heads as column blocks
        self.c_proj = Conv1D(D, D)  # W_O, heads as row blocks

    def forward(self, x_BxTxD):
        B = x_BxTxD.shape[0]
        q, k, v = self.c_attn(x_BxTxD).split(D, dim=-1)
        q, k, v = (u.view(B, T, H, D // H).transpose(1, 2) for u in (q, k, v))
        z_BxHxTxd = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(z_BxHxTxd.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """GPT-2's block without its MLP (kept small: the attention is what is tracked)."""

    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(D), Attention()

    def forward(self, x_BxTxD):
        return x_BxTxD + self.attn(self.ln_1(x_BxTxD))


class GPT(nn.Module):
    """``transformer.{wte, wpe, h.{l}, ln_f}`` and ``lm_head``: GPT-2's names."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(VOCAB, D),
                "wpe": nn.Embedding(T, D),
                "h": nn.ModuleList([Block() for _ in range(LAYERS)]),
                "ln_f": nn.LayerNorm(D),
            }
        )
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, tokens_BxT):
        tr = self.transformer
        x_BxTxD = tr["wte"](tokens_BxT) + tr["wpe"](torch.arange(T))
        for block in tr["h"]:
            x_BxTxD = block(x_BxTxD)
        return self.lm_head(tr["ln_f"](x_BxTxD))


def language(seed: int) -> np.ndarray:
    """``SEQUENCES`` sequences of ``T + 1`` tokens of a second-order Markov chain whose
    transition logits (VOCAB, VOCAB, VOCAB) are 3·N(0, 1) (examples/track_flax.py's)."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((VOCAB, VOCAB, VOCAB))
    cum = np.cumsum(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), axis=-1)
    seq = np.empty((SEQUENCES, T + 1), np.int64)
    seq[:, :2] = rng.integers(0, VOCAB, (SEQUENCES, 2))
    for t in range(2, T + 1):
        u = rng.random(SEQUENCES)[:, None]
        seq[:, t] = np.minimum((cum[seq[:, t - 2], seq[:, t - 1]] < u).sum(-1), VOCAB - 1)
    return seq


def train(lam: float, steps: int, every: int, out: Path, seed: int = 0):
    """SGD with ``weight_decay=lam`` from the seed's start, the ``state_dict`` tracked
    every ``every`` steps into ``out`` as ``Optimizer("sgd", ETA, LAM)``; the final loss
    and the prediction table."""
    torch.manual_seed(seed)  # the same start for every λ
    model = GPT()
    sgd = torch.optim.SGD(model.parameters(), lr=ETA, weight_decay=lam)
    data = torch.from_numpy(language(seed))
    rng = np.random.default_rng(seed + 1)  # the same minibatches for every λ
    opt = Optimizer("sgd", eta=ETA, lam=LAM)  # what the run should have, in both runs
    settings = {"example": "track_torch"}
    with Tracker(
        out, every=every, optimizer=opt, config=settings, model_config=GPT2_CONFIG
    ) as tracker:
        for step in range(steps + 1):
            tracker.log(step, model.state_dict())  # GPT-2 names: pairs="auto" finds them
            if step < steps:
                windows_BxS = data[rng.integers(0, SEQUENCES, BATCH)]
                logits = model(windows_BxS[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), windows_BxS[:, 1:].reshape(-1))
                sgd.zero_grad()
                loss.backward()
                sgd.step()
        prediction = tracker.prediction()
    return loss.item(), prediction


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 steps, every 10 (not 400, 20)")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="results folders")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    torch.set_num_threads(1)  # a tiny model: threads cost more than they give (10× on 2 cores)
    runs = {"decay": LAM, "no decay": 0.0}

    summary = {}
    for name, lam in runs.items():
        folder = args.out / f"track_torch_lam{lam:g}"
        loss, prediction = train(lam, size["steps"], size["every"], folder)
        df = rankflow.load(folder)
        last = df[df["t"] == df["t"].max()]
        summary[name] = {
            "loss": loss,
            "balance_gap": float(last["balance_gap"].median()),
            "balance_gap_start": float(df.loc[df["t"] == 0, "balance_gap"].median()),
            "balance_gap_rel": float(last["balance_gap_rel"].median()),
            "rate": prediction["rate"].tolist(),
            "rate_se": prediction["rate_se"].tolist(),
            "agrees": [bool(a) for a in prediction["agrees"]],
            "predicted": [
                float(prediction["predicted_low"].iloc[0]),
                float(prediction["predicted_high"].iloc[0]),
            ],
        }
        print(f"\n{name} (λ = {lam:g}), {folder}: the prediction table")
        cols = [
            "layer",
            "pair",
            "head",
            "steps",
            "rate",
            "rate_se",
            "predicted_low",
            "predicted_high",
            "agrees",
        ]
        print(prediction[cols].to_string(index=False, float_format=lambda v: f"{v:.5g}"))

    print(f"\nSGD η = {ETA}, {size['steps']} steps, state_dict tracked every {size['every']}")
    print(f"medians over heads   {'λ':>4}  {'loss':>6}  {'gap at 0':>8}  {'at end':>8}  gap_rel")
    for name, lam in runs.items():
        s = summary[name]
        print(
            f"{name:<19}  {lam:>4g}  {s['loss']:>6.3f}  {s['balance_gap_start']:>8.3f}  "
            f"{s['balance_gap']:>8.3f}  {s['balance_gap_rel']:.4f}"
        )
    numbers = {"eta": ETA, "lam": LAM, "steps": size["steps"], **summary}
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
