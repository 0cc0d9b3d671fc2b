"""rankflow: weight decay on factorised weights W = ABᵀ, continuous and discrete.

Public API: :func:`run` (config → results table), :func:`load` (results directory →
table), :func:`load_states` (its factors at the saves, with ``save.states``),
:func:`resolve`, :class:`ConfigError`, ``fit`` (:func:`rankflow.fitting.fit`: a sweep's
decay rates against the theory, imported on first use), and :func:`use_all_cores` (one
JAX CPU device per core, as the ``rankflow`` command has). Importing rankflow has no side
effects: it changes neither ``XLA_FLAGS`` nor JAX's config.

The public subpackages (:data:`SUBPACKAGES`) are attributes of the package, each imported
when first used, so that ``import rankflow`` stays as fast as the entry points need:

- ``rankflow.theory``: the closed forms and exact identities (docs/theory.md, T1–T14), rate fits;
- ``rankflow.core``: the factorised problems, their flows and optimizers, sweeps;
- ``rankflow.attention``: the transformer family (the rebuttal's experiments);
- ``rankflow.compare``: a discrete optimizer against the flow it discretises;
- ``rankflow.inspect``: balance and rank of pretrained checkpoints;
- ``rankflow.fitting``: a sweep's decay rates against the theory (``rankflow.fit``: a
  results directory or table → one row per run, its window, regime and verdict);
- ``rankflow.track``: balance and rank of factor pairs in a user's own training loop;
- ``rankflow.plots``: figures from results tables (the one part importing matplotlib);
- ``rankflow.reproduce``: every claim of the paper as a test with a verdict;
- ``rankflow.config``, ``rankflow.numerics``, ``rankflow.engine``: the shared layers
  (config fields, diffrax/optax numerics, the sweep engine); ``rankflow.cli``: the command.
"""

import importlib
from typing import Any

from .api import run as run
from .config import version as _version
from .config.fields import ConfigError as ConfigError
from .core.config import resolve as resolve
from .engine.devices import use_all_cores as use_all_cores
from .engine.states import load_states as load_states
from .engine.store import load as load

# Written once, in pyproject.toml; read from the installed distribution's metadata.
__version__ = _version.VERSION
SUBPACKAGES = (
    "attention",
    "cli",
    "compare",
    "config",
    "core",
    "engine",
    "fitting",
    "inspect",
    "numerics",
    "plots",
    "reproduce",
    "theory",
    "track",
)
__all__ = [
    "SUBPACKAGES",
    "ConfigError",
    "fit",
    "load",
    "load_states",
    "resolve",
    "run",
    "use_all_cores",
]


def __getattr__(name: str) -> Any:
    """A public subpackage, imported on first use (``rankflow.plots.quick_plot``), and
    :func:`rankflow.fitting.fit` as ``rankflow.fit``."""
    if name == "fit":
        return importlib.import_module(f"{__name__}.fitting").fit
    if name in SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *SUBPACKAGES, "fit"})
