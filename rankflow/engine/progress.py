"""Progress of long commands: tqdm's bars on a terminal, plain lines on stderr off one.

Off a terminal (stderr a file or a pipe: CI, nohup, SLURM) a command is never silent for
longer than :func:`interval_s` (``RANKFLOW_PROGRESS_INTERVAL`` seconds, default
:data:`DEFAULT_INTERVAL_S`): each sweep prints a line per chunk (chunk i/n, runs, elapsed,
ETA), ``rankflow reproduce`` one at each experiment's start and end, and a background
timer (:func:`heartbeat`) prints ``rankflow: still running: <what>`` whenever nothing
was printed through :func:`say` for that long, also inside one chunk, one compile or
one training loop (XLA releases the GIL while it computes). ``<what>`` is the stack of
:func:`activity` levels, each with its elapsed seconds, e.g.
``rankflow reproduce (960 s) › reference 10/10 (125 s) › chunk 1/1 (40 s)``.

On a terminal nothing is printed here but tqdm's bar; ``quiet`` silences both (and
every line of a block nested in a quiet one). Everything goes to stderr, never stdout.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_INTERVAL_S",
    "INTERVAL_ENV",
    "activity",
    "heartbeat",
    "interval_s",
    "progress",
    "reported",
    "say",
]

INTERVAL_ENV = "RANKFLOW_PROGRESS_INTERVAL"
# Seconds without a line after which the heartbeat prints one (below a minute, with room
# for the timer's own tick).
DEFAULT_INTERVAL_S = 30.0
# The name of the heartbeat's thread.
THREAD = "rankflow-heartbeat"
# A sweep of more chunks prints a line every ⌈chunks / MAX_CHUNK_LINES⌉-th chunk (and the
# last): at most about this many lines, the heartbeat filling the gaps.
MAX_CHUNK_LINES = 100


@dataclass
class Activity:
    """One level of what runs (``what``, which its owner may update), since ``t0``
    (``time.monotonic()`` seconds)."""

    what: str
    t0: float = field(default_factory=time.monotonic)


class _State:
    """What the heartbeat reads: the activity stack, the time of the last line, the
    quiet depth and the timer; every field under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stack: list[Activity] = []
        self.last = time.monotonic()
        self.quiet = 0  # blocks entered with quiet=True, still open
        self.users = 0  # heartbeat blocks sharing the timer
        self.stop: threading.Event | None = None
        self.thread: threading.Thread | None = None


_state = _State()


def interval_s() -> float:
    """``RANKFLOW_PROGRESS_INTERVAL`` (seconds, > 0), else :data:`DEFAULT_INTERVAL_S`; a
    value that is not a positive number is said in one line and ignored (as
    ``RANKFLOW_CPU_DEVICES``)."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        say(
            f"rankflow: {INTERVAL_ENV}={raw!r} is not a positive number of seconds; "
            f"using {DEFAULT_INTERVAL_S:g}"
        )
        return DEFAULT_INTERVAL_S
    return value


def on_terminal() -> bool:
    """Whether stderr is a terminal (tqdm's bars) rather than a file or a pipe (lines)."""
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def say(line: str) -> None:
    """Print ``line`` on stderr (flushed) unless inside a quiet block; it counts as the
    last line the heartbeat waits from."""
    with _state.lock:
        if _state.quiet:
            return
        print(line, file=sys.stderr, flush=True)
        _state.last = time.monotonic()


@contextlib.contextmanager
def activity(what: str) -> Iterator[Activity]:
    """A level of what runs, named ``what`` in the heartbeat's line while the block runs;
    the yielded :class:`Activity`'s ``what`` may be updated (a sweep's current chunk)."""
    level = Activity(what)
    with _state.lock:
        _state.stack.append(level)
    try:
        yield level
    finally:
        with _state.lock:
            _state.stack.remove(level)


def running() -> str:
    """The activity stack, outermost first, each level with its elapsed seconds."""
    now = time.monotonic()
    with _state.lock:
        levels = list(_state.stack)
    return " › ".join(f"{a.what} ({now - a.t0:.0f} s)" for a in levels) or "rankflow"


@contextlib.contextmanager
def heartbeat(quiet: bool = False) -> Iterator[None]:
    """While the block runs, off a terminal and unless ``quiet`` (or inside a quiet
    block), print ``rankflow: still running: <what>`` on stderr whenever nothing was
    printed through :func:`say` for :func:`interval_s` seconds. Nested blocks share one
    timer thread; the last to leave stops it and waits for it, so nothing is printed
    after the block (a Ctrl-C included). ``quiet`` silences :func:`say` in the block."""
    start = not quiet and not on_terminal()
    interval = interval_s() if start else None
    with _state.lock:
        if quiet:
            _state.quiet += 1
        start = start and not _state.quiet
        if start:
            _state.users += 1
            if _state.thread is None:
                _start_timer(interval)
    try:
        yield
    finally:
        thread = None
        with _state.lock:
            if quiet:
                _state.quiet -= 1
            if start:
                _state.users -= 1
                if _state.users == 0:
                    thread, _state.thread = _state.thread, None
                    _state.stop.set()
        if thread is not None:
            thread.join(timeout=5)


def _start_timer(interval: float) -> None:
    """Start the heartbeat's thread (``_state.lock`` held): it wakes every
    ``min(1 s, interval / 10)`` and prints when ``interval`` passed since the last line."""
    stop = threading.Event()
    tick = min(1.0, interval / 10)
    _state.stop, _state.last = stop, time.monotonic()

    def beat() -> None:
        while not stop.wait(tick):
            what = running()
            with _state.lock:
                if stop.is_set():
                    return
                if not _state.quiet and time.monotonic() - _state.last >= interval:
                    try:
                        print(f"rankflow: still running: {what}", file=sys.stderr, flush=True)
                    except (OSError, ValueError):  # stderr closed: nobody to tell
                        return
                    _state.last = time.monotonic()

    _state.thread = threading.Thread(target=beat, name=THREAD, daemon=True)
    _state.thread.start()


def reported(name: str) -> Callable:
    """Decorate a command's function ``(args) -> int``: it runs under :func:`heartbeat`
    (quiet with ``args.quiet``) as the activity ``rankflow NAME``."""

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def run(args) -> int:
            with heartbeat(quiet=bool(getattr(args, "quiet", False))):
                with activity(f"rankflow {name}"):
                    return command(args)

        return run

    return decorate


class _ChunkLines:
    """A sweep's plain lines (off a terminal): a first line, then one per finished chunk
    (every ``every``-th and the last) with runs, elapsed seconds and the ETA from this
    session's rate; ``update(rows)`` as tqdm's."""

    def __init__(self, total: int, done: int, chunks: int, chunks_done: int, level: Activity):
        self.total, self.done, self.chunks, self.finished = total, done, chunks, chunks_done
        self.level, self.t0, self.start_runs = level, time.monotonic(), done
        self.every = max(1, math.ceil(chunks / MAX_CHUNK_LINES))
        again = f", {chunks_done} finished already" if chunks_done else ""
        runs, parts = ("run" if total == 1 else "runs"), ("chunk" if chunks == 1 else "chunks")
        say(f"rankflow: sweep of {total} {runs} in {chunks} {parts}{again}")

    def update(self, rows: int) -> None:
        self.done += rows
        self.finished += 1
        self.level.what = _chunk_what(self.finished, self.chunks)
        if self.finished % self.every and self.finished != self.chunks:
            return
        elapsed = time.monotonic() - self.t0
        ran = self.done - self.start_runs
        eta = elapsed / ran * (self.total - self.done) if ran else math.nan
        say(
            f"rankflow: chunk {self.finished}/{self.chunks} done: {self.done}/{self.total} "
            f"runs, {elapsed:.0f} s elapsed, ETA {eta:.0f} s"
        )


def _chunk_what(finished: int, chunks: int) -> str:
    """The activity of a sweep: the chunk it computes (or that it has finished)."""
    return f"chunk {min(finished + 1, chunks)}/{chunks}" + (" done" if finished >= chunks else "")


@contextlib.contextmanager
def progress(total: int, done: int, quiet: bool, chunks: int = 1, chunks_done: int = 0):
    """The progress of a sweep over ``total`` runs in ``chunks`` chunks, ``done`` runs
    (``chunks_done`` chunks) of them already finished; yields an object whose
    ``update(rows)`` counts a finished chunk of ``rows`` runs. On a terminal a tqdm bar
    over runs; off a terminal :class:`_ChunkLines` under :func:`heartbeat`; nothing
    printed when ``quiet``. Always the :func:`activity` ``chunk i/n``. A quiet bar is
    plain tqdm's (tqdm.auto's notebook bar warns "IProgress not found" in a Jupyter
    kernel without ipywidgets even when disabled)."""
    if quiet:
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm

    with activity(_chunk_what(chunks_done, chunks)) as level:
        if quiet or on_terminal():
            with tqdm(
                total=total,
                initial=done,
                unit="run",
                desc="rankflow",
                disable=quiet,
                file=sys.stderr,
                dynamic_ncols=True,
            ) as bar:
                yield _Counted(bar, level, chunks, chunks_done)
        else:
            with heartbeat():
                yield _ChunkLines(total, done, chunks, chunks_done, level)


class _Counted:
    """tqdm's bar, also counting chunks into the sweep's :class:`Activity`."""

    def __init__(self, bar, level: Activity, chunks: int, chunks_done: int):
        self.bar, self.level, self.chunks, self.finished = bar, level, chunks, chunks_done

    def update(self, rows: int) -> None:
        self.bar.update(rows)
        self.finished += 1
        self.level.what = _chunk_what(self.finished, self.chunks)
