"""Attention training: rankflow against a hand-written pure-JAX training step.

    python -m benchmarks.attention              # the ablation model, 1 and 12 runs, 200 steps
    python -m benchmarks.attention --quick      # a smoke run (50 steps, 2 repeats)
    python -m benchmarks.attention --steps 500 --repeats 5 --json out.json

The model and batch are those of ``sims/attention/ablation.toml``: char_lm, a decoder
of 2 pre-LayerNorm blocks, D = 32, 4 heads of d_h = 8, context 32, GELU MLP of width
128, untied unembedding over 103 characters; AdamW (η = 0.003, λ = 1 on every group but
the LayerNorms), minibatches of 32 windows of 32 characters, the losses on 256 held-out
and 256 training windows every 50 steps. Its sweep (λ_qk, λ_vo ∈ {1, 0} × 3 seeds) gives
the 12 models of the batch; the single model is its first point. The config trains
1,000 steps; 200 (``--steps``) give the time per step (every step costs the same) in a
fifth of the time.

Both sides compute the same thing:

- rankflow: ``rankflow.attention.program_for(point).run(params)``, the compiled,
  vmapped program that ``rankflow attention train`` runs (without building the pandas
  tables): initialisation, the training scan, the losses and the heads' factors at every
  save, then the per-head observables (SVD, eigh of every head at every save), and the
  host ↔ device copies.
- hand-written: plain dicts of ``jnp`` arrays, ``jax.jit`` of a ``lax.scan`` over save
  intervals whose body is a ``lax.scan`` of training steps; the forward pass, LayerNorm,
  softmax cross-entropy and AdamW with decay and learning-rate multipliers per parameter
  group written out (no flax, no optax). It starts from rankflow's initial parameters
  (computed once, untimed: the hand-written side is not charged for initialisation),
  draws the same minibatches (step k from ``fold_in(key, k)``), saves the same losses
  and factors, and leaves out the per-head observables (rankflow is charged for them).
  A batch of runs is batched two ways, both timed: ``vmap`` over the runs, and ``map``
  (``lax.map``, the runs one after another on each device, ``shard_map`` over the
  devices when there are several); the ratio is against the faster.
- Equality: before timing, both run ``--check-steps`` steps saving at every step; the
  largest relative difference of the train and validation losses is printed (float32
  rounding: ~1e-6) and the timed runs' losses at the last save are compared too.
- Timing: ``compile`` is the first call minus the median run; ``run`` is the median of
  ``--repeats`` calls, the methods interleaved (the order rotating at every repeat);
  the ratio of the fastest calls and that of the median process CPU times (all threads,
  less sensitive to other processes on the machine) are printed too; PASS/FAIL judges
  the median run time's ratio.
  ``ms/step`` is run / steps. The FLOP rate counts the model's matmuls analytically
  (forward: q, k, v, output and MLP projections, scores and weighted values at full
  T × T, unembedding; a training step ≈ 3× the forward of its minibatch; plus the
  forward passes of the evaluations) against the float32 ``jnp.dot`` peak of large
  squares measured in the same run, before and after (the larger is used).

Devices: the batch is sharded over every device JAX sees, on both sides (rankflow pads
to a multiple of their number); the count is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = Path(__file__).resolve().parents[1] / "sims" / "attention" / "ablation.toml"
TARGET = 1.15  # rankflow / hand-written, per batch size
GROUP_OF_FACTOR = {"W_Q": ("qk", "q"), "W_K": ("qk", "k"), "W_V": ("vo", "v"), "W_O": ("vo", "o")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.attention",
        description="rankflow attention training vs a hand-written pure-JAX training step",
    )
    ap.add_argument("--quick", action="store_true", help="50 steps, 2 repeats, small peak")
    ap.add_argument("--steps", type=int, default=None, help="training steps (200)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per method (3)")
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 12], help="batch sizes")
    ap.add_argument("--check-steps", type=int, default=5, help="steps of the equality check")
    ap.add_argument("--json", type=str, default=None, help="write the numbers here")
    args = ap.parse_args(argv)
    args.steps = args.steps or (50 if args.quick else 200)
    args.repeats = args.repeats or (2 if args.quick else 3)
    return args


# --- the configuration ----------------------------------------------------------------------


def points_of(steps: int, eval_every: int | None = None) -> list[dict[str, Any]]:
    """The ablation config's 12 points, with ``steps`` training steps."""
    from rankflow.attention import config as config_lib

    overrides: dict[str, Any] = {"save.t1": steps}
    if eval_every is not None:
        overrides["train.eval_every"] = eval_every
    return list(config_lib.expand(config_lib.resolve(str(CONFIG), overrides)))


def batch_params(points: list[dict[str, Any]], n: int) -> dict[str, np.ndarray]:
    from rankflow.attention.program import params_of

    rows = [params_of(points[i % len(points)]) for i in range(n)]
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


# --- the hand-written training program ------------------------------------------------------


def layer_norm(x, p, eps: float = 1e-6):
    """LayerNorm over the last axis (variance as E[x²] − E[x]², clipped at 0)."""
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.maximum(jnp.mean(x * x, -1, keepdims=True) - mean * mean, 0.0)
    return (x - mean) * (jax.lax.rsqrt(var + eps) * p["scale"]) + p["bias"]


def forward(params, ids, H: int, layers: int):
    """Logits (B, T, V) of token ids (B, T): the decoder of rankflow.attention.model."""
    import jax
    import jax.numpy as jnp

    T = ids.shape[1]
    x = params["embed"]["embedding"][ids] + params["pos"][:T][None]
    causal = jnp.tril(jnp.ones((T, T), bool))
    for l in range(layers):
        blk = params["blocks"][l]
        a = blk["attn"]
        h = layer_norm(x, blk["ln1"])
        q = jnp.einsum("btd,hde->bhte", h, a["W_Q"])
        k = jnp.einsum("btd,hde->bhte", h, a["W_K"])
        v = jnp.einsum("btd,hde->bhte", h, a["W_V"])
        s = jnp.einsum("bhte,bhse->bhts", q, k) / np.sqrt(q.shape[-1])
        s = jnp.where(causal[None, None], s, jnp.finfo(s.dtype).min)
        z = jnp.einsum("bhts,bhse->bhte", jax.nn.softmax(s, axis=-1), v)
        x = x + jnp.einsum("bhte,hed->btd", z, a["W_O"])
        m = blk["mlp"]
        h = layer_norm(x, blk["ln2"])
        h = jax.nn.gelu(h @ m["fc_in"]["kernel"] + m["fc_in"]["bias"])
        x = x + h @ m["fc_out"]["kernel"] + m["fc_out"]["bias"]
    return layer_norm(x, params["ln_f"]) @ params["unembed"]["kernel"]


def cross_entropy(logits, targets):
    """Mean next-token cross-entropy: log-sum-exp of the logits minus the target's."""
    import jax
    import jax.numpy as jnp

    label = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - label)


def leaf_groups(params) -> dict:
    """Each leaf's (group, attention factor or None), by its place in the tree."""
    out: dict[str, Any] = {"embed": {"embedding": ("embed", None)}, "pos": ("embed", None)}
    out["unembed"] = {"kernel": ("embed", None)}
    out["ln_f"] = {"scale": ("norm", None), "bias": ("norm", None)}
    out["blocks"] = {}
    for l, blk in params["blocks"].items():
        out["blocks"][l] = {
            "attn": {name: GROUP_OF_FACTOR[name] for name in blk["attn"]},
            "ln1": {"scale": ("norm", None), "bias": ("norm", None)},
            "ln2": {"scale": ("norm", None), "bias": ("norm", None)},
            "mlp": {
                layer: {"kernel": ("mlp", None), "bias": ("mlp", None)}
                for layer in ("fc_in", "fc_out")
            },
        }
    return out


def over_runs(single: Callable, batching: str) -> Callable:
    """``single(hyper, params0, data)`` over a batch of runs: ``vmap``, or ``map``
    (``lax.map``, the runs one after another on each device: ``shard_map`` over the
    devices when there are several)."""
    import jax

    if batching == "vmap":
        return jax.vmap(single, in_axes=(0, 0, None))

    def local(h, params0, data):
        return jax.lax.map(lambda a: single(*a, data), (h, params0))

    devices = jax.devices()
    if len(devices) == 1:
        return local
    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    runs, shared = jax.sharding.PartitionSpec("runs"), jax.sharding.PartitionSpec()
    return jax.shard_map(
        local, mesh=mesh, in_specs=(runs, runs, shared), out_specs=runs, check_vma=False
    )


def handwritten(
    point: dict[str, Any], H: int, layers: int, saves: int, batching: str = "vmap"
) -> Callable:
    """``run(hyper, params0, data)``: the jitted training of a batch of runs (``hyper``:
    1-d arrays of rankflow's traced keys; ``params0``: the initial parameters, leaves
    (runs, …)), batched by ``batching`` (:func:`over_runs`), returning the losses
    (runs, saves) and the heads' factors (runs, saves, layers, H, …)."""
    import jax
    import jax.numpy as jnp

    tr = point["train"]
    b1, b2, eps, every = tr["b1"], tr["b2"], tr["eps"], tr["eval_every"]
    B = point["dynamics"]["batch"]
    decay = set(tr["decay"])
    span = point["task"]["seq_len"] + 1
    is_leaf = lambda x: isinstance(x, tuple)

    def loss(params, windows):
        return cross_entropy(forward(params, windows[:, :-1], H, layers), windows[:, 1:])

    def single(h, params0, data):
        key = jax.random.fold_in(jax.random.PRNGKey(h["seed"]), 2)
        ids = data["train"]
        groups = leaf_groups(params0)
        lam = jax.tree.map(
            lambda g: h[f"train.lam_{g[0]}"] if g[0] in decay else None, groups, is_leaf=is_leaf
        )
        lr = jax.tree.map(
            lambda g: h[f"train.lr_{g[0]}"] * (1.0 if g[1] is None else h[f"train.lr_{g[1]}"]),
            groups,
            is_leaf=is_leaf,
        )

        def sample(k):
            starts = jax.random.randint(
                jax.random.fold_in(key, k), (B,), 0, ids.shape[0] - span + 1
            )
            return jax.vmap(lambda s: jax.lax.dynamic_slice(ids, (s,), (span,)))(starts)

        def adamw(p, g, m, v, lam_, c, count):
            m = (1 - b1) * g + b1 * m
            v = (1 - b2) * g * g + b2 * v
            u = (m / (1 - b1**count)) / (jnp.sqrt(v / (1 - b2**count)) + eps)
            if lam_ is not None:
                u = u + lam_ * p
            return p - h["dynamics.eta"] * (c * u), m, v

        def step(carry, _):
            params, m, v, k = carry
            g = jax.grad(loss)(params, sample(k))
            count = (k + 1).astype(g["pos"].dtype)
            new = jax.tree.map(
                lambda *a: adamw(*a, count), params, g, m, v, lam, lr, is_leaf=lambda x: x is None
            )
            pick = lambda i: jax.tree.map(lambda t: t[i], new, is_leaf=is_leaf)
            return (pick(0), pick(1), pick(2), k + 1), None

        def observe(params):
            attn = [params["blocks"][l]["attn"] for l in range(layers)]
            return {
                "train_loss": loss(params, data["train_eval"]),
                "val_loss": loss(params, data["val"]),
                "factors": {n: jnp.stack([a[n] for a in attn]) for n in GROUP_OF_FACTOR},
            }

        def interval(carry, _):
            carry = jax.lax.scan(step, carry, length=every)[0]
            return carry, observe(carry[0])

        zeros = jax.tree.map(jnp.zeros_like, params0)
        carry = (params0, zeros, zeros, jnp.asarray(0, jnp.int32))
        _, rest = jax.lax.scan(interval, carry, length=saves - 1)
        return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), observe(params0), rest)

    return jax.jit(over_runs(single, batching))


# --- the two sides, called alike ------------------------------------------------------------


class Sides:
    """The methods on one batch of runs, each call from host parameters to host outputs:
    ``rankflow`` and the hand-written program batched by ``vmap`` and by ``map``
    (:func:`over_runs`)."""

    def __init__(self, points: list[dict[str, Any]], n: int):
        import jax

        from rankflow.attention.program import program_for

        self.program = program_for(points[0])
        self.params = batch_params(points, n)
        self.n = n
        spec = self.program.spec
        self.data = self.program.data()
        # The same initial parameters as rankflow's (untimed; sharded like the runs).
        hyper = self.hyper()
        self.params0 = jax.block_until_ready(
            jax.jit(lambda P: jax.lax.map(self.program.init, P))(hyper)
        )
        windows = lambda b: np.concatenate([b["inputs"], b["targets"][:, -1:]], axis=1)
        self.hand_data = {
            "train": self.data["train"],
            "val": windows(self.data["val"]),
            "train_eval": windows(self.data["train_eval"]),
        }
        saves = len(self.program.steps)
        self.methods: dict[str, Callable] = {"rankflow": lambda: self.program.run(self.params)}
        for batching in ("vmap", "map"):
            hand = handwritten(points[0], spec.H, spec.layers, saves, batching)
            self.methods[f"hand-written, {batching}"] = self._call(hand)

    def hyper(self):
        """The runs' traced values on the devices, as rankflow shards them."""
        from rankflow.numerics.batching import shard

        dtype = self.program.spec.dtype
        return shard(self.params, lambda k: "int32" if k == "seed" else dtype)

    def _call(self, hand: Callable) -> Callable:
        import jax

        def call():
            out = hand(self.hyper(), self.params0, self.hand_data)
            return jax.tree.map(lambda x: np.asarray(x)[: self.n], out)

        return call


def loss_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray], at=slice(None)) -> float:
    """Largest relative difference of the train and validation losses."""
    worst = 0.0
    for name in ("train_loss", "val_loss"):
        x = np.asarray(a[name], np.float64)[:, at]
        y = np.asarray(b[name], np.float64)[:, at]
        worst = max(worst, float(np.max(np.abs(x - y) / np.abs(y))))
    return worst


def forward_flops(point: dict[str, Any], vocab: int) -> float:
    """Matmul FLOPs of one sequence's forward pass (2 per multiply-add)."""
    a = point["attention"]
    T, D, L, r = point["task"]["seq_len"], a["D"], a["layers"], a["mlp_ratio"]
    per_layer = 2 * T * D * D * 4 + 2 * 2 * T * T * D + 2 * 2 * T * D * r * D
    return L * per_layer + 2 * T * D * vocab


def run_flops(point: dict[str, Any], vocab: int, steps: int) -> float:
    """FLOPs of one run: ``steps`` training steps (3× the minibatch's forward) and the
    two evaluation sets' forward passes at every save."""
    tr, val = point["train"], point["task"]["val_size"]
    saves = steps // tr["eval_every"] + 1
    batch = point["dynamics"]["batch"]
    return forward_flops(point, vocab) * (3 * batch * steps + saves * 2 * val)


def timed(fn: Callable, cpu: list[float] | None = None) -> tuple[Any, float]:
    """``fn()`` and its wall time; its process CPU time (all threads) goes to ``cpu``."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t
    if cpu is not None:
        cpu.append(time.process_time() - c)
    return out, wall


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Every method for ``--check-steps`` steps, saving every step, on the largest batch:
    the losses' largest relative difference from rankflow's."""
    sides = Sides(points_of(args.check_steps, eval_every=1), max(args.runs))
    ref = sides.methods["rankflow"]()
    diffs = {k: loss_diff(f(), ref) for k, f in sides.methods.items() if k != "rankflow"}
    return {
        "check_steps": args.check_steps,
        "check_runs": max(args.runs),
        "check_diff": max(diffs.values()),
    }


def time_batch(points: list[dict[str, Any]], n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Time every method on ``n`` runs, interleaved (the order rotating per repeat)."""
    sides = Sides(points, n)
    names = list(sides.methods)
    outs, first, runs, cpus = {}, {}, {k: [] for k in names}, {k: [] for k in names}
    for k in names:
        outs[k], first[k] = timed(sides.methods[k])
    for i in range(args.repeats):
        for k in names[i % len(names) :] + names[: i % len(names)]:
            runs[k].append(timed(sides.methods[k], cpus[k])[1])
    med = {k: statistics.median(v) for k, v in runs.items()}
    best = min((k for k in names if k != "rankflow"), key=med.get)
    flops = n * run_flops(points[0], sides.program.spec.vocab, args.steps)
    return {
        "runs": n,
        "steps": args.steps,
        "compile_s": {k: first[k] - med[k] for k in names},
        "run_s": med,
        "runs_s": runs,
        "best_hand": best,
        "ratio": med["rankflow"] / med[best],
        "ratio_min": min(runs["rankflow"]) / min(runs[best]),
        "cpu_s": {k: statistics.median(v) for k, v in cpus.items()},
        "ratio_cpu": statistics.median(cpus["rankflow"]) / statistics.median(cpus[best]),
        "gflops": {k: flops / v / 1e9 for k, v in med.items()},
        "flops": flops,
        "final_diff": max(loss_diff(outs[k], outs["rankflow"], at=-1) for k in names[1:]),
        "final_val_loss": float(np.mean(outs["rankflow"]["val_loss"][:, -1])),
    }


def print_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    peak = info["peak_gflops"]
    print(
        f"machine: {info['cpu_count']} CPUs ({info['cpus_usable']} usable), {info['platform']}, "
        f"{len(info['devices'])} JAX device(s), jax {info['jax']}, optax {info['optax']}, "
        f"XLA_FLAGS={info['xla_flags']!r}"
    )
    print(
        f"load average: start {info['loadavg_start'][0]:.2f}, end {info['loadavg_end'][0]:.2f}; "
        f"float32 matmul peak {peak:.1f} GFLOP/s (jnp.dot, best of sizes "
        f"{info['peak_sizes']}, before and after)"
    )
    print(
        f"equality: {info['check_steps']} steps saving at every step, largest relative "
        f"difference of the train/validation losses, {info['check_runs']} runs: "
        f"{info['check_diff']:.1e}"
    )
    print()
    print(
        "| runs | steps | method | compile s | run s (median) | ms/step | GFLOP/s | % of peak "
        "| CPU s (median) | rankflow / best hand-written: run (fastest calls; CPU) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for who in r["run_s"]:
            ratio = ""
            if who == "rankflow":
                verdict = "PASS" if r["ratio"] <= TARGET else "FAIL"
                ratio = (
                    f"**{r['ratio']:.2f}** ({r['ratio_min']:.2f}; {r['ratio_cpu']:.2f}) "
                    f"{verdict} (≤ {TARGET})"
                )
            print(
                f"| {r['runs']} | {r['steps']} | {who} | {r['compile_s'][who]:.1f} | "
                f"{r['run_s'][who]:.2f} | {1e3 * r['run_s'][who] / r['steps']:.2f} | "
                f"{r['gflops'][who]:.1f} | {100 * r['gflops'][who] / peak:.1f}% | "
                f"{r['cpu_s'][who]:.2f} | {ratio} |"
            )
    print()
    for r in rows:
        print(
            f"- {r['runs']} run(s): {r['flops'] / 1e9:.1f} GFLOP per call; the ratio is "
            f"against {r['best_hand']}; the losses at the last save differ from rankflow's "
            f"by at most {r['final_diff']:.1e} (relative); mean validation loss "
            f"{r['final_val_loss']:.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    import jax

    from benchmarks.fixed_step import machine
    from benchmarks.peers import matmul_peak

    args = parse_args(argv)
    jax.config.update("jax_enable_x64", False)
    info = machine()
    info["peak_sizes"] = [256, 512] if args.quick else [256, 512, 1024, 2048]
    peak_before = max(matmul_peak(n) for n in info["peak_sizes"])
    info.update(check(args))
    points = points_of(args.steps)
    rows = []
    for n in args.runs:
        rows.append(time_batch(points, n, args))
        print(f"[{n} run(s) timed: ratio {rows[-1]['ratio']:.2f}]", file=sys.stderr, flush=True)
    peak_after = max(matmul_peak(n) for n in info["peak_sizes"])
    info["peak_gflops"] = max(peak_before, peak_after)
    info["peak_gflops_before_after"] = [peak_before, peak_after]
    info["loadavg_end"] = list(os.getloadavg())
    print_table(rows, info)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows}, indent=2))
    agree = info["check_diff"] <= 1e-4
    if not agree:
        print(f"DISAGREE: the losses differ by {info['check_diff']:.1e} (> 1e-4)")
    return 0 if agree else 1


if __name__ == "__main__":
    import rankflow

    rankflow.use_all_cores()  # as the rankflow command does: one CPU device per core
    sys.exit(main())
