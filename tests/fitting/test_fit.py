"""``rankflow.fit`` on a user's own problem: matrix completion with spare directions
(30×20, target rank 3, r = 10, float64, GD). Over the early window the rate/(2ηλ) lies in
T5's bracket; at λ = 0.1, η = 0.1 the later window is named a slower phase (its rate a
fraction of 2ηλ, and faster than the slowest spare singular value's own decay). The
verdicts change when the data are replaced by a wrong law (rate ηλ, rate 4ηλ). Gradient
flow solved tightly: T4's exact law passes with the window ending at rounding; with
the rounding check off (the mutant) the end is not named rounding.
``rankflow fit DIR`` end to end, and its one-line errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import theory
from rankflow.cli import main
from rankflow.config.fields import ConfigError
from rankflow.fitting import _window

COMPLETION = {
    "x64": True,
    "problem": {"kind": "completion", "m": 30, "n": 20, "rank": 3, "samples": 300},
    "model": {"r": 10},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "lam": 0.1},
    "save": {"t1": 1500, "num": 76},
    "sweep": {"dynamics.eta": [0.05, 0.1]},
}


@pytest.fixture(scope="module")
def completion(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit") / "mc"
    df = rankflow.run(COMPLETION, out=out)
    return df, out


def _bracket(row):
    return [float(b) for b in theory.gd_rate_bracket(row["dynamics.eta"], row["dynamics.lam"])]


def test_completion_early_window_in_t5s_bracket_and_a_slower_phase_named(completion):
    df, _ = completion
    fit = rankflow.fit(df, config=COMPLETION)
    assert (fit["verdict"] == "pass").all() and (fit["source"] == "T5").all(), fit
    for row in fit.to_dict("records"):
        low, high = _bracket(row)
        assert low - 4 * row["ratio_se"] <= row["ratio"] <= high + 4 * row["ratio_se"], row
    late = fit.set_index("dynamics.eta").loc[0.1]
    assert late["end"] == "slower phase" and late["t_max"] < 1000, late
    assert 0.05 < late["slow_ratio"] < 0.6  # a fraction of 2ηλ, measured 0.40 here
    base = 2 * 0.1 * 0.1
    spare = (late["spare_rate_low"] / base, late["spare_rate_high"] / base)
    # measured: the slower phase is not the slowest spare singular value's decay (0.03)
    assert np.isfinite(spare).all() and spare[0] < late["slow_ratio"], spare


@pytest.mark.parametrize("factor", [0.5, 2.0])  # rate ηλ; rate 4ηλ
def test_completion_data_replaced_by_a_wrong_law_fails(completion, factor):
    df, _ = completion
    eta, lam = df["dynamics.eta"], df["dynamics.lam"]
    gap0 = df.groupby("run_id")["balance_gap"].transform("first")
    wrong = df.assign(balance_gap=gap0 * np.exp(-factor * 2 * eta * lam * df["t"]))
    fit = rankflow.fit(wrong, config=COMPLETION)
    assert (fit["verdict"] == "fail").all(), fit


GF = {
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
    "model": {"r": 2},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"kind": "gradient_flow", "eta": 0.5, "lam": 0.5},
    "solver": {"rtol": 1e-13, "atol": 1e-15},
    "save": {"t1": 120, "num": 61},
}


def test_gradient_flow_exact_law_passes_to_rounding_and_not_without_the_check(monkeypatch):
    df = rankflow.run(GF)
    row = rankflow.fit(df).iloc[0]
    assert row["source"] == "T4" and row["end"] == "rounding" and row["verdict"] == "pass"
    assert row["ratio"] == pytest.approx(1.0, abs=1e-4)
    monkeypatch.setattr(_window, "ROUNDING", 0.0)  # the mutant: no rounding check
    assert rankflow.fit(df).iloc[0]["end"] != "rounding"


def test_fit_command_writes_fit_csv_and_prints_the_table(completion, capsys):
    _, out = completion
    assert main(["fit", str(out)]) == 0
    text = capsys.readouterr().out
    table = pd.read_csv(out / "fit.csv")
    assert len(table) == 2 and set(table["verdict"]) == {"pass"}
    assert "slower phase" in text and "T5" not in text.splitlines()[0]
    assert (
        main(["fit", str(out), "--t-min", "100", "--t-max", "400", "--out", str(out / "w.csv")])
        == 0
    )
    window = pd.read_csv(out / "w.csv")
    assert (window["t_min"] == 100).all() and (window["t_max"] == 400).all()
    assert (window["end"] == "t_max (set)").all()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--t-min", "5", "--t-max", "3"], "--t-min: must be < --t-max"),
        (["--column", "nope"], "--column: no column 'nope'"),
    ],
)
def test_fit_command_one_line_errors(completion, capsys, args, words):
    _, out = completion
    assert main(["fit", str(out), *args, "--out", str(out / "bad.csv")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "bad.csv").exists()


def test_fit_command_refuses_a_folder_that_is_not_a_results_dir(tmp_path, capsys):
    assert main(["fit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a rankflow results directory" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "fit.csv").exists()
    with pytest.raises(ConfigError, match="t_min: must be < t_max"):
        rankflow.fit(tmp_path, t_min=3, t_max=1)


@pytest.mark.slow
def test_attention_heads_fitted_per_head_and_pair(tmp_path):
    """The attention family's heads table: one row per layer, pair and head, T5 for its
    minibatch sgd; key–query pairs pass (measured 1.02587 × 2ηλ, T5's low end 1.02587)."""
    cfg = {
        "x64": True,
        "attention": {"D": 8, "H": 2, "layers": 2, "context": 8, "qk_bias": False},
        "task": {"kind": "char_lm", "seq_len": 8, "val_size": 4, "max_chars": 4000},
        "dynamics": {"batch": 4, "eta": 0.1, "kind": "sgd", "lam": 0.5},
        "train": {"eval_every": 10},
        "save": {"t1": 200},
    }
    rankflow.attention.run(cfg, out=tmp_path / "att")
    fit = rankflow.fit(tmp_path / "att")
    assert len(fit) == 8 and set(fit["source"]) == {"T5"}
    assert (fit.loc[fit["pair"] == "qk", "verdict"] == "pass").all(), fit


def test_depth_three_one_row_per_pair_and_a_pair_with_the_wrong_law_fails():
    """Depth 3 (T12): each pair's gap balance_gap_j is its own row, T5 for GD; one pair's
    gap replaced by the law at ηλ (the mutant) fails while the other still passes."""
    cfg = {
        "x64": True,
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
        "model": {"r": 2, "depth": 3},
        "init": {"kind": "gaussian", "scale": 0.5},
        "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
        "save": {"t1": 600, "num": 61},
    }
    df = rankflow.run(cfg)
    fit = rankflow.fit(df)
    assert fit["series"].tolist() == ["balance_gap_1", "balance_gap_2"]
    assert (fit["verdict"] == "pass").all() and (fit["source"] == "T5").all(), fit
    wrong = df.assign(balance_gap_2=df["balance_gap_2"].iloc[0] * np.exp(-0.01 * df["t"]))
    assert rankflow.fit(wrong)["verdict"].tolist() == ["pass", "fail"]


def test_schedule_fitted_on_t11s_clock_and_not_without_it():
    """GD under warmup-cosine: against T11's clock lr_clock/η the rate is T5's; the same
    gap against the step (the schedule ignored, the mutant) fails."""
    cfg = {
        "x64": True,
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
        "model": {"r": 2},
        "init": {"kind": "gaussian", "scale": 0.5},
        "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.1},
        "save": {"t1": 600, "num": 61},
    }
    cfg["dynamics"] |= {"schedule": "warmup_cosine", "warmup": 50}
    df = rankflow.run(cfg)
    assert rankflow.fit(df).iloc[0]["verdict"] == "pass"
    assert rankflow.fit(df.drop(columns="lr_clock")).iloc[0]["verdict"] == "fail"
