"""rankflow: weight decay on factorised weights W = ABᵀ, continuous and discrete.

Public API: :func:`run` (config → results table), :func:`load` (results directory →
table), :class:`ConfigError`, and the modules ``theory``, ``problems``, ``observables``,
``flows``, ``optimizers``, ``simulate``, ``plots``.
"""

from .api import run as run
from .config import ConfigError as ConfigError
from .config import resolve as resolve
from .store import load as load

__version__ = "0.1.0"
__all__ = ["ConfigError", "load", "resolve", "run"]
