"""Who may write a directory: the marker, the ``--out`` check and the exclusive lock.

A directory is rankflow's only if rankflow made it: every writer (a sweep, ``compare``,
``inspect``, ``reproduce``, a tracker) writes ``DIR/.rankflow.lock`` first, when it
creates or claims an empty directory, recording the kind, the rankflow version, the
command and a random id. Before any work a writer checks its output directory
(:func:`check_out`): it must be new, empty, or marked with the same kind; anything else
(a user's project or model folder, whatever names it holds, a file, a path under a
file, an unwritable place) is refused in one line, and nothing in it changes.

The writer holds the marker (:func:`claimed`) for as long as it writes: an
``fcntl.flock`` exclusive lock, which the OS releases on any exit, ``kill -9``
included. While held, the marker also records the holder (pid, host, command, start
time): a second writer is refused at once naming the holder, and a holder recorded in a
file nobody locks is a writer that crashed, reported in one line and taken over. SLURM
array tasks of a sweep write their chunks under the claim of the process that submitted
them (it holds the lock until every task has finished).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ..config.fields import ConfigError
from ..config.version import VERSION

__all__ = ["LOCK", "Busy", "WriterLock", "check_out", "claimed"]

LOCK = ".rankflow.lock"
# What the marker keeps once released: what made the directory, not who writes it now.
_MARK = ("kind", "version", "command", "id")


class Busy(ConfigError):
    """Another process holds the directory."""


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _kind_of(p: Path) -> str | None:
    """The kind the marker of directory ``p`` records, else None (no marker: not
    rankflow's, whatever names the directory holds)."""
    try:
        kind = json.loads((p / LOCK).read_text() or "{}").get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) and kind else None


# Kernel file systems that hold no user files (a directory made there fails, or worse).
VIRTUAL = ("/proc", "/sys")


def _virtual_root(p: Path) -> str | None:
    """The kernel file system (:data:`VIRTUAL`) that ``p`` lies under, if any."""
    resolved = p.resolve(strict=False)
    return next((v for v in VIRTUAL if resolved.is_relative_to(v)), None)


def check_out(out: str | Path, kind: str, option: str = "--out") -> None:
    """Raise ``ConfigError`` (one line naming what is there) unless ``out`` can be
    written by a rankflow writer of ``kind``: a new or empty directory under a writable
    one, or a directory whose marker says ``kind``."""
    p = Path(out)
    if p.is_symlink() and not p.exists():
        raise ConfigError(
            f"{option}: {out} is a symbolic link to {os.readlink(p)}, which does not exist; "
            f"create that directory or choose another {option}"
        )
    virtual = _virtual_root(p)
    if virtual:
        raise ConfigError(
            f"{option}: {out} is under {virtual}, a virtual file system of the kernel's "
            f"where no results can be written; choose another directory"
        )
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
    if _lost_marker(p):
        raise ConfigError(
            f"{option}: {p / LOCK} is missing: {out} holds a rankflow manifest.json but "
            f"not the marker that says rankflow made it (deleted by hand?); to write into "
            f'{out} again, recreate the marker: echo \'{{"kind": "{kind}"}}\' > {p / LOCK}'
        )
    raise ConfigError(
        f"{option}: {out} holds {names[0]} (not made by rankflow); choose a new or empty directory"
    )


def _lost_marker(p: Path) -> bool:
    """Whether ``p``, which has no marker, holds what a rankflow sweep or tracker writes
    (a manifest.json with a config hash): its marker was removed by hand."""
    if (p / LOCK).exists():
        return False
    try:
        manifest = json.loads((p / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "config_hash" in manifest


def _holder_line(h: dict) -> str:
    return f"pid {h.get('pid')} on {h.get('host')} ({h.get('command')}, since {h.get('started')})"


class WriterLock:
    """An exclusive claim on a directory, through its marker (see the module docstring):
    ``fresh`` when the directory was new or empty when taken, so that everything in it
    is this writer's."""

    def __init__(self, out: str | Path, kind: str):
        self.out, self.kind = Path(out), kind
        self.fresh = False
        self._fd: int | None = None
        self._made: list[Path] = []
        self._mark: dict = {"kind": kind}

    def acquire(self) -> WriterLock:
        """Check the directory (:func:`check_out`), create it if needed, lock it and write
        its marker; raise :class:`Busy` naming the holder when another process has it."""
        check_out(self.out, self.kind)
        missing = []
        p = self.out.absolute()
        while not p.exists():
            missing.append(p)
            p = p.parent
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            why = e.strerror or type(e).__name__
            for made in missing:  # the parents it did make, deepest first (empty)
                with contextlib.suppress(OSError):
                    made.rmdir()
            msg = f"--out: cannot create {self.out} ({why}); choose another directory"
            raise ConfigError(msg) from None
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
        command = " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:200]
        # What made the directory stays; a marker of an older rankflow gains what it lacks.
        made = {} if self.fresh else {k: old[k] for k in _MARK[1:] if old.get(k)}
        self._mark = {
            "kind": self.kind,
            "version": VERSION,
            "command": command,
            "id": secrets.token_hex(8),
        } | made
        self._write(
            self._mark
            | {
                "holder": {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "command": command,
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
        """Unlock, leaving the marker (kind, version, command, id; no holder)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self._write(self._mark)
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
    claim = WriterLock(out, kind).acquire()
    try:
        yield claim
    except BaseException:
        if not keep():
            claim.discard()
        raise
    finally:
        claim.release()
