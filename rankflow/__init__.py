"""rankflow: weight decay on factorised weights W = ABᵀ, continuous and discrete.

Public API: :func:`run` (config → results table), :func:`load` (results directory →
table), :func:`resolve`, :class:`ConfigError`, and :func:`use_all_cores` (one JAX CPU
device per core, as the ``rankflow`` command has). Importing rankflow has no side
effects: it changes neither ``XLA_FLAGS`` nor JAX's config.
"""

from .api import run as run
from .config.fields import ConfigError as ConfigError
from .core.config import resolve as resolve
from .engine.devices import use_all_cores as use_all_cores
from .engine.store import load as load

__version__ = "0.1.0"
__all__ = ["ConfigError", "load", "resolve", "run", "use_all_cores"]
