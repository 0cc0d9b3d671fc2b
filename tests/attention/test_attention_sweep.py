"""Attention sweeps on the engine, tested as core sweeps are (tests/engine/test_sweep.py): a
real SIGKILL mid-sweep then ``--resume`` gives exactly the uninterrupted tables (heads
and loss), and submitit's local executor runs a job array into one directory."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import rankflow.attention as ra

ROOT = Path(__file__).resolve().parents[2]

# A tiny model and few steps: chunks of one run take a fraction of a second each, and
# every test here shares one compiled program (one structure, batches of one run).
CONFIG = """
[attention]
D = 8
H = 2
layers = 1
context = 8
[task]
kind = "associative_recall"
pairs = 3
keys = 4
values = 4
val_size = 8
[dynamics]
kind = "sgd"
eta = 0.1
batch = 4
[train]
eval_every = 200
[save]
t1 = 800
[sweep]
"dynamics.lam" = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1]
seed = [0, 1]
"""


def _train(*args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "rankflow.cli", "attention", "train", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _assert_same(a: ra.Results, b: ra.Results):
    pd.testing.assert_frame_equal(a.heads, b.heads, check_categorical=False)
    pd.testing.assert_frame_equal(a.loss, b.loss, check_categorical=False)


@pytest.mark.slow
def test_sigkill_mid_sweep_then_resume_gives_exactly_the_uninterrupted_tables(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    out = tmp_path / "killed"
    proc = _train(str(path), "--out", str(out), "--chunk", "1")
    heads_dir = out / "results.parquet"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(heads_dir.glob("chunk-*.parquet"))) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(list(heads_dir.glob("chunk-*.parquet")))
    assert 2 <= n_before < 24, "the kill must land mid-sweep"
    resumed = _train(str(path), "--out", str(out), "--chunk", "1", "--resume")
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert stdout.startswith("24 runs (") and f"{n_before} chunks resumed" in stdout
    _assert_same(ra.load(out), ra.run(str(path), chunk=1))


@pytest.mark.slow
def test_submitit_local_executor_runs_a_two_job_array_into_one_directory(tmp_path):
    pytest.importorskip("submitit")
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    out = tmp_path / "array"
    args = [str(path), "--out", str(out), "--chunk", "1", "--quiet"]
    args += ["--executor", "submitit", "--cluster", "local", "--jobs", "2", "--time", "5"]
    args += ["--set", "sweep.seed=[0]", "--set", "sweep.dynamics.lam=[0.0, 0.5, 1.0]"]
    for resume, line in (([], "3 runs (0 diverged"), (["--resume"], "3 chunks resumed")):
        proc = _train(*args, *resume)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0 and line in stdout, stderr
        # Two array tasks ran as real subprocesses; a resumed array sends nothing.
        assert len(list((out / "submitit").glob("*_result.pkl"))) == 2
    assert len(list((out / "loss.parquet").glob("chunk-*.parquet"))) == 3
    overrides = {"sweep.seed": [0], "sweep.dynamics.lam": [0.0, 0.5, 1.0]}
    _assert_same(ra.load(out), ra.run(str(path), overrides=overrides, chunk=1))
