"""rankflow's version, written once: in ``pyproject.toml``'s ``[project]`` table.

An installed rankflow (a wheel, ``pip install -e .``) reads it from its distribution's
metadata (:func:`importlib.metadata.version`, as equinox does). Only where that metadata
is absent, a source tree put on ``sys.path`` without being installed, it is read from the
checkout's ``pyproject.toml`` beside the package; ``"0+unknown"`` where neither exists.
The root package (``rankflow.__version__``) and the engine (a results directory's marker)
both read it here, in the lowest layer, so that no module imports the root package.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "UNKNOWN", "VERSION", "installed_version"]

DISTRIBUTION = "rankflow"
# The checkout's pyproject.toml: one folder above the package.
CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# A PEP 440 version that sorts below every release: neither metadata nor pyproject found.
UNKNOWN = "0+unknown"


def installed_version(pyproject: Path = CHECKOUT_PYPROJECT) -> str:
    """The version of the rankflow distribution (``"0.1.0"``): its installed metadata,
    else ``project.version`` of ``pyproject`` where that file is rankflow's, else
    :data:`UNKNOWN`."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
    except (OSError, tomllib.TOMLDecodeError, KeyError):
        return UNKNOWN
    if project.get("name") != DISTRIBUTION or "version" not in project:
        return UNKNOWN
    return str(project["version"])


VERSION = installed_version()
