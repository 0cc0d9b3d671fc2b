"""The finish of a ``rankflow reproduce`` figure: :func:`~.common.finish_figure` with no
labels on the minor ticks of log axes (which collide on axes spanning under a decade).
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from .common import finish_figure

__all__ = ["finish_log_figure"]


def finish_log_figure(fig: Figure, axes, title: str, out_path) -> Figure:
    """:func:`finish_figure`, with no labels on the minor ticks of log axes."""
    for ax in np.ravel(axes):
        # Log axes spanning less than a decade label their minor ticks, which collide.
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_minor_formatter(mpl.ticker.NullFormatter())
    return finish_figure(fig, np.ravel(axes), title, out_path)
