"""``rankflow compare``: optimizer against flow, checked against T5 (per-step contraction of
the balance gap under GD), T6 (SGF mean of tr D) and T8 (first order in η)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import cli, plots
from rankflow.compare import COLUMNS, compare

ROOT = Path(__file__).resolve().parents[2]

GD = {
    "x64": True,
    "problem": {"kind": "sensing", "m": 5, "n": 4, "rank": 2, "samples": 40, "noise": 0.1},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
    "save": {"t1": 100, "num": 11},
}

SGD = {
    "x64": True,
    "problem": {"kind": "regression", "m": 6, "n": 3, "rank": 2, "samples": 30, "noise": 0.1},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "sgd_gaussian", "eta": 0.1, "lam": 0.05, "sigma": 0.3},
    "save": {"t1": 200, "num": 11},
}


@pytest.fixture(scope="module")
def gd_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare_gd")
    tables = compare(
        GD, out=out, overrides={"compare.window": 30}, figures=plots.write_compare_figures
    )
    return tables, out


@pytest.fixture(scope="module")
def sgd_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare_sgd")
    return compare(SGD, out=out, figures=plots.write_compare_figures), out


def _check_files(tables, out):
    for name, df in tables.items():
        assert list(df.columns) == list(COLUMNS[name])
        for suffix in ("parquet", "csv", "png"):
            assert (out / f"{name}.{suffix}").stat().st_size > 0
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"{name}.parquet"), df)
    assert "rankflow compare" in (out / "summary.md").read_text()
    meta = json.loads((out / "config.json").read_text())
    assert {"optimizer", "flow", "compare", "versions"} <= set(meta)


@pytest.mark.slow
def test_gd_compare_writes_documented_tables(gd_out):
    tables, out = gd_out
    assert set(tables) == {"trajectory", "contraction", "order"}
    _check_files(tables, out)
    traj = tables["trajectory"]
    assert list(traj["t"]) == [10.0 * i for i in range(11)]
    assert traj["distance"].iloc[0] == 0.0  # same seed: same data and start
    assert (traj["distance"].iloc[1:] > 1e-4).all()  # but GD is not GF
    assert (traj["optimizer.status"] == "ok").all() and (traj["flow.status"] == "ok").all()
    assert traj["flow.kind"].iloc[0] == "gradient_flow"
    assert traj["solver.method"].iloc[0] == "tsit5" and traj["solver.adaptive"].iloc[0]


def test_T5_gd_contraction_per_step_matches_the_exact_identity(gd_out):
    c = gd_out[0]["contraction"]
    assert list(c["t"]) == list(range(30))
    eta, lam = GD["dynamics"]["eta"], GD["dynamics"]["lam"]
    np.testing.assert_allclose(c["gd_contraction"], (1 - eta * lam) ** 2, rtol=1e-15)
    np.testing.assert_allclose(c["gf_contraction"], np.exp(-2 * eta * lam), rtol=1e-15)
    # The measured ratio ‖D_{k+1}‖/‖D_k‖ is T5's one-step prediction at every step ...
    assert c["t5_deviation"].max() < 1e-10
    assert c["t5_residual"].max() < 1e-10  # ... and so is the matrix D_{k+1} itself
    # ... while the gradient-flow factor e^{−2ηλ} misses it at every step.
    assert c["gf_deviation"].min() > 1e-10
    assert c["gd_deviation"].median() > 1e-6  # the O(η²) term of T5 is not negligible


def test_T8_gd_converges_to_gradient_flow_at_first_order(gd_out):
    o = gd_out[0]["order"]
    eta = GD["dynamics"]["eta"]
    np.testing.assert_allclose(o["dynamics.eta"], [eta, eta / 2, eta / 4, eta / 8])
    assert list(o["steps"]) == [100, 200, 400, 800]
    np.testing.assert_allclose(o["horizon"], 10.0)
    assert np.all(np.diff(o["distance"]) < 0)
    assert 0.8 <= o["order"].iloc[0] <= 1.2
    assert o["order_stderr"].iloc[0] < 0.1


@pytest.mark.slow
def test_T6_sgf_and_sgd_gaussian_means_of_the_trace(sgd_out):
    tables, out = sgd_out
    assert set(tables) == {"trajectory", "sde"}
    _check_files(tables, out)
    sde = tables["sde"]
    flow, opt = sde[sde["role"] == "flow"], sde[sde["role"] == "optimizer"]
    assert (flow["paths"] == 64).all() and (opt["paths"] == 64).all()  # compare.paths
    assert flow["z"].isna().iloc[0]  # t = 0: every path starts at the same point
    later = flow["t"] > 0
    # T6 is exact for the SDE: its Monte Carlo mean agrees within 4 standard errors.
    assert (flow["z"][later].abs() < 4).all()
    # The drive ησ²(m−n)r/(2λ) is well resolved: the mean moves many SEs from tr D(0).
    assert (flow["mean"] - flow["mean"].iloc[0]).iloc[-1] > 4 * flow["se"].iloc[-1]
    # Euler–Maruyama (sgd_gaussian) is O(η) from SGF, below the Monte Carlo error here.
    assert (opt["z"][opt["t"] > 0].abs() < 4).all()
    np.testing.assert_allclose(opt["theory"], flow["theory"])
    assert ((opt["q10"] <= opt["mean"]) & (opt["mean"] <= opt["q90"])).all()
    # Paths of the two dynamics use different noise: the trajectory compares their means.
    traj = tables["trajectory"]
    assert (traj["measure"] == "mean over 64 paths").all()
    assert traj["flow.kind"].iloc[0] == "stochastic_flow"
    assert traj["solver.method"].iloc[0] == "shark" and traj["solver.dt"].iloc[0] == 0.1
    assert (traj["distance"].iloc[1:] < 4 * traj["mc_floor"].iloc[1:]).all()
    # No order in η for this pair: the summary says there is no verdict, and none is written.
    assert "No order in η is fitted for this pair (T6" in (out / "summary.md").read_text()
    assert not (out / "verdict.csv").exists() and not (out / "halvings.csv").exists()


def test_cli_compare_momentum_example(tmp_path, capsys):
    """The sims example through the CLI, shortened; momentum's order with μ halved too."""
    out = tmp_path / "m"
    argv = ["compare", str(ROOT / "sims" / "compare_momentum.toml"), "--out", str(out)]
    argv += ["--set", "save.t1=100", "--set", "save.num=6", "--set", "compare.halvings=2"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "summary.md" in printed
    o = pd.read_parquet(out / "order.parquet")
    np.testing.assert_allclose(o["dynamics.mu"] / o["dynamics.eta"], 2.0)
    assert 0.8 <= o["order"].iloc[0] <= 1.2
    # The verdict of the single config, printed (issue #41): halvings 0.935, 0.969.
    d = o["distance"].to_numpy()
    halvings = ", ".join(f"{v:.3f}" for v in np.log2(d[:-1] / d[1:]))
    line = (
        f"order of the distance in η {o['order'].iloc[0]:.3f} ± {o['order_stderr'].iloc[0]:.3f} "
        f"(T8: 1 ± 0.15); per halving {halvings}: pass"
    )
    assert line in printed.splitlines() and halvings == "0.935, 0.969"
    assert printed.splitlines()[-1] == "verdict: 1 of 1 fitted orders pass, 0 fail"
    summary = (out / "summary.md").read_text()
    assert "| 0.05 | 0.1 | 200 |" in summary and f"| {halvings.split(', ')[0]} |" in summary
    assert (out / "trajectory.png").is_file() and not (out / "contraction.png").exists()


@pytest.mark.parametrize("kind", ["adamw", "adam_l2", "gradient_flow"])
def test_cli_compare_rejects_dynamics_without_flow(kind, tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        f'[problem]\nkind = "sensing"\nm = 4\nn = 4\nrank = 1\n[dynamics]\nkind = "{kind}"\n'
    )
    assert cli.main(["compare", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rankflow: error: dynamics.kind:")
    assert "gd, sgd_gaussian, sgd, momentum, momentum_coupled" in err and repr(kind) in err
    assert not (tmp_path / "o").exists()


def test_compare_rejects_bad_options():
    with pytest.raises(rankflow.ConfigError, match="compare.window: .*got 0"):
        compare(GD, overrides={"compare.window": 0})
    with pytest.raises(rankflow.ConfigError, match="compare.widow: unknown key"):
        compare(GD | {"compare": {"widow": 3}})
    # A bad value at one point of a sweep is named before anything runs.
    with pytest.raises(rankflow.ConfigError, match="dynamics.lam"):
        compare(GD | {"sweep": {"dynamics.lam": [0.1, -1.0]}})
