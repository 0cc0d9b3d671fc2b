"""Inspect a checkpoint series: the balance gap of every attention head across training.

Trains a tiny GPT-2-shaped model's attention factors by GD with weight decay, saves a
safetensors checkpoint every few hundred steps, and hands the series to
``rankflow.inspect.inspect_series``, which fits the decay of each head's gap against the
step. GD's prediction (docs/theory.md, T5): near a minimum the gap ‖AᵀA − BᵀB‖ contracts
per step by a factor between 1 − 2ηλ and (1 − ηλ)², a rate between −log(1 − ηλ)² and
−log(1 − 2ηλ) per step, both 2ηλ(1 + O(ηλ)).

Each head's pairs are the key–query pair (A, B) = (W_Q^h, W_K^h) and the value–output
pair (W_V^h, W_O^hᵀ); "training" fits each pair's product ABᵀ to a fixed target of its
own, so every head has a loss ½‖ABᵀ − M_h‖² + (λ/2)(‖A‖² + ‖B‖²) and the factors are
stored exactly as a GPT-2 checkpoint stores them (Conv1D weights, q|k|v side by side).

    python examples/checkpoint_series.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from safetensors.numpy import save_file

from rankflow.inspect import inspect_series
from rankflow.plots import save_figure, series_gap_figure
from rankflow.theory import gd_rate_bracket

D_MODEL, HEADS, LAYERS = 16, 2, 2  # d_h = 8
ETA, LAM = 0.1, 0.02  # ηλ = 0.002: 2ηλ = 0.004 per step
FULL = {"steps": list(range(1000, 2501, 250))}  # 7 checkpoints
QUICK = {"steps": list(range(1000, 2501, 500))}  # 4 checkpoints


def targets(rng: np.random.Generator, units: int, d_h: int) -> np.ndarray:
    """A D×D target of rank d_h/2 per unit (layer, pair, head), singular values 1.5 … 0.3."""
    k = d_h // 2
    U = np.linalg.qr(rng.standard_normal((units, D_MODEL, k)))[0]
    V = np.linalg.qr(rng.standard_normal((units, D_MODEL, k)))[0]
    return U @ (np.linspace(1.5, 0.3, k)[:, None] * np.swapaxes(V, -1, -2))


def train(steps: list[int], seed: int = 0):
    """GD with weight decay on every unit's pair from a Gaussian start (std 0.3), in
    float32 as training would be; yields (step, A, B) at each step of ``steps``."""
    rng = np.random.default_rng(seed)
    d_h, units = D_MODEL // HEADS, LAYERS * 2 * HEADS
    M = targets(rng, units, d_h).astype(np.float32)
    A = (0.3 * rng.standard_normal((units, D_MODEL, d_h))).astype(np.float32)
    B = (0.3 * rng.standard_normal((units, D_MODEL, d_h))).astype(np.float32)
    for step in range(steps[-1] + 1):
        if step in steps:
            yield step, A.copy(), B.copy()
        G = A @ np.swapaxes(B, -1, -2) - M  # ∇_W of ½‖W − M‖²
        A, B = A - ETA * (G @ B + LAM * A), B - ETA * (np.swapaxes(G, -1, -2) @ A + LAM * B)


def write_gpt2(folder: Path, A: np.ndarray, B: np.ndarray) -> None:
    """A GPT-2 checkpoint: per layer c_attn (D, 3D) = [W_Q | W_K | W_V] and c_proj
    (D, D) = W_O, both (in, out); unit index = (layer·2 + pair)·HEADS + head."""
    A = A.reshape(LAYERS, 2, HEADS, D_MODEL, -1)
    B = B.reshape(LAYERS, 2, HEADS, D_MODEL, -1)
    tensors = {}
    for layer in range(LAYERS):
        q, k = np.hstack(list(A[layer, 0])), np.hstack(list(B[layer, 0]))
        v = np.hstack(list(A[layer, 1]))
        o = np.vstack([b.T for b in B[layer, 1]])  # W_O^h = Bᵀ: (d_h, D) blocks
        tensors[f"h.{layer}.attn.c_attn.weight"] = np.hstack([q, k, v])
        tensors[f"h.{layer}.attn.c_proj.weight"] = o
    folder.mkdir(parents=True)
    save_file(
        {n: np.ascontiguousarray(t) for n, t in tensors.items()}, folder / "model.safetensors"
    )
    config = {"model_type": "gpt2", "n_embd": D_MODEL, "n_head": HEADS, "n_layer": LAYERS}
    (folder / "config.json").write_text(json.dumps(config))


def rate_figure(rates, low: float, high: float, title: str) -> Figure:
    """Each unit's fitted rate over 2ηλ (± its standard error) against GD's bracket."""
    fig = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = fig.add_subplot()
    labels = [f"L{r.layer} {r.pair} h{r.head}" for r in rates.itertuples()]
    x = np.arange(len(rates))
    ax.axhspan(low, high, color="C2", alpha=0.3, label="GD's bracket (T5)")
    ax.axhline(1.0, color="0.4", ls=":", label="gradient flow: 2ηλ (T4)")
    se = rates["rate_se"] / (2 * ETA * LAM)
    ax.errorbar(x, rates["rate/(2ηλ)"], yerr=se, fmt="o", color="C0", label="fitted ± SE")
    ax.set_xticks(x, labels, rotation=45, ha="right", fontsize="small")
    ax.set_ylabel("fitted rate / (2ηλ)")
    ax.yaxis.get_major_formatter().set_useOffset(False)
    ax.set_title(f"Decay rate of each head's balance gap\n{title}")
    ax.legend(fontsize="small")
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 checkpoints instead of 7")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="figures")
    args = parser.parse_args(argv)
    steps = (QUICK if args.quick else FULL)["steps"]

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for step, A, B in train(steps):
            write_gpt2(Path(tmp) / f"step{step}", A, B)
            paths.append(str(Path(tmp) / f"step{step}"))
        series = inspect_series(paths, steps, lr=ETA, lam=LAM)  # rankflow inspect --series

    rates = series.rates[series.rates["theory"]].copy()
    rates["rate/(2ηλ)"] = rates["rate"] / (2 * ETA * LAM)
    low, high = gd_rate_bracket(ETA, LAM)  # over 2ηλ
    print(f"{len(steps)} GPT-2 checkpoints, steps {steps[0]}–{steps[-1]}, η = {ETA}, λ = {LAM}")
    columns = ["layer", "pair", "head", "rate", "rate_se", "rate/(2ηλ)", "null_rate"]
    print(rates[columns].to_string(index=False, float_format=lambda v: f"{v:.6g}"))
    print(f"GD's bracket (T5), over 2ηλ: [{low:.6f}, {high:.6f}]")

    title = f"GD, η = {ETA}, λ = {LAM}, {len(steps)} checkpoints"
    written = [
        save_figure(
            series_gap_figure(series.heads, title=title), args.out / "checkpoint_series_gaps.png"
        ),
        save_figure(rate_figure(rates, low, high, title), args.out / "checkpoint_series_rates.png"),
    ]
    numbers = {
        "eta": ETA,
        "lam": LAM,
        "rate": rates["rate"].tolist(),
        "rate_se": rates["rate_se"].tolist(),
        "bracket": [float(low), float(high)],
        "null_rate": rates["null_rate"].tolist(),
        "figures": [str(p) for p in written],
    }
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
