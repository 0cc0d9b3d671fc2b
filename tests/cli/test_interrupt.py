"""Ctrl-C stops a sweep within seconds whatever its chunk's length (issue #34): each chunk
computes in a worker thread the main thread waits on in 0.1 s slices, the running chunk
is abandoned (its file never written), the finished ones stay, and ``--resume`` then
completes the table of an uninterrupted run. A second Ctrl-C ends the command at once.
tests/cli/test_user_errors.py holds the fast case of the user-mistake battery."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.engine import executors

ROOT = Path(__file__).resolve().parents[2]

# Two structures, so two chunks with --chunk 1: t1 = 4 steps (quick), then t1 GD steps
# of an 8×8 problem, 1–2 µs a step on this 2-core machine (2×2 ones take 40 ns: too
# cheap for a chunk of minutes within the 2³¹ steps a run may take).
LONG_SWEEP = """
seed = 0
[problem]
kind = "diagonal"
singular_values = [1.0, 0.5, 0.33, 0.25, 0.2, 0.17, 0.14, 0.12]
[dynamics]
kind = "gd"
[save]
num = 3
[sweep]
"save.t1" = [4.0, {t1}]
"""


def _rankflow(*args: str) -> subprocess.Popen:
    """``rankflow ARGS`` in a new process, as a terminal's foreground job has it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RANKFLOW_CACHE_DIR="off")
    # A shell starts background jobs with SIGINT ignored and a child inherits that (Python
    # then installs no KeyboardInterrupt handler): the child installs Python's default
    # handler itself, as a terminal's foreground job has it, whatever the runner inherited.
    start = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('rankflow.cli', run_name='__main__', alter_sys=True)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", start, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def interrupt_after_first_chunk(config: Path, out: Path) -> tuple[int, str, str, float]:
    """Run ``config`` into ``out`` one run per chunk, send SIGINT once the first chunk's
    file exists (the second chunk then computing), and return the exit status, stdout,
    stderr and the seconds from the signal to the process's end."""
    proc = _rankflow("run", str(config), "--out", str(out), "--chunk", "1", "--quiet")
    deadline = time.time() + 120
    while not list(out.glob("results.parquet/chunk-*.parquet")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # into the long chunk
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, stdout, stderr, time.perf_counter() - sent


@pytest.mark.slow
def test_sigint_during_a_chunk_of_over_a_minute_exits_in_seconds_and_resumes_exactly(tmp_path):
    config = tmp_path / "long.toml"
    config.write_text(LONG_SWEEP.format(t1=1.2e8))  # resumed here in 241 s (load 2.5)
    out = tmp_path / "out"
    rc, stdout, stderr, seconds = interrupt_after_first_chunk(config, out)
    print(f"exit {seconds:.2f} s after SIGINT")  # seen with pytest -s
    assert rc == 130 and seconds < 10, (rc, seconds, stderr)
    assert "run the same command with --resume to continue" in stderr
    assert sorted(p.name for p in (out / "results.parquet").iterdir()) == ["chunk-00000.parquet"]
    resumed = _rankflow("run", str(config), "--out", str(out), "--chunk", "1", "--resume")
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert "1 chunks resumed" in stdout, stdout
    print(f"resumed: {stdout.strip()}")
    # The chunk the signal abandoned does take over a minute: the resumed run's time
    # (on a faster machine, raise t1 until it does).
    assert float(re.search(r" in ([0-9.]+) s", stdout).group(1)) > 60, stdout
    reference = rankflow.run(config, chunk=1, quiet=True)
    pd.testing.assert_frame_equal(rankflow.load(out), reference, check_categorical=False)


@pytest.fixture
def sigint_default():
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal (a job started in
    the background of a non-interactive shell, as CI may start pytest, inherits SIGINT
    ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_chunk_is_computed_in_a_worker_the_main_thread_leaves_at_ctrl_c(sigint_default):
    release = threading.Event()

    def chunk():  # blocks as XLA does, after the signal has gone to the main thread
        os.kill(os.getpid(), signal.SIGINT)
        release.wait(30)
        return "done"

    assert executors._compute(lambda: 1) == 1  # outside interruptible(): in this thread
    with executors.interruptible():
        assert executors._compute(lambda: threading.current_thread().name) == executors.WORKER
        start = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            executors._compute(chunk)
        assert time.perf_counter() - start < 2
    assert executors.abandoned_chunk()
    release.set()
    deadline = time.time() + 10
    while executors.abandoned_chunk() and time.time() < deadline:
        time.sleep(0.01)
    assert not executors.abandoned_chunk()


def test_a_second_ctrl_c_exits_at_once(monkeypatch, capsys, sigint_default):
    class Exited(Exception):
        pass

    def fake_exit(status):
        raise Exited(status)

    monkeypatch.setattr(os, "_exit", fake_exit)
    args = argparse.Namespace(resume=False, out="out")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with cli._second_interrupt_exits(args):
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            time.sleep(5)  # the handler runs before this returns
        with pytest.raises(Exited, match="130"):
            signal.raise_signal(signal.SIGINT)
            time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert capsys.readouterr().err == (
        "rankflow: interrupted; the finished chunks are kept in out: run the same command "
        "with --resume to continue\n"
    )
