"""Run a block with OpenBLAS limited to one thread (best effort).

The inspection makes thousands of tiny LAPACK calls (r×r eigendecompositions and SVDs,
r = d_h ≤ 256). A multithreaded OpenBLAS wakes and synchronises its threads on each
call, which costs more than the work: measured on 2 cores, 3× slower idle and up to 30×
slower when other processes compete for the cores. Setting OPENBLAS_NUM_THREADS is too
late once numpy is imported, so this calls OpenBLAS's own setter on the libraries
already loaded (what threadpoolctl does). Where there is no OpenBLAS (macOS Accelerate,
MKL) or no /proc, it does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["single_threaded_blas"]

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)


def _openblas() -> list[tuple]:
    """(setter, getter) of every OpenBLAS loaded in this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    paths = {line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower()}
    found = []
    for path in sorted(p for p in paths if p.startswith("/") and ".so" in p):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, s) for s in _SETTERS if hasattr(lib, s)), None)
        getter = next((getattr(lib, g) for g in _GETTERS if hasattr(lib, g)), None)
        if setter is not None and getter is not None:
            setter.argtypes, getter.restype = [ctypes.c_int], ctypes.c_int
            found.append((setter, getter))
    return found


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """OpenBLAS on one thread inside the block; the previous counts restored after."""
    libs = _openblas()
    before = [getter() for _, getter in libs]
    for setter, _ in libs:
        setter(1)
    try:
        yield
    finally:
        for (setter, _), n in zip(libs, before):
            setter(n)
