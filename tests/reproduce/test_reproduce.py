"""``rankflow reproduce``: the cheapest experiment end to end through the CLI (report rows,
verdicts, figures, tables), its tests able to fail, the pretrained experiment on a small
synthetic checkpoint, and bad options refused before anything compiles."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rankflow import cli
from rankflow.core.program import TRACE_COUNTS
from rankflow.reproduce import EXPERIMENTS, check_options
from rankflow.reproduce._common import SIMS


@pytest.fixture(scope="module")
def toy_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    rc = cli.main(["reproduce", "--quick", "--only", "toy", "--out", str(out), "--quiet"])
    return out, rc


def test_reproduce_quick_only_toy_writes_a_passing_report(toy_out):
    out, rc = toy_out
    assert rc == 0
    report = (out / "report.md").read_text()
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert list(claims["name"]) == [
        "toy.l2_meets_nuclear",
        "toy.balancing_rate",
        "toy.soft_threshold",
    ]
    assert (claims["verdict"] == "pass").all()
    for name in claims["name"]:
        assert f"| [{name}](" in report and f"### {name}" in report
    assert "ALL PASS" in report and "3 of 3 claims pass" in report
    for fig in claims["figure"].unique():
        assert (out / "figures" / fig).stat().st_size > 10_000
        assert f"![{fig}](figures/{fig})" in report
    assert (out / "tables" / "toy_rates.csv").is_file()


def test_toy_tables_hold_the_brackets_the_claims_test(toy_out):
    """The rate test is a bracket a wrong law misses: the gradient-flow rate 2ηλ itself
    (ratio 1) is below GD's bracket at the larger ηλ, and 4ηλ is above it everywhere;
    the mutants of tests/claims/test_mutants.py run the claims themselves on wrong data."""
    out, _ = toy_out
    r = pd.read_csv(out / "tables" / "toy_rates.csv")
    low, high = r["gd_low"] - r["fit_error"], r["gd_high"] + r["fit_error"]
    assert ((r["rate_over_2etalam"] >= low) & (r["rate_over_2etalam"] <= high)).all()
    assert (1.0 < low[r["dynamics.eta"] * r["dynamics.lam"] >= 0.03]).all()
    assert (2.0 > high).all()
    sv = pd.read_csv(out / "tables" / "toy_final_singular_values.csv")
    # Soft-thresholding by λ/2 (a wrong T3) would miss the 1e-9 tolerance by far.
    s = np.array([1.0, 0.8, 0.6, 0.4, 0.2])
    wrong = np.maximum(s[None, :] - sv["dynamics.lam"].to_numpy()[:, None] / 2, 0)
    measured = sv[[f"sv_{i}" for i in range(1, 6)]].to_numpy()
    assert np.abs(measured - wrong)[sv["dynamics.lam"] > 0].max() > 1e-2
    assert np.abs(measured - sv[[f"svt_{i}" for i in range(1, 6)]].to_numpy()).max() < 1e-9


def test_rerun_into_the_same_directory_resumes(toy_out):
    out, _ = toy_out
    before = dict(TRACE_COUNTS)
    rc = cli.main(["reproduce", "--only", "toy", "--out", str(out), "--quiet"])
    assert rc == 0
    assert dict(TRACE_COUNTS) == before  # every chunk read back, nothing traced


def test_pretrained_on_a_balanced_synthetic_checkpoint(tmp_path, monkeypatch):
    # tests/inspect's checkpoint builder, importable when tests/reproduce runs alone too.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "inspect"))
    from test_inspect import build

    path, _, _ = build(tmp_path, arch="bert", layers=2, heads=4, d_model=16)
    out = tmp_path / "out"
    rc = cli.main(
        ["reproduce", "--only", "pretrained", "--checkpoint", str(path), "--out", str(out)]
    )
    assert rc == 0
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert set(claims["name"]) == {"pretrained.qk_balance", "pretrained.vo_balance"}
    assert (claims["verdict"] == "pass").all()
    assert (out / "figures" / "pretrained_scatter.png").is_file()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--quick", "--full"], "--quick/--full"),
        (["--only", "toy", "nope"], "--only: unknown experiment 'nope'; experiments are toy"),
        (["--only", "pretrained"], "--only pretrained: needs --checkpoint"),
        (["--checkpoint", "/no/such/model"], "--checkpoint: no such file"),
    ],
)
def test_bad_options_fail_in_one_line_before_compiling(tmp_path, capsys, argv, needle):
    before = dict(TRACE_COUNTS)
    out = tmp_path / "never"
    rc = cli.main(["reproduce", *argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and needle in err
    assert dict(TRACE_COUNTS) == before
    assert not out.exists()


def test_every_config_resolves_at_both_sizes():
    for mode in ("quick", "full"):
        _, names = check_options(mode == "quick", mode == "full")
        assert names == [n for n in EXPERIMENTS if n != "pretrained"]
        from rankflow.reproduce import _validate

        _validate(names, mode)
    assert {p.stem for p in Path(SIMS).glob("*.toml")} >= {"toy", "full", "discrete_floor"}


def test_a_crashing_experiment_exits_2_and_the_others_are_reported(tmp_path, capsys, monkeypatch):
    """A crash (here a KeyError planted in the toy experiment) is not a failed verdict:
    exit status 2, one line naming the experiment and the error, and the report holds
    every other experiment's claims and the crash's note (issue #33, item 4)."""
    from rankflow.reproduce import toy

    def crash(ctx):
        raise KeyError("lam_qk")

    monkeypatch.setattr(toy, "run_experiment", crash)
    out = tmp_path / "r"
    capsys.readouterr()
    rc = cli.main(["reproduce", "--quick", "--only", "toy", "rank", "--out", str(out), "--quiet"])
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert err.count("\n") == 1 and "experiment toy crashed: KeyError: 'lam_qk'" in err, err
    assert "Traceback" not in err
    report = (out / "report.md").read_text()
    assert "rank.factorised_is_nuclear" in report and "**Crashed** (KeyError" in report
    assert "Traceback" in (out / "tables" / "crash_toy.txt").read_text()


def test_one_sided_claims_are_named_in_the_report():
    """The summary table gives every tested claim's sides, and a one-sided claim carries a
    row saying which direction it cannot see and its two-sided partner."""
    from rankflow.reproduce import report
    from rankflow.reproduce._common import Claim

    common = dict(experiment="toy", source="T4", statement="s", prediction="p",
                  measurement="m", tolerance="t")  # fmt: skip
    claims = [
        Claim(name="toy.a", verdict="pass", **common),
        Claim(name="toy.b", verdict="fail", one_sided="a bound; partner toy.a", **common),
        Claim(name="toy.c", verdict="observation", **common),
    ]
    text = report.render(claims, mode="quick", seconds={}, notes={}, provenance={}, command="c")
    assert "| 1 | [toy.a](#toya) | T4 | two-sided | ✅ pass |" in text
    assert "| 2 | [toy.b](#toyb) | T4 | one-sided |" in text
    assert "| 3 | [toy.c](#toyc) | T4 | — |" in text
    assert text.count("| one-sided | a bound; partner toy.a |") == 1


def test_every_experiment_has_a_title_in_run_order():
    from rankflow.reproduce.report import TITLES

    assert list(TITLES) == list(EXPERIMENTS)
