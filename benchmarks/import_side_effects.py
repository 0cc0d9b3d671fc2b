"""What importing rankflow costs a user's own JAX code: nothing, since issue #27.

    python -m benchmarks.import_side_effects               # 2048² float32 dot, 10 calls, 6 repeats
    python -m benchmarks.import_side_effects --quick       # a smoke run (256², 3 calls, 1 repeat)
    python -m benchmarks.import_side_effects --json out.json

Until issue #27, ``import rankflow`` added ``--xla_cpu_multi_thread_eigen=false`` to
``XLA_FLAGS`` and asked JAX for one CPU device per core, which changes how a notebook's
own JAX code runs. Each repeat times a user's float32 ``n × n`` matmul (``jnp.dot``
jitted, ``block_until_ready``, the median of ``--calls`` calls after two warm-up calls)
in three fresh processes, their order alternating from one repeat to the next:

- ``plain``: JAX alone, rankflow never imported;
- ``import``: ``import rankflow`` first (and its submodules a user reaches:
  ``rankflow.cli``, ``rankflow.attention``);
- ``use_all_cores``: ``import rankflow; rankflow.use_all_cores()``, what the import did
  before issue #27 (and what the ``rankflow`` command does).

Ratios are each process's median over the ``plain`` process's of the same repeat; the
line gives their median and range over the repeats, and says whether the ``import``
process saw the same ``XLA_FLAGS`` and device count as ``plain``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("plain", "import", "use_all_cores")
SETUP = {
    "plain": "",
    "import": "import rankflow, rankflow.cli, rankflow.attention",
    "use_all_cores": "import rankflow\nrankflow.use_all_cores()",
}
# The user's code: JAX alone, timed after the kind's set-up.
WORKER = """
import json, os, statistics, time
SETUP
import jax, jax.numpy as jnp
x = jax.random.normal(jax.random.PRNGKey(0), (N, N), jnp.float32)
dot = jax.jit(jnp.dot)
for _ in range(2):
    dot(x, x).block_until_ready()
times = []
for _ in range(CALLS):
    t = time.perf_counter()
    dot(x, x).block_until_ready()
    times.append(time.perf_counter() - t)
print(json.dumps({
    "median": statistics.median(times),
    "xla_flags": os.environ.get("XLA_FLAGS"),
    "devices": jax.device_count(),
}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.import_side_effects", description=__doc__
    )
    ap.add_argument("--quick", action="store_true", help="256², 3 calls, 1 repeat")
    ap.add_argument("--n", type=int, default=None, help="matrix size (default 2048)")
    ap.add_argument("--calls", type=int, default=None, help="timed calls (default 10)")
    ap.add_argument("--repeats", type=int, default=None, help="process triples (default 6)")
    ap.add_argument("--json", default=None, help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    args.n = args.n or (256 if args.quick else 2048)
    args.calls = args.calls or (3 if args.quick else 10)
    args.repeats = args.repeats or (1 if args.quick else 6)
    return args


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process of ``kind``: its median matmul time, XLA_FLAGS, device count.
    The parent's device and thread settings are removed: a user's process sets none."""
    code = WORKER.replace("SETUP", SETUP[kind])
    code = code.replace("CALLS", str(args.calls)).replace("N, N", f"{args.n}, {args.n}")
    drop = ("XLA_FLAGS", "RANKFLOW_CPU_DEVICES", "JAX_NUM_CPU_DEVICES", "RANKFLOW_EIGEN_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def _ratio_text(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f}× (range {min(ratios):.3f}–{max(ratios):.3f})"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rankflow.engine.devices import physical_cores
    from rankflow.engine.sysinfo import cpu_model

    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs ({physical_cores()} physical cores, "
        f"{platform.machine()}, {cpu_model()}), python {platform.python_version()}",
        "load_start": os.getloadavg()[0],
    }
    runs: list[dict[str, dict[str, Any]]] = []
    for i in range(args.repeats):
        order = KINDS if i % 2 == 0 else KINDS[::-1]
        runs.append({kind: measure(kind, args) for kind in order})
    info["load_end"] = os.getloadavg()[0]
    flops = 2 * args.n**3
    print(
        f"{info['date']}; {info['machine']}; load average {info['load_start']:.2f} → "
        f"{info['load_end']:.2f}; float32 {args.n} × {args.n} jnp.dot, medians of "
        f"{args.calls} calls, {args.repeats} repeats of fresh processes (alternating order)"
    )
    print()
    print(
        "| process | median time (ms) | GFLOP/s | × plain: median (range) | XLA_FLAGS | devices |"
    )
    print("|---|---:|---:|---:|---|---:|")
    for kind in KINDS:
        t = statistics.median(r[kind]["median"] for r in runs)
        ratios = [r[kind]["median"] / r["plain"]["median"] for r in runs]
        last = runs[-1][kind]
        print(
            f"| {kind} | {1e3 * t:.1f} | {flops / t / 1e9:.0f} | {_ratio_text(ratios)} | "
            f"{last['xla_flags'] or '(unset)'} | {last['devices']} |"
        )
    same = all(
        (r["import"]["xla_flags"], r["import"]["devices"])
        == (r["plain"]["xla_flags"], r["plain"]["devices"])
        for r in runs
    )
    ratios = [r["import"]["median"] / r["plain"]["median"] for r in runs]
    print()
    print(
        f"import rankflow / plain: {_ratio_text(ratios)}; XLA_FLAGS and device count "
        + ("the same as plain" if same else "DIFFERENT from plain")
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "info": info, "args": vars(args)}, f, indent=2)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
