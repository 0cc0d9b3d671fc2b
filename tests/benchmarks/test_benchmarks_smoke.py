"""``python -m benchmarks.device`` on this machine's backend, as its own smoke test
(issue #18): its tables agree with one CPU device's, it says so, and a table that
differs is caught (exit status 1). ``python -m benchmarks.scaling --quick`` runs each
device count in its own process and reports every column (slow: about a minute).
``python -m benchmarks.muon_step --quick`` times GD and Muon at two sizes.
``python -m benchmarks.import_side_effects --quick`` finds a user's process unchanged by
``import rankflow`` (issue #27); ``python -m benchmarks.import_time`` times the import
against jax's and a baseline checkout's (issue #28)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import device

ROOT = Path(__file__).resolve().parents[2]


def _script(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m module args`` from the checkout, its output captured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _device(*args: str) -> subprocess.CompletedProcess:
    return _script("benchmarks.device", "--quick", *args)


def test_device_script_core_sweep_and_gf_update():
    res = _device("--parts", "core,gf_speed")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "tables (core gd) on " in res.stdout and "all agree" in res.stdout
    assert "GF update, d = r = 32, one configuration: " in res.stdout
    assert "MISMATCH" not in res.stdout


@pytest.mark.slow
def test_device_script_every_part():
    res = _device()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all agree" in res.stdout and "attention training: " in res.stdout


@pytest.mark.slow
def test_scaling_script_runs_each_device_count_and_reports_every_column(tmp_path):
    out = tmp_path / "scaling.json"
    res = _script(
        "benchmarks.scaling", "--quick", "--devices", "1,2", "--repeats", "1", "--json", str(out)
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["devices"] for r in rows] == [1, 2]
    for r in rows:
        assert set(r["times"]) == {"gd", "sde", "adaptive", "scan", "scan_all"}
        assert all(t > 0 for t in r["times"].values())
        assert r["small_products"] > 0 and r["peak_dot"] > 0 and r["peak_all"] > 0
    table = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 3 and all(line.count("|") == 11 for line in table)
    assert "hand-written scan, every device" in table[0]


def test_import_side_effects_script_finds_the_users_flags_and_devices_unchanged():
    res = _script("benchmarks.import_side_effects", "--quick")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "XLA_FLAGS and device count the same as plain" in res.stdout
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| plain", "| import", "| use_all_cores"]


@pytest.mark.slow
def test_import_time_script_times_rankflow_jax_and_a_baseline():
    res = _script("benchmarks.import_time", "--repeats", "1", "--baseline", str(ROOT))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[1:4]] == [
        "import jax",
        "import rankflow",
        "import rankflow (baseline)",
    ]
    assert lines[-1].startswith("ratio rankflow/baseline: ")


def _tables():
    return {
        "t": pd.DataFrame(
            {"x": [1.0, 2.0, np.nan], "n": [1, 2, 3], "status": ["ok", "ok", "diverged"]}
        )
    }


def test_mismatches_catch_a_float_off_by_more_than_rounding_and_any_other_column():
    ref = _tables()
    assert device.mismatches(_tables(), ref, 1e-4) == ([], 0.0)
    near = _tables()
    near["t"].loc[0, "x"] = 1.0 + 1e-6  # float32 rounding of the column's scale (2)
    bad, worst = device.mismatches(near, ref, 1e-4)
    assert bad == [] and 0 < worst < 1e-6
    far = _tables()
    far["t"].loc[0, "x"] = 1.001
    expected = "t.x: differs by 5.00e-04 of its scale (> 0.0001)"
    assert device.mismatches(far, ref, 1e-4)[0] == [expected]
    nan = _tables()
    nan["t"].loc[0, "x"] = np.nan
    assert device.mismatches(nan, ref, 1e-4)[0] == ["t.x: NaN in other places than on CPU"]
    status = _tables()
    status["t"].loc[1, "status"] = "diverged"
    assert device.mismatches(status, ref, 1e-4)[0] == ["t.status: differs from CPU"]
    assert device.mismatches({}, ref, 1e-4)[0] == ["t: other columns or rows than on CPU"]


@pytest.mark.slow
def test_sweep_scale_script_reports_the_plan_the_gaps_and_the_first_chunk(tmp_path):
    """``python -m benchmarks.sweep_scale --quick`` (issue #35; ~10 s): every number it
    reports, read back from its JSON (no timing asserted: this is a smoke test)."""
    res = _script(
        "benchmarks.sweep_scale", "--quick", "--repeats", "1", "--json", str(tmp_path / "s.json")
    )
    assert res.returncode == 0, res.stderr
    got = json.loads((tmp_path / "s.json").read_text())
    assert got["points"] == 10**4 and got["structures"] == 1000
    assert got["plan_s"] > 0 and got["gap_max_ms"] >= got["gap_median_ms"] > 0
    assert 0 < got["import_s"] < got["first_chunk_s"]
    assert "targets:" in res.stdout


def test_muon_step_script_times_gd_and_muon_at_each_size(tmp_path):
    """``python -m benchmarks.muon_step --quick`` (a few seconds): a row per size with
    both sides timed and the ratio's spread around it (no timing asserted)."""
    out = tmp_path / "muon.json"
    res = _script("benchmarks.muon_step", "--quick", "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["d"] for r in rows] == [8, 16]
    for r in rows:
        assert all(t > 0 for k in ("gd", "muon") for t in r["step_s"][k])
        assert r["ratio_min"] <= r["ratio_max"] and r["ratio"] > 0
    table = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 3 and "muon/gd" in table[0]
