"""Fixed-step dynamics: rankflow against a hand-written, jitted, vmapped ``lax.scan``.

    python -m benchmarks.fixed_step                  # 64 configs, 2,000 steps, d = 32
    python -m benchmarks.fixed_step --quick          # a smoke run (seconds)
    python -m benchmarks.fixed_step --configs 128 --steps 4000 --dim 16 --json out.json

Four cases on the same problem, the same configurations (a λ × η grid, one seed per
configuration), the same initial state and the same number of steps:

  (a) ``gd`` and ``gradient_flow`` (diffrax Euler, dt = 1) against the scan
      ``θ ← θ − η(∇L + λθ)``;                                         target ratio ≤ 1.10
  (b) ``sgd_gaussian`` and ``stochastic_flow`` (diffrax Euler–Maruyama, dt = 1) against
      a scan that draws ``jax.random.normal`` at every step,
      ``θ ← θ − η(∇L + σξ + λθ)``;                                    target ratio ≤ 1.25

The ratio is rankflow's run time over the scan's (median of the calls; the fastest calls'
ratio and the process-CPU-time ratio are shown too). Fairness:

- Both sides compute the same thing: the observables of ``rankflow.core.observables`` at the
  same save times (``--saves`` evenly spaced saves; t = 0 and t = steps by default),
  inside the jitted, vmapped program of the steps. The scan is structured as rankflow's
  optimizer programs are (an outer scan over save intervals whose body runs the steps and
  then observes), with a hand-written gradient ``G = ∇_W L``, ``(∇_A, ∇_B) = (G B, Gᵀ A)``.
- The same start: both sides derive data and (A, B) from the same seed with
  ``rankflow.core.problems`` (inside both programs).
- The same noise, bit for bit: the ``sgd_gaussian`` scan splits its key as rankflow's
  optax noise transform does; the ``stochastic_flow`` scan draws from the keys diffrax's
  ``UnsafeBrownianPath`` uses (``fold_in`` of the bits of t₀ and t₁) on diffrax's time
  grid, which rankflow lays on each save interval: ``t_k = s + (e − s)·(k/N)``. Each row
  shows the largest deviation of the observables between the two sides, each relative
  to its scale (0: identical bits).
  ``gradient_flow``'s Euler steps are ``t_{k+1} − t_k`` on that float32 grid, not
  exactly 1: it is checked against an (untimed) Euler scan on the grid, and its distance
  to the timed dt = 1 scan is printed.
- Timing: ``compile`` is the first call minus the median run (tracing + XLA compile);
  ``run`` is the median of ``--repeats`` further calls, rankflow and scan interleaved
  (alternating which goes first) so that load changes hit both. rankflow is timed through
  ``rankflow.core.program.program_for(point).run(params)``: the cached compiled program of
  the structure, which ``rankflow.run`` calls, without building the pandas table; that
  includes the host → device copy of the parameters and the device → host copy of the
  observables, and the scan side does the same.

Each case runs in its own worker process. jaxlib 0.10's batched CPU LAPACK kernels can
deadlock when two of them run at once on a 2-core machine (rankflow's observables avoid
it by computing one matrix at a time); a watchdog ends a worker whose call used no CPU
for ``--stall-timeout`` seconds, the case is started again (up to ``--attempts`` times)
and the table counts it under ``hangs``, so a regression shows as a number. See
README.md in this folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HUNG = 3  # exit code of a worker whose call deadlocked
CASES = ("gd", "gradient_flow", "sgd_gaussian", "stochastic_flow")
TARGETS = {"gd": 1.10, "gradient_flow": 1.10, "sgd_gaussian": 1.25, "stochastic_flow": 1.25}
# The reference scan of each case: its update and the key stream of its noise.
REFERENCE = {
    "gd": ("gd", None),
    "gradient_flow": ("gd", None),
    "sgd_gaussian": ("noisy", "optax"),
    "stochastic_flow": ("noisy", "diffrax"),
}
# Largest scaled deviation of the observables for the two sides to "agree" (float32 steps
# in a different order round differently; bit-identical programs give 0).
AGREE = 1e-4
# Observables compared between the two sides (all scalar columns and the singular values).
COMPARED = ("loss", "l2_penalty", "nuclear_norm", "balance_gap", "balance_trace", "sv")


# --- configuration ------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.fixed_step",
        description="rankflow fixed-step dynamics vs a hand-written vmapped lax.scan",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 configs, 200 steps, d=16")
    ap.add_argument("--configs", type=int, default=None, help="configurations (default 64)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 2000)")
    ap.add_argument("--dim", type=int, default=None, help="d = m = n = r (default 32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per side (default 5)")
    ap.add_argument("--saves", type=int, default=2, help="save.num: evenly spaced saves (>= 2)")
    ap.add_argument(
        "--problem",
        choices=("diagonal", "sensing"),
        default="diagonal",
        help="diagonal: L = ½‖W − diag(s)‖², s = linspace(1, 1/d, d); "
        "sensing: 4·d² Gaussian measurements of a rank-d/4 target",
    )
    ap.add_argument("--sigma", type=float, default=0.01, help="noise σ of the stochastic cases")
    ap.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}"
    )
    ap.add_argument("--json", default=None, help="also write the table (and machine) as JSON")
    add_worker_options(ap, hang_timeout=600.0)
    args = ap.parse_args(argv)
    quick = args.quick
    args.configs = args.configs or (16 if quick else 64)
    args.steps = args.steps or (200 if quick else 2000)
    args.dim = args.dim or (16 if quick else 32)
    args.repeats = args.repeats or (3 if quick else 5)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in args.cases:
        if c not in CASES:
            ap.error(f"--cases: unknown case {c!r}; choose from {', '.join(CASES)}")
    if args.saves < 2 or args.steps % (args.saves - 1):
        ap.error("--saves: need >= 2 saves, evenly spaced on whole steps (steps % (saves-1) == 0)")
    if args.repeats < 3:
        ap.error("--repeats: at least 3")
    return args


def grid(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` configurations: a λ × η grid (as square as ``n`` allows), seed = index."""
    a = max(k for k in range(1, int(math.isqrt(n)) + 1) if n % k == 0)
    lam = np.repeat(np.linspace(0.0, 0.05, a), n // a)
    eta = np.tile(np.linspace(0.02, 0.2, n // a), a)
    return lam, eta, np.arange(n)


def add_worker_options(ap: argparse.ArgumentParser, hang_timeout: float) -> None:
    """The watchdog's options (see :class:`Watchdog`) and the hidden worker ones."""
    ap.add_argument(
        "--stall-timeout",
        type=float,
        default=10.0,
        help="a call that uses no CPU for this long is deadlocked (s)",
    )
    ap.add_argument(
        "--hang-timeout",
        type=float,
        default=hang_timeout,
        help="abort any call that takes longer (s)",
    )
    ap.add_argument(
        "--attempts", type=int, default=3, help="start a case again after a deadlock, up to"
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)


def base_config(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    d = args.dim
    if args.problem == "diagonal":
        problem = {
            "kind": "diagonal",
            "singular_values": [float(v) for v in np.linspace(1, 1 / d, d)],
        }
    else:
        problem = {"kind": "sensing", "m": d, "n": d, "rank": max(1, d // 4), "samples": 4 * d * d}
    cfg: dict[str, Any] = {
        "seed": 0,
        "x64": False,
        "problem": problem,
        "model": {"r": d},
        "init": {"kind": "gaussian", "scale": 0.1},
        "dynamics": {"kind": kind, "lam": 0.01, "eta": 0.1},
        "save": {"t1": float(args.steps), "num": args.saves},
    }
    if kind in ("sgd_gaussian", "stochastic_flow"):
        cfg["dynamics"]["sigma"] = args.sigma
    if kind in ("gradient_flow", "stochastic_flow"):
        cfg["solver"] = {"method": "euler", "adaptive": False, "dt": 1.0}
    return cfg


def batch_params(point: dict[str, Any], args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The per-run parameter batch of ``Program.run`` (keys ``PARAM_KEYS``)."""
    from rankflow.core import config as config_lib
    from rankflow.core import program as simulate

    flat = config_lib.flatten(point)
    one = {k: flat[k] for k in config_lib.PROGRAM_KEYS}
    if one["problem.seed"] is None:
        one["problem.seed"] = one["seed"]  # data fixed by the base seed, as rankflow does
    one["path"] = 0
    lam, eta, seed = grid(args.configs)
    out = {k: np.full(args.configs, v) for k, v in one.items()}
    out["dynamics.lam"], out["dynamics.eta"], out["seed"] = lam, eta, seed
    return {k: out[k] for k in simulate.PARAM_KEYS}


# --- the hand-written reference -----------------------------------------------------------


def reference_program(point: dict[str, Any], kind: str, noise: str | None) -> Callable:
    """A jitted, vmapped ``lax.scan`` of the update, observing as rankflow does.

    ``kind``: ``"gd"`` (``θ ← θ − η(∇L + λθ)``), ``"noisy"`` (``+ ησξ``) or
    ``"gd_grid"`` (Euler with diffrax's steps ``t_{k+1} − t_k``, for checks); ``noise``:
    whose key stream the noise follows, ``"optax"`` (rankflow's ``add_gaussian_noise``:
    ``key, sub = split(key)``, one key per leaf from ``sub``) or ``"diffrax"``
    (``UnsafeBrownianPath``: ``fold_in`` of the bits of t₀ and t₁ on diffrax's time grid,
    increment ``√(t₁ − t₀)·ξ`` and drift times ``t₁ − t₀``, as its Euler step computes).
    """
    import jax
    import jax.numpy as jnp

    from rankflow.core import vocabulary
    from rankflow.core.observables import observables
    from rankflow.core.problems import init_factors, make_problem

    problem = make_problem(point)
    r = point["model"]["r"]
    rank_tol = point["save"]["rank_tol"]
    init_kind = point["init"]["kind"]
    ts = np.asarray(vocabulary.save_times(point))
    steps = int(round(ts[-1]))
    every = steps // (len(ts) - 1)
    f32 = jnp.float32

    if problem.kind == "diagonal":

        def grad_w(W, data):
            return W - data["target"]

    elif problem.kind == "sensing":

        def grad_w(W, data):
            X = data["X"]
            res = jnp.einsum("kij,ij->k", X, W) - data["y"]
            return jnp.einsum("k,kij->ij", res, X) / X.shape[0]

    else:
        raise ValueError(problem.kind)

    def time_at(k, t0, t1):
        """diffrax's ConstantStepSize grid on one save interval [t0, t1] (rankflow solves
        each interval on its own): t_1 = t0 + dt0, t_k = t0 + (t1 − t0)·(k/N), t_N = t1."""
        # N is computed from the traced bounds as diffrax does: a compile-time constant N
        # lets XLA divide by multiplying with 1/N, which rounds differently.
        n = jnp.ceil((t1 - t0) / jnp.nextafter(f32(1.0), f32(jnp.inf))).astype(jnp.int32)
        kf = k.astype(f32)
        t = t0 + (t1 - t0) * (kf / n.astype(f32))
        return jnp.where(k == 1, t0 + 1.0, jnp.where(k == every, t1, jnp.where(k == 0, t0, t)))

    def single(p):
        base = jax.random.PRNGKey(p["seed"])
        data_key = jax.random.fold_in(jax.random.PRNGKey(p["problem.seed"]), 0)
        noise_key = jax.random.fold_in(jax.random.fold_in(base, 2), p["path"])
        data = problem.make_data(data_key, p["problem.noise"], f32)
        A, B = init_factors(
            init_kind,
            jax.random.fold_in(base, 1),
            problem,
            data,
            r,
            p["init.scale"],
            p["init.imbalance"],
            f32,
        )
        lam, eta, sigma = p["dynamics.lam"], p["dynamics.eta"], p["dynamics.sigma"]

        def observe(A, B):
            return observables(A, B, problem.loss(A @ B.T, data), lam, rank_tol)

        def step(carry, bounds):
            A, B, key, k = carry
            t0_int, t1_int = bounds
            G = grad_w(A @ B.T, data)
            gA, gB = G @ B, G.T @ A
            if kind == "gd":
                A, B = A - eta * (gA + lam * A), B - eta * (gB + lam * B)
            elif kind == "gd_grid":  # Euler on diffrax's float32 time grid (checks only)
                dt = time_at(k + 1, t0_int, t1_int) - time_at(k, t0_int, t1_int)
                A = A + (-eta * (lam * A + gA)) * dt
                B = B + (-eta * (lam * B + gB)) * dt
            elif noise == "optax":
                key, sub = jax.random.split(key)
                ka, kb = jax.random.split(sub, 2)
                gA = gA + sigma * jax.random.normal(ka, A.shape, f32)
                gB = gB + sigma * jax.random.normal(kb, B.shape, f32)
                A, B = A - eta * (gA + lam * A), B - eta * (gB + lam * B)
            else:  # diffrax: Euler–Maruyama on diffrax's grid with its Brownian keys
                t0, t1 = time_at(k, t0_int, t1_int), time_at(k + 1, t0_int, t1_int)
                dt = t1 - t0
                bk = jax.random.fold_in(key, jax.lax.bitcast_convert_type(t0, jnp.int32))
                bk = jax.random.fold_in(bk, jax.lax.bitcast_convert_type(t1, jnp.int32))
                ka, kb = jax.random.split(bk, 2)
                sd = jnp.sqrt(dt)
                dWA = jax.random.normal(ka, A.shape, f32) * sd
                dWB = jax.random.normal(kb, B.shape, f32) * sd
                g = eta * sigma
                A = A + ((-eta * (lam * A + gA)) * dt + g * dWA)
                B = B + ((-eta * (lam * B + gB)) * dt + g * dWB)
            return (A, B, key, k + 1), None

        def interval(carry, i):
            # The step index k restarts at every save interval (diffrax's grid above).
            A, B, key, _ = carry
            bounds = (f32(every) * i.astype(f32), f32(every) * (i + 1).astype(f32))
            carry = (A, B, key, jnp.asarray(0, jnp.int32))
            carry = jax.lax.scan(lambda c, _: step(c, bounds), carry, length=every)[0]
            return carry, observe(carry[0], carry[1])

        first = observe(A, B)
        # rankflow's optimizers get fold_in(noise_key, 0); its diffrax paths noise_key.
        key = jax.random.fold_in(noise_key, 0) if noise == "optax" else noise_key
        carry = (A, B, key, jnp.asarray(0, jnp.int32))
        _, rest = jax.lax.scan(interval, carry, jnp.arange(len(ts) - 1))
        return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)

    jitted = jax.jit(jax.vmap(single))

    def run(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = {
            k: jnp.asarray(v, jnp.int32 if k in ("seed", "problem.seed", "path") else f32)
            for k, v in params.items()
        }
        return jax.tree.map(np.asarray, jitted(batch))

    return run


# --- timing -------------------------------------------------------------------------------


class Watchdog:
    """Detect a deadlocked call and end the process with exit code ``HUNG``.

    A call is deadlocked when the process has used (almost) no CPU time for
    ``stall_s`` seconds while it is in flight (a slow call on a loaded machine still
    burns CPU); ``limit_s`` bounds any one call in any case.
    """

    def __init__(self, stall_s: float, limit_s: float):
        self.stall_s, self.limit_s = stall_s, limit_s
        self._what: str | None = None
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        window: list[tuple[float, float]] = []
        while True:
            time.sleep(0.5)
            with self._lock:
                what, started = self._what, self._started if self._what else 0.0
            if what is None:
                window.clear()
                continue
            now, cpu = time.monotonic(), time.process_time()
            window.append((now, cpu))
            while window and now - window[0][0] > self.stall_s:
                window.pop(0)
            stalled = now - started > self.stall_s and cpu - window[0][1] < 0.01 * self.stall_s
            if stalled or now - started > self.limit_s:
                why = "used no CPU for" if stalled else "ran longer than"
                sys.stderr.write(
                    f"fixed_step: {what} {why} {self.stall_s if stalled else self.limit_s:.0f} s: "
                    "deadlocked (jaxlib's CPU LAPACK kernels, see benchmarks/README.md)\n"
                )
                sys.stderr.flush()
                os._exit(HUNG)

    def call(self, what: str, fn: Callable, *a):
        """``fn(*a)``, its wall time; the process CPU time it used goes to ``self.cpu``."""
        with self._lock:
            self._what, self._started = what, time.monotonic()
        try:
            c, t = time.process_time(), time.perf_counter()
            out = fn(*a)
            wall = time.perf_counter() - t
            self.cpu = time.process_time() - c
            return out, wall
        finally:
            with self._lock:
                self._what = None


def scaled_diff(a_out: dict[str, np.ndarray], b_out: dict[str, np.ndarray]) -> float:
    """Largest deviation of the ``COMPARED`` observables, each relative to its natural
    scale over the batch: ``max|a − b| / max|b|``, and for the balance observables (small
    differences of ‖A‖² and ‖B‖²-sized terms) ``/ max l2_penalty``."""
    worst = 0.0
    l2 = float(np.max(np.abs(np.asarray(b_out["l2_penalty"], np.float64))))
    for name in COMPARED:
        a = np.asarray(a_out[name], np.float64)
        b = np.asarray(b_out[name], np.float64)
        scale = l2 if name.startswith("balance") else float(np.max(np.abs(b)))
        worst = max(worst, float(np.max(np.abs(a - b))) / max(scale, 1e-30))
    return worst


def time_case(case: str, args: argparse.Namespace, dog: Watchdog) -> dict[str, Any]:
    from rankflow.core import config as config_lib
    from rankflow.core.program import program_for

    point = config_lib.expand(config_lib.resolve(base_config(args, case)))[0]
    params = batch_params(point, args)
    program = program_for(point)
    ref_kind, ref_noise = REFERENCE[case]
    reference = reference_program(point, ref_kind, ref_noise)

    out_rf, first_rf = dog.call(f"rankflow {case} (first call)", program.run, params)
    out_sc, first_sc = dog.call(f"scan {case} (first call)", reference, params)
    runs: dict[str, list[float]] = {"rf": [], "sc": []}
    cpus: dict[str, list[float]] = {"rf": [], "sc": []}
    for i in range(args.repeats):
        # Alternate the order too, so that neither side always runs second.
        order = (("rf", program.run), ("sc", reference))
        for who, fn in order if i % 2 == 0 else order[::-1]:
            _, dt = dog.call(f"{who} {case} (run {i + 1})", fn, params)
            runs[who].append(dt)
            cpus[who].append(dog.cpu)
    runs_rf, runs_sc = runs["rf"], runs["sc"]
    run_rf, run_sc = statistics.median(runs_rf), statistics.median(runs_sc)

    # Agreement of the observables with a hand-written program that should compute the
    # same numbers: the timed scan, except for gradient_flow, whose Euler steps are
    # t_{k+1} − t_k on diffrax's float32 grid t_k = s + (e − s)·(k/N) (not exactly 1): it is checked
    # against Euler on that grid (untimed), and its distance to the dt = 1 scan is shown.
    check, vs_timed = "timed scan", None
    if case == "gradient_flow":
        grid_out, _ = dog.call(
            "scan gd_grid (check)", reference_program(point, "gd_grid", None), params
        )
        worst = scaled_diff(out_rf, grid_out)
        vs_timed = scaled_diff(out_rf, out_sc)
        check = "Euler scan on diffrax's float32 time grid (untimed)"
    else:
        worst = scaled_diff(out_rf, out_sc)
    status_ok = bool(np.all(np.asarray(out_rf["status"]) == 0))
    ratio = run_rf / run_sc
    return {
        "case": case,
        "reference": {"gd": "scan θ←θ−η(∇L+λθ)", "noisy": "scan θ←θ−η(∇L+σξ+λθ)"}[ref_kind]
        + (f", {ref_noise} keys" if ref_noise else ""),
        "configs": args.configs,
        "steps": args.steps,
        "saves": args.saves,
        "compile_s_rankflow": first_rf - run_rf,
        "compile_s_scan": first_sc - run_sc,
        "run_s_rankflow": run_rf,
        "run_s_scan": run_sc,
        "runs_s_rankflow": runs_rf,
        "runs_s_scan": runs_sc,
        "ratio": ratio,
        "ratio_min": min(runs_rf) / min(runs_sc),
        # Process CPU time (all threads) per call: less sensitive to other processes.
        "cpu_s_rankflow": statistics.median(cpus["rf"]),
        "cpu_s_scan": statistics.median(cpus["sc"]),
        "ratio_cpu": statistics.median(cpus["rf"]) / statistics.median(cpus["sc"]),
        "target": TARGETS[case],
        "pass": ratio <= TARGETS[case],
        "max_diff": worst,
        "checked_against": check,
        "max_diff_vs_timed_scan": vs_timed,
        "agree": worst <= AGREE and status_ok,
        "final_loss_mean_rankflow": float(np.mean(out_rf["loss"][:, -1])),
        "final_loss_mean_scan": float(np.mean(out_sc["loss"][:, -1])),
    }


def machine() -> dict[str, Any]:
    import diffrax
    import jax
    import jaxlib
    import optax

    import rankflow

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "processor": platform.processor() or platform.machine(),
        "platform": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "diffrax": diffrax.__version__,
        "optax": optax.__version__,
        "python": platform.python_version(),
        "rankflow": os.path.dirname(os.path.abspath(rankflow.__file__)),
        "prng_impl": str(jax.config.jax_default_prng_impl),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "loadavg_start": list(os.getloadavg()),
    }


def print_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    print(
        f"machine: {info['cpu_count']} CPUs ({info['cpus_usable']} usable), "
        f"{info['platform']} {info['devices']}, jax {info['jax']} (jaxlib {info['jaxlib']}), "
        f"diffrax {info['diffrax']}, optax {info['optax']}, python {info['python']}, "
        f"PRNG {info['prng_impl']}; rankflow from {info['rankflow']}"
    )
    print(
        f"load average: start {info['loadavg_start'][0]:.2f}, end {info['loadavg_end'][0]:.2f}"
        "  (other processes on the machine distort timings; rankflow and scan calls are "
        "interleaved, so the ratios suffer less)"
    )
    print(
        "compile s = first call − median run; run s = median of the timed calls; ratio = "
        "rankflow run / scan run (min: of the fastest calls; cpu: of the median process CPU "
        "times, all threads); PASS/FAIL judges the median ratio; both sides save the "
        "observables at the same times"
    )
    head = (
        f"{'case':<16}{'configs':>8}{'steps':>7}{'compile s':>16}{'run s (median)':>20}"
        f"{'ratio':>7}{'(min)':>7}{'(cpu)':>7}{'target':>7}  {'result':<6}"
        f"{'max diff':>10}{'hangs':>6}"
    )
    print(head)
    print(f"{'':<31}{'rankflow / scan':>16}{'rankflow / scan':>20}")
    print("-" * len(head))
    for r in rows:
        if r.get("failed"):
            print(f"{r['case']:<16}  deadlocked in all {r['deadlocks']} attempts: no timing")
            continue
        print(
            f"{r['case']:<16}{r['configs']:>8}{r['steps']:>7}"
            f"{r['compile_s_rankflow']:>8.2f} /{r['compile_s_scan']:>6.2f}"
            f"{r['run_s_rankflow']:>11.3f} /{r['run_s_scan']:>7.3f}"
            f"{r['ratio']:>7.2f}{r['ratio_min']:>7.2f}{r['ratio_cpu']:>7.2f}{r['target']:>7.2f}  "
            f"{'PASS' if r['pass'] else 'FAIL':<6}"
            f"{r['max_diff']:>10.1e}{r['deadlocks']:>6}{'' if r['agree'] else '  DISAGREE'}"
        )
    for r in rows:
        if r.get("failed"):
            continue
        extra = (
            f"; vs the timed dt = 1 scan: {r['max_diff_vs_timed_scan']:.1e}"
            if r["max_diff_vs_timed_scan"] is not None
            else ""
        )
        print(
            f"  {r['case']}: timed against {r['reference']}; "
            f"observables checked against {r['checked_against']}{extra}"
        )
    if any(r["deadlocks"] for r in rows):
        print(
            "  hangs: worker processes that deadlocked (jaxlib CPU LAPACK) and were started "
            "again; see benchmarks/README.md"
        )


def worker(args: argparse.Namespace) -> int:
    """Time one case in this process and write its row as JSON to ``args.worker_out``."""
    import jax

    jax.config.update("jax_enable_x64", False)
    dog = Watchdog(args.stall_timeout, args.hang_timeout)
    row = time_case(args.worker, args, dog)
    with open(args.worker_out, "w") as f:
        json.dump(row, f)
    return 0


def run_case(case: str, args: argparse.Namespace, passthrough: list[str]) -> dict[str, Any]:
    """Run one case in a fresh process (rankflow and the scan timed in it, interleaved);
    start it again if it deadlocks, up to ``--attempts`` times."""
    import subprocess
    import tempfile

    hangs = 0
    for _ in range(args.attempts):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "row.json")
            cmd = [sys.executable, "-m", "benchmarks.fixed_step", *passthrough]
            cmd += ["--worker", case, "--worker-out", out]
            rc = subprocess.run(cmd).returncode
            if rc == 0:
                with open(out) as f:
                    row = json.load(f)
                row["deadlocks"] = hangs
                return row
        if rc != HUNG:
            raise SystemExit(f"fixed_step: case {case} failed (exit code {rc})")
        hangs += 1
    return {"case": case, "deadlocks": hangs, "failed": True}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    info = machine()
    passthrough = _without_option(argv, "--json")
    rows = []
    t0 = time.perf_counter()
    for case in args.cases:
        rows.append(run_case(case, args, passthrough))
        r = rows[-1]
        msg = "deadlocked every time" if r.get("failed") else f"ratio {r['ratio']:.3f}"
        print(f"[{time.perf_counter() - t0:6.1f} s] {case}: {msg}", file=sys.stderr, flush=True)
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = time.perf_counter() - t0
    print_table(rows, info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": info, "args": {k: v for k, v in vars(args).items()}, "rows": rows},
                f,
                indent=2,
            )
    if args.quick:
        print(
            "  --quick: a smoke run; at this size fixed overheads dominate and the ratios "
            "mean little"
        )
    ok = all(not r.get("failed") and r["agree"] and (r["pass"] or args.quick) for r in rows)
    return 0 if ok else 1


def _without_option(argv: list[str], name: str) -> list[str]:
    """``argv`` without ``name VALUE`` / ``name=VALUE``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


if __name__ == "__main__":
    import rankflow

    rankflow.use_all_cores()  # as the rankflow command does: one CPU device per core
    sys.exit(main())
