"""Who may write a directory: the ``--out`` check and the exclusive lock.

Every writer (a sweep, ``compare``, ``inspect``, ``reproduce``) first checks its
output directory (:func:`check_out`): it must be new, empty, or one of rankflow's own
directories of the same kind; anything else — a user's model folder, a file, a path
under a file, an unwritable place — is refused in one line before any work.

It then holds ``DIR/.rankflow.lock`` (:func:`claimed`) for as long as it writes: an
``fcntl.flock`` exclusive lock, which the OS releases on any exit, ``kill -9``
included. The file records the directory's kind and, while held, the holder (pid,
host, command, start time): a second writer is refused at once naming the holder, and
a holder recorded in a file nobody locks is a writer that crashed, reported in one line
and taken over. SLURM array tasks of a sweep write their chunks under the claim of the
process that submitted them (it holds the lock until every task has finished).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ..config.fields import ConfigError

__all__ = ["LOCK", "Busy", "WriterLock", "check_out", "claimed"]

LOCK = ".rankflow.lock"
# The files that, all present, mark a directory of each kind written before the lock
# file existed (a sweep's manifest must also hold its config hash).
_LEGACY_MARKS = {
    "sweep": ("manifest.json", "config.json"),
    "inspect": ("inspect.json", "heads.parquet"),
    "compare": ("summary.md", "config.json", "trajectory.parquet"),
    "reproduce": ("report.md", "runs"),
}


class Busy(ConfigError):
    """Another process holds the directory."""


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _kind_of(p: Path) -> str | None:
    """The rankflow kind recorded in (or evident from) directory ``p``, else None."""
    try:
        kind = json.loads((p / LOCK).read_text() or "{}").get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind:
        return kind
    for k, marks in _LEGACY_MARKS.items():
        if all((p / m).exists() for m in marks):
            if k == "sweep" and '"config_hash"' not in (p / marks[0]).read_text(errors="replace"):
                continue
            return k
    return None


def _listing(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def check_out(out: str | Path, kind: str, option: str = "--out") -> None:
    """Raise ``ConfigError`` (one line naming what is there) unless ``out`` can be
    written by a rankflow writer of ``kind``: a new or empty directory under a writable
    one, or a rankflow directory of the same kind."""
    p = Path(out)
    base = _nearest_existing(p.absolute())
    if base != p.absolute() and not base.is_dir():
        raise ConfigError(f"{option}: {out} is under a file ({base}); choose a new directory")
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{option}: {out} is a file; choose a new or empty directory")
    if not os.access(base, os.W_OK | os.X_OK):
        what = "is not writable" if base == p.absolute() else f"cannot be created in {base}"
        raise ConfigError(f"{option}: {out} {what} (permission denied); choose another directory")
    if not p.is_dir():
        return
    names = sorted(n for n in os.listdir(p) if n != LOCK)
    have = _kind_of(p)
    if have == kind or (not names and have is None):
        return
    if have is not None:
        raise ConfigError(
            f"{option}: {out} holds rankflow {have} results, not {kind}; "
            f"choose a new or empty directory"
        )
    raise ConfigError(
        f"{option}: {out} holds {_listing(names)} (not a rankflow results directory); "
        f"choose a new or empty directory"
    )


def _holder_line(h: dict) -> str:
    return f"pid {h.get('pid')} on {h.get('host')} ({h.get('command')}, since {h.get('started')})"


class WriterLock:
    """An exclusive claim on a directory (see the module docstring): ``fresh`` when the
    directory was new or empty when taken, so that everything in it is this writer's."""

    def __init__(self, out: str | Path, kind: str):
        self.out, self.kind = Path(out), kind
        self.fresh = False
        self._fd: int | None = None
        self._made: list[Path] = []

    def acquire(self) -> WriterLock:
        """Create the directory if needed and lock it; raise :class:`Busy` naming the
        holder when another process has it."""
        missing = []
        p = self.out.absolute()
        while not p.exists():
            missing.append(p)
            p = p.parent
        self.out.mkdir(parents=True, exist_ok=True)
        self._made = missing  # deepest first
        path = self.out / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = self._read(fd).get("holder") or {}
                os.close(fd)
                raise Busy(
                    f"--out: {self.out} is being written by {_holder_line(holder)}; wait for "
                    f"it to finish or choose another --out"
                ) from None
            # The file may have been removed (a discarded claim) between open and lock.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        old = self._read(fd)
        if old.get("holder"):
            print(
                f"rankflow: {self.out}: taking over from {_holder_line(old['holder'])}, "
                f"which ended without releasing it",
                file=sys.stderr,
            )
        self.fresh = not [n for n in os.listdir(self.out) if n != LOCK]
        self._write(
            {
                "kind": self.kind,
                "holder": {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "command": " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:200],
                    "started": datetime.datetime.now().isoformat(timespec="seconds"),
                },
            }
        )
        return self

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            data = os.read(fd, 65536).decode() or "{}"
            out = json.loads(data)
            return out if isinstance(out, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write(self, content: dict) -> None:
        data = json.dumps(content).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Unlock, leaving the kind (and no holder) in the lock file."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self._write({"kind": self.kind})
        os.close(self._fd)
        self._fd = None

    def discard(self) -> None:
        """Remove everything this claim wrote into a fresh directory, and the
        directories it created: a writer that failed before finishing any work leaves
        nothing behind, so the corrected rerun starts clean."""
        if self._fd is None or not self.fresh:
            return
        for entry in self.out.iterdir():
            if entry.name == LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        (self.out / LOCK).unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        for d in self._made:
            try:
                d.rmdir()
            except OSError:
                break


@contextlib.contextmanager
def claimed(
    out: str | Path, kind: str, keep: Callable[[], bool] = lambda: False
) -> Iterator[WriterLock]:
    """Check ``out`` (:func:`check_out`), hold it exclusively while the block runs, and
    release it on any exit. When the block fails, a fresh directory is discarded unless
    ``keep()`` (e.g. a sweep with a finished chunk, which ``--resume`` continues)."""
    check_out(out, kind)
    claim = WriterLock(out, kind).acquire()
    try:
        yield claim
    except BaseException:
        if not keep():
            claim.discard()
        raise
    finally:
        claim.release()
