"""``rankflow plot DIR --theory``: every line's prediction in the line's own colour,
anchored on it (tests/plots/figure_checks.py's ``theory_colour_problems``), AdamW's lines
saying "no prediction" in the legend; the figure passes the figure review. Mutant
figures — a theory line in another line's colour, one not anchored — fail the check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rankflow
from rankflow.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plots"))
from figure_checks import capture_figures, check_figure, theory_colour_problems  # noqa: E402

CONFIG = {
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
    "model": {"r": 2},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"eta": 0.1},
    "save": {"t1": 300, "num": 31},
    "sweep": {"dynamics.kind": ["gd", "adamw"], "dynamics.lam": [0.05, 0.1]},
}


@pytest.fixture(scope="module")
def figure(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "sweep"
    rankflow.run(CONFIG, out=out)
    with pytest.MonkeyPatch.context() as mp, capture_figures(mp) as figs:
        args = ["plot", str(out), "--hue", "dynamics.lam", "--logy", "--theory"]
        assert main([*args, "--out", str(out / "gap.png")]) == 0
    return figs[0], out


def test_theory_lines_in_their_lines_colour_and_adamw_says_no_prediction(figure):
    figure, _ = figure
    assert theory_colour_problems(figure) == []
    ax = figure.axes[0]
    assert len([ln for ln in ax.get_lines() if ln.get_gid() == "theory"]) == 2  # gd's λs
    labels = ax.get_legend_handles_labels()[1]
    assert sum(text.endswith("adamw: no prediction") for text in labels) == 2, labels
    assert any(text.startswith("theory (T5)") for text in labels), labels
    check_figure(figure, dynamics=["gd", "adamw"])


def test_mutant_theory_line_in_another_colour_or_not_anchored_fails(figure):
    figure, _ = figure
    ax = figure.axes[0]
    theory = [ln for ln in ax.get_lines() if ln.get_gid() == "theory"]
    colours = [theory[0].get_color(), theory[1].get_color()]
    theory[0].set_color(colours[1])  # the mutant: the other λ's colour
    assert theory_colour_problems(figure)
    theory[0].set_color(colours[0])
    y = theory[1].get_ydata()
    theory[1].set_ydata(y * 3)  # the mutant: not anchored on its line
    assert theory_colour_problems(figure)
    theory[1].set_ydata(y)
    assert theory_colour_problems(figure) == []


def test_plot_theory_one_line_errors(figure, tmp_path, capsys):
    _, results = figure
    out = tmp_path / "x.png"
    assert main(["plot", str(results), "--x", "rank", "--theory", "--out", str(out)]) == 2
    assert "--theory" in capsys.readouterr().err and not out.exists()
