"""``python -m benchmarks.device`` on this machine's backend, as its own smoke test
(issue #18): its tables agree with one CPU device's, it says so, and a table that
differs is caught (exit status 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import device

ROOT = Path(__file__).resolve().parents[1]


def _device(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.device", "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


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
