"""What ``rankflow info`` reports: the versions, devices and settings that decide how
rankflow runs here, in a form to paste into a bug report.

JAX is asked for its devices once, through :func:`devices`; a platform named in
``JAX_PLATFORMS`` that JAX cannot start becomes one line naming the platform and the
rankflow extra that installs it.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from ..config.fields import ConfigError
from . import devices as cpu_devices
from . import store
from .programs import compilation_cache_dir
from .store import package_versions

__all__ = ["INSTALL_HINTS", "devices", "format_info", "info"]

# Every package whose version changes what rankflow computes or how fast: those a
# manifest records, the accelerator plugins, and the libraries of figures, checkpoints,
# the Hub and SLURM.
PACKAGES = (
    *store.PACKAGES[:3],
    "jax-cuda12-plugin",
    "jax-cuda13-plugin",
    "libtpu",
    *store.PACKAGES[3:],
    "matplotlib",
    "safetensors",
    "huggingface_hub",
    "submitit",
)
# The environment variables that set threads and devices (XLA's, the BLAS libraries',
# rankflow's own), shown unset when they are.
THREAD_VARIABLES = (
    "XLA_FLAGS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "RANKFLOW_EIGEN_THREADS",
    "RANKFLOW_CPU_DEVICES",
    "JAX_PLATFORMS",
)
# What to install for each accelerator platform JAX_PLATFORMS may name.
INSTALL_HINTS = {
    "cuda": 'pip install "rankflow[cuda12]" (or "rankflow[cuda13]") on a machine with an '
    "NVIDIA GPU",
    "tpu": 'pip install "rankflow[tpu]" on a TPU VM',
    "rocm": "a ROCm build of JAX (JAX's installation guide; rankflow has no extra for it)",
}
INSTALL_HINTS["gpu"] = INSTALL_HINTS["cuda"]


def devices() -> list:
    """``jax.devices()``. Raises :class:`ConfigError` in one line when JAX cannot start a
    platform that ``JAX_PLATFORMS`` asks for (e.g. ``cuda`` without a GPU or without
    JAX's CUDA plugin), naming the platform and what to install."""
    import jax

    try:
        return jax.devices()
    # JAX raises RuntimeError, or a bare AssertionError when the CUDA plugin is missing.
    except (RuntimeError, AssertionError) as e:
        asked = os.environ.get("JAX_PLATFORMS", "").strip()
        if not asked:
            raise
        wanted = [p.strip() for p in asked.split(",") if p.strip() and p.strip() != "cpu"]
        hints = "; ".join(
            f"for {p}: {INSTALL_HINTS.get(p, 'a JAX build that supports it')}" for p in wanted
        )
        detail = f" (JAX: {str(e).splitlines()[0]})" if str(e).strip() else ""
        raise ConfigError(
            f"JAX_PLATFORMS={asked}: JAX cannot start {', '.join(wanted) or asked}{detail}; "
            f"{hints or 'check the platform name'}, or unset JAX_PLATFORMS to use what JAX "
            "finds"
        ) from None


def _memory(device) -> int | None:
    """The memory JAX reports for ``device`` in bytes (None where it reports none, as
    on CPU)."""
    try:
        stats = device.memory_stats()
    except Exception:  # some backends do not implement it
        return None
    return (stats or {}).get("bytes_limit")


def _cpu_devices() -> int | None:
    import jax

    try:
        return len(jax.devices("cpu"))
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU out
        return None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name and its widest vector ISA (XLA:CPU vectorises for it, so
    float32 results can differ in the last bits between machines that differ here), or
    the platform's processor string where ``/proc/cpuinfo`` cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(
        (k.strip(), v.strip())
        for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
    )
    flags = set(fields.get("flags", "").split())
    isa = next(
        (f for f in ("avx512f", "avx2", "avx", "sse4_2") if f in flags), "no x86 vector flags"
    )
    return f"{fields.get('model name', platform.processor() or 'unknown')} ({isa})"


def info() -> dict[str, Any]:
    """Versions, devices (platform, kind, memory), x64, the compilation cache and the
    thread settings of this process, as a JSON-ready mapping."""
    import jax

    found = devices()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "rankflow": package_versions(("rankflow",)).get("rankflow", "not installed"),
        "python": sys.version.split()[0],
        "system": platform.platform(),
        "versions": package_versions(PACKAGES),
        "backend": jax.default_backend(),
        "devices": [
            {
                "id": d.id,
                "platform": d.platform,
                "kind": d.device_kind,
                "memory_bytes": _memory(d),
            }
            for d in found
        ],
        "x64": bool(jax.config.jax_enable_x64),
        "compilation_cache": compilation_cache_dir(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "usable_cpus": usable,
        "cpu_devices": _cpu_devices(),
        "cpu_devices_set_by": cpu_devices.setting().source,
        "cpu_devices_via": cpu_devices.setting().via,
        "physical_cores": cpu_devices.default_count()[0],
        "environment": {name: os.environ.get(name) for name in THREAD_VARIABLES},
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _memory_text(n: int | None) -> str:
    return "not reported" if n is None else f"{n / 2**30:.1f} GiB"


def _cpu_devices_text(d: dict[str, Any]) -> str:
    """Which CPU device count is in force: every core (or the user's count) via the
    ``rankflow`` command or ``rankflow.use_all_cores()``, or JAX's default."""
    via, source = d.get("cpu_devices_via"), d["cpu_devices_set_by"]
    line = f"CPU devices: {d['cpu_devices']}, "
    if via is None:
        return line + source
    line += f"via {via}: {source}"
    if source == cpu_devices.LATE or cpu_devices.ENV in source:
        return line
    return line + f"; {cpu_devices.ENV}=N sets it"


def format_info(d: dict[str, Any]) -> str:
    """:func:`info` as plain text lines, one setting a line."""
    versions = ", ".join(f"{k} {v}" for k, v in d["versions"].items() if k != "rankflow")
    lines = [
        f"rankflow {d['rankflow']}, Python {d['python']}, {d['system']}",
        f"packages: {versions}",
        f"backend: {d['backend']} ({_count(len(d['devices']), 'device')})",
    ]
    lines += [
        f"  device {x['id']}: platform {x['platform']}, kind {x['kind']}, "
        f"memory {_memory_text(x['memory_bytes'])}"
        for x in d["devices"]
    ]
    cache = d["compilation_cache"] or "off (RANKFLOW_CACHE_DIR=off)"
    lines += [
        f"x64: {'on' if d['x64'] else 'off'} (configs turn it on with x64 = true)",
        f"compilation cache: {cache}",
        f"cpus: {d['cpus']} ({d['usable_cpus']} usable by this process, "
        f"{d['physical_cores']} physical cores): {d['cpu_model']}",
        _cpu_devices_text(d),
    ]
    lines += [f"{k}: {'(unset)' if v is None else v}" for k, v in d["environment"].items()]
    return "\n".join(lines)
