"""rankflow against what users would otherwise use, and against the machine's limit.

    python -m benchmarks.peers               # everything (~20 min); writes BENCHMARKS.md's
                                             # tables and figures/benchmarks.png
    python -m benchmarks.peers --quick       # a smoke run (small sizes; writes nothing)
    python -m benchmarks.peers --sections adaptive,sde --json peers.json

Five sections, each on the diagonal problem of ``rankflow.core.problems``
(``L = ½‖ABᵀ − diag(s)‖²``, s = linspace(1, 1/d, d), Gaussian start of scale 0.1, the
flow ``dθ/dt = −η(∇L + λθ)``), with the configurations of ``benchmarks.fixed_step``
(a λ × η grid, λ ∈ [0, 0.05], η ∈ [0.02, 0.2], seed = index), the same initial state for
every method (drawn by ``rankflow.core.problems``) and the same horizon:

- ``fixed``: gradient flow, explicit Euler, dt = 1, float32. rankflow's program against
  a hand-written vmapped JAX ``lax.scan`` (``benchmarks.fixed_step``'s), ``torchdiffeq``
  (Euler, the configurations stacked into one batch) and a NumPy loop (batched matmul).
- ``sde``: the stochastic flow ``dθ = −η(∇L + λθ)dt + ησ dW``, Euler–Maruyama, dt = 1,
  a batch of Monte Carlo paths. rankflow against the hand-written scan (same keys, same
  bits) and ``torchsde`` (``sdeint``, Euler, its default Brownian interval).
- ``adaptive``: gradient flow with error control, rtol = 1e-6, atol = 1e-8. rankflow
  (Tsit5) through ``Program.run``, which chooses its batching strategy by measurement
  (``rankflow.numerics.batching``), in float32 and float64, with the default (integral-only)
  step-size controller and with the PI controller ``ADAPTIVE_PI`` (``solver.pcoeff``,
  ``solver.icoeff``; chosen by ``benchmarks.controller``), and with ``vmap`` forced; a
  stacked-system prototype (one controller for all runs); ``scipy.integrate.solve_ivp``
  (RK45, float64, one configuration after another); ``torchdiffeq`` (dopri5, float64,
  the stacked batch with a per-configuration max norm so that every configuration meets
  the tolerance).
- ``sweep``: configurations per second for a λ × η × seed grid: ``rankflow.run`` of the
  grid (the whole public path, pandas table included) against the best peer.
- ``roofline``: GFLOP/s of the gradient-flow update (3 products of 2·d²·r flops per
  step) for d = r ∈ {32, 128, 512}, one configuration and a batch, next to the float32
  matmul peak measured in the same process. The per-step time is the difference of two
  runs of K and 2K steps over K, so compilation, transfers and the observables cancel.

Accuracy is matched explicitly: every method's final factors are compared with a float64
reference (diffrax Dopri8, rtol 1e-10, atol 1e-12, for the flow; a float64 NumPy Euler
loop for the Euler discretisation); the error is ``max over runs of ‖(A, B) − ref‖_F /
‖ref‖_F``. rankflow's factors come from its ``save = "states"`` program (same solve,
untimed). For the SDE, whose paths differ between libraries, the mean final loss over the
paths is compared with a float64 Monte Carlo reference (in standard errors).

Timing: every callable is called once (``compile`` = that call minus the median run),
then ``--repeats`` times with all methods of a section interleaved, in alternating order,
so that load changes on the shared machine hit all of them; ``run`` is the median. Each
section runs in its own worker process under ``benchmarks.fixed_step``'s stall watchdog
(jaxlib 0.10's CPU LAPACK deadlock, see README.md in this folder).

Thread counts (``benchmarks.peers_threads``): every PyTorch peer is timed at 1 thread and
at the number of CPUs (``--torch-threads``), and scipy's ``solve_ivp`` and the NumPy loop
at 1 and all BLAS threads (``--blas-threads``, with threadpoolctl), each count a row of
its own in the same interleaved race; the targets compare rankflow with the fastest. On a
shared 2-core machine the two-thread pools spin and can run many times slower than one
thread when the other core is busy (torchsde: 89 s against 16–26 s), and can be the
faster on a quiet one: both are measured in the run whose tables they are in.

``--sections`` reruns some sections: their tables and target rows replace those of
BENCHMARKS.md's generated block and the others stay, marked with the date and load of
the run they are from (``benchmarks.peers_markdown``); the figure is redrawn only by a
run of every section (or with ``--keep``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import fixed_step as fs
from benchmarks import peers_markdown
from benchmarks import peers_threads as peer_threads

SECTIONS = ("fixed", "sde", "adaptive", "sweep", "roofline")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MD = os.path.join(ROOT, "BENCHMARKS.md")
FIGURE = os.path.join(ROOT, "figures", "benchmarks.png")
BEGIN = "<!-- BEGIN GENERATED: python -m benchmarks.peers -->"
END = "<!-- END GENERATED -->"
# The targets: (row compared, peer row, required speed-up of rankflow).
RK = "rankflow"


# --- configuration ------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description="rankflow vs torchdiffeq, torchsde, scipy, NumPy, hand-written JAX; roofline",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes, writes nothing")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"subset of {','.join(SECTIONS)}"
    )
    ap.add_argument("--dim", type=int, default=None, help="d = m = n = r (default 32)")
    ap.add_argument("--configs", type=int, default=None, help="configurations (default 64)")
    ap.add_argument("--steps", type=int, default=None, help="horizon in steps (default 2000)")
    ap.add_argument("--paths", type=int, default=None, help="SDE paths (default 64)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per method (default 5)")
    ap.add_argument("--sigma", type=float, default=0.01, help="SDE noise σ")
    ap.add_argument(
        "--torch-threads",
        default="each",
        help="PyTorch threads: 'each' (default: 1 and the number of CPUs, each timed as a "
        "row of its own; the targets use the faster), a comma list such as '1' or '1,2', "
        "or 'auto' (a probe picks 1 or all CPUs, one row)",
    )
    ap.add_argument(
        "--blas-threads",
        default="each",
        help="BLAS threads of scipy's solve_ivp and the NumPy loop (threadpoolctl): 'each' "
        "(default: 1 and the number of CPUs, each a row) or a comma list",
    )
    ap.add_argument("--json", default=None, help="also write every number as JSON here")
    ap.add_argument(
        "--keep",
        default=None,
        help="JSON of an earlier run (--json): the sections not run now are taken from it "
        "(marked as such in the tables), e.g. to rerun one section",
    )
    ap.add_argument("--no-write", action="store_true", help="do not touch BENCHMARKS.md/figure")
    fs.add_worker_options(ap, hang_timeout=900.0)
    args = ap.parse_args(argv)
    q = args.quick
    args.dim = args.dim or (8 if q else 32)
    args.configs = args.configs or (8 if q else 64)
    args.steps = args.steps or (100 if q else 2000)
    args.paths = args.paths or (8 if q else 64)
    args.repeats = args.repeats or (3 if q else 5)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    try:
        args.blas_counts = peer_threads.counts(args.blas_threads)
        if args.torch_threads != "auto":
            peer_threads.counts(args.torch_threads)
    except ValueError as e:
        ap.error(str(e))
    for s in args.sections:
        if s not in SECTIONS:
            ap.error(f"--sections: unknown {s!r}")
    # What benchmarks.fixed_step's helpers read.
    args.saves, args.problem = 2, "diagonal"
    return args


def point_for(args, kind: str, *, x64: bool = False, solver: dict | None = None, **over):
    """The resolved point of ``kind`` on the benchmark problem."""
    from rankflow.core import config as config_lib

    cfg = fs.base_config(args, kind)
    cfg["x64"] = x64
    if solver is not None:
        cfg["solver"] = solver
    for k, v in over.items():
        cfg[k] = v
    return config_lib.expand(config_lib.resolve(cfg))[0]


def target_of(d: int) -> np.ndarray:
    return np.diag(np.linspace(1.0, 1.0 / d, d))


def initial_factors(point, params) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) at t = 0 of every run, float64, drawn exactly as rankflow's program does."""
    import jax
    import jax.numpy as jnp

    from rankflow.core.problems import init_factors, make_problem

    problem = make_problem(point)
    r = point["model"]["r"]
    with jax.enable_x64(True):

        def one(seed, pseed, scale, imb, noise):
            data_key = jax.random.fold_in(jax.random.PRNGKey(pseed), 0)
            data = problem.make_data(data_key, noise, jnp.float64)
            key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
            kind = point["init"]["kind"]
            return init_factors(kind, key, problem, data, r, scale, imb, jnp.float64)

        A, B = jax.jit(jax.vmap(one))(
            jnp.asarray(params["seed"], jnp.int32),
            jnp.asarray(params["problem.seed"], jnp.int32),
            jnp.asarray(params["init.scale"], jnp.float64),
            jnp.asarray(params["init.imbalance"], jnp.float64),
            jnp.asarray(params["problem.noise"], jnp.float64),
        )
        return np.asarray(A), np.asarray(B)


def factor_error(A, B, ref) -> float:
    """max over runs of ‖(A, B) − (A_ref, B_ref)‖_F / ‖(A_ref, B_ref)‖_F."""
    Ar, Br = ref
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    num = np.sum((A - Ar) ** 2, axis=(1, 2)) + np.sum((B - Br) ** 2, axis=(1, 2))
    den = np.sum(Ar**2, axis=(1, 2)) + np.sum(Br**2, axis=(1, 2))
    return float(np.max(np.sqrt(num / den)))


# --- timing -------------------------------------------------------------------------------


def race(dog, fns: dict[str, Callable[[], Any]], repeats: int):
    """Call every method once, then ``repeats`` times interleaved (alternating order).
    Returns the first outputs and, per method, compile and run seconds (medians)."""
    outs, first = {}, {}
    for name, fn in fns.items():
        outs[name], first[name] = dog.call(f"{name} (first call)", fn)
    runs: dict[str, list[float]] = {n: [] for n in fns}
    cpus: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            _, dt = dog.call(f"{name} (run {i + 1})", fns[name])
            runs[name].append(dt)
            cpus[name].append(dog.cpu)
    times = {}
    for n in names:
        med = statistics.median(runs[n])
        times[n] = {
            "compile_s": max(0.0, first[n] - med),
            "run_s": med,
            "runs_s": runs[n],
            "cpu_s": statistics.median(cpus[n]),
        }
    return outs, times


def torch_counts(choice: str) -> tuple[int, ...]:
    """The PyTorch thread counts to time each PyTorch peer at (``--torch-threads``)."""
    if choice == "auto":
        return (torch_threads("auto"),)
    return peer_threads.counts(choice)


def add_peer(fns: dict, name: str, fn: Callable, counts: tuple[int, ...], kind: str) -> dict:
    """Add ``fn`` to ``fns`` once per thread count (``kind``: ``"torch"`` or ``"blas"``);
    returns ``{row name: name}`` of the rows added."""
    make = peer_threads.torch_variants if kind == "torch" else peer_threads.blas_variants
    variants = make(name, fn, counts)
    fns.update(variants)
    return dict.fromkeys(variants, name)


def torch_threads(choice: str = "auto") -> int:
    """Set and return PyTorch's thread count: ``choice`` if a number; with ``"auto"``, all
    CPUs only if a probe of the benchmark's kind of work (batched 32 × 32 products) runs
    at least 25% faster with them than with one thread."""
    import torch

    if choice != "auto":
        torch.set_num_threads(int(choice))
        return int(choice)

    x = torch.randn(64, 32, 32)

    def probe() -> float:
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            y = x
            for _ in range(300):
                y = torch.tanh(y @ x)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    many = os.cpu_count() or 1
    torch.set_num_threads(1)
    one = probe()
    best = 1
    if many > 1:
        torch.set_num_threads(many)
        if probe() < one / 1.25:
            best = many
    torch.set_num_threads(best)
    return best


# --- peers --------------------------------------------------------------------------------


def numpy_euler(A0, B0, lam, eta, S, steps, dtype):
    """The batched explicit Euler loop, θ ← θ − η(∇L + λθ), in NumPy."""
    A, B = A0.astype(dtype), B0.astype(dtype)
    S = S.astype(dtype)
    lam = lam.astype(dtype)[:, None, None]
    eta = eta.astype(dtype)[:, None, None]
    for _ in range(steps):
        G = A @ B.transpose(0, 2, 1) - S
        A, B = A - eta * (G @ B + lam * A), B - eta * (G.transpose(0, 2, 1) @ A + lam * B)
    return A, B


def torch_field(S, lam, eta, dtype):
    import torch

    St = torch.tensor(S, dtype=dtype)
    lt = torch.tensor(lam, dtype=dtype)[:, None, None]
    et = torch.tensor(eta, dtype=dtype)[:, None, None]

    class Flow(torch.nn.Module):
        def forward(self, t, y):
            A, B = y
            G = A @ B.transpose(1, 2) - St
            return -et * (G @ B + lt * A), -et * (G.transpose(1, 2) @ A + lt * B)

    return Flow()


def torch_member_max_norm(y):
    """torchdiffeq error norm: the largest per-configuration RMS (cf.
    rankflow.numerics.batching)."""
    import torch

    if isinstance(y, torch.Tensor):
        y = (y,)
    if y[0].dim() < 2:
        return max(t.abs().max() for t in y)
    sq = sum((t**2).reshape(t.shape[0], -1).sum(1) for t in y)
    size = sum(t[0].numel() for t in y)
    return (sq / size).max().sqrt()


def torchdiffeq_solve(A0, B0, lam, eta, S, T, method, dtype, **kw):
    import torch
    import torchdiffeq

    f = torch_field(S, lam, eta, dtype)
    y0 = (torch.tensor(A0, dtype=dtype), torch.tensor(B0, dtype=dtype))
    with torch.no_grad():
        A, B = torchdiffeq.odeint(f, y0, torch.tensor([0.0, T], dtype=dtype), method=method, **kw)
    return A[-1].numpy(), B[-1].numpy()


def scipy_solve(A0, B0, lam, eta, S, T, rtol, atol, method="RK45"):
    """solve_ivp one configuration after another, NumPy vector field, float64."""
    from scipy.integrate import solve_ivp

    n, m, r = A0.shape
    k = B0.shape[1]
    As, Bs, nfev = [], [], 0
    for i in range(n):
        lam_i, eta_i = float(lam[i]), float(eta[i])

        def f(t, y, lam_i=lam_i, eta_i=eta_i):
            A, B = y[: m * r].reshape(m, r), y[m * r :].reshape(k, r)
            G = A @ B.T - S
            return np.concatenate(
                [(-eta_i * (G @ B + lam_i * A)).ravel(), (-eta_i * (G.T @ A + lam_i * B)).ravel()]
            )

        y0 = np.concatenate([A0[i].ravel(), B0[i].ravel()])
        sol = solve_ivp(f, (0.0, T), y0, method=method, rtol=rtol, atol=atol, t_eval=[T])
        y = sol.y[:, -1]
        As.append(y[: m * r].reshape(m, r))
        Bs.append(y[m * r :].reshape(k, r))
        nfev += sol.nfev
    return np.stack(As), np.stack(Bs), nfev


def jax_field(S):
    """The flow's vector field written by hand for diffrax, args ``(λ, η)``."""

    def field(t, th, a):
        A, B = th
        lam, eta = a
        G = A @ B.T - S
        return -eta * (G @ B + lam * A), -eta * (G.T @ A + lam * B)

    return field


def flow_reference(A0, B0, lam, eta, S, T):
    """The float64 flow at T: diffrax Dopri8, rtol 1e-10, atol 1e-12, run by run."""
    import diffrax
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        field = jax_field(jnp.asarray(S))

        def one(x):
            A, B, l, e = x
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field),
                diffrax.Dopri8(),
                0.0,
                T,
                None,
                (A, B),
                (l, e),
                saveat=diffrax.SaveAt(t1=True),
                stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
                max_steps=1_000_000,
            )
            return jax.tree.map(lambda y: y[-1], sol.ys)

        xs = tuple(jnp.asarray(x, jnp.float64) for x in (A0, B0, lam, eta))
        A, B = jax.jit(lambda xs: jax.lax.map(one, xs))(xs)
        return np.asarray(A), np.asarray(B)


def rankflow_batch(program, params):
    """``Program.run``'s device batch of ``params`` (same dtypes)."""
    import jax.numpy as jnp

    from rankflow.core.program import PARAM_KEYS

    return {k: jnp.asarray(np.asarray(params[k]), program._param_dtype(k)) for k in PARAM_KEYS}


def rankflow_batched_runner(program, params, strategy: str | None = None):
    """Run ``program``'s single-run function over ``params`` with ``rankflow.numerics.batching``
    (the measured strategy of its structure, or ``strategy``), host arrays in and out
    as ``Program.run`` does. Returns the runner and the strategy used."""
    import jax

    from rankflow.numerics import batching

    with jax.enable_x64(program.point["x64"]):
        batch = rankflow_batch(program, params)
        choice = None
        if strategy is None:
            choice = batching.choose(program._single, batch, program.key)
            strategy = choice.strategy

    def go():
        with jax.enable_x64(program.point["x64"]):
            b = rankflow_batch(program, params)
            out = batching.run(program._single, b, program.key, strategy=strategy)
            return jax.tree.map(np.asarray, out)

    return go, strategy, choice


def final_factors(out):
    A, B = out["theta"]
    return np.asarray(A)[:, -1], np.asarray(B)[:, -1]


# --- sections -----------------------------------------------------------------------------


def row(name, t, err=None, **extra):
    return {"method": name, **t, "error": err, **extra}


def section_fixed(args, dog) -> dict:
    import jax

    from rankflow.core.program import program_for

    point = point_for(args, "gradient_flow")
    params = fs.batch_params(point, args)
    lam, eta = params["dynamics.lam"], params["dynamics.eta"]
    S, T, d = target_of(args.dim), float(args.steps), args.dim
    A0, B0 = initial_factors(point, params)
    threads = torch_counts(args.torch_threads)
    program = program_for(point)
    scan = fs.reference_program(point, "gd", None)
    fns = {
        "rankflow (Euler, dt = 1)": lambda: program.run(params),
        "JAX lax.scan, hand-written": lambda: scan(params),
    }
    peer_of = add_peer(
        fns,
        "torchdiffeq (Euler, dt = 1)",
        lambda: torchdiffeq_solve(
            A0, B0, lam, eta, S, T, "euler", _torch_dtype("float32"), options={"step_size": 1.0}
        ),
        threads,
        "torch",
    )
    peer_of |= add_peer(
        fns,
        "NumPy loop",
        lambda: numpy_euler(A0, B0, lam, eta, S, args.steps, np.float32),
        args.blas_counts,
        "blas",
    )
    outs, times = race(dog, fns, args.repeats)
    flow_ref = flow_reference(A0, B0, lam, eta, S, T)
    euler_ref = numpy_euler(A0, B0, lam, eta, S, args.steps, np.float64)
    rf_states = final_factors(program_for(point, save="states").run(params))
    finals = {"rankflow (Euler, dt = 1)": rf_states} | {n: outs[n] for n in peer_of}
    rows = []
    for name in fns:
        err = err_e = None
        if name in finals:
            err = factor_error(*finals[name], flow_ref)
            err_e = factor_error(*finals[name], euler_ref)
        extra = {}
        if name.startswith("JAX"):
            extra["obs_diff_vs_rankflow"] = fs.scaled_diff(
                outs[name], outs["rankflow (Euler, dt = 1)"]
            )
        extra["peer"] = peer_of.get(name)
        rows.append(row(name, times[name], err, error_vs_euler64=err_e, **extra))
    peer_threads.mark_best(rows)
    del jax
    return {
        "rows": rows,
        "configs": args.configs,
        "steps": args.steps,
        "dim": d,
        "torch_threads": threads,
        "blas_threads": args.blas_counts,
    }


def _torch_dtype(name):
    import torch

    return getattr(torch, name)


def section_sde(args, dog) -> dict:
    import jax

    from rankflow.core.program import program_for

    n = args.paths
    point = point_for(args, "stochastic_flow")
    saved = args.configs
    args.configs = n
    params = fs.batch_params(point, args)
    args.configs = saved
    lam, eta, sigma = 0.01, 0.1, args.sigma
    params["seed"][:] = 0
    params["path"] = np.arange(n)
    params["dynamics.lam"][:] = lam
    params["dynamics.eta"][:] = eta
    S, T, d = target_of(args.dim), float(args.steps), args.dim
    A0, B0 = initial_factors(point, params)
    threads = torch_counts(args.torch_threads)
    program = program_for(point)
    scan = fs.reference_program(point, "noisy", "diffrax")
    fns = {
        "rankflow (Euler–Maruyama, dt = 1)": lambda: program.run(params),
        "JAX lax.scan, hand-written": lambda: scan(params),
    }
    peer_of = add_peer(
        fns,
        "torchsde (Euler, dt = 1)",
        lambda: torchsde_solve(A0, B0, lam, eta, sigma, S, T),
        threads,
        "torch",
    )
    outs, times = race(dog, fns, args.repeats)
    # Reference E[L(T)]: float64, 4× the paths, rankflow's x64 program (untimed).
    ref_point = point_for(args, "stochastic_flow", x64=True)
    ref_params = {k: np.concatenate([v] * 4) for k, v in params.items()}
    ref_params["path"] = np.arange(4 * n)
    ref_loss = np.asarray(program_for(ref_point).run(ref_params)["loss"][:, -1], np.float64)
    ref_mean, ref_se = (
        float(ref_loss.mean()),
        float(ref_loss.std(ddof=1) / math.sqrt(len(ref_loss))),
    )
    rows = []
    for name in fns:
        o = outs[name]
        if isinstance(o, dict):
            loss = np.asarray(o["loss"][:, -1], np.float64)
        else:
            A, B = (np.asarray(x, np.float64) for x in o)
            loss = 0.5 * np.sum((A @ B.transpose(0, 2, 1) - S) ** 2, axis=(1, 2))
        mean, se = float(loss.mean()), float(loss.std(ddof=1) / math.sqrt(len(loss)))
        z = abs(mean - ref_mean) / math.hypot(se, ref_se)
        extra = {"mean_loss": mean, "se_loss": se, "z_vs_ref": z, "peer": peer_of.get(name)}
        if name.startswith("JAX"):
            extra["obs_diff_vs_rankflow"] = fs.scaled_diff(
                o, outs["rankflow (Euler–Maruyama, dt = 1)"]
            )
        rows.append(row(name, times[name], abs(mean - ref_mean) / ref_mean, **extra))
    peer_threads.mark_best(rows)
    del jax
    return {
        "rows": rows,
        "paths": n,
        "steps": args.steps,
        "dim": d,
        "lam": lam,
        "eta": eta,
        "sigma": sigma,
        "ref_mean_loss": ref_mean,
        "ref_se_loss": ref_se,
        "ref_paths": 4 * n,
        "torch_threads": threads,
    }


def torchsde_solve(A0, B0, lam, eta, sigma, S, T):
    """torchsde.sdeint, Euler(–Maruyama), dt = 1, float32, on the flattened batch."""
    import torch
    import torchsde

    n, m, r = A0.shape
    k = B0.shape[1]
    St = torch.tensor(S, dtype=torch.float32)

    class SGF(torch.nn.Module):
        noise_type, sde_type = "diagonal", "ito"

        def f(self, t, y):
            A, B = y[:, : m * r].view(n, m, r), y[:, m * r :].view(n, k, r)
            G = A @ B.transpose(1, 2) - St
            dA = -eta * (G @ B + lam * A)
            dB = -eta * (G.transpose(1, 2) @ A + lam * B)
            return torch.cat([dA.reshape(n, -1), dB.reshape(n, -1)], 1)

        def g(self, t, y):
            return torch.full_like(y, eta * sigma)

    y0 = torch.tensor(
        np.concatenate([A0.reshape(n, -1), B0.reshape(n, -1)], 1), dtype=torch.float32
    )
    with torch.no_grad():
        ys = torchsde.sdeint(SGF(), y0, torch.tensor([0.0, T]), method="euler", dt=1.0)
    y = ys[-1].numpy()
    return y[:, : m * r].reshape(n, m, r), y[:, m * r :].reshape(n, k, r)


ADAPTIVE_RTOL, ADAPTIVE_ATOL = 1e-6, 1e-8
# A PI step-size controller (solver.pcoeff, solver.icoeff): of the settings of
# benchmarks.controller, the one with the fewest steps (accepted + rejected) in float64 on
# this problem, and half the error of the default integral-only controller at the same
# rtol; the default stays integral-only (it keeps the tables of existing configs).
ADAPTIVE_PI = {"pcoeff": 0.2, "icoeff": 0.4}


def section_adaptive(args, dog) -> dict:
    import diffrax
    import jax
    import jax.numpy as jnp

    from rankflow.core.program import program_for
    from rankflow.numerics import batching

    rtol, atol = ADAPTIVE_RTOL, ADAPTIVE_ATOL
    solver = {"method": "tsit5", "adaptive": True, "rtol": rtol, "atol": atol}
    p32 = point_for(args, "gradient_flow", solver=solver)
    p64 = point_for(args, "gradient_flow", x64=True, solver=solver)
    params = fs.batch_params(p32, args)
    lam, eta = params["dynamics.lam"], params["dynamics.eta"]
    S, T = target_of(args.dim), float(args.steps)
    A0, B0 = initial_factors(p32, params)
    threads = torch_counts(args.torch_threads)
    prog32, prog64 = program_for(p32), program_for(p64)
    pi_solver = solver | ADAPTIVE_PI
    pi32 = point_for(args, "gradient_flow", solver=pi_solver)
    pi64 = point_for(args, "gradient_flow", x64=True, solver=pi_solver)
    progpi32, progpi64 = program_for(pi32), program_for(pi64)
    pi = ", ".join(f"solver.{k} = {v:g}" for k, v in ADAPTIVE_PI.items())
    # Program.run measures the batching of an adaptive structure on its first batch
    # (rankflow.numerics.batching, cached per structure): the probe is timed here, apart.
    t = time.perf_counter()
    _, strat32, choice32 = rankflow_batched_runner(prog32, params)
    _, strat64, choice64 = rankflow_batched_runner(prog64, params)
    probe_s = time.perf_counter() - t
    # The PI programs are structures of their own: Program.run measures their batching too.
    _, pstrat32, pchoice32 = rankflow_batched_runner(progpi32, params)
    _, pstrat64, pchoice64 = rankflow_batched_runner(progpi64, params)
    govmap, _, _ = rankflow_batched_runner(prog32, params, strategy="vmap")

    # The stacked-system strategy, prototyped on the bare field (float32).
    field = jax_field(jnp.asarray(S, jnp.float32))

    @jax.jit
    def stacked(A, B, l, e):
        sol = batching.stacked_ode(
            field, diffrax.Tsit5(), 0.0, T, (A, B), (l, e), rtol=rtol, atol=atol
        )
        return jax.tree.map(lambda y: y[-1], sol.ys)

    f32 = [jnp.asarray(x, jnp.float32) for x in (A0, B0, lam, eta)]
    names = {
        "r32": f"rankflow Tsit5 float32 (Program.run: {strat32}, measured)",
        "r32v": "rankflow Tsit5 float32, vmap forced",
        "r64": f"rankflow Tsit5 float64 (Program.run: {strat64}, measured)",
        "p32": f"rankflow Tsit5 float32, PI controller ({pi}; Program.run: {pstrat32})",
        "p64": f"rankflow Tsit5 float64, PI controller ({pi}; Program.run: {pstrat64})",
        "stk": "diffrax Tsit5 float32, one stacked system",
        "sci": "scipy solve_ivp RK45 float64, one by one",
        "tdq": "torchdiffeq dopri5 float64, stacked batch",
    }
    fns = {
        names["r32"]: lambda: prog32.run(params),
        names["r32v"]: govmap,
        names["r64"]: lambda: prog64.run(params),
        names["p32"]: lambda: progpi32.run(params),
        names["p64"]: lambda: progpi64.run(params),
        names["stk"]: lambda: jax.tree.map(np.asarray, stacked(*f32)),
    }
    peer_of = add_peer(
        fns,
        names["sci"],
        lambda: scipy_solve(A0, B0, lam, eta, S, T, rtol, atol),
        args.blas_counts,
        "blas",
    )
    peer_of |= add_peer(
        fns,
        names["tdq"],
        lambda: torchdiffeq_solve(
            A0,
            B0,
            lam,
            eta,
            S,
            T,
            "dopri5",
            _torch_dtype("float64"),
            rtol=rtol,
            atol=atol,
            options={"norm": torch_member_max_norm},
        ),
        threads,
        "torch",
    )
    outs, times = race(dog, fns, args.repeats)
    ref = flow_reference(A0, B0, lam, eta, S, T)
    s32 = program_for(p32, save="states")
    s64 = program_for(p64, save="states")
    finals = {
        names["r32"]: final_factors(s32.run(params)),
        names["r32v"]: final_factors(rankflow_batched_runner(s32, params, "vmap")[0]()),
        names["r64"]: final_factors(s64.run(params)),
        names["p32"]: final_factors(program_for(pi32, save="states").run(params)),
        names["p64"]: final_factors(program_for(pi64, save="states").run(params)),
        names["stk"]: outs[names["stk"]],
    } | {n: outs[n][:2] for n in peer_of}
    rows = [row(n, times[n], factor_error(*finals[n], ref), peer=peer_of.get(n)) for n in fns]
    peer_threads.mark_best(rows)
    sci = [n for n in peer_of if peer_of[n] == names["sci"]]
    return {
        "rows": rows,
        "configs": args.configs,
        "steps": args.steps,
        "dim": args.dim,
        "rtol": rtol,
        "atol": atol,
        "probe_s": probe_s,
        "choice_float32": {"strategy": strat32, "seconds_per_run": dict(choice32.seconds_per_run)},
        "choice_float64": {"strategy": strat64, "seconds_per_run": dict(choice64.seconds_per_run)},
        "choice_pi": {
            dtype: {"strategy": c.strategy, "seconds_per_run": dict(c.seconds_per_run)}
            for dtype, c in (("float32", pchoice32), ("float64", pchoice64))
        },
        "scipy_nfev": outs[sci[0]][2],
        "blas_threads": args.blas_counts,
        "torch_threads": threads,
        "names": names,
    }


def section_sweep(args, dog) -> dict:
    import rankflow
    from rankflow.core import config as config_lib
    from rankflow.core.program import PARAM_KEYS, params_of, program_for

    os.environ.setdefault("RANKFLOW_CACHE_DIR", "off")  # measure compiles honestly
    n_lam, n_eta, n_seed = (2, 2, 2) if args.quick else (8, 8, 8)
    steps = args.steps // 2
    d = args.dim
    saved = args.steps
    args.steps = steps
    cfg = fs.base_config(args, "gradient_flow")
    args.steps = saved
    cfg["sweep"] = {
        "dynamics.lam": [float(x) for x in np.linspace(0.0, 0.05, n_lam)],
        "dynamics.eta": [float(x) for x in np.linspace(0.02, 0.2, n_eta)],
        "seed": list(range(n_seed)),
    }
    resolved = config_lib.resolve(cfg)
    points = config_lib.expand(resolved)
    n = len(points)
    params = {k: np.array([params_of(p, 0)[k] for p in points]) for k in PARAM_KEYS}
    lam, eta = params["dynamics.lam"], params["dynamics.eta"]
    S = target_of(d)
    A0, B0 = initial_factors(points[0], params)
    threads = torch_counts(args.torch_threads)
    program = program_for(points[0])
    scan = fs.reference_program(points[0], "gd", None)
    fns = {
        "rankflow.run(grid) (table included)": lambda: rankflow.run(cfg),
        "rankflow program (no table)": lambda: program.run(params),
        "JAX lax.scan, hand-written": lambda: scan(params),
    }
    peer_of = add_peer(
        fns,
        "torchdiffeq (Euler, batched grid)",
        lambda: torchdiffeq_solve(
            A0,
            B0,
            lam,
            eta,
            S,
            float(steps),
            "euler",
            _torch_dtype("float32"),
            options={"step_size": 1.0},
        ),
        threads,
        "torch",
    )
    peer_of |= add_peer(
        fns,
        "NumPy loop (batched grid)",
        lambda: numpy_euler(A0, B0, lam, eta, S, steps, np.float32),
        args.blas_counts,
        "blas",
    )
    outs, times = race(dog, fns, max(3, args.repeats - 2))
    df = outs["rankflow.run(grid) (table included)"]
    assert len(df) == 2 * n and (df["status"] == "ok").all()
    rows = [
        row(k, v, None, configs_per_s=n / v["run_s"], peer=peer_of.get(k)) for k, v in times.items()
    ]
    peer_threads.mark_best(rows)
    return {
        "rows": rows,
        "configs": n,
        "grid": [n_lam, n_eta, n_seed],
        "steps": steps,
        "dim": d,
        "torch_threads": threads,
        "blas_threads": args.blas_counts,
    }


def product_rate(f, a, b, n: int, repeats: int, k: int = 1) -> float:
    """Median GFLOP/s of ``f(a, b)``, ``k`` float32 n × n products per call (compiled
    first; each timing runs enough calls for ~2 GFLOP per product, so that small sizes
    are timed above the clock's noise)."""
    f(a, b).block_until_ready()
    calls = max(1, int(2e9 / (2 * n**3)))
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            out = f(a, b)
        out.block_until_ready()
        ts.append(time.perf_counter() - t)
    return k * calls * 2 * n**3 / statistics.median(ts) / 1e9


def matmul_peak(n: int, repeats: int = 7) -> float:
    """Median GFLOP/s of a float32 ``jnp.dot`` of two n × n matrices."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    return product_rate(jax.jit(jnp.dot), a, b, n, repeats)


def section_roofline(args, dog) -> dict:
    from rankflow.core.program import program_for

    dims = (8, 16) if args.quick else (32, 128, 512)
    batch_of = {8: 4, 16: 4, 32: 64, 128: 16, 512: 4}

    # K such that K steps take ~1 s at the rate expected of each size: the difference of
    # the K- and 2K-step runs must stand well above the run-to-run spread of the rest
    # (the observables at the two saves: a 512 × 512 SVD takes longer than 100 steps).
    rate = {8: 1e9, 16: 5e9, 32: 50e9, 128: 120e9, 512: 250e9}

    def steps_of(d, batch):
        return 50 if args.quick else max(8, int(1.0 * rate[d] / (batch * 6 * d**3)))

    peak_sizes = (64, 256) if args.quick else (128, 256, 512, 1024, 2048)
    # The machine's peak: the best over sizes (small products can beat large ones in cache).
    peak_before = max(matmul_peak(n) for n in peak_sizes)
    rows = []
    for d in dims:
        for batch in (1, batch_of[d]):
            K = steps_of(d, batch)
            sub = argparse.Namespace(**vars(args))
            sub.dim, sub.configs = d, batch
            fns = {}
            for k in (K, 2 * K):
                sub.steps = k
                point = point_for(sub, "gradient_flow")
                params = fs.batch_params(point, sub)
                prog, scan = program_for(point), fs.reference_program(point, "gd", None)
                fns[f"rankflow {k}"] = lambda prog=prog, params=params: prog.run(params)
                fns[f"scan {k}"] = lambda scan=scan, params=params: scan(params)
            _, times = race(dog, fns, args.repeats)
            flops = batch * 3 * 2 * d**3
            out = {"dim": d, "batch": batch, "steps": K}
            for who in ("rankflow", "scan"):
                per_step = (times[f"{who} {2 * K}"]["run_s"] - times[f"{who} {K}"]["run_s"]) / K
                out[f"{who}_step_s"] = per_step
                out[f"{who}_gflops"] = flops / per_step / 1e9 if per_step > 0 else float("nan")
            rows.append(out)
            print(f"  roofline d={d} batch={batch}: {out}", file=sys.stderr, flush=True)
    peak_after = max(matmul_peak(n) for n in peak_sizes)
    return {
        "rows": rows,
        "peak_gflops": max(peak_before, peak_after),
        "peak_before": peak_before,
        "peak_after": peak_after,
        "peak_sizes": list(peak_sizes),
    }


SECTION_FN = {
    "fixed": section_fixed,
    "sde": section_sde,
    "adaptive": section_adaptive,
    "sweep": section_sweep,
    "roofline": section_roofline,
}


# --- driver -------------------------------------------------------------------------------


def worker(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", False)
    dog = fs.Watchdog(args.stall_timeout, args.hang_timeout)
    out = SECTION_FN[args.worker](args, dog)
    with open(args.worker_out, "w") as f:
        json.dump(out, f, default=float)
    return 0


def run_section(name: str, args, passthrough: list[str]) -> dict:
    hangs = 0
    for _ in range(args.attempts):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "section.json")
            cmd = [sys.executable, "-m", "benchmarks.peers", *passthrough]
            cmd += ["--worker", name, "--worker-out", out]
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            if rc == 0:
                with open(out) as f:
                    res = json.load(f)
                res["hangs"] = hangs
                return res
        if rc != fs.HUNG:
            raise SystemExit(f"peers: section {name} failed (exit code {rc})")
        hangs += 1
    return {"failed": True, "hangs": hangs, "rows": []}


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for p in ("torch", "torchdiffeq", "torchsde", "scipy", "numpy"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = "missing"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    info = fs.machine() | versions()
    info["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    passthrough = fs._without_option(argv, "--json")
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    for s in args.sections:
        results[s] = run_section(s, args, passthrough)
        print(f"[{time.perf_counter() - t0:6.1f} s] {s} done", file=sys.stderr, flush=True)
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = time.perf_counter() - t0
    if args.keep:
        with open(args.keep) as f:
            earlier = json.load(f)
        m = earlier["machine"]
        when = (
            f"{m.get('date', 'an earlier run')}, load average "
            f"{m['loadavg_start'][0]:.2f} → {m['loadavg_end'][0]:.2f}"
        )
        kept = {s: r | {"earlier_run": when} for s, r in earlier["results"].items()}
        results = {s: results.get(s) or kept[s] for s in SECTIONS if s in results or s in kept}
    verdicts = judge(results)
    text = tables(results, info, verdicts, args)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"machine": info, "results": results, "verdicts": verdicts},
                f,
                indent=2,
                default=float,
            )
    if not args.quick and not args.no_write:
        write_markdown(text, args.sections if not args.keep else list(SECTIONS))
        if set(results) >= set(SECTIONS):
            from benchmarks.peers_plot import plot

            plot(results, info, FIGURE)
            print(f"wrote {os.path.relpath(MD, ROOT)} and {os.path.relpath(FIGURE, ROOT)}")
        else:
            print(
                f"wrote the {', '.join(args.sections)} tables of {os.path.relpath(MD, ROOT)} "
                f"(the figure needs every section: rerun them all, or pass --keep)"
            )
    return 0


# --- verdicts and tables ------------------------------------------------------------------


def _find(res, prefix):
    for r in res.get("rows", []):
        if r["method"].startswith(prefix):
            return r
    return None


def _best(res, prefix):
    """The fastest row whose method starts with ``prefix`` (a peer at its best thread
    count)."""
    rows = [r for r in res.get("rows", []) if r["method"].startswith(prefix)]
    return min(rows, key=lambda r: r["run_s"]) if rows else None


def _name(r) -> str:
    """A row's method, marked where it is the fastest of its thread counts."""
    return r["method"] + (" (fastest)" if r.get("best") else "")


def _threads(x) -> str:
    return ", ".join(str(k) for k in x) if isinstance(x, (list, tuple)) else str(x)


def _counts_note(res) -> str:
    """The thread counts of a section's peers, for its heading."""
    out = f"PyTorch threads: {_threads(res['torch_threads'])}"
    if res.get("blas_threads"):
        out += f"; BLAS threads: {_threads(res['blas_threads'])}"
    return out


def judge(results) -> list[dict]:
    """The targets, each with the measured ratio."""
    out = []

    def add(what, num, den, target, kind, accuracy_ok=True, note=""):
        if num is None or den is None:
            return
        ratio = den["run_s"] / num["run_s"] if kind == "speedup" else num["run_s"] / den["run_s"]
        ok = (ratio >= target if kind == "speedup" else ratio <= target) and accuracy_ok
        out.append(
            {
                "target": what,
                "value": ratio,
                "required": target,
                "kind": kind,
                "pass": ok,
                "note": note,
            }
        )

    fx = results.get("fixed", {})
    rk, sc, td = _find(fx, RK), _find(fx, "JAX"), _best(fx, "torchdiffeq")
    add("fixed step: rankflow / hand-written scan", rk, sc, 1.10, "ratio")
    add("fixed step: speed-up over torchdiffeq", rk, td, 1.0, "speedup", note="must be > 1")
    sd = results.get("sde", {})
    add("SDE: speed-up over torchsde", _find(sd, RK), _best(sd, "torchsde"), 4.0, "speedup")
    ad = results.get("adaptive", {})
    sci, tdq = _best(ad, "scipy"), _best(ad, "torchdiffeq")
    for who in ("float32 (", "float64 (", "float64, PI"):
        mine = _find(ad, f"rankflow Tsit5 {who}")
        who = who.rstrip(" (")
        for peer, what, target in ((sci, "solve_ivp RK45", 2.0), (tdq, "torchdiffeq dopri5", 3.0)):
            if mine is None or peer is None:
                continue
            # Matched error: within 10× of the peer's at the same rtol and atol.
            acc = mine["error"] <= 10 * peer["error"]
            note = f"error {mine['error']:.1e} vs {peer['error']:.1e}"
            add(f"adaptive {who}: speed-up over {what}", mine, peer, target, "speedup", acc, note)
    rf = results.get("roofline", {})
    big = [r for r in rf.get("rows", []) if r["dim"] == 512]
    if big:
        frac = max(r["rankflow_gflops"] for r in big) / rf["peak_gflops"]
        out.append(
            {
                "target": "roofline: d = r = 512 GF update / measured matmul peak",
                "value": frac,
                "required": 0.5,
                "kind": "fraction",
                "pass": frac >= 0.5,
                "note": "",
            }
        )
    sw = results.get("sweep", {})
    if sw.get("rows"):
        rk = _find(sw, "rankflow.run")
        peers = [r for r in sw["rows"] if not r["method"].startswith("rankflow")]
        bp = max(peers, key=lambda r: r["configs_per_s"])
        out.append(
            {
                "target": f"sweep: rankflow.run configs/s over the best peer ({bp['method']})",
                "value": rk["configs_per_s"] / bp["configs_per_s"],
                "required": 1.0,
                "kind": "speedup",
                "pass": rk["configs_per_s"] >= bp["configs_per_s"],
                "note": "",
            }
        )
    return out


def _fmt(x, spec=".3f"):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def tables(results, info, verdicts, args) -> str:
    L = []
    L.append(
        f"Machine: {info['cpu_count']} CPUs ({info['cpus_usable']} usable, {info['processor']}), "
        f"{info['platform']}; python {info['python']}, "
        f"jax {info['jax']} (jaxlib {info['jaxlib']}), "
        f"diffrax {info['diffrax']}, optax {info['optax']}, numpy {info['numpy']}, scipy "
        f"{info['scipy']}, torch {info['torch']}, torchdiffeq {info['torchdiffeq']}, torchsde "
        f"{info['torchsde']}; PRNG {info['prng_impl']}; XLA_FLAGS `{info['xla_flags']}`."
    )
    L.append(
        f"Run of {info.get('date', '?')}. Load average (1 min) {info['loadavg_start'][0]:.2f} "
        "at the start, "
        f"{info['loadavg_end'][0]:.2f} at the end; the whole run took {info['wall_s']:.0f} s. "
        "Times are medians over the repeats, methods interleaved; compile = first call − median."
    )
    for s, r in results.items():
        if r.get("earlier_run"):
            L.append(f"The `{s}` section below is from an earlier run ({r['earlier_run']}).")
    L.append("")
    fx = results.get("fixed")
    if fx and fx.get("rows"):
        L.append(
            "### Fixed step: gradient flow, Euler dt = 1, float32 — "
            f"{fx['configs']} configurations, "
            f"d = r = {fx['dim']}, {fx['steps']} steps ({_counts_note(fx)})"
        )
        L.append("")
        L.append(
            "| method | compile s | run s | × rankflow | error vs float64 flow | vs float64 Euler |"
        )
        L.append("|---|---:|---:|---:|---:|---:|")
        base = _find(fx, RK)["run_s"]
        for r in fx["rows"]:
            err = _fmt(r["error"], ".1e")
            err_e = _fmt(r.get("error_vs_euler64"), ".1e")
            if r.get("obs_diff_vs_rankflow") is not None:
                err = f"observables = rankflow's ({r['obs_diff_vs_rankflow']:.0e})"
                err_e = "same update"
            L.append(
                f"| {_name(r)} | {r['compile_s']:.2f} | {r['run_s']:.3f} | "
                f"{r['run_s'] / base:.2f} | {err} | {err_e} |"
            )
        L.append("")
    sd = results.get("sde")
    if sd and sd.get("rows"):
        L.append(
            "### SDE: stochastic gradient flow, Euler–Maruyama dt = 1, float32 — "
            f"{sd['paths']} paths, "
            f"d = r = {sd['dim']}, {sd['steps']} steps, λ = {sd['lam']}, η = {sd['eta']}, "
            f"σ = {sd['sigma']} ({_counts_note(sd)})"
        )
        L.append("")
        L.append(
            f"Reference E[L(T)] = {sd['ref_mean_loss']:.6g} ± {sd['ref_se_loss']:.2g} "
            f"(float64, {sd['ref_paths']} paths)."
        )
        L.append("")
        L.append("| method | compile s | run s | × rankflow | mean L(T) ± SE | off the reference |")
        L.append("|---|---:|---:|---:|---:|---:|")
        base = _find(sd, RK)["run_s"]
        for r in sd["rows"]:
            off = f"{r['z_vs_ref']:.1f} SE"
            if r.get("obs_diff_vs_rankflow") is not None:
                off += f"; = rankflow's bits ({r['obs_diff_vs_rankflow']:.0e})"
            L.append(
                f"| {_name(r)} | {r['compile_s']:.2f} | {r['run_s']:.3f} | "
                f"{r['run_s'] / base:.2f} | {r['mean_loss']:.6g} ± {r['se_loss']:.1g} | {off} |"
            )
        L.append("")
    ad = results.get("adaptive")
    if ad and ad.get("rows"):
        L.append(
            f"### Adaptive: gradient flow, rtol = {ad['rtol']:g}, atol = {ad['atol']:g} — "
            f"{ad['configs']} configurations, d = r = {ad['dim']}, t ∈ [0, {ad['steps']}] "
            f"({_counts_note(ad)})"
        )
        L.append("")
        c32, c64 = ad["choice_float32"], ad["choice_float64"]

        def per(c):
            return ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in c["seconds_per_run"].items())

        L.append(
            f"rankflow's strategy, measured on a probe of 8 configurations ({ad['probe_s']:.1f} s "
            f"for both dtypes, compilations included): float32 → **{c32['strategy']}** "
            f"(per run: {per(c32)}); float64 → **{c64['strategy']}** ({per(c64)})."
            + "".join(
                f" PI controller, {dtype}: **{c['strategy']}** ({per(c)})."
                for dtype, c in ad.get("choice_pi", {}).items()
            )
        )
        L.append("")
        L.append("| method | compile s | run s | × rankflow | error vs float64 reference |")
        L.append("|---|---:|---:|---:|---:|")
        base = _find(ad, "rankflow Tsit5 float32")["run_s"]
        for r in ad["rows"]:
            L.append(
                f"| {_name(r)} | {r['compile_s']:.2f} | {r['run_s']:.3f} | "
                f"{r['run_s'] / base:.2f} | {r['error']:.1e} |"
            )
        L.append("")
    sw = results.get("sweep")
    if sw and sw.get("rows"):
        g = sw["grid"]
        L.append(
            f"### Sweep: λ × η × seed = {g[0]} × {g[1]} × {g[2]} = {sw['configs']} configurations, "
            f"gradient flow, Euler dt = 1, float32, d = r = {sw['dim']}, {sw['steps']} steps "
            f"({_counts_note(sw)})"
        )
        L.append("")
        L.append("| method | compile s | grid s | configurations / s |")
        L.append("|---|---:|---:|---:|")
        for r in sw["rows"]:
            L.append(
                f"| {_name(r)} | {r['compile_s']:.2f} | {r['run_s']:.3f} | "
                f"{r['configs_per_s']:.0f} |"
            )
        L.append("")
    rf = results.get("roofline")
    if rf and rf.get("rows"):
        L.append(
            "### Roofline: gradient-flow update (6·d³ flops per step and configuration), "
            "float32 — "
            f"matmul peak {rf['peak_gflops']:.0f} GFLOP/s (jnp.dot of {rf['peak_sizes']} squares, "
            f"best of before/after: {rf['peak_before']:.0f} / {rf['peak_after']:.0f})"
        )
        L.append("")
        L.append(
            "| d = r | batch | steps K | rankflow ms/step | GFLOP/s | of peak | "
            "hand-written scan GFLOP/s | of peak |"
        )
        L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        pk = rf["peak_gflops"]
        for r in rf["rows"]:
            L.append(
                f"| {r['dim']} | {r['batch']} | {r['steps']} | {r['rankflow_step_s'] * 1e3:.3f} | "
                f"{r['rankflow_gflops']:.1f} | {r['rankflow_gflops'] / pk:.0%} | "
                f"{r['scan_gflops']:.1f} | {r['scan_gflops'] / pk:.0%} |"
            )
        L.append("")
    if verdicts:
        L.append("### Targets")
        L.append("")
        L.append(
            "Each peer at the fastest of the thread counts in its section's heading; the adaptive "
            "rows' errors are against the float64 reference."
        )
        L.append("")
        L.append("| target | measured | required | result | note |")
        L.append("|---|---:|---:|---|---|")
        for v in verdicts:
            req = {
                "speedup": f"≥ {v['required']:g}×",
                "ratio": f"≤ {v['required']:g}",
                "fraction": f"≥ {v['required']:.0%}",
            }[v["kind"]]
            val = f"{v['value']:.0%}" if v["kind"] == "fraction" else f"{v['value']:.2f}"
            verdict = "PASS" if v["pass"] else "FAIL"
            L.append(f"| {v['target']} | {val} | {req} | {verdict} | {v.get('note', '')} |")
        L.append("")
    hangs = {k: v.get("hangs", 0) for k, v in results.items() if v.get("hangs")}
    if hangs:
        L.append(f"Worker restarts after an XLA:CPU deadlock: {hangs}.")
    return "\n".join(L)


def write_markdown(text: str, ran: list[str]) -> None:
    """Write ``text`` as BENCHMARKS.md's generated block; where only the sections of
    ``ran`` were run, theirs replace the block's and the others stay (``peers_markdown``)."""
    with open(MD) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"peers: {MD} lacks the generated-section markers")
    head, rest = doc.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    if set(ran) < set(SECTIONS):
        text = peers_markdown.merge(old.strip("\n"), text, ran, SECTIONS)
    with open(MD, "w") as f:
        f.write(head + BEGIN + "\n\n" + text + "\n\n" + END + tail)


if __name__ == "__main__":
    import rankflow

    rankflow.use_all_cores()  # as the rankflow command does: one CPU device per core
    sys.exit(main())
