"""rankflow: weight decay on factorised weights W = ABᵀ, continuous and discrete.

Public API: :func:`run` (config → results table), :func:`load` (results directory →
table), :class:`ConfigError`, and the modules ``theory``, ``problems``, ``observables``,
``flows``, ``optimizers``, ``simulate``, ``plots``.
"""

import os as _os


def _xla_cpu_flags() -> None:
    """Single-threaded Eigen in XLA:CPU, unless the user chose otherwise. CPU only: the
    flag is XLA:CPU's, and GPU and TPU backends ignore it.

    Measured here (jax 0.10.2, 2 cores), a vmapped batch of 2,048 runs' observables ran
    1.5× faster with XLA's Eigen kernels single-threaded: at this suite's sizes the
    batch, not the single matrix, is the parallelism worth having. Must be set before JAX
    creates its CPU backend; ``RANKFLOW_EIGEN_THREADS=1`` keeps JAX's default. (The
    deadlocks of batched CPU LAPACK kernels are avoided in ``rankflow.core.observables``.)
    """
    flags = _os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in flags or _os.environ.get("RANKFLOW_EIGEN_THREADS"):
        return
    _os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


_xla_cpu_flags()

# One CPU device per physical core (or the user's count), before JAX starts its backend:
# every batch is sharded over all devices (rankflow.engine.devices).
from .engine import devices as _devices  # noqa: E402

_devices.configure()

from .api import run as run  # noqa: E402
from .config.fields import ConfigError as ConfigError  # noqa: E402
from .core.config import resolve as resolve  # noqa: E402
from .engine.store import load as load  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ConfigError", "load", "resolve", "run"]
