"""``rankflow compare`` over a ``[sweep]``: every point's discrete run and its flow, one
batch per structure and side, joined into tidy tables with the swept columns; the order
in η (T8) measured at every point of a λ × η sweep of GD against gradient flow."""

import contextlib
import io
import json

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import cli
from rankflow.compare import COLUMNS, compare
from rankflow.compare import run as compare_run
from rankflow.engine import programs
from rankflow.engine.programs import TRACE_COUNTS

GD = {
    "x64": True,
    "problem": {"kind": "sensing", "m": 6, "n": 4, "rank": 2, "samples": 40, "noise": 0.1},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
    "save": {"t1": 100, "num": 11},
    "sweep": {"dynamics.lam": [0.03, 0.1], "dynamics.eta": [0.025, 0.05, 0.1]},
}
OPTIONS = {"compare.window": 20}
SAVES = 11


def _traced(before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in TRACE_COUNTS.items() if v != before.get(k, 0)}


TOML = """x64 = true
[problem]
kind = "sensing"
m = 6
n = 4
rank = 2
samples = 40
noise = 0.1
[model]
r = 3
[init]
kind = "gaussian"
scale = 0.5
[dynamics]
kind = "gd"
eta = 0.1
lam = 0.1
[save]
t1 = 100
num = 11
[sweep]
"dynamics.lam" = [0.03, 0.1]
"""


@pytest.fixture(scope="module")
def gd_sweep(tmp_path_factory):
    """``rankflow compare`` on a TOML with a [sweep] over λ, and η swept by --set."""
    programs.release()  # the structures compile here, whatever ran before
    tmp = tmp_path_factory.mktemp("compare_sweep")
    (tmp / "gd.toml").write_text(TOML)
    out = tmp / "out"
    before = dict(TRACE_COUNTS)
    args = ["compare", str(tmp / "gd.toml"), "--out", str(out), "--set", "compare.window=20"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(args + ["--set", "sweep.dynamics.eta=[0.025, 0.05, 0.1]"])
    assert code == 0, printed.getvalue()  # every point's order in η passes its verdict
    traced = _traced(before)
    names = ("trajectory", "contraction", "order", "sweep")
    tables = {name: pd.read_parquet(out / f"{name}.parquet") for name in names}
    return tables, out, traced, printed.getvalue()


def test_one_row_per_point_and_save_with_the_swept_columns(gd_sweep):
    tables, out, _, _ = gd_sweep
    traj = tables["trajectory"]
    front = ["point", "sweep.dynamics.lam", "sweep.dynamics.eta"]
    assert list(traj.columns) == front + list(COLUMNS["trajectory"])
    assert len(traj) == 6 * SAVES
    # Row-major over the [sweep] table (the first key varies slowest).
    points = traj.drop_duplicates("point")
    assert list(points["sweep.dynamics.lam"]) == [0.03] * 3 + [0.1] * 3
    assert list(points["sweep.dynamics.eta"]) == [0.025, 0.05, 0.1] * 2
    # The setting columns carry each point's own values.
    assert np.array_equal(traj["dynamics.eta"], traj["sweep.dynamics.eta"])
    assert np.array_equal(traj["dynamics.lam"], traj["sweep.dynamics.lam"])
    judged = ["halvings", "verdict"]  # judged from the order table, beside it
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted([*tables, *judged])
    for name, df in tables.items():
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"{name}.parquet"), df)
        assert (out / f"{name}.csv").stat().st_size > 0
    assert (out / "sweep.png").stat().st_size > 0
    summary = (out / "summary.md").read_text()
    assert "## Sweep: 6 points over dynamics.lam, dynamics.eta" in summary
    assert "sweep.png" in summary
    meta = json.loads((out / "config.json").read_text())
    assert meta["points"] == 6 and meta["optimizer"]["sweep"] == GD["sweep"]


def test_order_in_eta_is_first_order_at_every_point(gd_sweep):
    """T8: at every (λ, η) the distance at a fixed ηt shrinks like η (order in
    [0.8, 1.2], float64), and per λ across the swept η too."""
    tables, _, _, _ = gd_sweep
    sweep = tables["sweep"]
    assert len(sweep) == 6 and (sweep["status"] == "ok").all()
    assert sweep["order"].between(0.8, 1.2).all(), sweep[["point", "order"]]
    order = tables["order"]
    assert len(order) == 6 * 4  # η, η/2, η/4, η/8 at each point
    # Each point's η halvings start from the point's swept η.
    first = order.groupby("point").first()
    assert np.array_equal(first["dynamics.eta"], first["sweep.dynamics.eta"])
    # GD's contraction is T5's exact step at every point.
    assert (sweep["t5_deviation_max"] < 1e-12).all()
    assert np.allclose(
        sweep["gd_contraction"],
        (1 - sweep["dynamics.eta"] * sweep["dynamics.lam"]) ** 2,
        rtol=0,
        atol=1e-15,
    )


def test_every_point_prints_its_halving_orders_and_verdict(gd_sweep):
    """T8 at each of the six points, as the command prints it: the orders between
    consecutive halvings (1.002 … 0.989 at λ = 0.1, η = 0.1) and pass."""
    _, _, _, printed = gd_sweep
    lines = [line for line in printed.splitlines() if line.startswith("point ")]
    assert [line.split(" (")[0] for line in lines] == [f"point {i}" for i in range(6)]
    assert all(line.endswith(": pass") and "(T8: 1 ± 0.15); per halving " in line for line in lines)
    assert lines[4].startswith("point 4 (dynamics.lam=0.1, dynamics.eta=0.05): order")
    assert printed.splitlines()[-1] == "verdict: 6 of 6 fitted orders pass, 0 fail"


def test_each_structure_compiles_once_per_side(gd_sweep):
    """Six points, each with four learning rates, on each side: one trace of the
    optimizer's program and one of the flow's, not one per point."""
    _, _, traced, _ = gd_sweep
    assert sorted(traced.values()) == [1, 1], traced


@pytest.mark.slow
def test_a_point_of_the_sweep_equals_its_comparison_alone(gd_sweep):
    """The join is faithful: point 4 (λ = 0.1, η = 0.05) is the comparison of that
    point without a sweep, to rounding (the batch differs, not the arithmetic)."""
    tables, _, _, _ = gd_sweep
    alone_cfg = {k: v for k, v in GD.items() if k != "sweep"}
    alone = compare(alone_cfg, overrides=OPTIONS | {"dynamics.lam": 0.1, "dynamics.eta": 0.05})
    for name, df in alone.items():
        part = tables[name][tables[name]["point"] == 4].drop(
            columns=["point", "sweep.dynamics.lam", "sweep.dynamics.eta"]
        )
        pd.testing.assert_frame_equal(part.reset_index(drop=True), df, rtol=1e-10, atol=1e-14)


def test_mispaired_points_fail_the_order(monkeypatch):
    """The wrong version: each optimizer run joined with another point's flow (the
    batch split at the wrong place) gives no first order, so the test above can fail."""
    real = compare_run._run_all

    def mispaired(points):
        sides = real(points)
        return [(opt, sides[(i + 3) % len(sides)][1]) for i, (opt, _) in enumerate(sides)]

    monkeypatch.setattr(compare_run, "_run_all", mispaired)
    sweep = compare(GD, overrides=OPTIONS)["sweep"]
    assert not sweep["order"].between(0.8, 1.2).all(), sweep["order"]


@pytest.mark.slow
def test_a_structural_sweep_compiles_once_per_structure():
    programs.release()
    cfg = GD | {"sweep": {"model.r": [2, 3], "dynamics.lam": [0.05, 0.1]}}
    before = dict(TRACE_COUNTS)
    tables = compare(cfg, overrides=OPTIONS | {"compare.halvings": 1})
    assert sorted(_traced(before).values()) == [1, 1, 1, 1]  # 2 structures × 2 sides
    assert list(tables["sweep"]["sweep.model.r"]) == [2, 2, 3, 3]
    assert tables["sweep"]["order"].between(0.8, 1.2).all()


def test_a_point_without_a_flow_is_named_before_anything_compiles(capsys):
    cfg = GD | {"sweep": {"dynamics.kind": ["gd", "gradient_flow"]}}
    before = dict(TRACE_COUNTS)
    with pytest.raises(
        rankflow.ConfigError, match="dynamics.kind.*at dynamics.kind='gradient_flow'"
    ):
        compare(cfg)
    assert _traced(before) == {}


@pytest.mark.slow
def test_a_stochastic_sweep_joins_the_sde_tables():
    """sgd_gaussian over λ: the T6 tables of each point, joined, with max |z| per point."""
    cfg = {
        "x64": True,
        "problem": {"kind": "regression", "m": 5, "n": 3, "rank": 2, "samples": 20},
        "model": {"r": 2},
        "dynamics": {"kind": "sgd_gaussian", "eta": 0.1, "lam": 0.05, "sigma": 0.3},
        "save": {"t1": 40, "num": 5},
        "sweep": {"dynamics.lam": [0.05, 0.2]},
    }
    tables = compare(cfg, overrides={"compare.paths": 64})
    assert set(tables) == {"trajectory", "sde", "sweep"}
    assert len(tables["sde"]) == 2 * 2 * 5  # points × roles × saves
    sweep = tables["sweep"]
    # 64 paths: |z| against T6's exact mean stays within Monte Carlo reach.
    assert (sweep["flow.z_max"] < 5).all() and (sweep["optimizer.z_max"] < 6).all()
