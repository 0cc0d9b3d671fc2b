"""Packaging (issue #18): the experiment configs ship inside the package as
``rankflow/sims`` and are found there first; the setuptools package list misses no
package; ``uv.lock`` pins exactly the lower bounds of ``pyproject.toml``; and (slow) a
wheel installed into a fresh virtual environment runs ``rankflow reproduce --quick --only
toy``, ``rankflow demo`` and ``rankflow info`` from an empty directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import rankflow
from rankflow.cli.demo import DEMO_CONFIG
from rankflow.config import resources, version
from rankflow.reproduce import EXPERIMENTS
from rankflow.reproduce._common import SIMS, config_path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
# What a checkout may hold beside its tracked files (caches, builds, environments, runs).
UNTRACKED = (".git", "__pycache__", "*.egg-info", "build", "dist", ".venv", "out", "*_cache")


def _normal(name: str) -> str:
    """A distribution name in its normal form (PEP 503): ``huggingface_hub`` →
    ``huggingface-hub``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_package_of_the_source_tree_is_listed_and_sims_is_mapped():
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "rankflow").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert set(SETUPTOOLS["packages"]) == found | {"rankflow.sims"}
    assert SETUPTOOLS["package-dir"] == {"rankflow.sims": "sims"}


def test_package_data_covers_every_config_in_sims():
    """Every file of sims/ is shipped: TOML by the package-data globs, Python as modules
    of ``rankflow.sims``; a config in a new kind of file would be left out."""
    globs = SETUPTOOLS["package-data"]["rankflow.sims"]
    sims = ROOT / "sims"
    # The files the globs select, as setuptools expands them (relative to the package).
    data = {p for g in globs for p in sims.glob(g)}
    for path in sims.rglob("*"):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        module = path.suffix == ".py" and path.parent == sims
        assert module or path in data, f"{path.relative_to(ROOT)} is not shipped in the wheel"


def test_a_checkout_reads_its_own_sims_and_every_config_the_cli_names_exists():
    assert resources.sims_dir() == ROOT / "sims"
    assert DEMO_CONFIG == ROOT / "sims" / "demo.toml" and DEMO_CONFIG.is_file()
    assert SIMS == ROOT / "sims" / "reproduce"
    names = {p.stem for p in SIMS.glob("*.toml")}
    assert len(names) >= len(EXPERIMENTS)
    for name in names:
        assert config_path(name).is_file()


def test_an_installed_copy_is_found_before_the_checkout(tmp_path, monkeypatch):
    """The package's own rankflow/sims wins (a wheel never reads the folder it was built
    from); without it, the checkout's sims/."""
    (tmp_path / "sims").mkdir()
    monkeypatch.setattr(resources.resources, "files", lambda package: tmp_path)
    assert resources.sims_dir() == tmp_path / "sims"
    assert resources.sims_path("reproduce/toy.toml") == tmp_path / "sims/reproduce/toy.toml"
    (tmp_path / "sims").rmdir()
    assert resources.sims_dir() == ROOT / "sims"


def test_the_version_is_written_once_in_pyproject():
    """``rankflow.__version__`` is the installed distribution's version, which is
    pyproject's (issue #42); the engine's marker records that same version."""
    from importlib import metadata

    from rankflow.engine import writer

    assert rankflow.__version__ == metadata.version("rankflow") == PYPROJECT["project"]["version"]
    assert writer.VERSION is rankflow.__version__
    source = (ROOT / "rankflow" / "__init__.py").read_text()
    assert not re.search(r"__version__\s*=\s*['\"]", source), "a version literal in __init__"


def test_without_metadata_the_version_is_the_checkouts_pyproject(tmp_path, monkeypatch):
    """The fallback, only where the distribution's metadata is absent: pyproject.toml
    beside the package if it is rankflow's, else ``0+unknown``."""

    def absent(name):
        raise version.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version.metadata, "version", absent)
    assert version.installed_version() == PYPROJECT["project"]["version"]
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert version.installed_version(other) == version.UNKNOWN
    assert version.installed_version(tmp_path / "missing.toml") == version.UNKNOWN
    other.write_text('[project]\nname = "rankflow"\nversion = "2.0"\n')
    assert version.installed_version(other) == "2.0"


def _lower_bound(spec: str) -> str:
    (bound,) = re.findall(r"(?:>=|==)\s*([\w.]+)", spec)
    return bound


def test_the_lock_pins_exactly_the_lower_bounds_of_pyproject():
    """uv.lock was made for pyproject.toml as it is (same requirements) and installs each
    direct dependency at its lower bound, the version the suite was tested with."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {}
    for p in lock["package"]:
        locked.setdefault(p["name"], set()).add(p["version"])
    (me,) = [p for p in lock["package"] if p["name"] == "rankflow"]
    recorded = {
        (_normal(r["name"]), r.get("specifier", "")) for r in me["metadata"]["requires-dist"]
    }
    project = PYPROJECT["project"]
    requirements = list(project["dependencies"])
    requirements += [r for extra in project["optional-dependencies"].values() for r in extra]
    checked = 0
    for req in requirements:
        name, spec = re.match(r"([\w.-]+)(?:\[[\w,-]+\])?\s*(.*)", req).groups()
        if _normal(name) == "rankflow":
            continue
        assert any(n == _normal(name) and s.replace(" ", "") for n, s in recorded), req
        assert locked[_normal(name)] == {_lower_bound(spec)}, (req, locked[_normal(name)])
        checked += 1
    assert checked >= 20


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_reproduces_from_an_empty_directory(tmp_path):
    """Build the wheel, install it (and its dependencies, from the package index) into a
    plain venv, and run the CLI from an empty folder with no checkout in reach."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RANKFLOW_CACHE_DIR"] = str(tmp_path / "cache")
    # Built from a copy, so that the build's egg-info never lands in the checkout (where,
    # on PYTHONPATH, it would pass for an installed rankflow).
    source, dist, empty, venv = (tmp_path / n for n in ("source", "dist", "empty", "venv"))
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*UNTRACKED))
    empty.mkdir()
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(dist)]
    subprocess.run([*build, "--no-build-isolation", "-q"], env=env, check=True)
    (wheel,) = dist.glob("rankflow-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], env=env, check=True)
    pip = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", f"rankflow @ {wheel.as_uri()}"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]

    def rankflow(*argv: str) -> str:
        res = subprocess.run(
            [str(venv / "bin/rankflow"), *argv], cwd=empty, env=env, capture_output=True, text=True
        )
        assert res.returncode == 0, (argv, res.stderr[-2000:])
        return res.stdout

    where = subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "from rankflow import resources; print(resources.sims_dir())",
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv) and where.endswith("rankflow/sims"), where
    assert "3 of 3 claims pass" in rankflow("reproduce", "--quick", "--only", "toy", "--out", "r")
    assert (empty / "r" / "report.md").is_file()
    rankflow("demo", "--out", "d")
    assert (empty / "d" / "balance.png").stat().st_size > 10_000
    assert "compilation cache: " + str(tmp_path / "cache") in rankflow("info")
