"""Bad input: a one-line error naming the field, exit code 2, nothing compiled."""

import math

import pytest

import rankflow
from rankflow import cli
from rankflow import config as C
from rankflow.simulate import TRACE_COUNTS


def _error(cfg):
    with pytest.raises(rankflow.ConfigError) as e:
        C.resolve(cfg)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "cfg, field, words",
    [
        ({"dynamics": {"lamda": 0.1}}, "dynamics.lamda", "did you mean 'dynamics.lam'"),
        ({"dynamcs": {"lam": 0.1}}, "dynamcs", "did you mean 'dynamics'"),
        ({"sead": 1}, "sead", "did you mean 'seed'"),
        ({"dynamics": {"lam": "big"}}, "dynamics.lam", "expected a number"),
        ({"model": {"r": 2.5}}, "model.r", "expected an integer"),
        ({"x64": 1}, "x64", "expected true or false"),
        ({"model": {"r": True}}, "model.r", "boolean"),
        ({"dynamics": {"lam": -0.1}}, "dynamics.lam", "must be ≥ 0"),
        ({"dynamics": {"eta": -1.0}}, "dynamics.eta", "must be > 0"),
        ({"dynamics": {"eta": 0}}, "dynamics.eta", "must be > 0"),
        ({"dynamics": {"sigma": -1.0}}, "dynamics.sigma", "must be ≥ 0"),
        ({"model": {"r": 0}}, "model.r", "must be ≥ 1"),
        ({"save": {"t1": 0}}, "save.t1", "must be > 0"),
        ({"save": {"t1": -5.0}}, "save.t1", "must be > 0"),
        ({"dynamics": {"lam": math.nan}}, "dynamics.lam", "finite"),
        ({"dynamics": {"eta": math.inf}}, "dynamics.eta", "finite"),
        ({"problem": {"singular_values": [1.0, math.nan]}}, "problem.singular_values", "finite"),
        ({"problem": {"kind": "sensing", "m": 4, "n": 5, "rank": 6}}, "problem.rank", "≤ min"),
        (
            {"problem": {"kind": "sensing", "rank": 2, "singular_values": [1.0]}},
            "problem.singular_values",
            "problem.rank = 2",
        ),
        ({"problem": {"kind": "regression", "n": 30, "samples": 10}}, "problem.samples", "≥"),
        ({"problem": {"kind": "tensor"}}, "problem.kind", "one of diagonal"),
        ({"dynamics": {"kind": "sgd_nesterov"}}, "dynamics.kind", "one of"),
        ({"solver": {"method": "euler", "adaptive": True}}, "solver.adaptive", "error estimate"),
        ({"dynamics": {"kind": "gd"}, "save": {"t1": 10, "num": 4}}, "save.num", "whole steps"),
        ({"dynamics": {"sigma": 0.1}}, "dynamics.sigma", "deterministic"),
        ({"problem": {"kind": "custom"}}, "problem.loss", "custom problems need"),
        ({"problem": {"kind": "custom", "loss": "nowhere:f"}}, "problem.loss", "cannot load"),
        ({"save": {"ts": [0.0, 5.0, 3.0]}}, "save.ts", "increasing"),
        ({"sweep": {"dynamics.lam": []}}, "sweep.dynamics.lam", "non-empty"),
        ({"sweep": {"dynamics.lam": [0.1, -1.0]}}, "dynamics.lam", "must be ≥ 0"),
        ({"sweep": {"dynamics.lamb": [0.1]}}, "dynamics.lamb", "did you mean"),
        ({"sweep": {"x64": [True, False]}}, "sweep.x64", "not sweepable"),
    ],
)
def test_bad_input_names_the_field(cfg, field, words):
    msg = _error(cfg)
    assert msg.startswith(field), msg
    assert words in msg, msg


def test_sweep_point_is_validated_before_compiling():
    # Valid alone, invalid in one combination: found before anything runs.
    msg = _error(
        {"problem": {"kind": "sensing", "m": 8, "n": 8}, "sweep": {"problem.rank": [2, 9]}}
    )
    assert msg.startswith("problem.rank")


def test_set_overrides_parse_toml_literals():
    sets = C.parse_set(["dynamics.lam=0.1", "save.ts=[0, 5, 10]", "init.kind=balanced", "x64=true"])
    assert sets == {
        "dynamics.lam": 0.1,
        "save.ts": [0, 5, 10],
        "init.kind": "balanced",
        "x64": True,
    }
    cfg = C.resolve({}, sets)
    assert cfg["dynamics"]["lam"] == 0.1 and cfg["save"]["t1"] == 10.0
    with pytest.raises(rankflow.ConfigError, match="^--set"):
        C.parse_set(["dynamics.lam"])


def test_defaults_are_resolved():
    cfg = C.resolve({})
    assert cfg["problem"]["m"] == cfg["problem"]["n"] == 5
    assert cfg["solver"]["adaptive"] is True
    assert C.resolve({"solver": {"method": "rk4"}})["solver"]["adaptive"] is False


def _write(tmp_path, text):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "toml, sets, field",
    [
        ("[dynamics]\nlamda = 0.1\n", [], "dynamics.lamda"),
        ("[dynamics]\nlam = -1.0\n", [], "dynamics.lam"),
        ("[dynamics]\nlam = nan\n", [], "dynamics.lam"),
        ("[model]\nr = 0\n", [], "model.r"),
        ("[save]\nt1 = 0\n", [], "save.t1"),
        ("", ["dynamics.eta=-2"], "dynamics.eta"),
        ("", ["problem.kind=sensing", "problem.rank=50"], "problem.rank"),
        ("[dynamics\n", [], "config"),
    ],
)
def test_cli_bad_input_exit_2_one_line_nothing_compiled(tmp_path, capsys, toml, sets, field):
    before = dict(TRACE_COUNTS)
    args = ["run", _write(tmp_path, toml), "--out", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rankflow: error: {field}"), err
    assert len(err.splitlines()) == 1
    assert dict(TRACE_COUNTS) == before
    assert not (tmp_path / "out").exists()


def test_cli_missing_file(tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
