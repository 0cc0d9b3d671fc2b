"""The ``rankflow`` command. Parses arguments and calls the library; nothing else.

One module per subcommand, each with ``add_parser(subparsers)`` that builds its parser
and sets the function it runs (``func``): ``run`` (also ``sweep``), ``plot``, ``fit``,
``compare``, ``inspect``, ``attention``, ``reproduce``, ``demo``, ``info``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

from ..config.fields import ConfigError
from ..engine import devices
from ..engine.executors import abandoned_chunk, interruptible
from . import attention, compare, demo, fit, info, inspect, plot, reproduce, run

__all__ = ["build_parser", "main"]

SUBCOMMANDS = (run, plot, fit, compare, inspect, attention, reproduce, demo, info)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``rankflow`` and every subcommand."""
    ap = argparse.ArgumentParser(
        prog="rankflow",
        description="Weight decay on factorised weights W = ABᵀ: flows and optimizers, "
        "checked against exact theory.",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return ap


# Exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130
# Exit status of a command whose reader closed its output early (128 + SIGPIPE), as
# shells report a command that SIGPIPE ended (`git log | head`, `yes | head`).
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run ``rankflow ARGV``. A user's mistake is one line on stderr: exit status 2 for
    a config error, 1 for a file that cannot be read or written; Ctrl-C exits 130,
    saying whether ``--resume`` continues (finished chunks are kept). A reader that
    stops early (``rankflow info --json | head -c 100``) ends any command quietly, exit
    status 141, as SIGPIPE ends other commands (Python's note on SIGPIPE: what is left
    to write goes to the null device).

    Ctrl-C is seen within a fraction of a second even while a chunk computes (each runs
    in a worker thread: :func:`rankflow.engine.executors.interruptible`); the chunk is
    abandoned, and when its worker is still computing the process ends at once
    (``os._exit(130)``) after the line, without waiting for it. A second Ctrl-C while
    the first is handled ends it at once too.

    Before the command starts JAX, it asks for one CPU device per physical core
    (``RANKFLOW_CPU_DEVICES`` and XLA's flag choose otherwise) and single-threaded Eigen:
    :func:`rankflow.engine.devices.configure`, which leaves JAX's count, without an
    error, where JAX has started already (``main`` called inside a Python process)."""
    try:
        try:
            return _command(argv)
        finally:  # also after --help and usage errors (SystemExit): what they print
            sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
        return CLOSED_PIPE


def _command(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    devices.configure(via=devices.COMMAND)
    with _second_interrupt_exits(args):
        return _call(args)


def _call(args: argparse.Namespace) -> int:
    try:
        with interruptible():
            return args.func(args)
    except ConfigError as e:
        return _fail(str(e), 2)
    except BrokenPipeError:
        raise  # the reader has gone: nothing to say (main)
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        return _fail(f"{e.strerror or e}:{where}" if e.strerror else str(e), 1)
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        args.interrupt_said = True
        if abandoned_chunk():  # XLA is still computing it: do not wait for it
            _exit_now()
        return INTERRUPTED


def _interrupted(args: argparse.Namespace) -> str:
    """The line Ctrl-C prints: how to continue, where the command can."""
    if hasattr(args, "resume") and getattr(args, "out", None):
        return (
            f"rankflow: interrupted; the finished chunks are kept in {args.out}: run the "
            "same command with --resume to continue"
        )
    return "rankflow: interrupted"


@contextlib.contextmanager
def _second_interrupt_exits(args: argparse.Namespace):
    """While the block runs, the first SIGINT raises ``KeyboardInterrupt`` as usual and
    a second one ends the process at once (exit 130). Only where SIGINT has Python's
    default handler, in the main thread: a job started with SIGINT ignored keeps it so."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return

    def second(signum, frame):
        if not getattr(args, "interrupt_said", False):
            _say_now(_interrupted(args))
        _exit_now()

    def first(signum, frame):
        signal.signal(signal.SIGINT, second)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _say_now(line: str) -> None:
    """Write ``line`` to stderr from a signal handler: straight to its file descriptor
    (the interrupted code may be inside a print to it), else through ``print``."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (stderr captured)
        print(line, file=sys.stderr)
    else:
        os.write(fd, f"{line}\n".encode())


def _exit_now() -> None:
    """End the process with exit status 130 now, what was printed flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(INTERRUPTED)


def _stdout_to_devnull() -> None:
    """Point stdout's file descriptor at the null device, so that the interpreter's
    last flush of what is left to write finds no closed pipe (and says nothing)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (stdout captured)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _fail(message: str, status: int) -> int:
    # One line, whatever the message: lines it spans are joined.
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    print(f"rankflow: error: {'; '.join(lines)}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
