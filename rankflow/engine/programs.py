"""The one cache of compiled programs (every family's, keyed by structure) and the
trace counts that tests read to check that a structure compiles once."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "PROGRAMS",
    "TRACE_COUNTS",
    "compilation_cache_dir",
    "enable_compilation_cache",
    "program",
    "release",
]

# The programs built so far, by key. Families' keys cannot collide: each is the JSON of
# a point's structural keys, and the families' sections differ.
PROGRAMS: dict[str, Any] = {}
# How many times each structure's program has been traced (tests assert it stays 1).
TRACE_COUNTS: dict[str, int] = defaultdict(int)
# The cache folder enable_compilation_cache set (None: it set none), told apart from a
# folder the user set, which it leaves alone.
_OWN_CACHE: str | None = None


def program(key: str, build: Callable[[], Any]) -> Any:
    """The cached program of ``key``, built by ``build()`` the first time."""
    if key not in PROGRAMS:
        PROGRAMS[key] = build()
    return PROGRAMS[key]


def release() -> None:
    """Drop every cached program and JAX's compiled executables (they are compiled again,
    or read from the persistent cache, when next needed).

    Each XLA:CPU executable keeps a few hundred memory maps (measured: ~300 per core
    program), and a Linux process may hold ``vm.max_map_count`` = 65,530 of them: a
    process that compiles thousands of programs (a long test session, every experiment of
    ``rankflow reproduce``) otherwise ends in a segmentation fault inside the compiler."""
    import gc

    import jax

    PROGRAMS.clear()
    jax.clear_caches()
    gc.collect()


def compilation_cache_dir() -> str | None:
    """The folder of JAX's persistent compilation cache that rankflow's commands turn on
    (default ``~/.cache/rankflow/jax``; ``RANKFLOW_CACHE_DIR`` moves it), or None when
    ``RANKFLOW_CACHE_DIR=off`` turns it off."""
    where = os.environ.get("RANKFLOW_CACHE_DIR", str(Path.home() / ".cache/rankflow/jax"))
    return None if where.lower() in ("off", "0", "none", "") else where


def enable_compilation_cache() -> str | None:
    """Turn on JAX's persistent compilation cache in :func:`compilation_cache_dir`, so a
    rerun of a sweep in a new process does not compile again; called by ``rankflow.run``
    and the commands before they compile.

    Only where the user has set no cache of their own: a ``jax_compilation_cache_dir``
    set before (``jax.config.update`` or ``JAX_COMPILATION_CACHE_DIR``) is left as it
    is, with JAX's thresholds, and is the folder returned. Otherwise rankflow sets its
    folder and caches every program (``jax_persistent_cache_min_compile_time_secs`` and
    ``jax_persistent_cache_min_entry_size_bytes`` set to 0: rankflow's programs compile
    in under JAX's default second, and a sweep's reruns are what the cache is for).
    ``RANKFLOW_CACHE_DIR=off`` leaves JAX's config untouched.

    Returns:
      The folder of the cache in use, or None where rankflow turned none on.
    """
    global _OWN_CACHE
    import jax

    where = compilation_cache_dir()
    if where is None:
        return None
    current = jax.config.jax_compilation_cache_dir
    if current and current != _OWN_CACHE:  # the user's own cache
        return current
    if current != where:
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        _OWN_CACHE = where
    return where
