"""What ``rankflow.run`` costs beyond its compiled program, with one CPU device and with
one per core (issue #27).

    python -m benchmarks.run_overhead             # 64 configs, d = r = 32, 2,000 steps, 11 saves
    python -m benchmarks.run_overhead --quick     # a smoke run (16 configs, d = 16, 200 steps)
    python -m benchmarks.run_overhead --devices 1,all --repeats 9 --json out.json

The sweeps are ``benchmarks.scaling``'s (a λ × η grid on ``benchmarks.fixed_step``'s
diagonal problem): ``gd``, and ``sde``, the Euler–Maruyama ``stochastic_flow`` (dt = 1,
σ = 0.01). Each device count runs in its own process (``RANKFLOW_CPU_DEVICES=1`` or
``=all``, then ``rankflow.use_all_cores()``, before JAX starts). In each process, per case,
timed warm (compilation cached in-process) and interleaved, alternating the order:

- ``run``: ``rankflow.run(cfg)``, the table included;
- ``program``: ``Program.run`` of the structure's program on the very batch ``rankflow.run``
  builds (its plan's one chunk): the sharded, compiled program with the host ↔ device
  copies, no plan and no table;
- ``scan``: ``benchmarks.fixed_step.reference_program``, the hand-written jitted, vmapped
  ``lax.scan`` of the same update and observables, on one device, same batch;
- ``scan_sm``: the same scan with its batch split over every device by ``shard_map``
  (``rankflow.numerics.batching.per_device``), i.e. hand-written JAX on every core.

``overhead`` is ``run − program``: the serial Python/pandas work of ``rankflow.run``, in
wall time and in CPU time (this process's, all threads; under load the wall times vary
by more than the overhead, its CPU time much less).
Ratios ``×`` are the 1-device time over this process's; ``run/scan_sm`` is the target
"within 1.10× of a hand-written shard_map" (issue #27). Medians of ``--repeats`` calls.
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
from datetime import UTC, datetime
from typing import Any
from unittest import mock

CASES = {"gd": ("gd", None), "sde": ("noisy", "diffrax")}  # case: reference_program's
METHODS = ("run", "program", "scan", "scan_sm")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run_overhead", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="16 configs, d = 16, 200 steps")
    ap.add_argument("--configs", type=int, default=None, help="a square number (default 64)")
    ap.add_argument("--steps", type=int, default=None, help="default 2000")
    ap.add_argument("--dim", type=int, default=None, help="d = m = n = r (default 32)")
    ap.add_argument("--saves", type=int, default=11, help="save.num (default 11)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per method (≥ 5)")
    ap.add_argument("--devices", default="1,all", help="RANKFLOW_CPU_DEVICES values")
    ap.add_argument("--json", default=None, help="also write the numbers as JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.configs = args.configs or (16 if args.quick else 64)
    args.steps = args.steps or (200 if args.quick else 2000)
    args.dim = args.dim or (16 if args.quick else 32)
    args.repeats = max(5, args.repeats or 7)
    args.problem, args.sigma = "diagonal", 0.01
    return args


def case_fns(args: argparse.Namespace, case: str) -> dict[str, Any]:
    """The four timed callables of a case (see the module docstring)."""
    import jax

    import rankflow
    from benchmarks import fixed_step as fs
    from benchmarks.scaling import sweep_config
    from rankflow.core import config as config_lib
    from rankflow.core import family
    from rankflow.core.program import PARAM_KEYS, params_of, program_for
    from rankflow.engine.plan import pad_runs
    from rankflow.numerics.batching import per_device

    cfg = sweep_config(args, case)
    points, chunks = family.plan(config_lib.resolve(cfg))
    assert len(chunks) == 1, "one chunk expected: the program then sees rankflow.run's batch"
    c = chunks[0]
    point = points[c.runs[0][0]]
    params = pad_runs([params_of(points[i], path) for i, path in c.runs], PARAM_KEYS, c.pad_to)
    program = program_for(point)
    scan = fs.reference_program(point, *CASES[case])
    real_jit = jax.jit
    with mock.patch.object(jax, "jit", lambda f: real_jit(per_device(f))):
        scan_sm = fs.reference_program(point, *CASES[case])
    return {
        "run": lambda: rankflow.run(cfg, quiet=True),
        "program": lambda: program.run(params),
        "scan": lambda: scan(params),
        "scan_sm": lambda: scan_sm(params),
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import rankflow

    rankflow.use_all_cores()  # reads RANKFLOW_CPU_DEVICES; before JAX starts
    import jax

    out: dict[str, Any] = {"devices": jax.device_count(), "cases": {}}
    for case in CASES:
        fns = case_fns(args, case)
        for fn in fns.values():
            fn()  # compile
        wall = {m: [] for m in fns}
        cpu = {m: [] for m in fns}
        for i in range(args.repeats):
            for m in METHODS if i % 2 == 0 else METHODS[::-1]:
                t, c = time.perf_counter(), time.process_time()
                fns[m]()
                wall[m].append(time.perf_counter() - t)
                cpu[m].append(time.process_time() - c)
        out["cases"][case] = {
            "wall": {m: statistics.median(v) for m, v in wall.items()},
            "spread": {m: [min(v), max(v)] for m, v in wall.items()},
            "cpu": {m: statistics.median(v) for m, v in cpu.items()},
        }
    return out


def run_worker(label: str, argv: list[str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f
    )
    env["RANKFLOW_CPU_DEVICES"] = label
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "benchmarks.run_overhead", *argv, "--worker", label]
        subprocess.run([*cmd, "--worker-out", path], env=env, check=True)
        with open(path) as f:
            return json.load(f) | {"label": label, "load": os.getloadavg()[0]}


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace, info: dict) -> None:
    print(
        f"{info['date']}; {info['machine']}; {args.configs} configurations, d = r = "
        f"{args.dim}, {args.steps} steps, {args.saves} saves, float32; medians of "
        f"{args.repeats} warm calls; load average {info['load_start']:.2f} at the start, "
        + ", ".join(f"{r['load']:.2f} after {r['label']}" for r in rows)
        + "."
    )
    one = rows[0]
    print()
    print(
        "| case | devices | rankflow.run ms (×) | Program.run ms (×) | overhead ms (of run) "
        "| overhead CPU ms | scan, 1 device, ms | scan shard_map ms (×) | run / scan_sm "
        "| CPU s: run, program | cores busy |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        for r in rows:
            w, w1 = r["cases"][case]["wall"], one["cases"][case]["wall"]
            cpu = r["cases"][case]["cpu"]
            over = w["run"] - w["program"]
            cells = [
                case,
                f"{r['devices']} ({r['label']})",
                f"{1e3 * w['run']:.0f} ({w1['run'] / w['run']:.2f}×)",
                f"{1e3 * w['program']:.0f} ({w1['program'] / w['program']:.2f}×)",
                f"{1e3 * over:.0f} ({over / w['run']:.0%})",
                f"{1e3 * (cpu['run'] - cpu['program']):.1f}",
                f"{1e3 * w['scan']:.0f}",
                f"{1e3 * w['scan_sm']:.0f} ({w1['scan'] / w['scan_sm']:.2f}×)",
                f"{w['run'] / w['scan_sm']:.2f}",
                f"{cpu['run']:.2f}, {cpu['program']:.2f}",
                f"{cpu['run'] / w['run']:.2f}",
            ]
            print("| " + " | ".join(cells) + " |")
    print()
    print(
        "×: against the 1-device process (for scan shard_map: against the 1-device scan "
        "of that process). overhead: rankflow.run − Program.run (plan, padding, table), "
        "wall and CPU time (medians). "
        "cores busy: CPU time over wall time of rankflow.run; below the device count where "
        "other processes held the cores, and the ratios then measure the load."
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker is not None:
        with open(args.worker_out, "w") as f:
            json.dump(worker(args), f)
        return 0
    from rankflow.engine.devices import physical_cores
    from rankflow.engine.sysinfo import cpu_model

    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs ({physical_cores()} physical cores, "
        f"{platform.machine()}, {cpu_model()}), python {platform.python_version()}",
        "load_start": os.getloadavg()[0],
    }
    labels = [d.strip() for d in args.devices.split(",")]
    rows = [run_worker(label, argv) for label in labels]
    print_table(rows, args, info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "info": info, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
