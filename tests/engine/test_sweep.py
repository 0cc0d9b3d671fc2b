"""Sweeps at scale: chunks, resume after SIGKILL, devices, SLURM (submitit's local
executor: real subprocesses), compile counts, corrupt chunks, the compilation cache."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.core import config as C
from rankflow.core.family import default_chunk_size, plan
from rankflow.core.program import TRACE_COUNTS, program_for
from rankflow.engine import store

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "problem": {"kind": "sensing", "m": 6, "n": 5, "rank": 2, "samples": 40},
    "model": {"r": 3},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 40, "num": 5},
    "sweep": {"dynamics.lam": [0.0, 0.05, 0.1], "seed": [0, 1, 2]},
}


def _write_config(path: Path, cfg: dict) -> Path:
    lines = []
    for sec, body in cfg.items():
        if not isinstance(body, dict):
            lines.append(f"{sec} = {json.dumps(body)}")
    for sec, body in cfg.items():
        if isinstance(body, dict):
            lines.append(f"[{sec}]")
            lines += [f'"{k}" = {json.dumps(v)}' for k, v in body.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _rankflow(*args, env=None, **kw):
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "rankflow.cli", *args],
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_chunked_equals_unchunked_and_pads_to_one_shape(tmp_path):
    whole = rankflow.run(SMALL)
    chunked = rankflow.run(SMALL, out=tmp_path, chunk=4)
    pd.testing.assert_frame_equal(whole, chunked, check_categorical=False)
    _, chunks = plan(C.resolve(SMALL), 4)
    assert [c.rows for c in chunks] == [4, 4, 1] and {c.pad_to for c in chunks} == {4}
    assert len(list((tmp_path / "results.parquet").glob("chunk-*.parquet"))) == 3


def test_default_chunk_bounds_memory():
    small = C.expand(C.resolve(SMALL))[0]
    big = C.expand(
        C.resolve(SMALL | {"problem": {"kind": "sensing", "m": 200, "n": 200, "samples": 4000}})
    )[0]
    assert default_chunk_size(small) == 1024
    assert 1 <= default_chunk_size(big) < 16  # 4000 × 200 × 200 measurements per run


@pytest.mark.slow
def test_200_config_sweep_compiles_each_structure_once(tmp_path):
    cfg = {
        "problem": {"kind": "diagonal", "singular_values": [0.3, 0.6, 0.9]},
        "save": {"t1": 23, "num": 24},  # structures no other test compiles
        "dynamics": {"eta": 0.1},
        "sweep": {
            "dynamics.kind": ["gd", "momentum"],
            "dynamics.lam": list(np.linspace(0.0, 0.1, 20)),
            "seed": list(range(5)),
        },
    }
    points = C.expand(C.resolve(cfg))
    keys = {program_for(p).key for p in points}
    assert len(points) == 200 and len(keys) == 2
    df = rankflow.run(cfg, out=tmp_path, chunk=32)  # 4 chunks per structure, last padded
    assert df["run_id"].nunique() == 200
    assert [TRACE_COUNTS[k] for k in keys] == [1, 1]


def test_resume_refuses_another_config_and_names_the_difference(tmp_path):
    rankflow.run(SMALL, out=tmp_path)
    other = SMALL | {"dynamics": {"kind": "gd", "eta": 0.2}}
    with pytest.raises(rankflow.ConfigError, match=r"^--out: .*dynamics\.eta = 0\.2 here"):
        rankflow.run(other, out=tmp_path, resume=True)
    with pytest.raises(rankflow.ConfigError, match="pass --resume"):
        rankflow.run(SMALL, out=tmp_path)


def test_corrupt_and_partial_chunks_are_detected_redone_and_reported(tmp_path, capsys):
    ref = rankflow.run(SMALL, out=tmp_path, chunk=3)
    files = sorted((tmp_path / "results.parquet").glob("chunk-*.parquet"))
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated
    df = pd.read_parquet(files[1])
    df.iloc[:5].to_parquet(files[1])  # readable, but rows missing
    (tmp_path / "results.parquet" / ".chunk-00002.parquet.x.tmp").write_text("junk")
    again = rankflow.run(SMALL, out=tmp_path, chunk=3, resume=True)
    err = capsys.readouterr().err
    assert "chunk-00000.parquet was corrupt" in err and "chunk-00001.parquet" in err
    pd.testing.assert_frame_equal(ref, again)
    assert not list((tmp_path / "results.parquet").glob(".*"))


def test_sigkill_mid_sweep_then_resume_gives_exactly_the_uninterrupted_rows(tmp_path):
    cfg = SMALL | {
        "save": {"t1": 3000, "num": 31},
        "sweep": {"dynamics.lam": list(np.linspace(0.0, 0.1, 12)), "seed": [0, 1]},
    }
    path = _write_config(tmp_path / "sweep.toml", cfg)
    out = tmp_path / "killed"
    # Per-chunk work is made slow enough that the kill lands mid-sweep.
    proc = _rankflow("run", str(path), "--out", str(out), "--chunk", "1")
    chunk_dir = out / "results.parquet"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(chunk_dir.glob("chunk-*.parquet"))) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(list(chunk_dir.glob("chunk-*.parquet")))
    assert 3 <= n_before < 24, "the kill must land mid-sweep"
    resumed = _rankflow("run", str(path), "--out", str(out), "--chunk", "1", "--resume")
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert f"{n_before} chunks resumed" in stdout
    ref = rankflow.run(cfg, chunk=1)
    pd.testing.assert_frame_equal(rankflow.load(out), ref, check_categorical=False)


@pytest.mark.slow
def test_one_and_four_devices_give_identical_tables(tmp_path):
    path = _write_config(tmp_path / "sweep.toml", SMALL)
    tables = []
    for devices in (1, 4):
        out = tmp_path / f"dev{devices}"
        flags = f"--xla_force_host_platform_device_count={devices}"
        proc = _rankflow(
            "run", str(path), "--out", str(out), "--chunk", "5", env={"XLA_FLAGS": flags}
        )
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        tables.append(rankflow.load(out))
    code = "import jax; print(jax.device_count())"
    n = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    )
    assert n.stdout.strip() == "4"
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)


def test_submitit_local_executor_runs_a_two_job_array_into_one_directory(tmp_path):
    pytest.importorskip("submitit")
    df = rankflow.run(
        SMALL,
        out=tmp_path,
        chunk=5,
        executor="submitit",
        slurm={"cluster": "local", "jobs": 2, "time": 5},
    )
    logs = list((tmp_path / "submitit").glob("*_result.pkl"))
    assert len(logs) == 2  # two array tasks ran as real subprocesses
    pd.testing.assert_frame_equal(df, rankflow.run(SMALL), check_categorical=False)
    pd.testing.assert_frame_equal(rankflow.load(tmp_path), df)


@pytest.mark.slow
def test_compilation_cache_serves_a_new_process(tmp_path):
    path = _write_config(tmp_path / "c.toml", SMALL | {"save": {"t1": 17, "num": 18}})
    env = {"RANKFLOW_CACHE_DIR": str(tmp_path / "cache")}
    for i in range(2):
        proc = _rankflow("run", str(path), "--out", str(tmp_path / f"o{i}"), env=env)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        entries = sorted(p.name for p in (tmp_path / "cache").iterdir())
        if i == 0:
            first = entries
    assert first and entries == first  # the second process compiled nothing new


def test_cli_summary_and_plot(tmp_path, capsys):
    path = _write_config(tmp_path / "c.toml", SMALL)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("9 runs (0 diverged, 0 max_steps) in") and "runs/s" in line
    fig = tmp_path / "gap.png"
    assert (
        cli.main(
            ["plot", str(tmp_path / "o"), "--hue", "dynamics.lam", "--logy", "--out", str(fig)]
        )
        == 0
    )
    assert fig.stat().st_size > 10_000
    assert cli.main(["plot", str(tmp_path / "o"), "--y", "nope", "--out", str(fig)]) == 2
    assert "--y: no column 'nope'" in capsys.readouterr().err


def test_manifest_records_what_resuming_must_match(tmp_path):
    rankflow.run(SMALL, out=tmp_path, chunk=2)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["chunk_size"] == 2 and manifest["chunks"] == 5
    assert manifest["config_hash"] == store.config_hash(C.to_json(C.resolve(SMALL)))
