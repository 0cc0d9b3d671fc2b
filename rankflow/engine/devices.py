"""How many CPU devices JAX gives rankflow: one per physical core unless the user says.

XLA:CPU shows one device unless told otherwise, and a vmapped batch of small matrix
products (rankflow's sweeps) runs on that device's one thread: one core of two sits idle
(measured, issue #18). rankflow shards every batch over all the devices JAX sees, so with
one CPU device per core a sweep uses every core. The count is the user's where they set
it, in this order:

1. ``RANKFLOW_CPU_DEVICES=N`` (a positive integer), or ``RANKFLOW_CPU_DEVICES=all``;
2. ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (XLA's own flag);
3. ``jax.config.update("jax_num_cpu_devices", N)`` before rankflow is imported (or
   ``JAX_NUM_CPU_DEVICES=N``);
4. otherwise (and for ``all``) one device per physical core this process may run on: the
   CPUs of its affinity mask (``os.sched_getaffinity``), counted once per core —
   hyperthreads share one — capped by the cgroup CPU quota of containers and SLURM where
   one is set.

Every decomposition in rankflow's traced programs runs one matrix at a time on CPU
(:mod:`rankflow.numerics.linalg`): on jax/jaxlib 0.10.2 a batched LAPACK kernel (the vmap of an
SVD) waits for pool tasks that no free thread runs once every thread of XLA:CPU's
intra-op pool runs a device's program, and the process sleeps for ever (seen with 2
devices on 2 cores before the initialisations went through ``rankflow.numerics.linalg``;
benchmarks/README.md, "XLA:CPU deadlocks"). Code of the user's (a custom loss) that
vmaps a decomposition of its own can still meet it: ``RANKFLOW_CPU_DEVICES=1`` is the
way out.

This concerns the CPU backend only: on a GPU or TPU host the accelerators are the
devices, and ``JAX_PLATFORMS`` without ``cpu`` leaves the CPU count alone. If JAX's
backends are already running when rankflow is imported (another library used JAX
first), the count cannot change any more: rankflow leaves it, and ``rankflow info``
says how many devices are in use and how to get more.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV",
    "LATE",
    "XLA_FLAG",
    "CpuDevices",
    "cgroup_cpus",
    "configure",
    "default_count",
    "physical_cores",
    "requested",
    "setting",
    "usable_cpus",
]

ENV = "RANKFLOW_CPU_DEVICES"
XLA_FLAG = "--xla_force_host_platform_device_count"
CGROUP = Path("/sys/fs/cgroup")
SYSFS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuDevices:
    """The CPU device count rankflow asked JAX for (None: it asked for nothing) and why,
    in words for ``rankflow info``."""

    count: int | None
    source: str


# Why the count is JAX's own when its backends started before rankflow was imported.
LATE = (
    "JAX had started before rankflow was imported, so its device count stands; set "
    f"{ENV}=N and import rankflow before using JAX for N CPU devices"
)
_SETTING = CpuDevices(None, "not configured (rankflow.engine.devices.configure not run)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int] | None = None, sysfs: Path = SYSFS_CPU) -> int:
    """Physical cores among ``cpus`` (default: :func:`usable_cpus`): logical CPUs that
    share a core (hyperthreads) count once, by their (package, core) ids in sysfs; a
    CPU whose topology cannot be read counts as a core of its own."""
    cores = set()
    for cpu in usable_cpus() if cpus is None else cpus:
        top = sysfs / f"cpu{cpu}" / "topology"
        package, core = _read(top / "physical_package_id"), _read(top / "core_id")
        cores.add((package, core) if package is not None and core is not None else ("cpu", cpu))
    return max(1, len(cores))


def _own_cgroup_dirs(root: Path) -> list[Path]:
    """This process's cgroup v2 directory (from ``/proc/self/cgroup``) and its parents
    up to ``root``: a quota set on any of them applies."""
    text = _read(Path("/proc/self/cgroup")) or ""
    rel = next((ln.split(":", 2)[2] for ln in text.splitlines() if ln.startswith("0::")), "/")
    here = root / rel.lstrip("/")
    dirs = [here, *here.parents]
    return [d for d in dirs if d == root or root in d.parents]


def cgroup_cpus(root: Path = CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (quota / period; the smallest on
    the way to the root), or None where none is set or none can be read. Reads cgroup v2
    ``cpu.max`` and v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``."""
    quotas = []
    for d in _own_cgroup_dirs(root):
        parts = (_read(d / "cpu.max") or "").split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quotas.append(int(parts[0]) / int(parts[1]))
            except (ValueError, ZeroDivisionError):
                pass
    q, p = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    if q and p and q.lstrip("-").isdigit() and p.isdigit() and int(q) > 0 and int(p) > 0:
        quotas.append(int(q) / int(p))
    return min(quotas) if quotas else None


def default_count() -> tuple[int, str]:
    """One device per physical core this process may use (affinity, then cgroup quota)."""
    cpus = usable_cpus()
    cores = physical_cores(cpus)
    why = f"one per physical core ({cores} of the {len(cpus)} CPUs this process may use)"
    quota = cgroup_cpus()
    if quota is not None and math.ceil(quota) < cores:
        cores = max(1, math.ceil(quota))
        why = f"one per CPU of the cgroup's quota ({quota:g} CPUs)"
    return cores, why


def _flag_count(flags: str) -> int | None:
    for part in flags.split():
        if part.startswith(XLA_FLAG + "="):
            value = part.split("=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def requested(environ: dict[str, str] | None = None) -> tuple[int | None, str, str | None]:
    """``(count, source, problem)``: the count the user set (``None``: use the default)
    with where it came from, and a one-line note on a ``RANKFLOW_CPU_DEVICES`` that is
    not a positive integer (it is then ignored)."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV, "").strip()
    if raw == "all":
        count, why = default_count()
        return count, f"{ENV}=all: {why}", None
    if raw:
        if raw.isdigit() and int(raw) > 0:
            return int(raw), f"{ENV}={raw}", None
        problem = f"{ENV}={raw!r} is not a positive integer or 'all'; ignored"
    else:
        problem = None
    flag = _flag_count(env.get("XLA_FLAGS", ""))
    if flag is not None:
        return flag, f"XLA_FLAGS {XLA_FLAG}={flag}", problem
    return None, "", problem


def configure() -> CpuDevices:
    """Ask JAX for the CPU device count of the module docstring, unless its backends are
    running already; remembered for :func:`setting`. Called when rankflow is imported."""
    global _SETTING
    import jax

    count, source, problem = requested()
    if problem:
        print(f"rankflow: {problem}", file=sys.stderr)
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    preset = jax.config.jax_num_cpu_devices
    if platforms and "cpu" not in [p.strip() for p in platforms.split(",")]:
        _SETTING = CpuDevices(None, f"no CPU backend (JAX_PLATFORMS={platforms})")
    elif count is not None and not source.startswith(ENV):
        _SETTING = CpuDevices(count, source)  # XLA's flag: JAX reads it itself
    elif count is None and preset >= 0:
        _SETTING = CpuDevices(preset, f"jax_num_cpu_devices={preset}, set before rankflow")
    else:
        if count is None:
            count, why = default_count()
            source = f"the default: {why}"
        try:
            jax.config.update("jax_num_cpu_devices", count)
        except RuntimeError:  # JAX's backends are running: the count can no longer change
            _SETTING = CpuDevices(None, LATE)
        else:
            _SETTING = CpuDevices(count, source)
    return _SETTING


def setting() -> CpuDevices:
    """What :func:`configure` did in this process."""
    return _SETTING
