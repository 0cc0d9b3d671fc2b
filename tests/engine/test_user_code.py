"""A results folder's identity covers the user's code (issue #34): a custom loss's own
code and every helper function, class, module-level constant and user module it reaches
(:mod:`rankflow.config.usercode`). Editing any of them between two ``--resume`` runs is
refused in one line naming the function and the file, and the folder stays byte for
byte as it was; an unchanged loss resumes to exactly the uninterrupted table."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.config.usercode import code_changes, code_record
from rankflow.engine import store
from rankflow.engine.execute import not_resumable

HELPERS = """
OFFSET = 1.0

def shift(W):
    return W + OFFSET
"""
LOSSES = """
import jax.numpy as jnp
import {helpers} as helpers

SCALE = 0.5
TARGET = (1.0, 2.0, 3.0)


def helper(W):
    return jnp.sum((W - jnp.asarray(TARGET).reshape(W.shape)) ** 2)


def loss(W):
    return SCALE * helper(W) + 0.1 * jnp.sum(helpers.shift(W) ** 2)


def unrelated(W):
    return 0.0
"""
# (file, old, new, the part named): each edit changes what the loss computes.
EDITS = [
    ("losses", "return SCALE * helper(W)", "return 0.7 * SCALE * helper(W)", "loss"),
    ("losses", "jnp.sum((W - ", "jnp.sum((2 * W - ", "helper"),
    ("losses", "SCALE = 0.5", "SCALE = 0.6", "SCALE"),
    ("losses", "TARGET = (1.0, 2.0, 3.0)", "TARGET = (1.0, 2.0, 3.5)", "TARGET"),
    ("helpers", "OFFSET = 1.0", "OFFSET = 2.0", "OFFSET"),
    ("helpers", "return W + OFFSET", "return W - OFFSET", "shift"),
]
# Edits that change nothing the loss computes.
NOT_CHANGES = [
    ("losses", "def unrelated(W):\n    return 0.0", "def unrelated(W):\n    return 1.0"),
    ("losses", "SCALE = 0.5", "SCALE = 0.5  # a comment"),
]


class Modules:
    """A user's two modules in a folder on ``sys.path``, named uniquely per test,
    imported afresh (no bytecode cache: an edit of the same size within a second would
    otherwise be read from a stale one) after every edit."""

    def __init__(self, folder: Path, tag: str):
        self.folder, self.tag = folder, tag
        self.names = {"losses": f"losses_{tag}", "helpers": f"helpers_{tag}"}
        self.texts = {"losses": LOSSES.format(helpers=self.names["helpers"]), "helpers": HELPERS}
        for kind in self.texts:
            self.write(kind, self.texts[kind])

    def path(self, kind: str) -> Path:
        return self.folder / f"{self.names[kind]}.py"

    def write(self, kind: str, text: str) -> None:
        self.path(kind).write_text(text)
        for name in self.names.values():
            sys.modules.pop(name, None)
        importlib.invalidate_caches()

    def edit(self, kind: str, old: str, new: str) -> None:
        assert old in self.texts[kind]
        self.write(kind, self.texts[kind].replace(old, new))

    def restore(self) -> None:
        for kind in self.texts:
            self.write(kind, self.texts[kind])

    def loss(self):
        return importlib.import_module(self.names["losses"]).loss


@pytest.fixture
def modules(tmp_path, monkeypatch, request):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    mods = Modules(tmp_path, request.node.name.replace("[", "_").replace("]", "")[-24:])
    yield mods
    for name in mods.names.values():
        sys.modules.pop(name, None)


def _snapshot(folder: Path) -> dict:
    """Every entry's bytes and mode."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
    }


def test_every_edit_the_loss_reaches_changes_its_record_and_names_the_part(modules):
    base = {"problem.loss": code_record(modules.loss(), "losses:loss")}
    assert set(base["problem.loss"]["parts"]) == {
        f"{modules.names['losses']}.{n}" for n in ("loss", "helper", "SCALE", "TARGET")
    } | {f"{modules.names['helpers']}.{n}" for n in ("shift", "OFFSET")}
    modules.restore()
    assert code_record(modules.loss(), "losses:loss") == base["problem.loss"]  # stable
    for kind, old, new, part in EDITS:
        modules.restore()
        modules.edit(kind, old, new)
        said = code_changes(base, {"problem.loss": code_record(modules.loss(), "losses:loss")})
        assert said == (
            f"problem.loss (changed: {modules.names[kind]}.{part} in {modules.path(kind)})"
        ), (part, said)
    for kind, old, new in NOT_CHANGES:
        modules.restore()
        modules.edit(kind, old, new)
        again = {"problem.loss": code_record(modules.loss(), "losses:loss")}
        assert code_changes(base, again) is None and again == base, old


def test_a_value_the_hash_cannot_read_makes_the_sweep_not_resumable(modules):
    lock = threading.Lock()

    def loss(W):
        return (W**2).sum() if lock else 0.0

    record = code_record(loss, "loss")
    assert "_thread.lock" in record["unhashable"]
    why = not_resumable({}, {"problem.loss = loss": record})
    assert why.startswith("problem.loss = loss reaches a _thread.lock object")


def test_a_chunk_of_another_code_version_is_foreign(tmp_path):
    ident = store.Identity("h", 1, 2, code="aaaa")
    df = pd.DataFrame({"run_id": [0], "path": [0], "t": [0.0]})
    f = store.write_chunk(tmp_path, 0, df, ident=store.Identity("h", 1, 2, code="bbbb"))
    assert "another version of the custom loss" in store.chunk_problem(f, 0, ident)
    g = store.write_chunk(tmp_path, 1, df, ident=ident)
    assert store.chunk_problem(g, 1, ident) is None


def test_resume_after_an_edit_is_refused_in_one_line_and_leaves_the_folder_unchanged(
    tmp_path, modules, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "custom.toml"
    config.write_text(
        f'[problem]\nkind = "custom"\nloss = "{modules.names["losses"]}:loss"\nm = 3\nn = 1\n'
        '[model]\nr = 1\n[dynamics]\nkind = "gd"\neta = 0.1\n[save]\nt1 = 2\nnum = 3\n'
        "[sweep]\nseed = [0, 1, 2]\n"
    )
    argv = ["run", str(config), "--out", "out", "--chunk", "1", "--quiet"]
    assert cli.main(argv) == 0
    whole = rankflow.load("out")
    (tmp_path / "out" / store.RESULTS / "chunk-00002.parquet").unlink()  # as if stopped
    before = _snapshot(tmp_path / "out")
    capsys.readouterr()
    for kind, old, new, part in EDITS:
        modules.restore()
        modules.edit(kind, old, new)
        assert cli.main([*argv, "--resume"]) == 2, part
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rankflow: error: --out: out was run"), err
        assert f"{modules.names[kind]}.{part} in {modules.path(kind).name}" in err, err
        assert f"problem.loss = {modules.names['losses']}:loss" in err, err
        assert "--out NEW" in err and "delete out" in err, err
        assert _snapshot(tmp_path / "out") == before, part
    modules.restore()
    modules.edit(*NOT_CHANGES[0][:3])  # not a change: resumes
    assert cli.main([*argv, "--resume"]) == 0, capsys.readouterr().err
    assert "2 chunks resumed" in capsys.readouterr().out
    pd.testing.assert_frame_equal(rankflow.load("out"), whole, check_exact=True)


def test_python_api_refuses_a_changed_global_and_a_folder_without_code_records(tmp_path, modules):
    """A notebook's case: the loss's module-level value changed in memory, not on disk;
    then a folder of an earlier rankflow, whose manifest records no code."""
    mod = importlib.import_module(modules.names["losses"])
    cfg = {
        "problem": {"kind": "custom", "loss": mod.loss, "m": 3, "n": 1},
        "model": {"r": 1},
        "dynamics": {"kind": "gd", "eta": 0.1},
        "save": {"t1": 2, "num": 3},
    }
    out = tmp_path / "o"
    rankflow.run(cfg, out=out)
    before = _snapshot(out)
    mod.SCALE = 0.75
    with pytest.raises(rankflow.ConfigError, match=r"changed: losses_.*\.SCALE in .*losses_"):
        rankflow.run(cfg, out=out, resume=True)
    assert _snapshot(out) == before
    mod.SCALE = 0.5
    manifest = store.read_manifest(out)
    del manifest["code"]
    (out / store.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(rankflow.ConfigError, match=r"manifest.json records no version of"):
        rankflow.run(cfg, out=out, resume=True)
