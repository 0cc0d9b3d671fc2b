"""What ``rankflow.track.Tracker`` costs a user's own training loop.

    python -m benchmarks.track_overhead              # 600 steps, 5 repeats (~2.5 min on 2 cores)
    python -m benchmarks.track_overhead --quick      # a smoke run (a tiny model, seconds)
    python -m benchmarks.track_overhead --steps 2000 --repeats 7 --json out.json

The model is the attention benchmark's (``benchmarks/attention.py``, the one of
``sims/attention/ablation.toml``): rankflow's flax NNX decoder
(``rankflow.attention.model.Transformer``), 2 pre-LayerNorm blocks, D = 32, 4 heads of
d_h = 8, context 32, GELU MLP of width 128, untied unembedding over 103 tokens. Its
parameters are a nested dict (``blocks/{l}/attn/W_Q`` …), so ``pairs="auto"`` finds
2 layers × (qk, vo) × 4 heads = 16 units. The user's loop is what a flax user writes: a
``jax.jit`` training step (the loss's gradient, ``optax.adamw(3e-3, weight_decay=1.0)``,
the parameters and optimizer state donated), each step drawing 32 windows of 33 tokens
from a synthetic token stream (uniform over the vocabulary, seed 0; the step's cost does
not depend on the data) by ``fold_in(key, step)`` inside the step.

Three methods, each ``--steps`` steps from the same parameters and optimizer state, then
``block_until_ready``:

- ``plain``: the loop alone;
- ``every 100``: ``tracker.log(step, params)`` after every step with
  ``Tracker(None, every=100)`` (a measurement at steps 0, 100, …; the other calls return
  at once);
- ``every step``: ``Tracker(None, every=1)``.

A measurement is the tracker's jitted function of the parameters (per head: SVD and
eigh, the balance gap, the ranks) plus its host copy and the pandas rows; it waits for
the step before it, which the plain loop (asynchronous dispatch) never does. After the
repeats, its two parts are timed apart with the public functions (median of 30 calls):
``jax.jit(measure)`` to its results on the host, and ``rows`` building the DataFrame.

Compilation: the training step is compiled before any timing. A tracker compiles its
measure function at its first measurement (each new tracker anew, as each training
run's would): each method's tracker is made once and its first measurement
(``tracker.measure(params)``) taken before any timing, and the timed calls reuse it, so
the run times and their ratios are steady state. The compile time is reported apart:
the first measurement minus a steady one, ``(every step − plain) / steps``.

Timing: medians and ranges (min–max) of ``--repeats`` calls per method, the methods
interleaved with the order rotating at every repeat; ratios are the medians' against
``plain`` in the same run, beside the median of each repeat's own ratio and the median
process CPU time's ratio (all threads: less sensitive to other processes). On a shared
machine one call's time varies by more than the sparse tracker costs, so the sparse
ratio is also estimated from the dense one: ``1 + n · (every step − plain) / steps /
plain`` for ``n`` measurements, a difference of two times far apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

METHODS = ("plain", "every 100", "every step")
WITHIN = 1.05  # "every 100 within 5% of plain"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.track_overhead", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny model, 30 steps, 2 repeats")
    ap.add_argument("--steps", type=int, default=None, help="training steps per call (600)")
    ap.add_argument("--repeats", type=int, default=None, help="calls per method (5)")
    ap.add_argument("--every", type=int, default=None, help="the sparse tracker's k (100)")
    ap.add_argument("--json", type=str, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    args.steps = args.steps or (30 if args.quick else 600)
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.every = args.every or (10 if args.quick else 100)
    # The attention benchmark's model; --quick: a tiny one (one block, D = 8, 2 heads).
    args.model = (
        {"D": 8, "H": 2, "layers": 1, "context": 8, "vocab": 16, "batch": 4}
        if args.quick
        else {"D": 32, "H": 4, "layers": 2, "context": 32, "vocab": 103, "batch": 32}
    )
    return args


def label(method: str, every: int) -> str:
    """The method's name with the sparse tracker's actual k."""
    return f"every {every}" if method == "every 100" else method


def setup(args: argparse.Namespace) -> dict[str, Any]:
    """The model's initial parameters and optimizer state, and the jitted step
    ``(params, opt_state, k) → (params, opt_state, k + 1)``."""
    import jax
    import jax.numpy as jnp
    import optax

    from rankflow.attention.model import Model, ModelSpec

    m = args.model
    spec = ModelSpec(
        D=m["D"],
        H=m["H"],
        layers=m["layers"],
        context=m["context"],
        mlp_ratio=4,
        vocab=m["vocab"],
        d_in=0,
        d_out=m["vocab"],
    )
    model = Model(spec)
    params = model.init(jax.random.PRNGKey(0))
    tx = optax.adamw(3e-3, weight_decay=1.0)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (100_000,), 0, m["vocab"])
    key, span = jax.random.PRNGKey(2), m["context"] + 1

    def loss(p, windows_BxS):
        logits_BxTxV = model.apply(p, windows_BxS[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(
            logits_BxTxV, windows_BxS[:, 1:]
        ).mean()

    def step(p, opt_state, k):
        starts_B = jax.random.randint(
            jax.random.fold_in(key, k), (m["batch"],), 0, tokens.shape[0] - span
        )
        windows_BxS = jax.vmap(lambda s: jax.lax.dynamic_slice(tokens, (s,), (span,)))(starts_B)
        grads = jax.grad(loss)(p, windows_BxS)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, k + 1

    return {
        "params": params,
        "opt_state": tx.init(params),
        "step": jax.jit(step, donate_argnums=(0, 1)),
        "k": jnp.zeros((), jnp.int32),
        "spec": spec,
    }


def train(s: dict[str, Any], steps: int, tracker=None) -> tuple[float, float]:
    """``steps`` steps of the user's loop from the initial state (copied: the step
    donates its inputs), logging into ``tracker`` after each; (wall s, CPU s)."""
    import jax

    p, o, k = jax.tree.map(lambda x: x.copy(), (s["params"], s["opt_state"], s["k"]))
    jax.block_until_ready((p, o, k))
    step = s["step"]
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(steps):
        p, o, k = step(p, o, k)
        if tracker is not None:
            tracker.log(i, p)
    jax.block_until_ready(p)
    return time.perf_counter() - wall, time.process_time() - cpu


def new_tracker(s: dict[str, Any], every: int):
    """A new tracker, its measure function compiled (untimed); the seconds that first
    measurement took."""
    from rankflow.track import Tracker

    tracker = Tracker(None, every=every)
    t0 = time.perf_counter()
    tracker.measure(s["params"])
    return tracker, time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every repeat of every method; the numbers of the report."""
    import jax

    s = setup(args)
    t0 = time.perf_counter()
    p, o, k = jax.tree.map(lambda x: x.copy(), (s["params"], s["opt_state"], s["k"]))
    jax.block_until_ready(s["step"](p, o, k))
    step_compile = time.perf_counter() - t0
    every = {"plain": None, "every 100": args.every, "every step": 1}
    wall: dict[str, list[float]] = {m: [] for m in METHODS}
    cpu: dict[str, list[float]] = {m: [] for m in METHODS}
    trackers, first = {}, []
    for method, k_every in every.items():
        if k_every is not None:
            trackers[method], t_first = new_tracker(s, k_every)
            first.append(t_first)
    for rep in range(args.repeats):
        order = METHODS[rep % 3 :] + METHODS[: rep % 3]
        for method in order:
            w, c = train(s, args.steps, trackers.get(method))
            wall[method].append(w)
            cpu[method].append(c)
        print(
            f"[repeat {rep + 1}/{args.repeats}: "
            + ", ".join(f"{label(m, args.every)} {wall[m][-1]:.2f} s" for m in METHODS)
            + "]",
            file=sys.stderr,
            flush=True,
        )
    units = len(trackers["every step"].measure(s["params"]))
    parts = breakdown(s)
    med = {m: statistics.median(v) for m, v in wall.items()}
    per_log = (med["every step"] - med["plain"]) / args.steps
    ratio = {m: med[m] / med["plain"] for m in METHODS}
    n_sparse = -(-args.steps // args.every)
    estimate = 1 + n_sparse * per_log / med["plain"]
    paired = {
        m: statistics.median(w / p for w, p in zip(wall[m], wall["plain"], strict=True))
        for m in METHODS
    }
    ratio_cpu = {m: statistics.median(cpu[m]) / statistics.median(cpu["plain"]) for m in METHODS}
    return {
        "steps": args.steps,
        "repeats": args.repeats,
        "every": args.every,
        "model": args.model,
        "units": units,
        "logs": {m: 0 if e is None else -(-args.steps // e) for m, e in every.items()},
        "step_compile_s": step_compile,
        "wall_s": wall,
        "cpu_s": cpu,
        "median_s": med,
        "ratio": ratio,
        "ratio_paired": paired,
        "ratio_cpu": ratio_cpu,
        "ratio_estimate": estimate,
        "measure_s": per_log,
        "first_log_s": first,
        "compile_s": statistics.median(first) - per_log,
        "parts_s": parts,
    }


def breakdown(s: dict[str, Any], calls: int = 30) -> dict[str, float]:
    """Seconds of one measurement's parts (median of ``calls``): the jitted statistics
    to host arrays, and the pandas rows."""
    import jax

    from rankflow.track import measure, resolve_pairs, rows

    pairs = tuple(resolve_pairs(s["params"]))
    fn = jax.jit(lambda p: measure(p, pairs))
    host = lambda: jax.tree.map(np.asarray, fn(s["params"]))
    out = host()

    def median_time(f) -> float:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return {"measure": median_time(host), "rows": median_time(lambda: rows(0, pairs, out))}


def machine() -> dict[str, Any]:
    import platform

    import flax
    import jax
    import optax

    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "devices": [str(d) for d in jax.devices()],
        "python": platform.python_version(),
        "jax": jax.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "loadavg_start": os.getloadavg()[0],
    }


def report(r: dict[str, Any], info: dict[str, Any]) -> None:
    m = r["model"]
    print(
        f"machine: {info['cpus']} CPUs ({info['processor']}), {info['devices']}, python "
        f"{info['python']}, jax {info['jax']}, flax {info['flax']}, optax {info['optax']}, "
        f"XLA_FLAGS={info['xla_flags']!r}; {info['date']}"
    )
    print(
        f"load average: start {info['loadavg_start']:.2f}, end {info['loadavg_end']:.2f}; "
        f"whole run {info['total_s']:.0f} s"
    )
    print(
        f"model: {m['layers']} block(s), D = {m['D']}, {m['H']} heads, context {m['context']}, "
        f"vocab {m['vocab']}, batch {m['batch']}; AdamW; {r['units']} tracked units; "
        f"{r['steps']} steps per call, {r['repeats']} repeats, methods interleaved"
    )
    print(
        f"compile (excluded from the ratios): training step {r['step_compile_s']:.2f} s; the "
        f"tracker's measure function {r['compile_s']:.2f} s (first measurement, median over "
        f"the {len(r['first_log_s'])} trackers, minus a steady one); a steady measurement "
        f"{1e3 * r['measure_s']:.2f} ms ((every step − plain) / steps); timed apart: the "
        f"jitted statistics {1e3 * r['parts_s']['measure']:.2f} ms, the pandas rows "
        f"{1e3 * r['parts_s']['rows']:.2f} ms"
    )
    print()
    print(
        "| method | measurements | run s: median (range) | ms/step | CPU s (median) "
        "| × plain: median (per-repeat median; CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for meth in METHODS:
        w = r["wall_s"][meth]
        name = label(meth, r["every"])
        print(
            f"| {name} | {r['logs'][meth]} | {r['median_s'][meth]:.3f} "
            f"({min(w):.3f}–{max(w):.3f}) | {1e3 * r['median_s'][meth] / r['steps']:.3f} | "
            f"{statistics.median(r['cpu_s'][meth]):.3f} | {r['ratio'][meth]:.3f} "
            f"({r['ratio_paired'][meth]:.3f}; {r['ratio_cpu'][meth]:.3f}) |"
        )
    print()
    b, est = r["ratio"]["every 100"], r["ratio_estimate"]
    verdict = lambda x: "within" if x <= WITHIN else "NOT within"
    print(
        f"every {r['every']} / plain = {b:.3f} (per repeat {r['ratio_paired']['every 100']:.3f}, "
        f"CPU {r['ratio_cpu']['every 100']:.3f}): {verdict(b)} 5%; from the cost of a "
        f"measurement, {est:.3f}: {verdict(est)} 5%; every step / plain = "
        f"{r['ratio']['every step']:.3f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    import jax

    args = parse_args(argv)
    jax.config.update("jax_enable_x64", False)
    start = time.perf_counter()
    info = machine()
    info["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    result = run(args)
    info["loadavg_end"] = os.getloadavg()[0]
    info["total_s"] = time.perf_counter() - start
    report(result, info)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "result": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
