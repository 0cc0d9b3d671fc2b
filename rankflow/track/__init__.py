"""Balance and rank of factor pairs in a user's own training loop.

Weight decay on the two factors of a product ``W = A Bᵀ`` balances them (docs/theory.md,
T4, T5) and lowers the product's rank (T3). This package measures that on a model's
parameters in memory — a JAX pytree (a dict, flax linen params, flax NNX state or
module) or a PyTorch ``state_dict`` — every k steps of the user's loop, writes the rows
as a rankflow results directory, and puts the theory's predicted decay beside the
measured one.

    from rankflow.track import Optimizer, Tracker
    with Tracker("runs/mine", every=100, optimizer=Optimizer("sgd", eta, lam)) as tracker:
        for step in range(steps):
            params = train_step(params, batch)
            tracker.log(step, params)

Modules: ``_pairs`` (factor pairs: paths, layouts, detection by name), ``_measure``
(the jittable statistics and their rows), ``_predict`` (the theory's decay per optimizer
and the fit of the measured one), ``_torch`` (PyTorch / Hugging Face state_dicts, read
as ``rankflow.inspect`` reads their checkpoints), ``_tracker`` (the loop-side object and
its folder).
"""

from ._measure import COLUMNS as COLUMNS
from ._measure import measure as measure
from ._measure import rows as rows
from ._pairs import Factor as Factor
from ._pairs import Pair as Pair
from ._pairs import TrackError as TrackError
from ._pairs import attention_pairs as attention_pairs
from ._pairs import flat_params as flat_params
from ._pairs import lora_pairs as lora_pairs
from ._pairs import resolve_pairs as resolve_pairs
from ._predict import KINDS as KINDS
from ._predict import Optimizer as Optimizer
from ._predict import predicted_rates as predicted_rates
from ._predict import prediction_table as prediction_table
from ._torch import state_dict_rows as state_dict_rows
from ._tracker import Tracker as Tracker

__all__ = [
    "COLUMNS",
    "KINDS",
    "Factor",
    "Optimizer",
    "Pair",
    "TrackError",
    "Tracker",
    "attention_pairs",
    "flat_params",
    "lora_pairs",
    "measure",
    "predicted_rates",
    "prediction_table",
    "resolve_pairs",
    "rows",
    "state_dict_rows",
]
