"""Archives and binary files given to ``rankflow inspect`` (issue #41, item 6): a zip of a
model folder is read (its weights copied to a temporary folder, removed after; member
paths never name a place to write; declared sizes checked against the free space; a
member cannot inflate past its declared size), other archives are refused in one line
naming the command that unpacks them, and the file kind is told by magic bytes, so the
`STEP PATH` list parser never sees a binary file and a safetensors file without its suffix
is read by its header."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import build

from rankflow import cli
from rankflow.inspect import (
    InspectError,
    _archive,
    file_kind,
    inspect_checkpoint,
    is_series,
    series_sources,
    unpacked,
)


def _zip(folder: Path, archive: Path, prefix: str = "model/", extra=()) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(folder.iterdir()):
            z.write(f, prefix + f.name)
        for name, data in extra:
            z.writestr(name, data)
    return archive


@pytest.fixture
def model(tmp_path) -> Path:
    path, _, _ = build(tmp_path, arch="bert", layers=2, heads=4, d_model=32)
    return path


def test_a_zipped_model_folder_reads_as_the_folder(tmp_path, model, monkeypatch):
    """The same heads table to the last bit; the zip named in inspect.json; the temporary
    folder gone after; the other members (tokenizer, a second config elsewhere) ignored."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    extra = [("model/tokenizer.json", "{}"), ("model/1_Pooling/config.json", "{}")]
    archive = _zip(model, tmp_path / "m.zip", extra=extra)
    assert file_kind(archive) == "zip" and not is_series([str(archive)])
    plain = inspect_checkpoint(model, findings=False)
    zipped = inspect_checkpoint(archive, out=tmp_path / "out", findings=False)
    assert zipped.heads.equals(plain.heads)
    assert zipped.meta["checkpoint"] == str(archive.resolve()) and zipped.meta["archive"]
    assert zipped.meta["files"] == [f"{archive}:model.safetensors"]
    assert zipped.summary.splitlines()[0] == f"# rankflow inspect: {archive.resolve()}"
    assert list(tmp.iterdir()) == []  # the unpacked copy is removed
    cli_out = tmp_path / "cli"
    assert cli.main(["inspect", str(archive), "--out", str(cli_out), "--no-figures"]) == 0
    assert (cli_out / "inspect.json").is_file() and list(tmp.iterdir()) == []


def test_member_paths_never_name_where_to_write(tmp_path, model):
    """A zip whose only model folder is ``../../outside/``: read from the temporary
    folder under the members' base names; nothing appears outside."""
    archive = _zip(model, tmp_path / "evil.zip", prefix="../../outside/")
    with unpacked(archive) as folder:
        assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
        assert not (tmp_path.parent.parent / "outside").exists()
        assert not (Path.cwd().parent.parent / "outside").exists()
    assert not folder.exists()


def test_zip_refusals_in_one_line(tmp_path, model, monkeypatch):
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as z:
        for prefix in ("a/", "b/"):
            z.write(model / "model.safetensors", prefix + "model.safetensors")
    with pytest.raises(InspectError, match=r"weights in 2 folders \(a, b\).*unzip .* -d DIR"):
        inspect_checkpoint(two)
    none = tmp_path / "none.zip"
    with zipfile.ZipFile(none, "w") as z:
        z.writestr("model/config.json", "{}")
    with pytest.raises(InspectError, match="without a .safetensors file"):
        inspect_checkpoint(none)
    # declared sizes beyond the free space: refused before anything is copied
    monkeypatch.setattr(_archive.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 10))
    with pytest.raises(InspectError, match=r"needs 0\.00 GiB .* 0\.00 GiB free"):
        inspect_checkpoint(_zip(model, tmp_path / "m.zip"))


def test_a_member_cannot_inflate_past_its_declared_size(tmp_path):
    """A member whose declared size is a lie (smaller than its data): the copy holds at
    most the declared bytes and fails (zipfile's CRC check), never writes the rest."""
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("model.safetensors", b"\0" * 1_000_000)
    dest = tmp_path / "copy"
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo("model.safetensors")
        info.file_size = 1000
        with pytest.raises(zipfile.BadZipFile):
            _archive._copy(z, info, dest, archive)
    assert dest.stat().st_size <= 1000


@pytest.mark.parametrize("kind", ["tar", "tar.gz"])
def test_cli_refuses_a_tar_in_one_line_and_writes_nothing(tmp_path, model, capsys, kind):
    archive = tmp_path / f"m.{kind}"
    with tarfile.open(archive, "w:gz" if kind == "tar.gz" else "w") as t:
        t.add(model, arcname="model")
    out = tmp_path / "out"
    assert cli.main(["inspect", str(archive), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"tar -xf {archive} -C DIR" in err[0] and "rankflow inspect DIR" in err[0]
    assert "archive, not a checkpoint" in err[0] and "STEP PATH" not in err[0]
    assert not out.exists()


def test_the_list_parser_never_sees_a_binary_file(tmp_path, model):
    """A list file is text by its first bytes: a zip or random bytes are refused by the
    list parser in one line naming what they are; a safetensors file without a suffix is
    not a list but a checkpoint, read by its header."""
    archive = _zip(model, tmp_path / "m.zip")
    with pytest.raises(InspectError, match="a zip archive, not a list file of `STEP PATH`"):
        series_sources(archive)
    blob = tmp_path / "blob"
    blob.write_bytes(np.random.default_rng(0).bytes(3000))
    assert file_kind(blob) == "binary" and not is_series([str(blob)])
    with pytest.raises(InspectError, match="a binary file, not a list file"):
        series_sources(blob)
    weights = tmp_path / "weights"  # model.safetensors, renamed
    shutil.copy(model / "model.safetensors", weights)
    assert file_kind(weights) == "safetensors" and not is_series([str(weights)])
    assert len(inspect_checkpoint(weights, heads=4, findings=False).heads) == 2 * 2 * 4
    listing = tmp_path / "steps.txt"
    listing.write_text(f"0 {model}\n100 {model}\n")
    assert file_kind(listing) == "text" and is_series([str(listing)])
    assert series_sources(listing)[1] == [0, 100]


def test_kinds_by_magic_bytes_not_by_suffix(tmp_path, model):
    """A zip named ``.safetensors`` is read as the zip it is; a shard of an index that is
    a zip is called one, with the command that unpacks it."""
    fake = _zip(model, tmp_path / "m.zip").rename(tmp_path / "model.safetensors")
    assert file_kind(fake) == "zip"
    assert inspect_checkpoint(fake, findings=False).heads.equals(
        inspect_checkpoint(model, findings=False).heads
    )
    from rankflow.inspect import open_checkpoint
    from rankflow.inspect._checkpoint import _read_header

    with pytest.raises(InspectError, match="a zip archive, not a safetensors file.*unzip"):
        _read_header(fake)
    assert open_checkpoint(model).names  # the real one still opens
