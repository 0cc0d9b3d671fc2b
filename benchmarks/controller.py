"""The step-size controller of adaptive solves: which PID coefficients to use.

    python -m benchmarks.controller            # 64 configurations, d = 32, t ∈ [0, 2000]
    python -m benchmarks.controller --quick    # a smoke run (small sizes)

The adaptive problem of ``benchmarks.peers`` (the diagonal problem, s = linspace(1, 1/d,
d), Gaussian start of scale 0.1, a λ × η grid with λ ∈ [0, 0.05], η ∈ [0.02, 0.2]),
gradient flow with Tsit5 at rtol = 1e-6, atol = 1e-8, solved by rankflow's
``Program.run`` (its measured batching strategy) with ``solver.pcoeff``,
``solver.icoeff`` (and ``solver.dcoeff``) set to each of ``SETTINGS``, in float32 and
float64. For each setting it prints:

- run time: the median of ``--repeats`` calls, all settings of a dtype interleaved in
  alternating order, with the ratio to the integral-only controller (diffrax's default)
  measured in the same run;
- accepted and rejected steps, summed over the configurations (the same solve on the
  bare vector field, with diffrax's step statistics);
- error: max over configurations of ‖(A, B) − ref‖_F / ‖ref‖_F at t = T, against
  ``benchmarks.peers``' float64 reference (Dopri8, rtol 1e-10, atol 1e-12).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks import fixed_step as fs
from benchmarks import peers

# (pcoeff, icoeff, dcoeff); the first is diffrax's integral-only default, the others are
# the PI settings diffrax's documentation suggests trying.
SETTINGS = (
    (0.0, 1.0, 0.0),
    (0.3, 0.3, 0.0),
    (0.2, 0.4, 0.0),
    (0.4, 0.3, 0.0),
    (0.1, 0.3, 0.0),
    (0.3, 0.4, 0.0),
)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.controller", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes")
    ap.add_argument("--dim", type=int, default=None, help="d = m = n = r (default 32)")
    ap.add_argument("--configs", type=int, default=None, help="configurations (default 64)")
    ap.add_argument("--steps", type=int, default=None, help="horizon t1 (default 2000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls (default 5)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    q = args.quick
    args.dim = args.dim or (8 if q else 32)
    args.configs = args.configs or (8 if q else 64)
    args.steps = args.steps or (100 if q else 2000)
    args.repeats = args.repeats or (3 if q else 5)
    args.saves, args.problem = 2, "diagonal"
    return args


def solver_of(setting) -> dict:
    p, i, d = setting
    return {
        "method": "tsit5",
        "adaptive": True,
        "rtol": peers.ADAPTIVE_RTOL,
        "atol": peers.ADAPTIVE_ATOL,
        "pcoeff": p,
        "icoeff": i,
        "dcoeff": d,
    }


def step_counts(setting, A0, B0, lam, eta, S, T, x64: bool) -> tuple[int, int]:
    """Accepted and rejected Tsit5 steps, summed over the configurations."""
    import diffrax
    import jax
    import jax.numpy as jnp

    p, i, d = setting
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        field = peers.jax_field(jnp.asarray(S, dtype))
        controller = diffrax.PIDController(
            rtol=peers.ADAPTIVE_RTOL, atol=peers.ADAPTIVE_ATOL, pcoeff=p, icoeff=i, dcoeff=d
        )

        def one(x):
            A, B, l, e = x
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field),
                diffrax.Tsit5(),
                0.0,
                T,
                None,
                (A, B),
                (l, e),
                saveat=diffrax.SaveAt(t1=True),
                stepsize_controller=controller,
                max_steps=100_000,
            )
            return sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

        xs = tuple(jnp.asarray(x, dtype) for x in (A0, B0, lam, eta))
        acc, rej = jax.jit(lambda xs: jax.lax.map(one, xs))(xs)
        return int(np.sum(acc)), int(np.sum(rej))


def measure(args, x64: bool, dog) -> list[dict]:
    from rankflow.core.program import program_for

    points = [
        peers.point_for(args, "gradient_flow", x64=x64, solver=solver_of(s)) for s in SETTINGS
    ]
    params = fs.batch_params(points[0], args)
    lam, eta = params["dynamics.lam"], params["dynamics.eta"]
    S, T = peers.target_of(args.dim), float(args.steps)
    A0, B0 = peers.initial_factors(points[0], params)
    ref = peers.flow_reference(A0, B0, lam, eta, S, T)
    names = [f"pcoeff {p:g}, icoeff {i:g}, dcoeff {d:g}" for p, i, d in SETTINGS]
    progs = [program_for(pt) for pt in points]
    fns = {n: (lambda prog=prog: prog.run(params)) for n, prog in zip(names, progs)}
    _, times = peers.race(dog, fns, args.repeats)
    base = times[names[0]]["run_s"]
    rows = []
    for n, s, pt in zip(names, SETTINGS, points):
        finals = peers.final_factors(program_for(pt, save="states").run(params))
        acc, rej = step_counts(s, A0, B0, lam, eta, S, T, x64)
        rows.append(
            {
                "dtype": "float64" if x64 else "float32",
                "setting": n,
                "pcoeff": s[0],
                "icoeff": s[1],
                "dcoeff": s[2],
                "run_s": times[n]["run_s"],
                "runs_s": times[n]["runs_s"],
                "vs_integral": times[n]["run_s"] / base,
                "accepted": acc,
                "rejected": rej,
                "error": peers.factor_error(*finals, ref),
            }
        )
    return rows


def main(argv=None) -> int:
    import os

    import jax

    args = parse_args(argv)
    jax.config.update("jax_enable_x64", False)
    dog = fs.Watchdog(120.0, 1800.0)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rows = measure(args, False, dog) + measure(args, True, dog)
    print(
        f"{args.configs} configurations, d = r = {args.dim}, t ∈ [0, {args.steps}], Tsit5, "
        f"rtol {peers.ADAPTIVE_RTOL:g}, atol {peers.ADAPTIVE_ATOL:g}; medians of "
        f"{args.repeats} interleaved calls; load average {load0:.2f} → "
        f"{os.getloadavg()[0]:.2f}; {time.perf_counter() - t0:.0f} s"
    )
    print()
    print("| dtype | controller | run s | × integral-only | accepted | rejected | error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        spread = f"{min(r['runs_s']):.3f}–{max(r['runs_s']):.3f}"
        print(
            f"| {r['dtype']} | {r['setting']} | {r['run_s']:.3f} ({spread}) | "
            f"{r['vs_integral']:.2f} | {r['accepted']} | {r['rejected']} | {r['error']:.1e} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    import rankflow

    rankflow.use_all_cores()  # as the rankflow command does: one CPU device per core
    sys.exit(main())
