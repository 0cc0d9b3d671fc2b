"""Sweeps at scale (issue #35): what planning costs, and how far apart chunks start,
whatever the sweep's size.

    python -m benchmarks.sweep_scale              # 10^6 points; 30,000 structures
    python -m benchmarks.sweep_scale --quick      # 10^4 points; 1,000 structures (smoke run)

Both sweeps are of a tiny problem (diagonal, d = r = 2, GD, η = 0.1, 10 steps, 2 saves):

1. ``points``: 1,000 λ × 1,000 seeds = 10^6 points, one structure. Timed in this
   process: ``rankflow.resolve`` and the engine's checked plan (``plan``, every guard
   included). Then the whole sweep is run as a user runs it, ``python -m rankflow.cli run
   CONFIG --out DIR`` in a fresh process, and each chunk's start is read from the chunk
   files it wrote: chunk k + 1 starts when chunk k's file is written, so the gap between
   consecutive files' modification times is the time from one chunk's start to the
   next's (its batch run, its table, its parquet file and the step to the next chunk).
   The first file (the compilation) is left out; median, 95th percentile and max.
2. ``structures``: 30,000 values of ``save.t1`` (each a structure, compiled on its own;
   ``RANKFLOW_MAX_STRUCTURES=30000``): the seconds from starting ``python -m
   rankflow.cli run`` to the moment its first chunk starts (before it compiles; the
   process is stopped there), imports included, and the import alone.

Targets (issue #35): the plan of 10^6 points within 2 s, chunks starting within 50 ms
of each other, the first chunk of 30,000 structures within 5 s. Prints the machine (CPUs,
load average) and the numbers; ``--json PATH`` saves them; exit status 1 where a target is
missed (only without ``--quick``).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = """[problem]
kind = "diagonal"
singular_values = [1.0, 0.5]
[model]
r = 2
[dynamics]
kind = "gd"
eta = 0.1
[save]
num = 2
"""
# In a fresh process: the command, stopped where its first chunk starts; prints the
# wall-clock time (time.time()) of that moment and how long the imports took.
FIRST_CHUNK = """
import os, sys, time
t0 = time.time()
import rankflow.cli
from rankflow.core import family
imported = time.time() - t0
def first_chunk(self, *args, **kwargs):
    print(time.time(), imported, flush=True)
    os._exit(0)
family.CoreFamily.run_chunk = first_chunk
sys.exit(rankflow.cli.main(sys.argv[1:]))
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _write(path: Path, sweep: dict[str, list], t1: float | None) -> Path:
    lines = [BASE + (f"t1 = {t1}\n" if t1 is not None else ""), "[sweep]"]
    lines += [f'"{k}" = [{", ".join(map(repr, v))}]' for k, v in sweep.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def points_case(folder: Path, n_lam: int, n_seed: int) -> dict:
    """Plan and run the sweep of ``n_lam`` λ × ``n_seed`` seeds (module docstring, 1)."""
    import rankflow
    from rankflow.core.family import CORE
    from rankflow.engine.plan import checked_plan

    sweep = {"dynamics.lam": [i / n_lam for i in range(n_lam)], "seed": list(range(n_seed))}
    config = _write(folder / "points.toml", sweep, 10.0)
    t0 = time.perf_counter()
    cfg = rankflow.resolve(config)
    resolved = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, points, chunks = checked_plan(CORE, cfg, None)
    planned = time.perf_counter() - t0
    out = folder / "points_out"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "rankflow.cli", "run", str(config), "--out", str(out)]
    run = subprocess.run(cmd + ["--quiet"], env=_env(), capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"the sweep failed: {run.stderr.strip()}")
    wall = time.perf_counter() - t0
    files = sorted((out / "results.parquet").glob("chunk-*.parquet"))
    stamps = [f.stat().st_mtime_ns / 1e9 for f in files]
    gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]  # the first (compiling) left out
    q95 = statistics.quantiles(gaps, n=20, method="inclusive")[-1] if len(gaps) > 1 else gaps[0]
    return {
        "points": len(points),
        "chunks": len(chunks),
        "chunk_runs": chunks[0].pad_to,
        "resolve_s": resolved,
        "plan_s": planned,
        "run_s": wall,
        "gap_median_ms": 1e3 * statistics.median(gaps),
        "gap_p95_ms": 1e3 * q95,
        "gap_max_ms": 1e3 * max(gaps),
        "gaps_over_50ms": sum(g > 0.05 for g in gaps),
    }


def structures_case(folder: Path, n: int, repeats: int) -> dict:
    """Seconds from the command's start to its first chunk's (module docstring, 2)."""
    config = _write(folder / "structures.toml", {"save.t1": [10.0 + i for i in range(n)]}, None)
    env = _env(RANKFLOW_MAX_STRUCTURES=str(n))
    starts, imports = [], []
    for k in range(repeats):
        cmd = [sys.executable, "-c", FIRST_CHUNK, "run", str(config)]
        cmd += ["--out", str(folder / f"structures_out{k}")]
        t0 = time.time()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode or not res.stdout.strip():
            raise SystemExit(f"the structural sweep failed: {res.stderr.strip()}")
        at, imported = map(float, res.stdout.split())
        starts.append(at - t0)
        imports.append(imported)
    return {
        "structures": n,
        "first_chunk_s": statistics.median(starts),
        "first_chunk_all_s": starts,
        "import_s": statistics.median(imports),
    }


def machine() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} CPUs, load {load}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sweep_scale", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="10^4 points, 1,000 structures")
    ap.add_argument("--repeats", type=int, default=3, help="runs of the structural case")
    ap.add_argument("--json", default=None, help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    n_lam, n_seed, n_struct = (100, 100, 1000) if args.quick else (1000, 1000, 30000)
    print(f"machine: {machine()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        p = points_case(Path(tmp), n_lam, n_seed)
        s = structures_case(Path(tmp), n_struct, args.repeats)
    print(
        f"{p['points']:,} points ({n_lam:,} λ × {n_seed:,} seeds) in {p['chunks']:,} chunks "
        f"of {p['chunk_runs']:,} runs: resolve {p['resolve_s']:.3f} s, plan "
        f"{p['plan_s']:.3f} s; the whole sweep {p['run_s']:.1f} s; chunk k to k + 1 "
        f"(start to start, files written): median {p['gap_median_ms']:.1f} ms, 95% "
        f"{p['gap_p95_ms']:.1f} ms, max {p['gap_max_ms']:.1f} ms, "
        f"{p['gaps_over_50ms']} of {p['chunks'] - 2} over 50 ms"
    )
    print(
        f"{s['structures']:,} structures: the first chunk starts {s['first_chunk_s']:.2f} s "
        f"after the command (median of {len(s['first_chunk_all_s'])}: "
        f"{', '.join(f'{x:.2f}' for x in s['first_chunk_all_s'])}; imports "
        f"{s['import_s']:.2f} s)"
    )
    missed = [
        what
        for what, ok in (
            ("plan ≤ 2 s", p["plan_s"] <= 2),
            ("chunks within 50 ms", p["gap_max_ms"] <= 50),
            ("first chunk ≤ 5 s", s["first_chunk_s"] <= 5),
        )
        if not ok
    ]
    print("targets: " + ("all met" if not missed else "missed: " + ", ".join(missed)))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), **p, **s}, indent=2))
    return 1 if missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
