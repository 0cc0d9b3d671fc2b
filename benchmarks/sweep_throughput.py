"""Sweep throughput: configurations per second for a λ × η × seed grid.

    python -m benchmarks.sweep_throughput            # 1,024 configs, d = r = 32, 1,000 steps
    python -m benchmarks.sweep_throughput --quick    # a smoke run

Three ways to run the same configurations (GD on the diagonal problem, d = m = n = r,
saving observables at t = 0 and t = steps):
  1. rankflow: one `rankflow.run` of the whole grid (one compiled program, vmapped in
     chunks, sharded over the local devices);
  2. rankflow, one `rankflow.run` call per configuration (what a user's Python loop over
     the grid would do);
  3. a plain Python loop calling one jitted single-run function (the GD scan and the
     same observables, hand-written), the usual "fast" script.
Compile time is excluded from every figure (each way is warmed up first); way 2 is timed
on a subset of the grid and reported per configuration. Medians over repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import rankflow
from rankflow.core.observables import observables


def grid_config(d: int, steps: int, n_lam: int, n_eta: int, n_seed: int) -> dict:
    return {
        "problem": {"kind": "diagonal", "singular_values": list(np.linspace(1.0, 0.1, d))},
        "model": {"r": d},
        "init": {"kind": "gaussian", "scale": 0.1},
        "dynamics": {"kind": "gd"},
        "save": {"t1": steps, "num": 2},
        "sweep": {
            "dynamics.lam": list(np.linspace(0.0, 0.1, n_lam)),
            "dynamics.eta": list(np.linspace(0.01, 0.1, n_eta)),
            "seed": list(range(n_seed)),
        },
    }


def hand_written_single(d: int, steps: int):
    """One GD run, jitted: the same update, start and observables as rankflow's."""
    S = jnp.diag(jnp.linspace(1.0, 0.1, d, dtype=jnp.float32))

    def loss(A, B):
        return 0.5 * jnp.sum((A @ B.T - S) ** 2)

    grad = jax.grad(loss, argnums=(0, 1))

    @jax.jit
    def run(seed, lam, eta):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
        ka, kb = jax.random.split(key)
        A = 0.1 * jax.random.normal(ka, (d, d), jnp.float32)
        B = 0.1 * jax.random.normal(kb, (d, d), jnp.float32)

        def step(theta, _):
            A, B = theta
            gA, gB = grad(A, B)
            return (A - eta * (gA + lam * A), B - eta * (gB + lam * B)), None

        first = observables(A, B, loss(A, B), lam, 1e-3)
        (A, B), _ = jax.lax.scan(step, (A, B), length=steps)
        return first, observables(A, B, loss(A, B), lam, 1e-3)

    return run


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 configs, 200 steps")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument(
        "--single-subset",
        type=int,
        default=32,
        help="configurations timed one rankflow.run call at a time",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    n_lam, n_eta, n_seed = (4, 4, 4) if args.quick else (16, 8, 8)
    steps = 200 if args.quick else args.steps
    d = args.dim
    cfg = grid_config(d, steps, n_lam, n_eta, n_seed)
    n = n_lam * n_eta * n_seed
    os.environ.setdefault("RANKFLOW_CACHE_DIR", "off")  # measure compiles honestly

    # 1. the whole grid in one rankflow.run
    t0 = time.perf_counter()
    df = rankflow.run(cfg)
    compile_and_run = time.perf_counter() - t0
    grid_s = median_time(lambda: rankflow.run(cfg), args.repeats)

    # 2. one rankflow.run per configuration
    points = [
        (lam, eta, seed)
        for lam in cfg["sweep"]["dynamics.lam"]
        for eta in cfg["sweep"]["dynamics.eta"]
        for seed in cfg["sweep"]["seed"]
    ]
    subset = points[:: max(1, len(points) // args.single_subset)][: args.single_subset]
    single_cfg = {k: v for k, v in cfg.items() if k != "sweep"}

    def one(lam, eta, seed):
        return rankflow.run(
            single_cfg
            | {"seed": seed, "dynamics": {"kind": "gd", "lam": float(lam), "eta": float(eta)}}
        )

    one(*subset[0])  # compile
    per_call = median_time(lambda: [one(*p) for p in subset], 1) / len(subset)

    # 3. a Python loop of a jitted single run
    run = hand_written_single(d, steps)
    jax.block_until_ready(run(0, 0.0, 0.01))
    loop_s = median_time(
        lambda: jax.block_until_ready([run(s, lam, eta) for lam, eta, s in points]),
        args.repeats,
    )
    # Same configurations, same numbers: check the final loss of one configuration.
    lam, eta, seed = points[-1]
    ours = df[(df["dynamics.lam"] == lam) & (df["dynamics.eta"] == eta) & (df["seed"] == seed)][
        "loss"
    ].iloc[-1]
    theirs = float(run(seed, lam, eta)[1]["loss"])
    assert np.isclose(ours, theirs, rtol=1e-4, atol=1e-6), (ours, theirs)

    rows = [
        ("rankflow, one run of the grid", grid_s, n / grid_s),
        ("rankflow, one run per config", per_call * n, 1 / per_call),
        ("Python loop of a jitted single run", loop_s, n / loop_s),
    ]
    best_peer = max(rows[1][2], rows[2][2])
    print(
        f"sweep throughput: {n} configs (λ {n_lam} × η {n_eta} × seed {n_seed}), "
        f"d = r = {d}, {steps} GD steps, {jax.device_count()} {jax.default_backend()} "
        f"device(s), {os.cpu_count()} CPUs, jax {jax.__version__}"
    )
    print(f"(first rankflow call incl. compile: {compile_and_run:.2f} s)")
    print(f"{'way':40s} {'time for the grid':>18s} {'configs/s':>10s} {'rankflow ×':>11s}")
    for name, secs, rate in rows:
        print(f"{name:40s} {secs:17.2f}s {rate:10.1f} {rows[0][2] / rate:10.1f}×")
    result = {
        "configs": n,
        "dim": d,
        "steps": steps,
        "devices": jax.device_count(),
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "rows": [{"way": a, "seconds": b, "configs_per_s": c} for a, b, c in rows],
        "speedup_vs_best_peer": rows[0][2] / best_peer,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    rankflow.use_all_cores()  # as the rankflow command does: one CPU device per core
    main()
