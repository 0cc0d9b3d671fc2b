"""How many CPU devices JAX shows: one per physical core when asked, JAX's own otherwise.

Importing rankflow changes nothing in JAX (no ``XLA_FLAGS``, no JAX config): a notebook
that imports it runs its own JAX code as before. The ``rankflow`` command, and a Python
user who calls :func:`use_all_cores` before anything uses JAX, get one CPU device per
physical core and single-threaded Eigen kernels in XLA:CPU (:func:`single_threaded_eigen`).

XLA:CPU shows one device unless told otherwise, and a vmapped batch of small matrix
products (rankflow's sweeps) runs on that device's one thread: one core of two sits idle
(measured, issue #18). rankflow shards every batch over all the devices JAX sees, so with
one CPU device per core a sweep uses every core. :func:`use_all_cores` (and the
``rankflow`` command) take the count from the first of:

1. ``RANKFLOW_CPU_DEVICES=N`` (a positive integer, capped at the CPUs this process may
   run on, with one line saying so: each device holds memory of its own), or
   ``RANKFLOW_CPU_DEVICES=all``;
2. ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (XLA's own flag);
3. ``jax.config.update("jax_num_cpu_devices", N)`` before :func:`use_all_cores` (or
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
devices, and ``JAX_PLATFORMS`` without ``cpu`` leaves the CPU count alone. Once JAX's
backends are running the count cannot change any more: :func:`use_all_cores` then raises
:class:`~rankflow.ConfigError` saying to call it first, and the ``rankflow`` command
(which never raises for it) leaves JAX's count; ``rankflow info`` says which count is in
force and what set it.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config.fields import ConfigError

__all__ = [
    "CALL",
    "COMMAND",
    "EIGEN_FLAG",
    "ENV",
    "LATE",
    "XLA_FLAG",
    "CpuDevices",
    "cgroup_cpus",
    "configure",
    "default_count",
    "jax_started",
    "physical_cores",
    "requested",
    "setting",
    "single_threaded_eigen",
    "usable_cpus",
    "use_all_cores",
]

ENV = "RANKFLOW_CPU_DEVICES"
XLA_FLAG = "--xla_force_host_platform_device_count"
EIGEN_FLAG = "--xla_cpu_multi_thread_eigen=false"
# Who asked for the count (``CpuDevices.via``).
COMMAND = "the rankflow command"
CALL = "rankflow.use_all_cores()"
CGROUP = Path("/sys/fs/cgroup")
SYSFS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuDevices:
    """The CPU device count rankflow asked JAX for (None: it asked for nothing), why in
    words for ``rankflow info``, and who asked (:data:`COMMAND`, :data:`CALL`; None: no
    one, JAX's own count stands)."""

    count: int | None
    source: str
    via: str | None = None

    @property
    def applied(self) -> bool:
        """Whether a call before JAX started set the count (or found it set)."""
        return self.via is not None and self.source != LATE


# Why the count is JAX's own when its backends started before anyone asked.
LATE = (
    f"JAX had started before the count could be set, so JAX's own count stands; call {CALL} "
    "before anything uses JAX"
)
# use_all_cores's one-line error once JAX has started.
_STARTED = (
    f"{CALL}: JAX has already started, so its CPU device count can no longer change; "
    f"call {CALL} first, before anything uses JAX"
)
_SETTING = CpuDevices(
    None, f"JAX's default: {CALL} was not called (before JAX starts, it gives one per core)"
)


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
    not a positive integer (it is then ignored) or exceeds the CPUs (it is capped)."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV, "").strip()
    if raw == "all":
        count, why = default_count()
        return count, f"{ENV}=all: {why}", None
    if raw:
        cpus = len(usable_cpus())
        if raw.isdigit() and 0 < int(raw) <= cpus:
            return int(raw), f"{ENV}={raw}", None
        if raw.isdigit() and int(raw) > cpus:  # each device holds memory of its own
            return (
                cpus,
                f"{ENV}={raw}, capped at the {cpus} CPUs this process may use",
                (
                    f"{ENV}={raw} exceeds the {cpus} CPUs this process may use; using {cpus} "
                    f"devices (XLA_FLAGS {XLA_FLAG}=N sets more, for testing)"
                ),
            )
        problem = f"{ENV}={raw!r} is not a positive integer or 'all'; ignored"
    else:
        problem = None
    flag = _flag_count(env.get("XLA_FLAGS", ""))
    if flag is not None:
        return flag, f"XLA_FLAGS {XLA_FLAG}={flag}", problem
    return None, "", problem


def jax_started() -> bool:
    """Whether JAX's backends are running (then the device count and ``XLA_FLAGS`` can no
    longer change anything)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # another JAX layout: config.update's RuntimeError tells instead
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started and started())


def single_threaded_eigen(environ: dict[str, str] | None = None) -> bool:
    """Add :data:`EIGEN_FLAG` to ``XLA_FLAGS`` (single-threaded Eigen in XLA:CPU) unless
    the flags name Eigen's threads already or ``RANKFLOW_EIGEN_THREADS`` is set (any value
    keeps JAX's default); True where it added it. CPU only: the flag is XLA:CPU's, and
    GPU and TPU backends ignore it. It acts only before JAX creates its CPU backend.

    Measured here (jax 0.10.2, 2 cores), a vmapped batch of 2,048 runs' observables ran
    1.5× faster with XLA's Eigen kernels single-threaded: at this suite's sizes the
    batch, not the single matrix, is the parallelism worth having. (The deadlocks of
    batched CPU LAPACK kernels are avoided in ``rankflow.numerics.linalg``.)
    """
    env = os.environ if environ is None else environ
    flags = env.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in flags or env.get("RANKFLOW_EIGEN_THREADS"):
        return False
    env["XLA_FLAGS"] = f"{flags} {EIGEN_FLAG}".strip()
    return True


def configure(via: str = COMMAND) -> CpuDevices:
    """Ask JAX for the CPU device count of the module docstring and single-threaded
    Eigen (:func:`single_threaded_eigen`), unless its backends are running already (then
    the setting says so: :data:`LATE`); remembered for :func:`setting`. Never raises:
    the ``rankflow`` command calls it before anything starts JAX; Python users call
    :func:`use_all_cores`. A second call after one that applied changes nothing."""
    global _SETTING
    import jax

    if _SETTING.applied:
        return _SETTING
    if jax_started():
        _SETTING = CpuDevices(None, LATE, via)
        return _SETTING
    count, source, problem = requested()
    if problem:
        print(f"rankflow: {problem}", file=sys.stderr)
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    preset = jax.config.jax_num_cpu_devices
    if platforms and "cpu" not in [p.strip() for p in platforms.split(",")]:
        _SETTING = CpuDevices(None, f"no CPU backend (JAX_PLATFORMS={platforms})", via)
    elif count is not None and not source.startswith(ENV):
        _SETTING = CpuDevices(count, source, via)  # XLA's flag: JAX reads it itself
    elif count is None and preset >= 0:
        _SETTING = CpuDevices(preset, f"jax_num_cpu_devices={preset}, set by you", via)
    else:
        if count is None:
            count, why = default_count()
            source = f"every core, {why}"
        try:
            jax.config.update("jax_num_cpu_devices", count)
        except RuntimeError:  # JAX's backends are running: the count can no longer change
            _SETTING = CpuDevices(None, LATE, via)
            return _SETTING
        _SETTING = CpuDevices(count, source, via)
    single_threaded_eigen()
    return _SETTING


def use_all_cores() -> CpuDevices:
    """One JAX CPU device per physical core, and single-threaded Eigen kernels, for this
    process: what the ``rankflow`` command does, for Python users who want it (a sweep
    shards its batch over every device). Call it before anything uses JAX; importing
    rankflow does neither. The count is the user's where they set one
    (``RANKFLOW_CPU_DEVICES=N`` or ``all``, XLA's
    ``--xla_force_host_platform_device_count``, ``JAX_NUM_CPU_DEVICES``);
    ``RANKFLOW_EIGEN_THREADS`` (any value) keeps JAX's Eigen threads. Calling it again
    is harmless.

    Returns:
      The :class:`CpuDevices` in force (also :func:`setting`).

    Raises:
      ConfigError: JAX's backends have started (a computation, ``jax.devices()``), so
        the count can no longer change.

    Examples:
      It acts on a process in which JAX has not started, so this example runs one (here
      with the count set to 2 by ``RANKFLOW_CPU_DEVICES``; unset, one per core):

      >>> import os, subprocess, sys
      >>> code = ("import jax, rankflow; s = rankflow.use_all_cores(); "
      ...         "print(s.count, s.source, jax.device_count(), rankflow.use_all_cores() == s)")
      >>> env = dict(os.environ, JAX_PLATFORMS="cpu", RANKFLOW_CPU_DEVICES="2")
      >>> run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
      >>> print(run.stdout.decode().strip())
      2 RANKFLOW_CPU_DEVICES=2 2 True
    """
    if jax_started() and not _SETTING.applied:
        raise ConfigError(_STARTED)
    found = configure(via=CALL)
    if not found.applied:  # jax.config refused the count: JAX started all the same
        raise ConfigError(_STARTED)
    return found


def setting() -> CpuDevices:
    """What :func:`configure` (or :func:`use_all_cores`) did in this process; JAX's default
    where neither ran."""
    return _SETTING
