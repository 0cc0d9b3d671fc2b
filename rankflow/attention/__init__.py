"""Attention layers: a flax NNX transformer whose heads are factor pairs, trained with
weight decay per parameter group and flowed in continuous time (docs/theory.md,
"Attention layers").

Public API: :func:`run` (config → ``Results(heads, loss)`` tables, optionally written to
a results directory), :func:`load`, :func:`resolve`; the model (:class:`Transformer`,
:class:`Model`, :class:`ModelSpec`), tasks (:func:`make_task`), per-head observables
(:func:`head_observables`, :func:`head_factors`), optimizers with group masks
(:func:`make_optimizer`, :func:`group_of`), and the theory probes
(:func:`product_gradients`); the image task's baselines (:func:`accuracy_baselines`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import GROUPS as GROUPS
from .config import resolve as resolve
from .model import Model as Model
from .model import ModelSpec as ModelSpec
from .model import Transformer as Transformer
from .model import VisionTransformer as VisionTransformer
from .model import model_spec as model_spec
from .observables import HEAD_COLUMNS as HEAD_COLUMNS
from .observables import PAIRS as PAIRS
from .observables import head_factors as head_factors
from .observables import head_observables as head_observables
from .optimizers import group_of as group_of
from .optimizers import make_optimizer as make_optimizer
from .program import TRACE_COUNTS as TRACE_COUNTS
from .program import program_for as program_for
from .sweep import Results as Results
from .sweep import accuracy_baselines as accuracy_baselines
from .sweep import load as load
from .sweep import validation_baseline as validation_baseline
from .tasks import make_task as make_task
from .train import loss_fn as loss_fn
from .train import product_gradients as product_gradients
from .train import train_step as train_step

__all__ = [
    "GROUPS",
    "HEAD_COLUMNS",
    "PAIRS",
    "Model",
    "ModelSpec",
    "Results",
    "TRACE_COUNTS",
    "Transformer",
    "VisionTransformer",
    "accuracy_baselines",
    "group_of",
    "head_factors",
    "head_observables",
    "load",
    "loss_fn",
    "make_optimizer",
    "make_task",
    "model_spec",
    "product_gradients",
    "program_for",
    "resolve",
    "run",
    "train_step",
    "validation_baseline",
]


def run(
    config: str | Path | Mapping[str, Any],
    *,
    overrides: Mapping[str, Any] | None = None,
    quiet: bool = True,
    **options: Any,
) -> Results:
    """Validate an attention config, train every point of its sweep, return the tables.

    Args:
      config: a TOML path or nested dict (sections ``attention``, ``task``, ``init``,
        ``dynamics``, ``train``, ``save``, ``solver``, ``sweep``; ``rankflow attention
        train --help`` lists every key).
      overrides: dotted keys to set first, e.g. ``{"dynamics.lam": 0.1}``.
      quiet: no progress bar.
      options: the sweep options of :func:`rankflow.run`, the same for every family:
        ``out`` (a results directory, written chunk by chunk), ``resume`` (continue
        the sweep already in ``out``), ``chunk`` (runs per compiled batch; default: a
        structure's runs, at most 32), ``executor`` (``"local"``, every local device,
        or ``"submitit"``, a SLURM job array into ``out``) and ``slurm``.

    Returns:
      ``Results(heads, loss)``: the per-(run, step, layer, head, pair) table and the
      per-(run, step) ``train_loss`` / ``val_loss`` table.

    Raises:
      ConfigError: on any invalid field, before anything is compiled.
    """
    from ..engine import enable_compilation_cache
    from .sweep import execute

    cfg = resolve(config, overrides)
    enable_compilation_cache()
    results, _ = execute(cfg, quiet=quiet, **options)
    return results
