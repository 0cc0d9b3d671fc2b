"""What a results directory records of where its numbers came from: the versions of the
packages they depend on, the devices, the git commit and the time.
"""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "package_versions", "provenance"]

# The packages whose versions a manifest records (what the numbers depend on).
PACKAGES = (
    "rankflow",
    "jax",
    "jaxlib",
    "equinox",
    "diffrax",
    "optax",
    "flax",
    "numpy",
    "pandas",
    "pyarrow",
)


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """The installed version of each package in ``names`` (those not installed left
    out), for the provenance a results directory records."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Versions, devices, git commit and time of this run."""
    import jax

    return {
        "versions": package_versions(),
        "devices": [str(d) for d in jax.devices()],
        "git_commit": _git_commit(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
