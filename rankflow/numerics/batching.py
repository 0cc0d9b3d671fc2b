"""Batching strategies for a single-run function, chosen by measurement.

A *single-run function* maps one run's parameters (a pytree of scalars or arrays) to its
outputs; a *batch* is the same pytree with a leading run axis. Three ways to run a batch
in one compiled program:

- ``vmap``: one program over the whole batch. Fixed-step solves and optimizers run every
  operation once for all runs (batched matrix products): the fastest for them.
- ``map``: ``lax.map``, the runs one after another inside the program. Adaptive solves
  keep their own step counts: under ``vmap`` an adaptive solve is one while loop that
  steps every run until the slowest has finished (a batch costs its slowest member's
  step count times its size), under ``map`` it costs the sum of the members' counts.
- ``chunks of k``: ``lax.map`` over chunks of ``k`` runs, each chunk vmapped; between
  the two.

Whatever the strategy, a batch sharded over several devices runs as one program per
device on that device's share (:func:`per_device`): each device maps or vmaps its own
runs, as one device would all of them.

A fourth, for ODEs whose vector field the caller has: one stacked system of all runs
with one step-size controller (:func:`stacked_ode`), which still meets the tolerance of
every run with :func:`member_max_norm`. It steps every run at the step size of the
hardest, as ``vmap`` does.

Which is fastest depends on the solver, the sizes, the spread of step counts across the
batch and the machine, so :func:`choose` times the candidates on a small probe batch
(evenly spaced members, so that the spread of step counts is that of the batch) and
caches the winner per structure key. Measured here (2 CPU cores, 64 adaptive Tsit5
solves of the diagonal problem, d = r = 32, η spread 10×): ``map`` 0.6 s, ``vmap``
3–4 s, stacked 3.3 s; fixed-step Euler: ``vmap`` fastest.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .solve import PID_FIELDS, SECTION_DEFAULTS, Saved, setup, solve

__all__ = [
    "Choice",
    "batched",
    "choose",
    "chosen",
    "chunked",
    "forget",
    "member_max_norm",
    "per_device",
    "probe_indices",
    "run",
    "sequential",
    "shard",
    "stacked_ode",
    "vmapped",
]

Single = Callable[[Any], Any]
Batched = Callable[[Any], Any]


def vmapped(single: Single) -> Batched:
    """The whole batch as one vmapped program."""
    return jax.vmap(single)


def sequential(single: Single) -> Batched:
    """The runs one after another inside one program (``lax.map``)."""
    return lambda batch: jax.lax.map(single, batch)


def chunked(single: Single, size: int) -> Batched:
    """``lax.map`` over chunks of ``size`` runs, each chunk vmapped (a remainder chunk
    is vmapped too)."""
    return lambda batch: jax.lax.map(single, batch, batch_size=size)


def member_max_norm(y) -> jax.Array:
    """Error norm of a stacked state (every leaf has the run axis first): the largest
    over runs of the run's RMS norm, so a step is accepted only where every run would
    accept it on its own (the tolerance holds run by run, not on average)."""
    leaves = jax.tree.leaves(y)
    if leaves[0].ndim == 0:  # diffrax also takes norms of scalars (step-size heuristics)
        return jnp.max(jnp.stack([jnp.abs(x) for x in leaves]))
    squares = sum(jnp.sum(jnp.reshape(x**2, (x.shape[0], -1)), axis=1) for x in leaves)
    size = sum(int(np.prod(x.shape[1:])) for x in leaves)
    return jnp.sqrt(jnp.max(squares) / size)


def stacked_ode(
    field: Callable,
    solver: diffrax.AbstractSolver,
    t0: float,
    t1: float,
    y0,
    args,
    *,
    rtol: float,
    atol: float,
    ts: np.ndarray | None = None,
    max_steps: int = SECTION_DEFAULTS["max_steps"],
    **controller_kwargs,
) -> Saved:
    """Solve the ODEs ``dy/dt = field(t, y, args)`` of a batch of runs (``y0`` and
    ``args`` with the run axis first) as one stacked system with one step-size
    controller whose error norm is :func:`member_max_norm` (``controller_kwargs``: more
    ``diffrax.PIDController`` options); saves the stacked state at ``ts`` (default:
    ``t1`` only) as ``.ys``. Raises if the solve fails."""
    unknown = set(controller_kwargs) - PID_FIELDS
    if unknown:
        raise TypeError(f"not PIDController options: {', '.join(sorted(unknown))}")
    section = {"method": solver, "rtol": rtol, "atol": atol, "max_steps": max_steps}
    section |= {"norm": member_max_norm, **controller_kwargs}
    return solve(
        jax.vmap(field, in_axes=(None, 0, 0)),
        y0,
        args,
        setup(section, ts, t0=t0, t1=t1, throw=True),
    )


_STRATEGIES: dict[str, Callable[[Single], Batched]] = {
    "vmap": vmapped,
    "map": sequential,
}


def batched(single: Single, strategy: str) -> Batched:
    """The (unjitted) batched function of a strategy name: ``"vmap"``, ``"map"`` or
    ``"chunks:K"``."""
    if strategy.startswith("chunks:"):
        return chunked(single, int(strategy.split(":", 1)[1]))
    try:
        return _STRATEGIES[strategy](single)
    except KeyError:
        raise ValueError(f"unknown batching strategy {strategy!r}") from None


def default_candidates(n: int) -> tuple[str, ...]:
    """``vmap``, ``map`` and, for batches of more than 8 runs, chunks of 8."""
    return ("vmap", "map") + (("chunks:8",) if n > 8 else ())


def probe_indices(n: int, probe: int) -> np.ndarray:
    """``probe`` members spread evenly over a batch of ``n`` (all of them if fewer)."""
    if n <= probe:
        return np.arange(n)
    return np.unique(np.rint(np.linspace(0, n - 1, probe)).astype(np.int64))


@dataclass(frozen=True)
class Choice:
    """The outcome of :func:`choose`: the winning ``strategy`` and the measured seconds
    per run of every candidate on the probe batch (compilation excluded)."""

    strategy: str
    seconds_per_run: Mapping[str, float]
    probe: int
    probe_seconds: float  # wall time of the whole measurement, compilations included


_CHOICES: dict[Any, Choice] = {}
_JITTED: dict[tuple[Any, str], Batched] = {}


def _batch_size(batch) -> int:
    return int(jax.tree.leaves(batch)[0].shape[0])


def choose(
    single: Single,
    batch,
    key: Any,
    *,
    candidates: tuple[str, ...] | None = None,
    probe: int = 8,
    repeats: int = 3,
) -> Choice:
    """The fastest strategy for ``single`` on batches like ``batch``, measured once per
    ``key`` (a structure key: whatever determines the program, not the numbers).

    Each candidate is compiled and run once on a probe of ``probe`` members spread over
    the batch (padded to a multiple of the device count, each device running its share
    as it will the batch's), then timed ``repeats`` times (median); the winner is cached
    under ``key`` and returned on later calls without measuring again.
    """
    if key in _CHOICES:
        return _CHOICES[key]
    n = _batch_size(batch)
    if n == 1:  # every strategy runs the one run alike: nothing to measure
        return Choice("vmap", {}, 1, 0.0)
    candidates = candidates or default_candidates(n)
    idx = probe_indices(n, probe)
    # Every device gets a share of the probe, as of the batch (padded with the last).
    devices = jax.device_count()
    idx = np.pad(idx, (0, -len(idx) % devices), mode="edge")
    sub = jax.tree.map(lambda x: x[idx], batch)
    started = time.perf_counter()
    per_run: dict[str, float] = {}
    for name in candidates:
        if name.startswith("chunks:") and int(name.split(":")[1]) >= len(idx):
            continue  # one chunk of the probe is vmap
        fn = _jitted(single, key, name)  # kept: a batch of the probe's size reuses it
        jax.block_until_ready(fn(sub))  # compile
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            jax.block_until_ready(fn(sub))
            times.append(time.perf_counter() - t)
        per_run[name] = statistics.median(times) / len(idx)
    best = min(per_run, key=per_run.get)
    choice = Choice(best, per_run, len(idx), time.perf_counter() - started)
    _CHOICES[key] = choice
    return choice


def chosen() -> Mapping[Any, Choice]:
    """The choices measured so far, by key."""
    return dict(_CHOICES)


def run(single: Single, batch, key: Any, *, strategy: str | None = None, **choose_kwargs):
    """Run ``batch`` through ``single`` with the measured (cached) strategy of ``key``,
    or with ``strategy`` if given; the jitted batched function is cached too."""
    strategy = strategy or choose(single, batch, key, **choose_kwargs).strategy
    return _jitted(single, key, strategy)(batch)


def _jitted(single: Single, key: Any, strategy: str) -> Batched:
    fn = _JITTED.get((key, strategy))
    if fn is None:
        fn = _JITTED[(key, strategy)] = jax.jit(per_device(batched(single, strategy)))
    return fn


def forget(key: Any = None) -> None:
    """Drop the cached choices and programs of ``key`` (of every key when ``None``)."""
    for k in [k for k in _CHOICES if key is None or k == key]:
        del _CHOICES[k]
    for k in [k for k in _JITTED if key is None or k[0] == key]:
        del _JITTED[k]


def shard(params: Mapping[str, np.ndarray], dtype_of: Callable[[str], Any]) -> dict[str, Any]:
    """A batch of 1-d parameter arrays on the devices: padded (with copies of its last
    run) to a multiple of their number and, with several, sharded across them, so each
    run's arithmetic is the same whatever the number of devices. ``dtype_of(key)``: the
    traced dtype of each key (call under the program's ``jax.enable_x64``). Cast on the
    host and copied to the devices in one ``device_put`` (each run's values straight to
    its device: no copy to the first device and reshard)."""
    import jax

    n = len(next(iter(params.values())))
    devices = jax.devices()
    padded = -(-n // len(devices)) * len(devices)
    batch = {
        k: np.asarray(np.pad(np.asarray(v), (0, padded - n), mode="edge"), np.dtype(dtype_of(k)))
        for k, v in params.items()
    }
    if len(devices) > 1:
        mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
        return jax.device_put(batch, sharding)
    return jax.device_put(batch)


def per_device(fn: Callable) -> Callable:
    """``fn(batch, *shared)`` (batched: every leaf of ``batch`` and of the output has the
    run axis first; ``shared`` the same for every run) run by each device on its share
    of the batch (``shard_map`` over all of JAX's devices, ``shared`` replicated), when
    there are several and the batch divides evenly among them; ``fn`` itself otherwise.
    Call it under ``jax.jit``.

    Each device then runs the one-device program on fewer runs, so each run's arithmetic
    is the same whatever the number of devices, and a ``lax.map`` (the ``map`` strategy
    of adaptive solves, the CPU decompositions of ``rankflow.core.observables``) maps over the
    device's own runs. Left to jit's automatic partitioning, the vmapped program of a
    batch sharded over 2 CPU devices ran no faster than on one (measured here, one
    sample on the shared 2-core machine: 64 GD runs, d = r = 32, 2,000 steps, 1.29 s
    partitioned by jit, 0.83 s through ``shard_map``, 1.29 s on one device)."""
    import jax

    @functools.wraps(fn)
    def call(batch, *shared):
        devices = jax.devices()
        if len(devices) == 1 or int(jax.tree.leaves(batch)[0].shape[0]) % len(devices):
            return fn(batch, *shared)
        mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
        runs, same = jax.sharding.PartitionSpec("runs"), jax.sharding.PartitionSpec()
        return jax.shard_map(
            fn,
            mesh=mesh,
            in_specs=(runs, *(same for _ in shared)),
            out_specs=runs,
            check_vma=False,  # diffrax's loops and custom_vmap carry no annotations
        )(batch, *shared)

    return call
