"""How long ``import rankflow`` takes, against ``import jax`` measured in the same run.

    python -m benchmarks.import_time                    # 15 repeats
    python -m benchmarks.import_time --repeats 3        # a smoke run
    python -m benchmarks.import_time --baseline ../old  # and an older checkout's rankflow

Each repeat starts two fresh interpreters, in alternating order: one times ``import jax``
alone, the other ``import rankflow`` (which imports jax, optax, diffrax, pandas and its own
core; the subpackages of ``rankflow.SUBPACKAGES`` that need matplotlib, flax or the
checkpoint readers are imported when first used). Each time is ``time.perf_counter``
around the import statement, so the interpreter's start-up is not in it. The line gives
the medians and ranges over the repeats and the ratios of the medians; with
``--baseline DIR``, the rankflow of that checkout is timed in the same repeats (its
processes interleaved with the others), so that a change is measured against what it
changed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"


def timed(mod: str, root: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(mod=mod)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env=env,
    )
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--baseline", type=Path, help="an older checkout to time as well")
    args = parser.parse_args(argv)
    cases = {"jax": ("jax", ROOT), "rankflow": ("rankflow", ROOT)}
    if args.baseline:
        cases["rankflow (baseline)"] = ("rankflow", args.baseline.resolve())
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.repeats):
        names = list(cases)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(*cases[name]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{args.repeats} repeats" + (f", baseline {args.baseline}" if args.baseline else "")
    )
    for name, v in times.items():
        print(f"import {name}: median {med[name]:.3f} s (range {min(v):.3f}–{max(v):.3f})")
    print(f"ratio rankflow/jax: {med['rankflow'] / med['jax']:.2f}")
    if args.baseline:
        print(f"ratio rankflow/baseline: {med['rankflow'] / med['rankflow (baseline)']:.2f}")


if __name__ == "__main__":
    main()
