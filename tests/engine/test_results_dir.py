"""A results directory has one writer and one identity (issue #14): two writers at
once, planted foreign / duplicate / stray chunks, ``--out`` on a folder that is not
rankflow's (for every subcommand that writes), reading with missing chunks, corrupt
directories, stale locks, callable losses' identity."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.config import callables
from rankflow.core import config as C
from rankflow.engine import store
from rankflow.engine.writer import LOCK, WriterLock

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
    "model": {"r": 2},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 4, "num": 3},
    "sweep": {"seed": [0, 1, 2, 3]},
}
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
[sweep]
seed = [0, 1, 2, 3]
"""

# One Python process imports rankflow once, then forks two `rankflow run` processes
# (cli.main) at the same moment for each round: the race is real (two processes, one
# new directory), without paying the import twice per round.
RACE = r"""
import json, os, sys
import rankflow.cli as cli

cli.build_parser()  # its imports, once: the children share them
config, base, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
ETAS = ("0.1", "0.05")

def child(eta, out, log):
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        rc = cli.main(["run", config, "--set", f"dynamics.eta={eta}", "--out", out,
                       "--chunk", "2", "--quiet"])
    except BaseException as e:
        print(repr(e), file=sys.stderr)
        rc = 99
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(rc)

def start(eta, out, log):
    pid = os.fork()
    if pid == 0:
        child(eta, out, log)
    return pid

results = {}
for eta in ETAS:  # each config's own uninterrupted table
    _, st = os.waitpid(start(eta, f"{base}/ref-{eta}", f"{base}/ref-{eta}.log"), 0)
    assert os.waitstatus_to_exitcode(st) == 0, open(f"{base}/ref-{eta}.log").read()
for r in range(rounds):
    out = f"{base}/round-{r}"
    pids = {eta: start(eta, out, f"{out}-{eta}.log") for eta in ETAS}
    rcs = {eta: os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for eta, p in pids.items()}
    results[r] = {eta: [rc, open(f"{out}-{eta}.log").read()] for eta, rc in rcs.items()}
print(json.dumps(results))
"""


def _snapshot(folder: Path) -> dict:
    """Every entry's bytes and mode, and the folder's mode."""
    out = {".": stat.S_IMODE(folder.stat().st_mode)}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = (
            p.read_bytes() if p.is_file() else None,
            stat.S_IMODE(p.stat().st_mode),
        )
    return out


def _model_folder(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    (model / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(256))
    os.chmod(model / "config.json", 0o640)
    os.chmod(model / "model.safetensors", 0o604)
    return model


@pytest.mark.slow
def test_two_writers_at_once_one_is_refused_the_other_is_its_own_table(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    rounds = 20
    res = subprocess.run(
        [sys.executable, "-c", RACE, str(config), str(tmp_path), str(rounds)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout.strip().splitlines()[-1])
    refs = {eta: rankflow.load(tmp_path / f"ref-{eta}") for eta in ("0.1", "0.05")}
    assert not refs["0.1"].equals(refs["0.05"])
    for r, by_eta in results.items():
        codes = sorted(rc for rc, _ in by_eta.values())
        assert codes == [0, 2], (r, by_eta)
        (winner,) = [eta for eta, (rc, _) in by_eta.items() if rc == 0]
        (loser,) = [eta for eta, (rc, _) in by_eta.items() if rc == 2]
        err = by_eta[loser][1].strip()
        assert len(err.splitlines()) == 1 and "is being written by pid" in err, (r, err)
        table = rankflow.load(tmp_path / f"round-{r}")
        pd.testing.assert_frame_equal(table, refs[winner])


def _plant(tmp_path):
    """A sweep of TINY in 4 chunks, beside another config's (η 0.05)."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    ref = rankflow.run(TINY, out=mine, chunk=1)
    rankflow.run(TINY, overrides={"dynamics.eta": 0.05}, out=other, chunk=1)
    chunks = mine / store.RESULTS
    # A foreign chunk: the right rows, written by someone else (no sweep identity).
    pd.read_parquet(chunks / "chunk-00001.parquet").to_parquet(chunks / "chunk-00001.parquet")
    # A chunk of another config, in place of chunk 2.
    shutil.copy(other / store.RESULTS / "chunk-00002.parquet", chunks / "chunk-00002.parquet")
    # Duplicates of chunk 0: under another index of the plan, and a second name for 0.
    shutil.copy(chunks / "chunk-00000.parquet", chunks / "chunk-00003.parquet")
    shutil.copy(chunks / "chunk-00000.parquet", chunks / "chunk-0000.parquet")
    # A stray: a copy of chunk 0 outside the plan.
    shutil.copy(chunks / "chunk-00000.parquet", chunks / "chunk-00099.parquet")
    return mine, ref


PLANTED = {
    "chunk-00001.parquet": "no sweep identity",
    "chunk-00002.parquet": "another config",
    "chunk-00003.parquet": "copy of chunk 0",
    "chunk-0000.parquet": "a second file for chunk 0",
    "chunk-00099.parquet": "outside the plan",
}


def test_planted_chunks_are_named_and_never_included(tmp_path, capsys):
    mine, ref = _plant(tmp_path)
    with pytest.warns(UserWarning) as caught:
        df = rankflow.load(mine)
    text = " ".join(str(w.message) for w in caught)
    for name, why in PLANTED.items():
        assert f"{name} " in text and why in text.split(name, 1)[1], (name, text)
    assert "3 of 4 chunks missing" in text and "3 of 4 runs absent" in text
    pd.testing.assert_frame_equal(df, ref[ref["run_id"] == 0].reset_index(drop=True))
    with pytest.raises(store.ResultsError, match="chunk-00001.parquet"):
        rankflow.load(mine, strict=True)

    capsys.readouterr()
    resumed = rankflow.run(TINY, out=mine, chunk=1, resume=True)
    err = capsys.readouterr().err
    for name, why in PLANTED.items():
        assert name in err and why in err.split(name, 1)[1], (name, err)
    pd.testing.assert_frame_equal(resumed, ref)
    with pytest.warns(UserWarning, match="chunk-00099.parquet") as caught:
        pd.testing.assert_frame_equal(rankflow.load(mine), ref)
    assert "missing" not in " ".join(str(w.message) for w in caught)


def _writers(model: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every subcommand that writes a directory, aimed at ``model``."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    return {
        "run": ["run", str(config), "--out", str(model)],
        "sweep": ["sweep", str(config), "--out", str(model)],
        "compare": ["compare", str(ROOT / "sims" / "compare_gd.toml"), "--out", str(model)],
        "attention train": [
            "attention",
            "train",
            str(ROOT / "sims" / "attention" / "rank.toml"),
            "--out",
            str(model),
        ],
        "inspect": ["inspect", str(model), "--out", str(model)],
        "reproduce": ["reproduce", "--quick", "--only", "toy", "--out", str(model)],
        "demo": ["demo", "--out", str(model)],
    }


def test_out_on_a_model_folder_is_refused_and_left_unchanged(tmp_path, capsys):
    model = _model_folder(tmp_path)
    before = _snapshot(model)
    for name, argv in _writers(model, tmp_path).items():
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, (name, err)
        assert "holds config.json (not made by rankflow)" in err, err
        assert _snapshot(model) == before, name
    # The Python API's out= as well.
    from rankflow.compare import compare
    from rankflow.inspect import inspect_checkpoint
    from rankflow.reproduce import reproduce

    for call in (
        lambda: rankflow.run(TINY, out=model),
        lambda: compare(ROOT / "sims" / "compare_gd.toml", out=model),
        lambda: inspect_checkpoint(model, out=model),
        lambda: reproduce(model, only=["toy"]),
    ):
        with pytest.raises(rankflow.ConfigError, match=r"not made by rankflow"):
            call()
        assert _snapshot(model) == before


def test_out_a_file_or_under_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for name, argv in _writers(f, tmp_path).items():
        if name == "inspect":
            argv[1] = str(tmp_path)
        for out, what in ((f, "is a file"), (f / "sub", "is under a file")):
            argv[argv.index("--out") + 1] = str(out)
            assert cli.main(argv) == 2, name
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and what in err, (name, err)
    assert f.read_text() == "mine"


def test_a_rankflow_directory_of_another_kind_is_refused(tmp_path, capsys):
    out = tmp_path / "sweep"
    rankflow.run(TINY, out=out)
    config = ROOT / "sims" / "compare_gd.toml"
    assert cli.main(["compare", str(config), "--out", str(out)]) == 2
    assert "holds rankflow sweep results, not compare" in capsys.readouterr().err


def test_a_failure_before_the_first_chunk_leaves_no_directory(tmp_path):
    def broken(W):
        raise ValueError("broken loss")

    cfg = {"problem": {"kind": "custom", "loss": broken, "m": 3, "n": 3}, "save": {"num": 3}}
    out = tmp_path / "a" / "b"
    with pytest.raises(Exception, match="broken loss"):
        rankflow.run(cfg, out=out)
    assert not (tmp_path / "a").exists()
    rankflow.run(TINY, out=out)  # the corrected rerun
    assert (out / store.MANIFEST).exists()


def test_a_held_directory_is_refused_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "d"
    claim = WriterLock(out, "sweep").acquire()
    try:
        config = tmp_path / "tiny.toml"
        config.write_text(TINY_TOML)
        assert cli.main(["run", str(config), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert f"is being written by pid {os.getpid()}" in err and len(err.splitlines()) == 1
    finally:
        claim.release()
    mark = json.loads((out / LOCK).read_text())
    assert mark["kind"] == "sweep" and "holder" not in mark


def test_a_stale_lock_is_reported_and_taken_over(tmp_path, capsys):
    out = tmp_path / "d"
    out.mkdir()
    holder = {"pid": 999999, "host": "elsewhere", "command": "rankflow run x", "started": "t"}
    (out / LOCK).write_text(json.dumps({"kind": "sweep", "holder": holder}))
    df = rankflow.run(TINY, out=out)
    err = capsys.readouterr().err
    assert "taking over from pid 999999 on elsewhere" in err
    pd.testing.assert_frame_equal(rankflow.load(out), df)


def test_missing_chunks_warn_with_the_count_and_raise_when_strict(tmp_path, capsys):
    out = tmp_path / "d"
    rankflow.run(TINY, out=out, chunk=1)
    (out / store.RESULTS / "chunk-00002.parquet").unlink()
    with pytest.warns(UserWarning, match=r"1 of 4 chunks missing \(chunk-00002\): 1 of 4 runs"):
        df = rankflow.load(out)
    assert sorted(df["run_id"].unique()) == [0, 1, 3]
    with pytest.raises(store.ResultsError, match="1 of 4 runs absent"):
        rankflow.load(out, strict=True)
    assert cli.main(["plot", str(out), "--out", str(tmp_path / "fig.png")]) == 0
    err = capsys.readouterr().err
    assert "rankflow: warning:" in err and "1 of 4 runs absent" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_attention_load_warns_on_a_missing_chunk(tmp_path):
    import rankflow.attention as ra

    cfg = {
        "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
        "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4},
        "dynamics": {"kind": "sgd", "eta": 0.1, "batch": 4},
        "train": {"eval_every": 10},
        "save": {"t1": 20},
        "sweep": {"seed": [0, 1]},
    }
    out = tmp_path / "att"
    ra.run(cfg, out=out, chunk=1)
    (out / "loss.parquet" / "chunk-00001.parquet").unlink()
    (out / store.RESULTS / "chunk-00001.parquet").unlink()
    with pytest.warns(UserWarning, match="1 of 2 runs absent"):
        res = ra.load(out)
    assert list(res.loss["run_id"].unique()) == [0]
    with pytest.raises(store.ResultsError, match="1 of 2 chunks missing"):
        ra.load(out, strict=True)


def test_corrupt_or_missing_directories_are_one_line(tmp_path, capsys):
    good = tmp_path / "good"
    rankflow.run(TINY, out=good, chunk=2)
    cases = {"missing": tmp_path / "nowhere", "empty": tmp_path / "empty"}
    cases["empty"].mkdir()
    for name in ("manifest", "table_file", "chunk", "chunks_text", "format_text", "chunk_dir"):
        shutil.copytree(good, tmp_path / name)
        cases[name] = tmp_path / name
    (cases["manifest"] / store.MANIFEST).write_text("{not json")
    shutil.rmtree(cases["table_file"] / store.RESULTS)
    (cases["table_file"] / store.RESULTS).write_text("a file")
    (cases["chunk"] / store.RESULTS / "chunk-00001.parquet").write_bytes(b"PAR1 garbage")
    # A hand-edited manifest (issue #34: a bare TypeError before).
    for name, key, value in (("chunks_text", "chunks", "84"), ("format_text", "format", "x")):
        manifest = json.loads((cases[name] / store.MANIFEST).read_text())
        (cases[name] / store.MANIFEST).write_text(json.dumps(manifest | {key: value}))
    chunk = cases["chunk_dir"] / store.RESULTS / "chunk-00001.parquet"
    chunk.unlink()
    chunk.mkdir()
    said = {
        "chunks_text": f'{store.MANIFEST}: corrupt manifest (chunks = "84" is not a count)',
        "format_text": f'{store.MANIFEST}: corrupt manifest (format = "x" is not a count)',
        "chunk_dir": "chunk-00001.parquet: is a directory, not a chunk file; remove it",
    }
    for name, path in cases.items():
        with pytest.raises(store.ResultsError, match=str(path)) as e:
            rankflow.load(path)
        assert said.get(name, "") in str(e.value), str(e.value)
        assert cli.main(["plot", str(path), "--out", str(tmp_path / "f.png")]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err, (name, err)
        assert cli.main(["attention", "plot", "rank", str(path), "--out", "f.png"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err, (name, err)


def test_a_deleted_lock_is_named_and_load_still_reads_the_folder(tmp_path, capsys):
    """Issue #34: ``load`` reads a folder whose ``.rankflow.lock`` was deleted by hand
    (the marker says who may write it; the manifest and chunks say what it holds), and
    writing into it again is refused in one line naming the marker and how to restore
    it; restored so, the sweep resumes."""
    out = tmp_path / "d"
    table = rankflow.run(TINY, out=out, chunk=2)
    (out / LOCK).unlink()
    pd.testing.assert_frame_equal(rankflow.load(out), table)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_TOML)
    argv = ["run", str(config), "--out", str(out), "--chunk", "2", "--resume", "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / LOCK} is missing" in err, err
    fix = err.split("recreate the marker: ")[1].strip()
    assert fix == f"""echo '{{"kind": "sweep"}}' > {out / LOCK}""", fix
    subprocess.run(fix, shell=True, check=True)
    assert cli.main(argv) == 0
    assert "2 chunks resumed" in capsys.readouterr().out


def test_callable_losses_are_identified_by_their_code():
    base = {"problem": {"kind": "custom", "m": 3, "n": 3}}

    def cfg(loss):
        return {**base, "problem": {**base["problem"], "loss": loss}}

    def h(loss):
        return store.config_hash(C.to_json(C.resolve(cfg(loss))))

    a = lambda W: 0.5 * (W**2).sum()  # noqa: E731
    b = lambda W: 0.3 * (W**2).sum()  # noqa: E731
    a2 = lambda W: 0.5 * (W**2).sum()  # noqa: E731 - the same code as a
    assert h(a) != h(b) and h(a) == h(a2)
    T = np.eye(3)
    c = lambda W: ((W - T) ** 2).sum()  # noqa: E731
    T = 2 * np.eye(3)  # noqa: F841 - the closure reads the new value
    assert h(c) != h(lambda W: ((W - np.eye(3)) ** 2).sum())
    assert callables.callable_identity(len).endswith(callables.UNHASHABLE_CODE)


def test_a_sweep_of_an_unhashable_loss_is_not_resumable(tmp_path):
    class Scale:  # an object whose content the code hash cannot see
        k = 0.5

    scale = Scale()
    loss = lambda W: scale.k * (W**2).sum()  # noqa: E731
    cfg = {"problem": {"kind": "custom", "loss": loss, "m": 3, "n": 3}, "save": {"num": 3}}
    out = tmp_path / "d"
    rankflow.run(cfg, out=out)
    with pytest.raises(rankflow.ConfigError, match="cannot be resumed.*cannot be hashed"):
        rankflow.run(cfg, out=out, resume=True)
