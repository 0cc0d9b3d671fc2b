"""Progress off a terminal (issue #41, item 7): ``rankflow reproduce`` printed nothing for
995 s of its training reference when stderr was a file. Off a terminal every long command
prints plain lines on stderr (each experiment's start and end, each chunk of a sweep) and
a heartbeat, ``rankflow: still running: …``, whenever nothing was printed for
``RANKFLOW_PROGRESS_INTERVAL`` seconds; on a terminal tqdm's bars stay as they were.

The gaps are measured from the time each line reaches stderr (a stream recording it,
or the file read as it grows), and every gap check is shown to fail on a run whose
heartbeat cannot fire (its interval above the silent stretch)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

from rankflow import cli
from rankflow import reproduce as reproduce_pkg
from rankflow.engine import progress

ROOT = Path(__file__).resolve().parents[2]
ENV = progress.INTERVAL_ENV
# Short intervals for tests; SLACK covers the timer's tick and a loaded machine.
INTERVAL = 0.3
SLACK = 0.7
STUB = "_slow_stub_for_tests"

# Three runs of a 2×2 diagonal problem, one per chunk with --chunk 1 (one program).
TINY_SWEEP = """
seed = 0
[problem]
kind = "diagonal"
singular_values = [1.0, 0.5]
[dynamics]
kind = "gd"
[save]
num = 3
t1 = 4.0
[sweep]
"dynamics.lam" = [0.01, 0.02, 0.03]
"""


class TimedStderr(io.TextIOBase):
    """A stderr (a terminal when ``tty``) recording each line with its arrival time
    (``time.monotonic()``), from any thread."""

    def __init__(self, tty: bool = False):
        self.tty, self.text, self.lines = tty, "", []
        self._partial, self._lock = "", threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            now = time.monotonic()
            self.text += s
            self._partial += s
            *done, self._partial = self._partial.split("\n")
            self.lines += [(now, line) for line in done]
        return len(s)

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        pass


def longest_silence(times: list[float], window: list[float] | None = None) -> float:
    """The longest gap between consecutive arrival times (seconds; 0 for < 2 lines);
    with ``window`` ``[t0, t1]``, of the times inside it, counting from t0 to t1."""
    if window is not None:
        times = [window[0], *(t for t in times if window[0] <= t <= window[1]), window[1]]
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def heartbeats(lines) -> list[str]:
    return [line for _, line in lines if line.startswith("rankflow: still running: ")]


def no_heartbeat_thread() -> bool:
    return all(t.name != progress.THREAD for t in threading.enumerate())


@pytest.fixture
def slow_experiment(monkeypatch):
    """``rankflow reproduce --only slow`` runs a stub that sleeps ``stub.seconds`` and
    records one observation (no JAX)."""
    stub = types.ModuleType(f"rankflow.reproduce.{STUB}")
    stub.CLAIMS, stub.seconds = [], 1.5

    def run_experiment(ctx):
        stub.window = [time.monotonic()]
        time.sleep(stub.seconds)
        stub.window.append(time.monotonic())
        ctx.claim(
            experiment="slow", name="slow.sleep", source="test", statement="it sleeps",
            prediction="-", measurement=f"{stub.seconds} s", tolerance="-",
            verdict="observation",
        )  # fmt: skip

    stub.run_experiment = run_experiment
    monkeypatch.setitem(sys.modules, stub.__name__, stub)
    monkeypatch.setattr(reproduce_pkg, "EXPERIMENTS", {"slow": STUB})
    monkeypatch.setenv("RANKFLOW_CACHE_DIR", "off")
    return stub


def reproduce_in_process(monkeypatch, tmp_path, interval: float, *flags: str) -> TimedStderr:
    monkeypatch.setenv(ENV, str(interval))
    err = TimedStderr()
    monkeypatch.setattr(sys, "stderr", err)
    argv = ["reproduce", "--quick", "--only", "slow", "--out", str(tmp_path / "r"), *flags]
    assert cli.main(argv) == 0
    return err


# --- reproduce -------------------------------------------------------------------------


def test_reproduce_off_a_terminal_is_never_silent_longer_than_the_interval(
    monkeypatch, tmp_path, slow_experiment, capsys
):
    """The gaps are measured while the experiment runs (its window): after it,
    ``programs.release()`` collects the garbage of this whole test session, holding the
    GIL for up to a second here, more than a heartbeat of 0.3 s allows (not one of 30 s);
    the subprocess test below measures from the first line to the last."""
    err = reproduce_in_process(monkeypatch, tmp_path, INTERVAL)
    gap = longest_silence([t for t, _ in err.lines], slow_experiment.window)
    assert gap < INTERVAL + SLACK, (gap, err.text)
    # What runs, each level with its elapsed seconds: the command, then the experiment.
    beat = r"rankflow: still running: rankflow reproduce \(\d+ s\)( › slow 1/1 \(\d+ s\))?"
    beats = heartbeats(err.lines)
    assert all(re.fullmatch(beat, b) for b in beats), beats
    assert sum("› slow 1/1" in b for b in beats) >= 2, err.text
    lines = [line for _, line in err.lines]
    said = [line for line in lines if line not in beats]
    assert len(said) == 2, lines
    assert re.fullmatch(r"rankflow reproduce: \[1/1\] slow … \(\d+ s in all\)", said[0]), said
    done = r"rankflow reproduce: \[1/1\] slow: 0 pass, 0 fail, 1 observations in \d+ s "
    done += r"\(\d+ s in all\)"
    assert re.fullmatch(done, said[1]), said
    assert "still running" not in capsys.readouterr().out  # never on stdout
    assert no_heartbeat_thread()
    time.sleep(3 * INTERVAL)
    assert len(err.lines) == len(lines)  # nothing after the command


def test_the_silence_check_fails_when_the_heartbeat_cannot_fire(
    monkeypatch, tmp_path, slow_experiment
):
    """The mutant: an interval above the experiment's 1.5 s (as with no heartbeat) leaves
    a silence the check above catches."""
    err = reproduce_in_process(monkeypatch, tmp_path, 30.0)
    assert heartbeats(err.lines) == []
    gap = longest_silence([t for t, _ in err.lines], slow_experiment.window)
    assert gap >= slow_experiment.seconds > INTERVAL + SLACK, (gap, err.text)


def test_reproduce_quiet_prints_nothing_on_stderr(monkeypatch, tmp_path, slow_experiment):
    slow_experiment.seconds = 0.5
    err = reproduce_in_process(monkeypatch, tmp_path, 0.05, "--quiet")
    assert err.text == ""
    assert no_heartbeat_thread()


def test_reproduce_with_stderr_to_a_file_in_a_subprocess(tmp_path):
    """``rankflow reproduce --quick 2>log``: the file, read as it grows, gets a line at
    least every interval (+ slack) from the first line to the last."""
    script = textwrap.dedent(
        f"""
        import sys, time, types
        import rankflow.reproduce as rp
        from rankflow import cli
        stub = types.ModuleType("rankflow.reproduce.{STUB}")
        stub.CLAIMS = []
        stub.run_experiment = lambda ctx: time.sleep(3)
        sys.modules[stub.__name__] = stub
        rp.EXPERIMENTS = {{"slow": "{STUB}"}}
        sys.exit(cli.main(["reproduce", "--quick", "--only", "slow", "--out", sys.argv[1]]))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), RANKFLOW_CACHE_DIR="off", **{ENV: "0.5"})
    log = tmp_path / "log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "r")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        arrivals, seen = [], 0
        while proc.poll() is None:
            lines = log.read_text().count("\n")
            arrivals += [time.monotonic()] * (lines - seen)
            seen = lines
            time.sleep(0.02)
    stdout = proc.stdout.read()
    assert proc.returncode == 0, log.read_text()
    text = log.read_text()
    assert text.count("\n") == seen, text  # every line was seen before the end
    assert longest_silence(arrivals) < 0.5 + 1.0 < 3, text  # 3 s: the stub's sleep
    assert text.count("rankflow: still running: rankflow reproduce") >= 3, text
    assert "0 of 0 claims pass" in stdout and "still running" not in stdout


# --- sweeps ------------------------------------------------------------------------------


def run_sweep_to_file(monkeypatch, tmp_path, *flags: str, tty: bool = False) -> str:
    """``rankflow run TINY --out DIR --chunk 1 FLAGS`` in this process, stderr a file
    (or a terminal); what it wrote there."""
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_SWEEP)
    monkeypatch.setenv("RANKFLOW_CACHE_DIR", "off")
    argv = ["run", str(config), "--out", str(tmp_path / "out"), "--chunk", "1", *flags]
    if tty:
        err = TimedStderr(tty=True)
        monkeypatch.setattr(sys, "stderr", err)
        assert cli.main(argv) == 0
        return err.text
    with open(tmp_path / "err.log", "w") as f:
        monkeypatch.setattr(sys, "stderr", f)
        assert cli.main(argv) == 0
    return (tmp_path / "err.log").read_text()


CHUNK = r"rankflow: chunk {i}/{n} done: {i}/{n} runs, \d+ s elapsed, ETA \d+ s"


def test_a_sweep_off_a_terminal_prints_a_line_per_chunk(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, "30")
    text = run_sweep_to_file(monkeypatch, tmp_path)
    lines = text.splitlines()
    assert lines[0] == "rankflow: sweep of 3 runs in 3 chunks", text
    chunks = [line for line in lines if line.startswith("rankflow: chunk")]
    assert len(chunks) == 3, text
    for i, line in enumerate(chunks, 1):
        assert re.fullmatch(CHUNK.format(i=i, n=3), line), line
    assert chunks[-1].endswith("ETA 0 s")
    assert "\r" not in text  # no tqdm bar in the file
    # Resumed with one chunk missing: the count goes on from the finished ones.
    (tmp_path / "out" / "results.parquet" / "chunk-00001.parquet").unlink()
    text = run_sweep_to_file(monkeypatch, tmp_path, "--resume")
    assert text.splitlines()[0] == "rankflow: sweep of 3 runs in 3 chunks, 2 finished already"
    chunks = [ln for ln in text.splitlines() if ln.startswith("rankflow: chunk")]
    assert len(chunks) == 1 and re.fullmatch(CHUNK.format(i=3, n=3), chunks[0]), text


def test_a_quiet_sweep_prints_nothing_and_a_terminal_gets_the_bar(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, "0.05")
    assert run_sweep_to_file(monkeypatch, tmp_path, "--quiet") == ""
    text = run_sweep_to_file(monkeypatch, tmp_path / "tty", tty=True)
    assert "rankflow: 100%" in text and "3/3" in text and "\r" in text, text  # tqdm's bar
    assert "rankflow: chunk" not in text and "still running" not in text, text
    assert no_heartbeat_thread()


# --- the pieces ------------------------------------------------------------------------


def test_the_terminal_check_chooses_bar_or_lines(monkeypatch):
    for tty in (True, False):
        err = TimedStderr(tty=tty)
        monkeypatch.setattr(sys, "stderr", err)
        assert progress.on_terminal() is tty
        with progress.progress(4, 0, False, chunks=2) as bar:
            assert isinstance(bar, progress._Counted if tty else progress._ChunkLines)
            assert no_heartbeat_thread() is tty  # the heartbeat only off a terminal
            bar.update(2)
            bar.update(2)
        assert ("rankflow: chunk 2/2 done" in err.text) is not tty, err.text


def test_the_eta_is_the_rate_of_this_session_times_the_runs_left(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    with progress.activity("sweep") as level:
        # 4 chunks of 10 runs, 2 of them resumed; each chunk takes 2 s here.
        lines = progress._ChunkLines(40, 20, 4, 2, level)
        clock[0] += 2
        lines.update(10)
        assert level.what == "chunk 4/4"
    out = capsys.readouterr().err.splitlines()
    assert out == [
        "rankflow: sweep of 40 runs in 4 chunks, 2 finished already",
        # 10 runs in 2 s, 10 left: 2 s. Counting the resumed runs in the rate (30 runs
        # in 2 s) would say 1 s; the runs in all instead of those left, 4 s.
        "rankflow: chunk 3/4 done: 30/40 runs, 2 s elapsed, ETA 2 s",
    ]


def test_a_sweep_of_many_chunks_prints_about_a_hundred_lines(capsys):
    with progress.activity("sweep") as level:
        lines = progress._ChunkLines(250, 0, 250, 0, level)
        for _ in range(250):
            lines.update(1)
    chunk_lines = [ln for ln in capsys.readouterr().err.splitlines() if "done:" in ln]
    assert len(chunk_lines) == 84  # every 3rd chunk and the last
    assert chunk_lines[-1].startswith("rankflow: chunk 250/250 done: 250/250 runs")


def test_the_heartbeat_runs_through_one_long_xla_computation(monkeypatch):
    """XLA releases the GIL while it computes: the timer prints during one jitted call
    (a training loop or a chunk is one such call)."""
    import jax
    import jax.numpy as jnp

    monkeypatch.setenv(ENV, "0.1")
    err = TimedStderr()
    monkeypatch.setattr(sys, "stderr", err)
    loop = jax.jit(lambda x: jax.lax.fori_loop(0, 300_000_000, lambda i, x: x * 0.5 + 1.0, x))
    loop.lower(jnp.ones(4)).compile()  # outside the timed block
    with progress.heartbeat(), progress.activity("a loop"):
        t0 = time.monotonic()
        loop(jnp.ones(4)).block_until_ready()
        t1 = time.monotonic()
    during = [t for t, line in err.lines if t0 <= t <= t1]
    assert t1 - t0 > 0.3, "the loop was too short to show anything"
    assert len(during) >= 2, (t1 - t0, err.text)
    assert longest_silence([t0, *during, t1]) < 0.1 + SLACK, err.text


def test_the_heartbeat_stops_at_the_end_and_at_ctrl_c(monkeypatch):
    monkeypatch.setenv(ENV, "0.05")
    err = TimedStderr()
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(KeyboardInterrupt):
        with progress.heartbeat(), progress.activity("work"):
            time.sleep(0.5)
            assert not no_heartbeat_thread()
            raise KeyboardInterrupt
    assert no_heartbeat_thread()
    n = len(err.lines)
    assert n >= 3, err.text  # it did print while the block ran
    time.sleep(0.3)
    assert len(err.lines) == n, err.text  # and nothing after
    assert heartbeats(err.lines)[0].startswith("rankflow: still running: work (0 s)")


def test_a_quiet_block_inside_silences_the_heartbeat(monkeypatch):
    monkeypatch.setenv(ENV, "0.05")
    err = TimedStderr()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.heartbeat(), progress.activity("outer"):
        with progress.heartbeat(quiet=True):
            progress.say("not said")
            t0 = time.monotonic()
            time.sleep(0.4)
            t1 = time.monotonic()
        time.sleep(0.4)
    assert not any(t0 <= t <= t1 for t, _ in err.lines), err.text
    assert "not said" not in err.text
    assert len(heartbeats(err.lines)) >= 2, err.text  # after the quiet block


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_interval_is_one_line_and_the_default_is_used(monkeypatch, capsys, raw):
    monkeypatch.setenv(ENV, raw)
    assert progress.interval_s() == progress.DEFAULT_INTERVAL_S
    assert capsys.readouterr().err == (
        f"rankflow: {ENV}={raw!r} is not a positive number of seconds; using 30\n"
    )
    monkeypatch.setenv(ENV, "2.5")
    assert progress.interval_s() == 2.5
    monkeypatch.delenv(ENV)
    assert progress.interval_s() == progress.DEFAULT_INTERVAL_S < 60
    assert capsys.readouterr().err == ""
