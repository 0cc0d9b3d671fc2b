"""Figures from results tables (the DataFrames of ``rankflow.run``, ``compare``,
``inspect``, ``attention``, ``reproduce`` and ``noise``): the only part of rankflow that imports
matplotlib.

Plots read tables only: nothing here imports jax or the simulation code. Figures are
``matplotlib.figure.Figure`` objects built without pyplot, so importing this package
neither selects a backend nor disturbs an interactive session; PNGs are rendered by
the Agg canvas that ``Figure.savefig`` picks for raster formats. Conventions shared by
every figure are in :mod:`.common`.

Modules, one per family: ``core`` (``rankflow run`` tables), ``compare``, ``inspect``,
``inspect_series`` (checkpoint series), ``attention``, ``rebuttal`` (the rebuttal
experiments), ``reproduce``, ``depth``, ``geometry``, ``noise`` and ``optimizers`` (the figures of
``rankflow reproduce`` the others do not draw; ``balancing`` draws its balancing claims' figure);
``balance_panels`` holds the balance figure's predictions and panel labels, ``finish`` the
finish of a ``reproduce`` figure (no labels on minor log ticks); ``common`` holds axis
text, colours, medians over runs and :func:`save_figure`.
"""

from . import (
    attention,
    core,
    depth,
    geometry,
    inspect,
    inspect_series,
    noise,
    optimizers,
    rebuttal,
    reproduce,
)
from .attention import attention_ablation_figure as attention_ablation_figure
from .attention import attention_balance_figure as attention_balance_figure
from .attention import attention_rank_figure as attention_rank_figure
from .common import DPI as DPI
from .common import LABELS as LABELS
from .common import save_figure as save_figure
from .compare import compare_contraction_figure as compare_contraction_figure
from .compare import compare_order_figure as compare_order_figure
from .compare import compare_sde_figure as compare_sde_figure
from .compare import compare_trajectory_figure as compare_trajectory_figure
from .compare import write_compare_figures as write_compare_figures
from .core import balance_figure as balance_figure
from .core import quick_plot as quick_plot
from .depth import depth_figure as depth_figure
from .geometry import geometry_figure as geometry_figure
from .inspect import inspect_layers_figure as inspect_layers_figure
from .inspect import inspect_scatter_figure as inspect_scatter_figure
from .inspect import inspection_figures as inspection_figures
from .inspect_series import series_figures as series_figures
from .inspect_series import series_gap_figure as series_gap_figure
from .inspect_series import series_rate_figure as series_rate_figure
from .noise import noise_models_figure as noise_models_figure
from .optimizers import optimizers_figure as optimizers_figure
from .rebuttal import experiment_figure as experiment_figure
from .rebuttal import rebuttal_figure as rebuttal_figure
from .reproduce import attention_nuclear_gap_figure as attention_nuclear_gap_figure
from .reproduce import balancing_figure as balancing_figure
from .reproduce import floor_figure as floor_figure
from .reproduce import rank_figure as rank_figure
from .reproduce import toy_spectrum_figure as toy_spectrum_figure
from .spectra import spectra_figure as spectra_figure
from .spectra import spectra_writer as spectra_writer

__all__ = [
    "spectra_figure",
    "spectra_writer",
    "DPI",
    "LABELS",
    "compare_contraction_figure",
    "compare_order_figure",
    "compare_sde_figure",
    "compare_trajectory_figure",
    "save_figure",
    "write_compare_figures",
]
# Every family module exports its figures by its own __all__.
__all__ += (
    attention.__all__
    + core.__all__
    + depth.__all__
    + geometry.__all__
    + inspect.__all__
    + inspect_series.__all__
    + noise.__all__
    + optimizers.__all__
    + rebuttal.__all__
    + reproduce.__all__
)
