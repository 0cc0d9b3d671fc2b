"""Track a LoRA adapter trained by SGD with weight decay: its balance gap decays at the
rate the theory predicts (T5), and a run whose decay is not applied is caught.

A frozen linear layer ``W0`` (out × in = 24 × 32) carries a LoRA update ``ΔW = B A`` in
plain JAX, stored under PEFT's names so that the tracker finds it by itself:
``lora_B`` (out × r, zero at the start, as PEFT does) and ``lora_A`` (r × in, Gaussian),
r = 4. The adapter fits a regression drawn from a seed, ``y = (W0 + ΔW*) x + noise``
with ``ΔW*`` of rank 2, by optax's SGD with decoupled weight decay
(``optax.chain(optax.add_decayed_weights(λ), optax.sgd(η))``: ``θ ← (1 − ηλ)θ − η g``)
on the full batch of 1,024 samples: the gradient steps of T5, without minibatch noise
(which adds T10's term to the gap's update and, with out ≠ in, a floor below which the
gap stops decaying).

The tracker is told the optimizer, ``Optimizer("sgd", eta, lam)``. The gap
``lora_Bᵀlora_B − lora_A lora_Aᵀ`` (r × r) of a product trained by gradient steps with
decay contracts by ``(1 − ηλ)²`` per step up to an O(η²) term (docs/theory.md, T5): its
fitted rate lies in T5's bracket ``[−log(1 − ηλ)², −log(1 − 2ηλ)]`` and the prediction
table says it agrees. Then the same loop without ``add_decayed_weights`` (the decay
configured in the tracker but never applied, as when a decay mask leaves the adapter
out): the gap is conserved up to the O(η²) term, its rate is near 0, and the table says
it disagrees.

    python examples/track_lora.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rankflow
from rankflow.theory import gd_rate_bracket
from rankflow.track import Optimizer, Tracker

OUT, IN, R, SAMPLES = 24, 32, 4, 1024
ETA, LAM = 0.05, 0.1  # ηλ = 0.005: 2ηλ = 0.01 per step
FULL = {"steps": 1000, "every": 25}
QUICK = {"steps": 600, "every": 50}


def regression(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``W0`` (OUT, IN) and the samples ``x`` (SAMPLES, IN), ``y`` (SAMPLES, OUT) of
    ``y = (W0 + ΔW*) x + 0.1·noise``, ``ΔW*`` of rank 2 with singular values 2 and 1."""
    rng = np.random.default_rng(seed)
    W0 = rng.standard_normal((OUT, IN)) / np.sqrt(IN)
    U = np.linalg.qr(rng.standard_normal((OUT, 2)))[0]
    V = np.linalg.qr(rng.standard_normal((IN, 2)))[0]
    x = rng.standard_normal((SAMPLES, IN))
    y = x @ (W0 + U @ np.diag([2.0, 1.0]) @ V.T).T + 0.1 * rng.standard_normal((SAMPLES, OUT))
    return W0.astype(np.float32), x.astype(np.float32), y.astype(np.float32)


def init(seed: int) -> dict:
    """PEFT's start: ``lora_A`` (R, IN) Gaussian of std 1/√IN, ``lora_B`` (OUT, R) zero."""
    A = jax.random.normal(jax.random.PRNGKey(seed), (R, IN)) / np.sqrt(IN)
    return {"layer": {"lora_A": A, "lora_B": jnp.zeros((OUT, R))}}


def train(decay: bool, steps: int, every: int, out: Path, seed: int = 0):
    """SGD on the adapter, with ``add_decayed_weights(LAM)`` or without, tracked
    every ``every`` steps as ``Optimizer("sgd", ETA, LAM)``; the prediction table's row and
    the final loss."""
    W0, x, y = regression(seed)
    tx = optax.sgd(ETA)
    if decay:
        tx = optax.chain(optax.add_decayed_weights(LAM), tx)

    def loss(params, x_BxI, y_BxO):
        lora = params["layer"]
        W_OxI = W0 + lora["lora_B"] @ lora["lora_A"]  # the frozen layer and its adapter
        return 0.5 * jnp.mean(jnp.sum((x_BxI @ W_OxI.T - y_BxO) ** 2, axis=-1))

    @jax.jit
    def step(params, opt_state, x_BxI, y_BxO):
        grads = jax.grad(loss)(params, x_BxI, y_BxO)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = init(seed)
    opt_state = tx.init(params)
    config = {"example": "track_lora", "decay_applied": decay}
    opt = Optimizer("sgd", eta=ETA, lam=LAM)  # what the tracker is told, in both runs
    with Tracker(out, every=every, optimizer=opt, config=config) as tracker:
        for k in range(steps + 1):
            tracker.log(k, params)  # pairs="auto" finds layer/lora_A and layer/lora_B
            if k < steps:
                params, opt_state = step(params, opt_state, x, y)
    return one_row(tracker.prediction()), float(loss(params, x, y))


def one_row(prediction) -> dict:
    """The prediction table's one row (one adapter, one unit) as plain numbers."""
    row = prediction.iloc[0]
    return {
        "rate": float(row["rate"]),
        "rate_se": float(row["rate_se"]),
        "predicted": [float(row["predicted_low"]), float(row["predicted_high"])],
        "source": str(row["source"]),
        "agrees": bool(row["agrees"]),
        "steps": int(row["steps"]),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="600 steps, every 50 (not 1000, 25)")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="results folders")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL

    runs = {}
    for name, decay in (("decay", True), ("decay not applied", False)):
        folder = args.out / ("track_lora" if decay else "track_lora_nodecay")
        runs[name], final_loss = train(decay, size["steps"], size["every"], folder)
        runs[name]["loss"] = final_loss
        df = rankflow.load(folder).sort_values("t")  # one unit: a row per logged step
        runs[name]["gap"] = [float(df["balance_gap"].iloc[0]), float(df["balance_gap"].iloc[-1])]

    low, high = (float(v) * 2 * ETA * LAM for v in gd_rate_bracket(ETA, LAM))
    print(f"SGD η = {ETA}, tracked as Optimizer('sgd', {ETA}, {LAM}); {size['steps']} steps")
    print(f"T5's bracket of the gap's rate per step: [{low:.6f}, {high:.6f}]")
    print(f"{'run':<18}  {'gap at 0':>8}  {'at end':>9}  {'rate ± se':>22}  {'agrees':>6}  loss")
    for name, r in runs.items():
        print(
            f"{name:<18}  {r['gap'][0]:>8.4f}  {r['gap'][1]:>9.3g}  "
            f"{r['rate']:>11.6f} ± {r['rate_se']:<8.2g}  {str(r['agrees']):>6}  {r['loss']:.4f}"
        )
    numbers = {"eta": ETA, "lam": LAM, "bracket": [low, high], **runs}
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
