"""Scaling with cores: configurations per second against the number of CPU devices.

    python -m benchmarks.scaling                  # 64 configs, d = r = 32, 2,000 steps
    python -m benchmarks.scaling --quick          # a smoke run (16 configs, d = 16, 200 steps)
    python -m benchmarks.scaling --devices 1,2,4,default --json out.json

The ``rankflow`` command (and ``rankflow.use_all_cores()``) gives JAX one CPU device per
physical core, and rankflow shards every batch over all of them
(``rankflow.engine.devices``, ``rankflow.numerics.batching.per_device``). Each device
count runs in its own process (the count is fixed when JAX starts):
``RANKFLOW_CPU_DEVICES=N`` for N, ``=all`` for ``all``, and ``default`` with no variable
or flag set (what the ``rankflow`` command gives), each process calling
``rankflow.use_all_cores()`` before JAX starts. In each process, on the diagonal problem
of ``benchmarks.fixed_step`` (L = ½‖ABᵀ − diag(s)‖², Gaussian start of scale 0.1), a sweep
of ``--configs`` configurations (a λ × η grid, one seed):

- ``gd``: ``rankflow.run`` of GD, ``--steps`` steps, the table included;
- ``sde``: ``rankflow.run`` of the Euler–Maruyama ``stochastic_flow`` (dt = 1, σ = 0.01);
- ``adaptive``: ``rankflow.run`` of gradient flow with Tsit5 (rtol 1e-6, atol 1e-8,
  float32), batched per device with the strategy ``rankflow.numerics.batching`` measures;
- ``scan``: the hand-written, jitted, vmapped ``lax.scan`` of the GD update with the same
  observables (``benchmarks.fixed_step.reference_program``), its batch on one device;
- ``scan_all``: the same program, its batch sharded over every device of the process
  (left to jit's partitioner): what hand-written JAX reaches with the same cores;
- the products alone: ``--configs`` float32 d × d products at once, sharded likewise, 500
  in a row in one program (``small_product_rate``): the update's ceiling at this size;
- the matmul peak: float32 ``jnp.dot`` of n × n squares (best over n), one product on
  one device (``dot``), and one product per device at once (``all devices``, a batch
  sharded over the devices and partitioned by jit: measured under load, ``shard_map``
  of the same products ran at a third of that rate, 33 against 93 GFLOP/s).

"cores busy" is the process's CPU time over the wall time of the GD calls: on a shared
machine, how many cores the run actually had. GFLOP/s of the fixed-step rows count the
update's three products (6·d³ flops per step and configuration; the observables at two
saves are not counted). Times are medians of
``--repeats`` calls after a first (compiling) call; the methods of a process are
interleaved. Ratios are against the 1-device process of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

CASES = ("gd", "sde", "adaptive", "scan", "scan_all")
RTOL, ATOL = 1e-6, 1e-8
SIGMA = 0.01


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scaling",
        description="configurations per second against the number of CPU devices",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 configs, d = 16, 200 steps")
    ap.add_argument("--configs", type=int, default=None, help="configurations (default 64)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 2000)")
    ap.add_argument("--dim", type=int, default=None, help="d = m = n = r (default 32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per method (default 5)")
    ap.add_argument(
        "--devices",
        default="1,default",
        help="device counts, one process each ('all': one per physical core; "
        "'default': no variable or flag set)",
    )
    ap.add_argument("--json", default=None, help="also write the rows (and machine) as JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.configs = args.configs or (16 if args.quick else 64)
    args.steps = args.steps or (200 if args.quick else 2000)
    args.dim = args.dim or (16 if args.quick else 32)
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.saves, args.problem, args.sigma = 2, "diagonal", SIGMA
    side = int(np.sqrt(args.configs))
    if side * side != args.configs:
        ap.error("--configs: a square number (a λ × η grid)")
    for d in args.devices.split(","):
        if d.strip() not in ("all", "default") and not (d.strip().isdigit() and int(d) > 0):
            ap.error(f"--devices: positive integers, 'all' or 'default', not {d!r}")
    return args


def sweep_config(args: argparse.Namespace, case: str) -> dict[str, Any]:
    """The ``rankflow.run`` config of a case: ``benchmarks.fixed_step``'s problem and
    start, a λ × η grid of ``--configs`` points."""
    from benchmarks import fixed_step as fs

    kind = {"gd": "gd", "sde": "stochastic_flow", "adaptive": "gradient_flow"}[case]
    cfg = fs.base_config(args, kind)
    if case == "adaptive":
        cfg["solver"] = {"method": "tsit5", "adaptive": True, "rtol": RTOL, "atol": ATOL}
    side = int(np.sqrt(args.configs))
    cfg["sweep"] = {
        "dynamics.lam": [float(x) for x in np.linspace(0.0, 0.05, side)],
        "dynamics.eta": [float(x) for x in np.linspace(0.02, 0.2, side)],
    }
    return cfg


def batch_sharding(k: int | None = None):
    """A batch's leading axis split over the first ``k`` devices (default: all of them)."""
    import jax

    devices = jax.devices()[:k]
    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))


def matmul_peak(per_device: bool, sizes=(256, 512, 1024), repeats: int = 5) -> float:
    """GFLOP/s of float32 n × n products, best over ``sizes``: one product on one device,
    or (``per_device``) one per device at once (a batch sharded over the devices, left
    to jit's partitioner), enough products per timing for ~2 GFLOP a device."""
    import jax
    import jax.numpy as jnp

    from benchmarks.peers import product_rate

    k = jax.device_count() if per_device else 1
    where = batch_sharding(k)
    best = 0.0
    for n in sizes:
        a = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (k, n, n)), where)
        b = jax.device_put(jax.random.normal(jax.random.PRNGKey(1), (k, n, n)), where)
        f = jax.jit(lambda x, y: jnp.einsum("kij,kjl->kil", x, y))
        best = max(best, product_rate(f, a, b, n, repeats, k))
    return best


def small_product_rate(configs: int, d: int, repeats: int = 5, chain: int = 500) -> float:
    """GFLOP/s of the update's products alone: ``configs`` float32 d × d products at once
    (a batch sharded over the process's devices, as rankflow shards a sweep), ``chain``
    of them in a row inside one program (a ``fori_loop``, as a scan runs its steps), by an
    orthogonal matrix so that nothing grows. The ceiling of the fixed-step update at this
    size: its three products a step are of this shape, and it adds elementwise work."""
    import jax
    import jax.numpy as jnp

    where = batch_sharding()
    rng = np.random.default_rng(0)
    q = np.linalg.qr(rng.standard_normal((configs, d, d)))[0].astype(np.float32)
    x = jax.device_put(rng.standard_normal((configs, d, d)).astype(np.float32), where)
    q = jax.device_put(q, where)

    def products(x, q):
        return jax.lax.fori_loop(0, chain, lambda _, z: jnp.einsum("bij,bjk->bik", z, q), x)

    f = jax.jit(products)
    f(x, q).block_until_ready()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        f(x, q).block_until_ready()
        ts.append(time.perf_counter() - t)
    return configs * chain * 2 * d**3 / statistics.median(ts) / 1e9


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One process: every case at this process's device count."""
    import jax

    import rankflow
    from benchmarks import fixed_step as fs
    from rankflow.core import config as config_lib
    from rankflow.engine import devices

    rankflow.use_all_cores()  # before JAX starts: the count of this process's label
    cfgs = {c: sweep_config(args, c) for c in CASES if not c.startswith("scan")}
    point = config_lib.expand(config_lib.resolve(fs.base_config(args, "gd")))[0]
    scan = fs.reference_program(point, "gd", None)
    params = fs.batch_params(point, args)
    sharded = jax.device_put(params, batch_sharding())
    fns = {c: (lambda cfg=cfg: rankflow.run(cfg, quiet=True)) for c, cfg in cfgs.items()}
    fns["scan"] = lambda: scan(params)
    fns["scan_all"] = lambda: scan(sharded)
    first, runs, cores = {}, {c: [] for c in fns}, {c: [] for c in fns}
    for c, fn in fns.items():
        t = time.perf_counter()
        fn()
        first[c] = time.perf_counter() - t
    for i in range(args.repeats):
        for c in CASES if i % 2 == 0 else CASES[::-1]:
            t, cpu = time.perf_counter(), time.process_time()
            fns[c]()
            runs[c].append(time.perf_counter() - t)
            cores[c].append((time.process_time() - cpu) / runs[c][-1])
    times = {c: statistics.median(v) for c, v in runs.items()}
    return {
        "devices": jax.device_count(),
        "source": devices.setting().source,
        "times": times,
        "spread": {c: [min(v), max(v)] for c, v in runs.items()},
        "cores_busy": {c: statistics.median(v) for c, v in cores.items()},
        "compile": {c: max(0.0, first[c] - times[c]) for c in fns},
        "small_products": small_product_rate(args.configs, args.dim),
        "peak_dot": matmul_peak(False),
        "peak_all": matmul_peak(True),
    }


def run_worker(label: str, args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANKFLOW_CPU_DEVICES", "JAX_NUM_CPU_DEVICES")
    }
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    if label != "default":
        env["RANKFLOW_CPU_DEVICES"] = label
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "benchmarks.scaling", *argv, "--worker", label]
        subprocess.run([*cmd, "--worker-out", out], env=env, check=True)
        with open(out) as f:
            return json.load(f)


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace, info: dict) -> None:
    one = next((r for r in rows if r["devices"] == 1), rows[0])
    flops = args.configs * args.steps * 6 * args.dim**3
    peak = max(max(r["peak_dot"], r["peak_all"]) for r in rows)
    print(
        f"{args.configs} configurations, d = r = {args.dim}, {args.steps} steps, float32; "
        f"{info['machine']}; load average {info['load_start']:.2f} at the start, "
        f"{info['load_end']:.2f} at the end; medians of {args.repeats} calls."
    )
    print()
    print(
        "| devices (set by) | GD configs/s (× 1 device) | SDE configs/s (×) "
        "| adaptive configs/s (×) | GD: cores busy | hand-written scan, 1 device, configs/s "
        "| GD GFLOP/s (of peak) | hand-written scan, every device: GFLOP/s (of peak) "
        "| d × d products alone, every device: GFLOP/s (of peak) "
        "| matmul peak GFLOP/s: one dot, one per device |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t, t1 = r["times"], one["times"]
        busy = r["cores_busy"]["gd"]
        how = "no flag" if r["label"] == "default" else f"RANKFLOW_CPU_DEVICES={r['label']}"
        cells = [f"{r['devices']} ({how})"]
        for c in ("gd", "sde", "adaptive"):
            cells.append(f"{args.configs / t[c]:.1f} ({t1[c] / t[c]:.2f}×)")
        gd, hand, alone = flops / t["gd"] / 1e9, flops / t["scan_all"] / 1e9, r["small_products"]
        cells += [
            f"{busy:.2f}",
            f"{args.configs / t['scan']:.1f}",
            f"{gd:.0f} ({gd / peak:.0%})",
            f"{hand:.0f} ({hand / peak:.0%})",
            f"{alone:.0f} ({alone / peak:.0%})",
            f"{r['peak_dot']:.0f}, {r['peak_all']:.0f}",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    print(
        "cores busy: the process's CPU time over the wall time of the GD calls (median): "
        "below the device count where other jobs held the cores."
    )
    print(
        f"of peak: the GD sweep's update rate (6·d³ flops a step and configuration, "
        f"observables and table not counted) over the best matmul rate of the run "
        f"({peak:.0f} GFLOP/s); likewise the hand-written scan with its batch sharded "
        f"over the process's devices, and {args.configs} d × d products at once (one a "
        f"configuration), 500 in a row: the update's products alone, its ceiling."
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker is not None:
        with open(args.worker_out, "w") as f:
            json.dump(worker(args), f)
        return 0
    from rankflow.engine.devices import default_count
    from rankflow.engine.sysinfo import cpu_model

    labels = list(dict.fromkeys(d.strip() for d in args.devices.split(",")))
    if "default" in labels:  # the default is 'all': that count runs once, as 'default'
        labels = [x for x in labels if x not in ("all", str(default_count()[0]))]
    elif "all" in labels:  # the count of 'all' runs once, as 'all'
        labels = [x for x in labels if x != str(default_count()[0])]
    start = load_average()
    rows = [run_worker(label, args, argv) for label in labels]
    for label, r in zip(labels, rows, strict=True):
        r["label"] = label
    info = {
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}, {cpu_model()}), "
        f"python {platform.python_version()}",
        "load_start": start,
        "load_end": load_average(),
    }
    print_table(rows, args, info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "info": info, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
