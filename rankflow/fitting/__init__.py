"""The one fit of a gap's decay against the theory, for any sweep (docs/guides/fit.md).

- :func:`fit` (``rankflow.fit``): a results directory or table → one row per run
  (path-mean; per depth pair, T12; per layer, pair and head) with the fitted rate, its
  standard error, rate/(2ηλ), the prediction and its source, the verdict and its
  tolerance, the window and the regime that ends it, and a following slower phase's rate;
- :func:`predict`: the theory's rate from a run's parameters (T4, T5, T6, T7, T9), or
  none with the reason; :func:`minibatch_floor`: SGD's T10 floor at a run's saved states
  against its measured mean D (the ``floor_*`` columns);
- :func:`find_window`: where a series follows its law, and what ends it (:data:`REGIMES`);
- :func:`fit_series`, :func:`verdict`: one series' fit and its verdict;
- :func:`scheduled_clock`: T11's clock of GD under a schedule.
"""

from ._fit import SLACK as SLACK
from ._fit import SLACK_SOLVED as SLACK_SOLVED
from ._fit import Z as Z
from ._fit import fit_series as fit_series
from ._fit import verdict as verdict
from ._floor import minibatch_floor as minibatch_floor
from ._predict import NO_PREDICTION as NO_PREDICTION
from ._predict import Prediction as Prediction
from ._predict import predict as predict
from ._table import fit as fit
from ._table import scheduled_clock as scheduled_clock
from ._window import REGIMES as REGIMES
from ._window import Window as Window
from ._window import find_window as find_window
from ._window import local_rates as local_rates

__all__ = [
    "NO_PREDICTION",
    "REGIMES",
    "SLACK",
    "SLACK_SOLVED",
    "Z",
    "Prediction",
    "Window",
    "find_window",
    "fit",
    "fit_series",
    "local_rates",
    "minibatch_floor",
    "predict",
    "scheduled_clock",
    "verdict",
]
