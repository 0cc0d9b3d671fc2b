"""T10 floor in ``rankflow.fit`` (rankflow/fitting/_floor.py) and ``rankflow plot
--theory``: rankflow's own sgd (regression 6×3, N = 64, η = λ = 0.1, b = 4, 8, 16, 32 in
one program, 8 paths, states saved) through ``rankflow.run(..., out=DIR)`` and
``rankflow.fit(DIR)``: ``floor_predicted`` (‖mean D*‖_F at the run's states) agrees with
``floor_measured`` (‖mean D‖_F over the same saves and paths) within 4 standard errors
over paths + 3% at every batch size and falls with b; the wrong versions fail the same
test: the with-replacement scale at b = 16, 32, λ for 2λ, no noise term. λ = 0, GD and
a run without states or config get NaN with the reason. The plot draws each sgd line's floor in
the line's colour (the figure review passes; the floor in another line's colour fails)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import rankflow
from rankflow import theory
from rankflow.cli import main
from rankflow.fitting import _floor
from rankflow.plots import core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plots"))
from figure_checks import capture_figures, check_figure, theory_colour_problems  # noqa: E402

ETA, LAM, N = 0.1, 0.1, 64
BATCHES = [4, 8, 16, 32]
CONFIG = {
    "x64": True,
    "problem": {"kind": "regression", "m": 6, "n": 3, "rank": 2, "samples": N, "noise": 0.5},
    "model": {"r": 3},
    "init": {"scale": 0.5},
    "dynamics": {"kind": "sgd", "eta": ETA, "lam": LAM, "paths": 8},
    "save": {"t1": 2000, "num": 101, "states": True},
    "sweep": {"dynamics.batch": BATCHES},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("floor") / "sgd"
    df = rankflow.run(CONFIG, out=out)
    return out, df


@pytest.fixture(scope="module")
def fitted(run):
    return rankflow.fit(run[0])


def _decayed(table):
    return table.sort_values("run_id")


def _agrees(table) -> np.ndarray:
    """Per batch size: |predicted − measured| ≤ 4 SE (over paths) + 3% of the prediction."""
    rows = _decayed(table)
    off = np.abs(rows["floor_predicted"] - rows["floor_measured"]).to_numpy()
    return off <= (4 * rows["floor_se"] + 0.03 * rows["floor_predicted"]).to_numpy()


def test_floor_predicted_is_the_measured_mean_balance_at_every_batch_size(fitted):
    rows = _decayed(fitted)
    assert rows["floor_note"].tolist() == [""] * 4
    assert (rows["floor_from"] == "after the window (end: floor)").all()
    assert (rows["floor_t_min"] == rows["t_max"]).all()
    assert _agrees(fitted).all(), rows[["floor_predicted", "floor_measured", "floor_se"]]
    ratio = rows["floor_predicted"] / rows["floor_measured"]
    np.testing.assert_allclose(rows["floor_ratio"], ratio)
    assert (np.diff(rows["floor_predicted"].to_numpy()) < 0).all()  # falls with b


def _wrong(monkeypatch, run_dir, floor):
    """The fit with ``theory.minibatch_balance_floor`` replaced by ``floor`` (its
    compiled function dropped, so the wrong one is traced)."""
    monkeypatch.setattr(_floor, "_JITTED", {})
    wrong = types.SimpleNamespace(minibatch_balance_floor=floor)
    monkeypatch.setattr(_floor, "theory", wrong)
    return rankflow.fit(run_dir)


def _with_replacement(A, B, gbar, deltas, eta, lam, batch, replace):
    return theory.minibatch_balance_floor(A, B, gbar, deltas, eta, lam, batch, True)


def _lam_for_2lam(A, B, gbar, deltas, eta, lam, batch, replace):  # λ(1 − ηλ) for λ(2 − ηλ)
    right = theory.minibatch_balance_floor(A, B, gbar, deltas, eta, lam, batch, replace)
    return right * (2 - eta * lam) / (1 - eta * lam)


def _no_noise(A, B, gbar, deltas, eta, lam, batch, replace):  # GD's own η² term alone
    return theory.minibatch_balance_floor(A, B, gbar, 0 * deltas, eta, lam, batch, replace)


def test_with_replacement_scale_fails_at_the_larger_batches(monkeypatch, run):
    # (N − b)/(N − 1) = 0.76, 0.51 at b = 16, 32 left out
    assert _agrees(_wrong(monkeypatch, run[0], _with_replacement))[2:].tolist() == [False] * 2


@pytest.mark.parametrize("floor", [_lam_for_2lam, _no_noise], ids=["lam_for_2lam", "no_noise"])
def test_wrong_rate_or_no_noise_term_fails_at_every_batch_size(monkeypatch, run, floor):
    assert not _agrees(_wrong(monkeypatch, run[0], floor)).any()


def test_no_floor_says_why(run, fitted):
    out, df = run
    table = rankflow.fit(df, config=CONFIG)  # a table holding its states: the same floors
    np.testing.assert_allclose(table["floor_predicted"], fitted["floor_predicted"])
    no_states = rankflow.fit(rankflow.load(out), config=CONFIG)
    assert (no_states["floor_note"] == "no states (save.states = false)").all()
    assert no_states["floor_predicted"].isna().all()
    no_config = rankflow.fit(df)
    assert no_config["floor_note"].str.startswith("no config").all()
    floors = _floor.RunFloors(out, CONFIG)  # what fit asks of each row, before any state
    for kind, lam, note in (("sgd", 0.0, "λ = 0"), ("gd", LAM, "not sgd")):
        row = floors.row(0, kind, lam, t_max=100.0, end="end of run", t1=2000.0)
        assert row["floor_note"] == note and np.isnan(row["floor_predicted"])
        assert row["floor_from"] == "last half of the run"
    scheduled = {"dynamics": {"kind": "sgd", "lam": LAM, "schedule": "warmup_cosine"}}
    note = _floor.minibatch_floor([], scheduled, t_from=0.0)["floor_note"]
    assert note == "under a schedule: T10's floor is of a constant η"


@pytest.fixture(scope="module")
def figure(run):
    out = run[0]
    with pytest.MonkeyPatch.context() as mp, capture_figures(mp) as figs:
        args = ["plot", str(out), "--hue", "dynamics.batch", "--logy", "--theory"]
        assert main([*args, "--out", str(out / "gap.png")]) == 0
    return figs[0]


def _floor_lines(fig):
    return [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == core.FLOOR_GID]


def test_plot_draws_each_sgd_lines_floor_in_its_colour(figure, fitted):
    lines = _floor_lines(figure)
    assert len(lines) == 4
    heights = sorted(float(ln.get_ydata()[0]) for ln in lines)
    np.testing.assert_allclose(heights, sorted(_decayed(fitted)["floor_predicted"]))
    measured = [  # one per batch size, in ascending b (the hue's order)
        ln for ln in figure.axes[0].get_lines()
        if not ln.get_label().startswith("_") and ln.get_gid() is None and len(ln.get_xdata())
    ]  # fmt: skip
    by_height = sorted(lines, key=lambda ln: -float(ln.get_ydata()[0]))  # the floor falls with b
    assert [ln.get_color() for ln in by_height] == [ln.get_color() for ln in measured]
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert core.FLOOR_LABEL in labels
    assert theory_colour_problems(figure) == []
    check_figure(figure)


def test_a_floor_in_another_lines_colour_fails_the_figure_review(figure):
    lines = _floor_lines(figure)
    colours = [ln.get_color() for ln in lines]
    try:
        for ln, c in zip(lines, colours[1:] + colours[:1], strict=True):
            ln.set_color(c)
        with pytest.raises(AssertionError, match="colour|nearer"):
            check_figure(figure)
    finally:
        for ln, c in zip(lines, colours, strict=True):
            ln.set_color(c)


def test_no_floor_beside_another_column(run):
    """The floor is a level of ‖D‖_F: a plot of the loss with --theory draws none."""
    out = run[0]
    with pytest.MonkeyPatch.context() as mp, capture_figures(mp) as figs:
        args = ["plot", str(out), "--y", "loss", "--hue", "dynamics.batch", "--theory"]
        assert main([*args, "--out", str(out / "loss.png")]) == 0
    assert _floor_lines(figs[0]) == []
