"""Muon's per-step cost against GD's, on the same factor pair, at two sizes in one run.

    python -m benchmarks.muon_step                  # d = 32 and 128, 1,000 steps, 9 rounds (~30 s)
    python -m benchmarks.muon_step --quick          # a smoke run (seconds)
    python -m benchmarks.muon_step --dims 32,64,128 --steps 400 --repeats 9 --json out.json

The problem is the diagonal one of ``benchmarks.fixed_step``: ``L = ½‖ABᵀ − diag(s)‖²``,
s = linspace(1, 1/d, d), m = n = r = d, one configuration (λ = 0.01, η = 0.02), a
Gaussian start of scale 0.1 (seed 0), float32. What is timed is the optimizer of each
rankflow kind, ``rankflow.core.dynamics.dynamics_of(kind).optimizer(η, {"lam": λ}, key)``
(the optax transformation ``rankflow.run`` steps with: ``optimizers.gd`` for ``gd``,
``optax.contrib.muon`` with ``weight_decay = λ`` for ``muon``), called directly in a
jitted ``lax.scan`` of ``--steps`` steps (gradient ``G = ABᵀ − S``, ``(∇_A, ∇_B) =
(G B, Gᵀ A)``, then ``tx.update`` and ``optax.apply_updates``), with no observables and
no saves: the steps alone, so the ratio is the optimizers' and not rankflow's table.
Muon's extra cost is its Newton–Schulz iteration (5 quintic steps, three matmuls each,
per factor) and its Nesterov momentum.

Timing: each side is compiled and called twice before any timing; then ``--repeats``
rounds, each calling gd and muon once (alternating which goes first, so that load
changes hit both), ``block_until_ready`` on the final factors. Per-step time = call time
/ steps; the table shows each side's median over the rounds and the ratio muon/gd of
the medians with its spread: min–max over the rounds of each round's own ratio. A
difference inside that spread is no difference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

KINDS = ("gd", "muon")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.muon_step", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smoke run: d = 8, 16; 20 steps")
    ap.add_argument("--dims", default=None, help="comma-separated d = m = n = r (32,128)")
    ap.add_argument("--steps", type=int, default=None, help="steps per timed call (1000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (9)")
    ap.add_argument("--lam", type=float, default=0.01, help="λ (0.01)")
    ap.add_argument("--eta", type=float, default=0.02, help="η (0.02)")
    ap.add_argument("--json", default=None, help="also write the table (and machine) as JSON")
    args = ap.parse_args(argv)
    args.dims = [int(d) for d in (args.dims or ("8,16" if args.quick else "32,128")).split(",")]
    args.steps = args.steps or (20 if args.quick else 1000)
    args.repeats = args.repeats or (3 if args.quick else 9)
    if args.repeats < 2:
        ap.error("--repeats: at least 2")
    return args


def program(kind: str, d: int, steps: int, lam: float, eta: float):
    """A jitted function of the factors: ``steps`` steps of ``kind``'s optimizer."""
    import jax
    import jax.numpy as jnp
    import optax

    from rankflow.core.dynamics import dynamics_of

    S = jnp.diag(jnp.linspace(1.0, 1.0 / d, d, dtype=jnp.float32))
    tx = dynamics_of(kind).optimizer(eta, {"lam": lam, "mu": 0.1}, jax.random.PRNGKey(0))

    def run(theta):
        def step(carry, _):
            theta, state = carry
            A, B = theta["A"], theta["B"]
            G = A @ B.T - S
            grads = {"A": G @ B, "B": G.T @ A}
            updates, state = tx.update(grads, state, theta)
            return (optax.apply_updates(theta, updates), state), None

        (theta, _), _ = jax.lax.scan(step, (theta, tx.init(theta)), length=steps)
        return theta

    return jax.jit(run)


def start(d: int) -> dict[str, Any]:
    import jax

    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    return {"A": 0.1 * jax.random.normal(ka, (d, d)), "B": 0.1 * jax.random.normal(kb, (d, d))}


def time_size(d: int, args: argparse.Namespace) -> dict[str, Any]:
    import jax

    theta = start(d)
    fns = {k: program(k, d, args.steps, args.lam, args.eta) for k in KINDS}
    compile_s = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(f(theta))
        compile_s[k] = time.perf_counter() - t0
        jax.block_until_ready(f(theta))  # warm-up
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    for i in range(args.repeats):
        order = KINDS if i % 2 == 0 else KINDS[::-1]
        for k in order:
            t0 = time.perf_counter()
            jax.block_until_ready(fns[k](theta))
            times[k].append((time.perf_counter() - t0) / args.steps)
    ratios = [m / g for m, g in zip(times["muon"], times["gd"], strict=True)]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "d": d,
        "compile_s": compile_s,
        "step_s": times,
        "median_step_s": med,
        "ratio": med["muon"] / med["gd"],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def machine() -> dict[str, Any]:
    import jax
    import optax

    return {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": jax.default_backend(),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "python": platform.python_version(),
        "loadavg_start": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", False)
    info = machine()
    t0 = time.perf_counter()
    rows = [time_size(d, args) for d in args.dims]
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = time.perf_counter() - t0
    print(
        f"Muon vs GD per step: diagonal problem, m = n = r = d, float32, λ = {args.lam}, "
        f"η = {args.eta}, seed 0; {args.steps} steps per call, {args.repeats} rounds "
        "(gd and muon interleaved), after compile and one warm-up call each; the kinds' "
        "optax optimizers in a jitted lax.scan"
    )
    print(
        f"Machine: {info['cpu_count']} CPUs ({info['processor']}), {info['platform']}; "
        f"python {info['python']}, jax {info['jax']}, optax {info['optax']}; load average "
        f"(1 min) {info['loadavg_start'][0]:.2f} at the start, {info['loadavg_end'][0]:.2f} "
        f"at the end; {info['wall_s']:.1f} s in all"
    )
    print()
    print("| d | gd ms/step (median) | muon ms/step (median) | muon/gd | spread (min–max) |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        m = r["median_step_s"]
        print(
            f"| {r['d']} | {1e3 * m['gd']:.4f} | {1e3 * m['muon']:.4f} | {r['ratio']:.2f} | "
            f"{r['ratio_min']:.2f}–{r['ratio_max']:.2f} |"
        )
    print()
    for r in rows:
        c = r["compile_s"]
        print(f"  d = {r['d']}: first call (compile) gd {c['gd']:.2f} s, muon {c['muon']:.2f} s")
    if args.quick:
        print("  --quick: a smoke run; at this size fixed overheads dominate the ratios")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
