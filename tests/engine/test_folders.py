"""A folder is rankflow's only if rankflow made it (its ``.rankflow.lock`` marker says
so), whatever names it holds; and a rerun into its own folder replaces its previous
outputs as a whole (issue #32, item 1).

Found by a hostile-input battery: ``rankflow reproduce --out proj`` on a user's project
folder holding ``report.md`` and ``runs/`` overwrote the user's ``report.md``, because
rankflow recognised its folders by the names in them; and an ``inspect --spectra`` into a
folder left ``spectra.parquet`` beside a later ``inspect``'s tables of another
checkpoint."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, build

from rankflow import cli
from rankflow.engine import store
from rankflow.engine.writer import LOCK

TINY_TOML = """
[problem]
kind = "diagonal"
singular_values = [1.0, 0.5]
[model]
r = 2
[dynamics]
kind = "gd"
eta = 0.1
[save]
t1 = 4
num = 3
"""
COMPARE = {
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
    "model": {"r": 2},
    "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
    "save": {"t1": 20, "num": 3},
}
SMALL = {"compare.halvings": 1, "compare.window": 3}


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` (hidden ones too): a file's bytes, None for a folder."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's own project folder ``proj`` (cwd ``tmp_path``), with the names a
    ``reproduce`` folder holds, and what the writers below read."""
    proj = tmp_path / "proj"
    (proj / "runs" / "exp1").mkdir(parents=True)
    (proj / "report.md").write_text("# My experiments\n\nNotes I care about.\n")
    (proj / "runs" / "exp1" / "metrics.csv").write_text("step,loss\n0,1.0\n1,0.5\n")
    (proj / "train.py").write_text("print('training')\n")
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    build(tmp_path, arch="bert", layers=2, heads=4, d_model=16)  # tmp_path/ckpt
    monkeypatch.chdir(tmp_path)
    return proj


WRITERS = {
    "reproduce": ["reproduce", "--quick", "--only", "toy"],
    "inspect": ["inspect", "ckpt"],
    "compare": ["compare", str(ROOT / "sims" / "compare_gd.toml")],
    "run": ["run", "tiny.toml"],
    "attention train": ["attention", "train", str(ROOT / "sims" / "attention" / "rank.toml")],
}


@pytest.mark.parametrize("argv", WRITERS.values(), ids=WRITERS.keys())
def test_a_users_project_folder_is_refused_and_left_unchanged(project, capsys, argv):
    before = _tree(project)
    capsys.readouterr()
    status = cli.main([*argv, "--out", "proj"])
    out, err = capsys.readouterr()
    assert status != 0
    assert err.count("\n") == 1 and "Traceback" not in out + err, err
    assert err.strip() == (
        "rankflow: error: --out: proj holds report.md (not made by rankflow); "
        "choose a new or empty directory"
    )
    assert _tree(project) == before  # every byte as it was, and nothing new


def test_the_python_api_refuses_it_too(project):
    from rankflow.config.fields import ConfigError
    from rankflow.reproduce import reproduce

    before = _tree(project)
    with pytest.raises(ConfigError, match=r"^--out: proj holds report\.md \(not made by"):
        reproduce("proj", only=["toy"], quiet=True)
    assert _tree(project) == before


def test_inspect_folders_carry_the_marker_and_are_written_again(tmp_path, capsys):
    """The marker records kind, version, command and id (the id stays across reruns);
    a marker of an older rankflow (the kind alone) still marks the folder; a folder with
    an inspection's files and no marker is not rankflow's."""
    a, _, _ = build(tmp_path, name="a", arch="bert", layers=2, heads=4, d_model=16)
    out = tmp_path / "out"
    argv = ["inspect", str(a), "--out", str(out), "--no-figures", "--quiet"]
    assert cli.main(argv) == 0
    mark = json.loads((out / LOCK).read_text())
    assert mark["kind"] == "inspect" and "holder" not in mark
    assert re.fullmatch(r"[0-9a-f]{16}", mark["id"]) and mark["version"]
    assert mark["command"]  # the process's command line (here, pytest's)
    assert cli.main(argv) == 0
    assert json.loads((out / LOCK).read_text())["id"] == mark["id"]

    (out / LOCK).write_text(json.dumps({"kind": "inspect"}))  # an older rankflow's
    assert cli.main(argv) == 0
    assert json.loads((out / LOCK).read_text())["kind"] == "inspect"

    (out / LOCK).unlink()
    before = _tree(out)
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert f"holds {min(before)} (not made by rankflow)" in capsys.readouterr().err
    assert _tree(out) == before


def test_inspect_rerun_replaces_the_spectra_of_the_previous_checkpoint(tmp_path):
    a, _, _ = build(tmp_path, name="a", arch="bert", layers=2, heads=4, d_model=16)
    b, _, _ = build(tmp_path, name="b", arch="gpt2", layers=1, heads=2, d_model=16, seed=1)
    out = tmp_path / "out"
    common = ["--out", str(out), "--no-figures", "--quiet"]
    assert cli.main(["inspect", str(a), "--spectra", *common]) == 0
    assert {"spectra.parquet", "spectra.csv", "spectra_sv.parquet"} <= _files(out)
    assert cli.main(["inspect", str(b), *common]) == 0
    assert not [n for n in _files(out) if n.startswith("spectra")]
    meta = json.loads((out / "inspect.json").read_text())
    assert _files(out) == {*meta["outputs"], "inspect.json"}
    assert pd.read_parquet(out / "heads.parquet")["layer"].max() == 0  # b's one layer


def test_write_outputs_removes_what_the_previous_run_listed_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    df = pd.DataFrame({"x": [1, 2]})
    store.write_outputs(out, "m.json", {}, {"a.parquet": df, "b.csv": df, "c.md": "c"})
    (out / "mine.txt").write_text("a file the user put here")

    def broken():
        raise RuntimeError("figure failed")

    # A run that fails keeps the old files, and the list, for the rerun to remove.
    with pytest.raises(RuntimeError, match="figure failed"):
        store.write_outputs(out, "m.json", {}, {"a.parquet": df}, broken)
    assert not (out / "m.json").exists() and (out / "b.csv").exists()
    store.write_outputs(out, "m.json", {}, {"a.parquet": df})
    assert sorted(os.listdir(out)) == ["a.parquet", "m.json", "mine.txt"]

    # A listing that names a hidden file, a directory or a path out of the folder
    # removes none of them.
    (out / "sub").mkdir()
    (tmp_path / "outside.txt").write_text("x")
    (out / ".hidden").write_text("x")
    listed = ["../outside.txt", "sub", ".hidden", str(tmp_path / "outside.txt")]
    (out / "m.json").write_text(json.dumps({"outputs": listed}))
    store.write_outputs(out, "m.json", {}, {"a.parquet": df})
    assert (tmp_path / "outside.txt").exists() and (out / "sub").is_dir()
    assert (out / ".hidden").exists()


def test_compare_rerun_without_figures_leaves_no_figure(tmp_path):
    import rankflow
    from rankflow.compare import compare, write

    tables = compare(COMPARE, overrides=SMALL)
    meta = {
        "optimizer": rankflow.resolve(COMPARE),
        "compare": {"halvings": 1},
        "flow": rankflow.resolve(COMPARE, {"dynamics.kind": "gradient_flow"}),
    }

    def figures(tables, out):
        (Path(out) / "trajectory.png").write_bytes(b"png")
        return [Path(out) / "trajectory.png"]

    out = write(tmp_path / "cmp", tables, meta, figures)
    assert "trajectory.png" in json.loads((out / "config.json").read_text())["outputs"]
    write(out, tables, meta)
    assert not (out / "trajectory.png").exists()
    listed = json.loads((out / "config.json").read_text())["outputs"]
    assert _files(out) == {*listed, "config.json"}


def test_reproduce_rerun_replaces_tables_figures_and_report(tmp_path):
    """``--only toy`` then ``--only pretrained``: the second's report stands alone, no
    table or figure of toy beside it, while toy's sweep stays in runs/ to resume."""
    ckpt, _, _ = build(tmp_path, arch="bert", layers=2, heads=4, d_model=16)
    out = tmp_path / "rep"
    assert cli.main(["reproduce", "--quick", "--only", "toy", "--out", str(out), "--quiet"]) == 0
    assert (out / "tables" / "toy_rates.csv").is_file()
    assert (out / "figures" / "toy_balance.png").is_file()
    argv = ["reproduce", "--quick", "--only", "pretrained", "--out", str(out), "--quiet"]
    # A rerun that fails midway leaves the previous run's outputs as they were.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"not a checkpoint")
    before = _tree(out)
    assert cli.main([*argv, "--checkpoint", str(tmp_path / "bad")]) != 0
    assert {k: v for k, v in _tree(out).items() if not k.startswith("runs")} == {
        k: v for k, v in before.items() if not k.startswith("runs")
    }
    assert cli.main([*argv, "--checkpoint", str(ckpt)]) == 0
    left = [p.name for d in ("tables", "figures") for p in (out / d).iterdir()]
    assert left and not [n for n in left if n.startswith("toy")], left
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert set(claims["experiment"]) == {"pretrained"}
    assert "toy." not in (out / "report.md").read_text()
    assert any((out / "runs" / "quick" / "toy").rglob("chunk-*.parquet"))
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [LOCK]
