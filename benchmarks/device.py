"""rankflow on whatever accelerator JAX sees: the same tables as on CPU, and its speed.

    python -m benchmarks.device            # under 5 minutes on a GPU, TPU or 2 CPU cores
    python -m benchmarks.device --quick    # a smoke run (the test suite runs it)
    python -m benchmarks.device --parts core,gf_speed   # a subset
    python -m benchmarks.device --json out.json

On JAX's default backend (a GPU or TPU where JAX finds one; the CPU otherwise, with
rankflow's default of one device per physical core), this

1. runs a small core sweep (GD and adaptive Tsit5 gradient flow, λ × seed, float32), a
   ``rankflow.compare`` of GD and gradient flow (matrix sensing, float64) and an
   attention sweep (SGD, float32), and compares every table with the same runs on one
   CPU device (a process with ``JAX_PLATFORMS=cpu``, ``RANKFLOW_CPU_DEVICES=1``):
   integer and text columns exactly, each float column to within ``--rtol`` (default
   1e-4) of that column's largest magnitude; both sides run float32 matrix products at
   full float32 precision (``jax_default_matmul_precision = "highest"``: GPUs otherwise
   multiply float32 in TF32). A mismatch is printed and the exit status is 1;
2. measures the gradient-flow update (Euler, dt = 1, float32) of one configuration at
   d = m = n = r = ``--dim`` (default 512; 6·d³ flops a step: the difference of a K-
   and a 2K-step run) against the device's matmul peak (float32 ``jnp.dot`` of n × n
   squares, best over n), and attention training throughput (steps per second of a
   batch of runs of ``sims/attention/ablation.toml``'s model, AdamW, over whole runs),
   all at JAX's default matmul precision.

Times are medians of ``--repeats`` calls after a compiling one.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

LIMIT_S = 300  # the whole script, by the budget
# What the script runs: the compared tables of a core sweep, a compare and an attention
# sweep; the GF update against the matmul peak; attention training throughput.
PARTS = ("core", "compare", "attention", "gf_speed", "attention_speed")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.device",
        description="rankflow's tables on the default backend against one CPU device, "
        "and its speed there",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: smaller runs and sizes")
    ap.add_argument("--dim", type=int, default=None, help="d = r of the GF update (512)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls (default 3)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="float tolerance, of the column")
    ap.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated subset of {', '.join(PARTS)} (default: all)",
    )
    ap.add_argument("--json", default=None, help="also write the results as JSON")
    ap.add_argument("--reference", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    for part in args.parts:
        if part not in PARTS:
            ap.error(f"--parts: unknown part {part!r}; choose from {', '.join(PARTS)}")
    args.dim = args.dim or (32 if args.quick else 512)
    args.repeats = args.repeats or 3
    return args


# --- the runs compared ---------------------------------------------------------------------


def core_config(quick: bool, dynamics: dict, solver: dict | None = None) -> dict[str, Any]:
    cfg = {
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.7, 0.4, 0.2, 0.1, 0.05]},
        "model": {"r": 6},
        "init": {"kind": "gaussian", "scale": 0.3},
        "dynamics": dynamics,
        "save": {"t1": 40 if quick else 400, "num": 5},
        "sweep": {"dynamics.lam": [0.0, 0.02, 0.05], "seed": [0, 1, 2]},
    }
    if solver:
        cfg["solver"] = solver
    return cfg


COMPARE = {
    "x64": True,
    "problem": {"kind": "sensing", "m": 8, "n": 6, "rank": 2, "samples": 100, "noise": 0.01},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
    "compare": {"window": 20, "halvings": 2},
}

ATTENTION = {
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
    "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4, "val_size": 8},
    "dynamics": {"kind": "sgd", "eta": 0.1, "batch": 4},
    "train": {"eval_every": 20},
    "save": {"t1": 40},
    "sweep": {"dynamics.lam": [0.0, 0.1, 0.2], "seed": [0, 1]},
}


def suite(quick: bool, parts: list[str]) -> dict[str, Any]:
    """Every table of the compared runs (of ``parts``), by name, and the devices that
    ran them."""
    import jax

    import rankflow
    import rankflow.attention as ra
    from rankflow.compare import compare

    jax.config.update("jax_default_matmul_precision", "highest")
    tables = {}
    if "core" in parts:
        tables["core gd"] = rankflow.run(core_config(quick, {"kind": "gd", "eta": 0.1}))
    if "core" in parts and not quick:  # adaptive: batched per device as measured
        tables["core gradient_flow tsit5"] = rankflow.run(
            core_config(
                quick,
                {"kind": "gradient_flow", "eta": 0.1},
                {"method": "tsit5", "adaptive": True, "rtol": 1e-5, "atol": 1e-7},
            )
        )
    if "compare" in parts:
        overrides = {"save.t1": 20 if quick else 200, "save.num": 5}
        if quick:
            overrides.update({"compare.halvings": 1, "compare.window": 5})
        for name, table in compare(COMPARE, overrides=overrides).items():
            tables[f"compare {name}"] = table
    if "attention" in parts:
        quicker = {"save.t1": 20, "train.eval_every": 10}
        att = ra.run(ATTENTION, overrides=quicker if quick else None)
        tables["attention heads"], tables["attention loss"] = att.heads, att.loss
    jax.config.update("jax_default_matmul_precision", None)
    return {"tables": tables, "devices": [str(d) for d in jax.devices()]}


def cpu_reference(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`suite` in a process on one CPU device."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", RANKFLOW_CPU_DEVICES="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ref.pkl")
        cmd = [sys.executable, "-m", "benchmarks.device", "--reference", out]
        cmd += ["--parts", ",".join(args.parts)] + (["--quick"] if args.quick else [])
        subprocess.run(cmd, env=env, check=True)
        with open(out, "rb") as f:
            return pickle.load(f)


def mismatches(here: dict, ref: dict, rtol: float) -> tuple[list[str], float]:
    """Where two suites' tables differ (one line each), and the largest scaled deviation
    of a float column over all tables (0: identical bits)."""
    bad, worst = [], 0.0
    for name, a in ref.items():
        b = here.get(name)
        if b is None or list(a.columns) != list(b.columns) or len(a) != len(b):
            bad.append(f"{name}: other columns or rows than on CPU")
            continue
        for col in a.columns:
            x, y = a[col].to_numpy(), b[col].to_numpy()
            if a[col].dtype.kind == "f":
                if not np.array_equal(np.isnan(x), np.isnan(y)):
                    bad.append(f"{name}.{col}: NaN in other places than on CPU")
                    continue
                ok = ~np.isnan(x)
                scale = max(float(np.max(np.abs(x[ok]), initial=0.0)), 1e-30)
                dev = float(np.max(np.abs(x[ok] - y[ok]), initial=0.0)) / scale
                worst = max(worst, dev)
                if dev > rtol:
                    bad.append(f"{name}.{col}: differs by {dev:.2e} of its scale (> {rtol:g})")
            elif not np.array_equal(x.astype(str), y.astype(str)):
                bad.append(f"{name}.{col}: differs from CPU")
    return bad, worst


# --- speed ---------------------------------------------------------------------------------


def median_call(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def matmul_peak(sizes: tuple[int, ...], repeats: int) -> float:
    """GFLOP/s of a float32 ``jnp.dot`` of n × n squares on the default device, best
    over ``sizes`` (each timing runs products for ~2 GFLOP, or 20 on an accelerator)."""
    import jax
    import jax.numpy as jnp

    work = 2e9 if jax.default_backend() == "cpu" else 2e10
    best = 0.0
    for n in sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
        b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
        f = jax.jit(jnp.dot)
        calls = max(1, int(work / (2 * n**3)))

        def run(f=f, a=a, b=b, calls=calls):
            for _ in range(calls):
                out = f(a, b)
            out.block_until_ready()

        best = max(best, calls * 2 * n**3 / median_call(run, repeats) / 1e9)
    return best


def gf_update(d: int, steps: int, repeats: int) -> float:
    """Seconds per step of one configuration's gradient-flow update at d = r (Euler,
    dt = 1, float32): the difference of a ``2·steps`` and a ``steps`` run."""
    from rankflow.core import config as config_lib
    from rankflow.core.program import params_of, program_for

    times = {}
    for k in (steps, 2 * steps):
        cfg = {
            "problem": {"kind": "diagonal", "singular_values": list(np.linspace(1, 1 / d, d))},
            "model": {"r": d},
            "init": {"kind": "gaussian", "scale": 0.1},
            "dynamics": {"kind": "gradient_flow", "eta": 0.01, "lam": 0.01},
            "solver": {"method": "euler", "adaptive": False, "dt": 1.0},
            "save": {"t1": float(k), "num": 2},
        }
        point = config_lib.expand(config_lib.resolve(cfg))[0]
        prog = program_for(point)
        params = {key: np.asarray([v]) for key, v in params_of(point, 0).items()}
        times[k] = median_call(lambda prog=prog, params=params: prog.run(params), repeats)
    diff = times[2 * steps] - times[steps]
    return diff / steps if diff > 0 else float("nan")  # NaN: lost in the noise


def attention_rate(quick: bool, repeats: int) -> tuple[float, int]:
    """Training steps per second of a batch of runs (``sims/attention/ablation.toml``'s
    model and optimizer; 4 runs, or 2 tiny ones with ``quick``) and the batch size, over
    a whole ``rankflow.attention.run`` after a compiling one: its data, one evaluation
    and its tables included (a lower bound on the training loop's own rate; the
    difference of two run lengths was lost in the noise of a shared machine)."""
    import rankflow.attention as ra

    if quick:
        model = {"D": 8, "H": 2, "layers": 1, "context": 8}
        task = {"kind": "char_lm", "seq_len": 8, "val_fraction": 0.1, "val_size": 16}
        steps, batch, runs = 500, 4, [0, 1]
    else:
        model = {"D": 32, "H": 4, "layers": 2, "context": 32, "mlp_ratio": 4}
        task = {"kind": "char_lm", "seq_len": 32, "val_fraction": 0.1, "val_size": 256}
        steps, batch, runs = 400, 32, [0, 1, 2, 3]
    cfg = {
        "x64": False,
        "attention": model,
        "task": task,
        "dynamics": {"kind": "adamw", "eta": 3e-3, "batch": batch, "lam": 1.0},
        "train": {"eval_every": steps},
        "save": {"t1": steps},
        "sweep": {"seed": runs},
    }
    seconds = median_call(lambda: ra.run(cfg), repeats)
    return steps * len(runs) / seconds, len(runs)


def gf_speed(args: argparse.Namespace) -> dict[str, Any]:
    import jax

    sizes = (256,) if args.quick else (512, 1024, 2048, 4096)
    peak = matmul_peak(sizes, args.repeats)
    d = args.dim
    # Steps for a K-step run of about a second at the rate expected (50 GFLOP/s a CPU
    # core, 20 TFLOP/s an accelerator), so that the difference of the runs stands out.
    rate = 5e10 if jax.default_backend() == "cpu" else 2e13
    steps = max(10, int((0.1 if args.quick else 1.0) * rate / (6 * d**3)))
    step_s = gf_update(d, steps, args.repeats)
    return {
        "peak_gflops": peak,
        "peak_sizes": list(sizes),
        "dim": d,
        "gf_steps": steps,
        "gf_step_s": step_s,
        "gf_gflops": 6 * d**3 / step_s / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    if args.reference:
        with open(args.reference, "wb") as f:
            pickle.dump(suite(args.quick, args.parts), f)
        return 0
    import jax

    import rankflow

    rankflow.use_all_cores()  # one CPU device per core, before JAX starts

    backend, found = jax.default_backend(), jax.devices()
    print(f"backend {backend}: {len(found)} × {found[0].device_kind}", flush=True)
    bad, worst, s = [], 0.0, {}
    if set(args.parts) & {"core", "compare", "attention"}:
        here = suite(args.quick, args.parts)
        ref = cpu_reference(args)
        bad, worst = mismatches(here["tables"], ref["tables"], args.rtol)
        print(
            f"tables ({', '.join(ref['tables'])}) on {backend}, {len(found)} devices, "
            f"against one CPU device: {'all agree' if not bad else f'{len(bad)} mismatches'}"
            f" (largest float deviation {worst:.1e} of the column's scale; tolerance "
            f"{args.rtol:g})"
        )
        for line in bad:
            print(f"  MISMATCH {line}")
    if "gf_speed" in args.parts:
        s.update(gf_speed(args))
        print(
            f"GF update, d = r = {s['dim']}, one configuration: {s['gf_gflops']:.1f} GFLOP/s"
            f" = {s['gf_gflops'] / s['peak_gflops']:.0%} of the matmul peak "
            f"{s['peak_gflops']:.0f} GFLOP/s (jnp.dot of {s['peak_sizes']} squares)"
        )
    if "attention_speed" in args.parts:
        rate, runs = attention_rate(args.quick, args.repeats)
        s.update(attention_steps_per_s=rate, attention_runs=runs)
        print(
            f"attention training: {rate:.0f} steps/s (training steps × runs over the "
            f"whole run's time) in a batch of {runs} runs"
        )
    total = time.perf_counter() - started
    print(f"took {total:.0f} s" + (f" (over the {LIMIT_S} s budget)" if total > LIMIT_S else ""))
    if args.json:
        out = {"backend": backend, "devices": [str(d) for d in found], "mismatches": bad}
        out.update(worst=worst, seconds=total, **s)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
