"""No side effects (issue #27): importing rankflow, or ``rankflow.run``, leaves the
user's ``XLA_FLAGS``, JAX's config and device count as they were, and a compilation cache
of the user's; one CPU device per core is asked for by ``rankflow.use_all_cores()`` (an
error once JAX has started) and by the ``rankflow`` command. Each check runs in a fresh
process: JAX reads its flags and device count once, when it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rankflow.engine import devices

ROOT = Path(__file__).resolve().parents[2]
# Everything that sets JAX's devices, threads or cache from outside, removed so that each
# check starts from JAX's defaults and sets only what it names.
SETTINGS = (
    "XLA_FLAGS",
    devices.ENV,
    "JAX_NUM_CPU_DEVICES",
    "RANKFLOW_EIGEN_THREADS",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PLATFORMS",
)
TINY = {"problem": {"kind": "diagonal"}, "save": {"t1": 4, "num": 3}, "dynamics": {"kind": "gd"}}
# A user's own XLA flag (a valid one: the run below starts JAX with it).
USER_FLAGS = "--xla_force_host_platform_device_count=1"


def _python(code: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` (or ``-m``, with ``args``) in a fresh process from the checkout, with the
    settings above removed and ``env`` set; rankflow's cache in ``tmp_path``."""
    base = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    base.update(PYTHONPATH=str(ROOT), RANKFLOW_CACHE_DIR=str(tmp_path / "rankflow-cache"))
    argv = [sys.executable, *args] if args else [sys.executable, "-c", textwrap.dedent(code)]
    res = subprocess.run(
        argv, env={**base, **env}, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    return res


# What a user's process sees of JAX: XLA_FLAGS, every config value, the device count.
# IMPORT is replaced by nothing (the user's own process) or by rankflow's import and run.
STATE = """
import json, os
xla_flags = os.environ.get("XLA_FLAGS")
import jax
config = {k: repr(v) for k, v in jax.config.values.items()}
IMPORT
print(json.dumps({
    "xla_flags_before": xla_flags,
    "xla_flags": os.environ.get("XLA_FLAGS"),
    "config_before": config,
    "config": {k: repr(v) for k, v in jax.config.values.items()},
    "devices": jax.device_count(),
}))
"""
IMPORT = "import rankflow, rankflow.cli, rankflow.attention, rankflow.engine"
RUN = f"{IMPORT}\nrankflow.run({TINY!r}, quiet=True)"


def _state(tmp_path: Path, code: str, **env: str) -> dict:
    out = _python(STATE.replace("IMPORT", code), tmp_path, **env).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("flags", [None, USER_FLAGS], ids=["XLA_FLAGS unset", "user flags"])
def test_import_leaves_xla_flags_and_jax_config_as_they_were(tmp_path, flags):
    env = {} if flags is None else {"XLA_FLAGS": flags}
    got = _state(tmp_path, IMPORT, **env)
    # Mutant: the import-time `--xla_cpu_multi_thread_eigen=false` of before.
    assert got["xla_flags"] == got["xla_flags_before"] == flags
    # Mutant: the import-time jax_num_cpu_devices of before (one device per core).
    assert got["config"] == got["config_before"]
    assert got["config"]["jax_num_cpu_devices"] == "-1"
    assert got["devices"] == _state(tmp_path, "", **env)["devices"] == 1


def test_run_leaves_flags_devices_and_the_users_compilation_cache(tmp_path):
    mine = str(tmp_path / "my-cache")
    got = _state(
        tmp_path,
        f"jax.config.update('jax_compilation_cache_dir', {mine!r})\n"
        "config = {k: repr(v) for k, v in jax.config.values.items()}\n" + RUN,
        XLA_FLAGS=USER_FLAGS,
    )
    assert got["config"]["jax_compilation_cache_dir"] == repr(mine)
    # Mutant: rankflow's folder and its zero thresholds over the user's cache.
    assert got["config"] == got["config_before"]
    assert got["xla_flags"] == USER_FLAGS and got["devices"] == 1
    assert not (tmp_path / "rankflow-cache").exists()


def test_run_without_a_cache_of_the_users_turns_rankflows_on_and_nothing_else(tmp_path):
    got = _state(tmp_path, RUN)
    changed = {k for k, v in got["config"].items() if got["config_before"][k] != v}
    assert "jax_compilation_cache_dir" in changed
    assert changed <= {
        "jax_compilation_cache_dir",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    }
    assert got["config"]["jax_compilation_cache_dir"] == repr(str(tmp_path / "rankflow-cache"))
    assert got["xla_flags"] is None and got["devices"] == 1
    off = _state(tmp_path, RUN, RANKFLOW_CACHE_DIR="off")
    assert off["config"] == off["config_before"]


def test_use_all_cores_after_jax_started_is_one_line_saying_to_call_it_first(tmp_path):
    res = _python(
        """
        import jax, rankflow
        jax.numpy.ones(2).block_until_ready()  # JAX's backends start
        try:
            rankflow.use_all_cores()
        except rankflow.ConfigError as e:
            print(e)
        else:
            print("no error")
        """,
        tmp_path,
    )
    assert res.stdout.count("\n") == 1, res.stdout
    assert res.stdout.startswith("rankflow.use_all_cores(): JAX has already started")
    assert "call rankflow.use_all_cores() first" in res.stdout


COUNT = """
import os, jax, rankflow
CALL
print(len(jax.devices()), "|", os.environ.get("XLA_FLAGS"))
"""


def test_use_all_cores_before_jax_starts_gives_the_count_and_twice_is_harmless(tmp_path):
    call = "rankflow.use_all_cores()\nrankflow.use_all_cores()"
    out = _python(COUNT.replace("CALL", call), tmp_path, RANKFLOW_CPU_DEVICES="2").stdout
    assert out.strip() == f"2 | {devices.EIGEN_FLAG}"
    # Without the call the variable asks for nothing: JAX's one device, its flags.
    out = _python(COUNT.replace("CALL", ""), tmp_path, RANKFLOW_CPU_DEVICES="2").stdout
    assert out.strip() == "1 | None"
    # RANKFLOW_EIGEN_THREADS keeps JAX's Eigen threads; XLA's device flag is the count.
    out = _python(
        COUNT.replace("CALL", call),
        tmp_path,
        RANKFLOW_EIGEN_THREADS="1",
        XLA_FLAGS="--xla_force_host_platform_device_count=3",
    ).stdout
    assert out.strip() == "3 | --xla_force_host_platform_device_count=3"


def test_the_command_uses_every_core_and_info_says_which_count_is_in_force(tmp_path):
    cores = devices.default_count()[0]
    d = json.loads(_python("", tmp_path, "-m", "rankflow.cli", "info", "--json").stdout)
    assert d["cpu_devices"] == cores
    assert d["cpu_devices_via"] == devices.COMMAND
    assert d["cpu_devices_set_by"].startswith("every core, one per physical core")
    d = json.loads(
        _python(
            "", tmp_path, "-m", "rankflow.cli", "info", "--json", RANKFLOW_CPU_DEVICES="1"
        ).stdout
    )
    assert (d["cpu_devices"], d["cpu_devices_set_by"]) == (1, "RANKFLOW_CPU_DEVICES=1")
    # A Python user who did not call use_all_cores is told JAX's default is in force.
    text = _python(
        "from rankflow.engine import sysinfo; print(sysinfo.format_info(sysinfo.info()))",
        tmp_path,
    ).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("CPU devices:"))
    assert line.startswith("CPU devices: 1, JAX's default: rankflow.use_all_cores() was not")
