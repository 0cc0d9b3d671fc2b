"""Where rankflow's experiment configs are: the ``sims/`` folder that ``rankflow demo``,
``rankflow reproduce`` and the README name.

An installed rankflow (a wheel, ``pip install .``) carries them inside the package as
``rankflow/sims``, read through :mod:`importlib.resources`; a source checkout keeps them
in ``sims/`` beside the package. The installed copy is looked up first, so that a
non-editable install never depends on the folder it was built from.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["sims_dir", "sims_path"]

# The checkout's sims/: one folder above the package.
CHECKOUT_SIMS = Path(__file__).resolve().parents[2] / "sims"


def sims_dir() -> Path:
    """The folder of the experiment configs: the package's ``rankflow/sims`` when it is
    installed with them, else the checkout's ``sims/``."""
    bundled = resources.files("rankflow") / "sims"
    # Installed packages are unpacked folders, so the resource is a real path; a
    # zipped package (no path) falls back to the checkout.
    if isinstance(bundled, Path) and bundled.is_dir():
        return bundled
    return CHECKOUT_SIMS


def sims_path(relative: str) -> Path:
    """``sims/RELATIVE`` (e.g. ``"demo.toml"``, ``"reproduce/toy.toml"``), in the folder
    :func:`sims_dir` finds."""
    return sims_dir() / relative
