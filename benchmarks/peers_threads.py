"""The thread counts of ``benchmarks.peers``' peers: each PyTorch peer (torchdiffeq,
torchsde) and each BLAS-backed one (``scipy.integrate.solve_ivp``, the NumPy loop) is
timed at every thread count asked for (default: 1 and the number of CPUs), as rows of its
own in the same interleaved race as rankflow; the tables show every count and the targets
compare rankflow with the fastest.

PyTorch's count is set with ``torch.set_num_threads`` before each call; NumPy's and
SciPy's BLAS (OpenBLAS here) with ``threadpoolctl.threadpool_limits`` around each call. On
a shared 2-core machine neither count wins everywhere: one thread avoids spinning for a
busy core, two use both when the other core is free, so both are measured in the run
whose tables they are in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def counts(choice: str) -> tuple[int, ...]:
    """Thread counts from a command-line value: ``"1,2"`` → (1, 2); ``"each"`` → 1 and the
    number of CPUs."""
    if choice == "each":
        return tuple(dict.fromkeys((1, os.cpu_count() or 1)))
    out = tuple(dict.fromkeys(int(x) for x in choice.split(",") if x.strip()))
    if not out or min(out) < 1:
        raise ValueError(f"thread counts must be positive integers, got {choice!r}")
    return out


def label(name: str, k: int) -> str:
    return f"{name}, {k} thread{'s' if k > 1 else ''}"


def torch_variants(name: str, fn: Callable[[], Any], threads: tuple[int, ...]) -> dict:
    """``{label: call}``: ``fn`` with PyTorch's intra-op pool at each count."""
    import torch

    def at(k):
        def go():
            torch.set_num_threads(k)
            return fn()

        return go

    return {label(name, k): at(k) for k in threads}


def blas_variants(name: str, fn: Callable[[], Any], threads: tuple[int, ...]) -> dict:
    """``{label: call}``: ``fn`` with the BLAS pools (threadpoolctl) at each count; without
    threadpoolctl, one call at the library's default count, labelled so."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return {f"{name}, BLAS threads: library default": fn}

    def at(k):
        def go():
            with threadpool_limits(limits=k, user_api="blas"):
                return fn()

        return go

    return {label(name, k): at(k) for k in threads}


def blas_info() -> str:
    """The BLAS libraries NumPy and SciPy use, with their default thread counts."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (BLAS threads not controlled)"
    import numpy  # noqa: F401  (loads its BLAS)
    import scipy.linalg  # noqa: F401

    libs = {(i["internal_api"], i["num_threads"]) for i in threadpool_info()}
    return ", ".join(f"{api} ({n} threads by default)" for api, n in sorted(libs))


def mark_best(rows: list[dict]) -> None:
    """Flag, among rows that differ only in the thread count, the fastest (``best``)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("peer"):
            groups.setdefault(r["peer"], []).append(r)
    for group in groups.values():
        fastest = min(group, key=lambda r: r["run_s"])
        for r in group:
            r["best"] = r is fastest and len(group) > 1
