"""What a run may take of the machine, checked before anything compiles: the memory
free to it, the saves a run may write, and the one-line refusals naming the config keys
that set an estimate.

Every family estimates its memory from the sizes in its config, in O(1) time (no loop
up to a user's number, no array): the core family and the attention family through
``run_bytes`` and ``memory_parts`` (:mod:`.plan` checks them), ``rankflow compare``
and ``rankflow inspect`` with :func:`check_fits` directly. The estimates are meant
to be within 2× of the measured peak (``tests/engine/test_resource_guards.py``
measures them at three sizes per family).
"""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.fields import ConfigError, env_limit, get_dotted

__all__ = [
    "MAX_SAVES",
    "budget",
    "check_fits",
    "check_saves",
    "dominant_keys",
    "free_memory",
    "gib",
    "host_memory",
    "max_saves",
    "nearest_disk",
    "sizes_text",
]

# Default of RANKFLOW_MAX_SAVES: the most saves one run may write. Each save is a row of
# the results table per run (per head and pair in the attention family's), and inside a
# flow's solve an evaluation of every observable; 10⁵ saves is more than a figure or a
# fit can use, while a typo (save.num = 1e9) would fill the machine with rows.
MAX_SAVES = 10**5
# The share of the free memory a run may plan to take (the rest: what the estimate
# leaves out, the allocator's slack).
SHARE = 0.9


def gib(n: float) -> str:
    """``n`` bytes in GiB (TiB, PiB from 1024 of the smaller unit), three significant
    digits."""
    value, unit = n / 2**30, "GiB"
    for larger in ("TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"


def free_memory() -> tuple[int, str]:
    """Bytes free to this process on the first device, and what it is: an accelerator's
    allocator limit less what is in use where JAX reports it (GPU, TPU); else the host's
    available memory, lowered to what the process's address-space limit (``ulimit -v``)
    and its cgroup's limit leave."""
    import jax

    device = jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), f"{device.platform} device"
    return host_memory()


def host_memory() -> tuple[int, str]:
    """The host's available memory (``MemAvailable``), or less where a limit of this
    process says so: ``(bytes, "host")`` or ``(bytes, "host under its ulimit -v")``,
    ``(bytes, "host under its cgroup's memory.max")``."""
    free, where = _available(), "host"
    limits = [(_address_space_left(), "host under its ulimit -v"), (_cgroup_left(), None)]
    for left, name in limits:
        if left is not None and left < free:
            free, where = left, name or "host under its cgroup's memory.max"
    return max(0, free), where


def _available() -> int:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _address_space_left() -> int | None:
    """RLIMIT_AS less the address space in use (JAX alone reserves about 1.6 GB of it),
    or None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return soft
    return soft - size


def _cgroup_left() -> int | None:
    """The cgroup (v2) memory.max less memory.current, or None without a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current") as f:
            return int(limit) - int(f.read().strip())
    except (OSError, ValueError):
        return None


def nearest_disk(out: str | Path) -> tuple[int, str]:
    """Bytes free on the file system a directory ``out`` is (or would be made) on, and
    what it is: ``(bytes, "disk of DIR")``, DIR the nearest existing ancestor."""
    p = Path(out).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free, f"disk of {p}"


def budget(free: int) -> int:
    """The bytes a run may plan to take of ``free``."""
    return int(SHARE * free)


def max_saves() -> int:
    """The most saves one run may write: ``RANKFLOW_MAX_SAVES`` (default 10⁵)."""
    return env_limit("RANKFLOW_MAX_SAVES", MAX_SAVES)


def check_saves(saves: int, key: str, how: str) -> None:
    """Refuse ``saves`` saves per run (set by ``key``; ``how``: how they come about)
    above :func:`max_saves`."""
    limit = max_saves()
    if saves > limit:
        raise ConfigError(
            f"{key}: {saves:,} saves per run ({how}) exceed the limit of {limit:,} (a row of "
            f"the results table per run and save); save less often, or raise the limit "
            f"with RANKFLOW_MAX_SAVES={saves}"
        )


def dominant_keys(parts: Mapping[tuple[str, ...], float], share: float = 0.8) -> list[str]:
    """The config keys of an estimate's largest parts (``parts``: keys → bytes), taken
    largest first until they hold ``share`` of the total, each key once."""
    total = sum(parts.values()) or 1
    keys: list[str] = []
    held = 0.0
    for names, n in sorted(parts.items(), key=lambda kv: -kv[1]):
        keys += [k for k in names if k not in keys]
        held += n
        if held >= share * total:
            break
    return keys


def sizes_text(point: Mapping[str, Any], keys: Iterable[str]) -> str:
    """``"k = v, …"`` of ``keys`` in ``point`` (a list by its length)."""

    def shown(value: Any) -> str:
        if isinstance(value, list | tuple) and len(value) > 4:
            return f"[{len(value):,} values]"
        return f"{value:g}" if isinstance(value, float) else str(value)

    return ", ".join(f"{k} = {shown(get_dotted(point, k))}" for k in keys)


def check_fits(
    need: float,
    keys: Sequence[str],
    sizes: str,
    what: str = "one run",
    free: tuple[int, str] | None = None,
    fix: str = "make them smaller",
) -> None:
    """Refuse, in one line naming ``keys`` and their ``sizes``, ``what`` needing ``need``
    bytes when that is more than :data:`SHARE` of the memory free (:func:`free_memory`,
    or ``free``); the line ends with ``fix``."""
    have, where = free if free is not None else free_memory()
    if need > budget(have):
        raise ConfigError(
            f"{', '.join(keys)}: {what} needs about {gib(need)} ({sizes}), more than "
            f"{SHARE:.0%} of the {gib(have)} free on the {where}; {fix}"
        )
