"""How a batch of attention runs is laid out: on CPU the runs of a device train one after
another (``rankflow.attention.program.over_runs``, measured faster than ``vmap`` by
``benchmarks/attention.py``), each run's numbers the same as when it trains alone, and
the tables the same (to float64 rounding) whatever the number of devices."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

import rankflow.attention as ra
from rankflow.attention import config as config_lib
from rankflow.attention.program import over_runs, params_of

ROOT = Path(__file__).resolve().parents[2]

CONFIG = {
    "x64": True,
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
    "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4, "val_size": 8},
    "dynamics": {"kind": "adamw", "eta": 0.01, "batch": 4},
    "train": {"eval_every": 4},
    "save": {"t1": 12},
    "sweep": {"dynamics.lam": [0.0, 0.5, 1.0]},
}


def _batch(points, ids):
    rows = [params_of(points[i]) for i in ids]
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


@pytest.mark.slow
def test_each_run_of_a_batch_trains_as_it_does_alone():
    points = config_lib.expand(ra.resolve(CONFIG))
    program = ra.program_for(points[0])
    together = program.run(_batch(points, [0, 1, 2]))
    alone = [program.run(_batch(points, [i])) for i in range(3)]
    shuffled = program.run(_batch(points, [2, 0, 1]))
    for name in ("train_loss", "val_loss", "balance_gap", "sv"):
        for i in range(3):
            np.testing.assert_allclose(together[name][i], alone[i][name][0], rtol=1e-12)
            np.testing.assert_array_equal(together[name][i], shuffled[name][(i + 1) % 3])
    # The check can fail: runs of different λ differ.
    assert not np.allclose(together["balance_gap"][0], alone[2]["balance_gap"][0], rtol=1e-3)


def test_over_runs_maps_each_run_and_keeps_its_place():
    runs = (np.arange(5.0), np.arange(5.0) * 10, None)
    out = over_runs(lambda a, b, c: {"s": a + b, "c": c is None}, runs)
    np.testing.assert_array_equal(out["s"], np.arange(5.0) * 11)
    assert np.all(out["c"])
    vmapped = jax.vmap(lambda a, b: a * b)(runs[0], runs[1])
    np.testing.assert_array_equal(over_runs(lambda a, b, c: a * b, runs), vmapped)


def _train(config: Path, out: Path, devices: int):
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    env["RANKFLOW_CPU_DEVICES"] = str(devices)
    proc = subprocess.run(
        [sys.executable, "-m", "rankflow.cli", "attention", "train", str(config), "--out", out],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return ra.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["adamw", "gradient_flow"])
def test_one_and_two_devices_give_identical_attention_tables(tmp_path, kind):
    dynamics = {"kind": kind, "eta": 0.01, "batch": 4}
    lines = [
        "x64 = true",
        "[attention]",
        "D = 8\nH = 2\nlayers = 1\ncontext = 8",
        "[task]",
        'kind = "associative_recall"\npairs = 3\nkeys = 4\nvalues = 4\nval_size = 8',
        "[dynamics]",
        *(f"{k} = {v!r}".replace("'", '"') for k, v in dynamics.items()),
        "[train]\neval_every = 4",
        "[save]\nt1 = 12",
        "[sweep]",
        '"dynamics.lam" = [0.0, 0.5, 1.0]',  # 3 runs: padded to 4 on two devices
    ]
    config = tmp_path / "c.toml"
    config.write_text("\n".join(lines) + "\n")
    one, two = (_train(config, tmp_path / f"d{n}", n) for n in (1, 2))
    # Equal to float64 rounding: a few ulps apart (so were the vmapped runs before:
    # 6e-15 at most, frob_minus_nuc), not bit for bit.
    for a, b in ((one.heads, two.heads), (one.loss, two.loss)):
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, atol=0)
