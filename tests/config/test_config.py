"""Bad input: a one-line error naming the field, exit code 2, nothing compiled."""

import math

import pytest

import rankflow
from rankflow import cli
from rankflow.core import config as C
from rankflow.core import vocabulary
from rankflow.core.program import TRACE_COUNTS


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
        # The wsd schedules' decay tail (issue #43): in (0, save.t1 − warmup], wsd only.
        (
            {"dynamics": {"schedule": "wsd", "warmup": 4, "decay_steps": 7}, "save": {"t1": 10}},
            "dynamics.decay_steps",
            "must be in (0, save.t1 − dynamics.warmup = 6] steps",
        ),
        (
            {"dynamics": {"schedule": "wsd_cosine", "decay_steps": 0}},
            "dynamics.decay_steps",
            "must be in (0,",
        ),
        (
            {"dynamics": {"schedule": "linear", "decay_steps": 2}},
            "dynamics.decay_steps",
            "only the wsd schedules",
        ),
        ({"dynamics": {"decay_steps": 2}}, "dynamics.decay_steps", "a constant schedule has no"),
        (
            {"dynamics": {"schedule": "wsd", "warmup": 10}, "save": {"t1": 10}},
            "dynamics.warmup",
            "room for its decay tail",
        ),
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


# --- dynamics, noise, paths and solvers ---------------------------------------------------

_NOISY = "stochastic_flow, stochastic_momentum_flow, sgd_gaussian"


@pytest.mark.parametrize(
    "cfg, field, allowed",
    [
        ({"dynamics": {"kind": "gd", "sigma": 0.1}}, "dynamics.sigma", _NOISY),
        ({"dynamics": {"kind": "gradient_flow", "sigma": 0.1}}, "dynamics.sigma", _NOISY),
        ({"dynamics": {"kind": "momentum", "sigma": 0.1}}, "dynamics.sigma", _NOISY),
        (
            {"problem": {"kind": "sensing"}, "dynamics": {"kind": "sgd", "sigma": 0.1}},
            "dynamics.sigma",
            _NOISY,
        ),
        ({"dynamics": {"kind": "momentum_flow", "mu": 0}}, "dynamics.mu", "> 0"),
        ({"dynamics": {"kind": "momentum_flow_coupled", "mu": -1.0}}, "dynamics.mu", "> 0"),
        ({"dynamics": {"kind": "momentum", "mu": 1.5}}, "dynamics.mu", "(0, 1]"),
        ({"dynamics": {"kind": "momentum_coupled", "mu": 2}}, "dynamics.mu", "(0, 1]"),
        (
            {"problem": {"kind": "sensing", "samples": 20}, "dynamics": {"kind": "sgd"}},
            "dynamics.batch",
            "≤ problem.samples = 20",
        ),
        (
            {"dynamics": {"kind": "sgd"}},
            "dynamics.kind",
            "sensing, completion, regression or codiagonal",
        ),
        ({"dynamics": {"paths": 0}}, "dynamics.paths", "≥ 1"),
        (
            {"dynamics": {"kind": "gd", "paths": 4}},
            "dynamics.paths",
            _NOISY + ", sgd",
        ),
        (
            {"dynamics": {"kind": "gradient_flow", "paths": 2}},
            "dynamics.paths",
            _NOISY + ", sgd",
        ),
        (
            {"dynamics": {"kind": "stochastic_flow", "sigma": 0.1}, "solver": {"method": "tsit5"}},
            "solver.method",
            "euler, heun, midpoint, ralston, sea, shark, sra1",
        ),
        (
            {
                "dynamics": {"kind": "stochastic_momentum_flow", "sigma": 0.1},
                "solver": {"method": "dopri5"},
            },
            "solver.method",
            "euler, heun, midpoint, ralston, sea, shark, sra1",
        ),
        ({"solver": {"method": "shark"}}, "solver.method", "tsit5, dopri5"),
        (
            {"dynamics": {"kind": "momentum_flow"}, "solver": {"method": "sra1"}},
            "solver.method",
            "tsit5, dopri5",
        ),
        (
            {
                "dynamics": {"kind": "stochastic_flow", "sigma": 0.1},
                "solver": {"method": "euler", "adaptive": True},
            },
            "solver.adaptive",
            "heun, midpoint, ralston, shark, sra1",
        ),
        # A bad combination inside a structural sweep is found before anything runs.
        (
            {"dynamics": {"sigma": 0.1}, "sweep": {"dynamics.kind": ["stochastic_flow", "gd"]}},
            "dynamics.sigma",
            _NOISY,
        ),
    ],
)
def test_bad_dynamics_input_names_the_field_and_the_allowed_values(cfg, field, allowed):
    before = dict(TRACE_COUNTS)
    msg = _error(cfg)
    assert msg.startswith(f"{field}:"), msg
    assert allowed in msg, msg
    assert dict(TRACE_COUNTS) == before


def _sigma_warnings(record):
    return [w for w in record if "dynamics.sigma = 0" in str(w.message)]


@pytest.mark.parametrize(
    "cfg",
    [
        {"dynamics": {"kind": "stochastic_flow"}},
        {"dynamics": {"kind": "sgd_gaussian"}},
        {"dynamics": {"kind": "stochastic_momentum_flow", "sigma": 0.0}},
        # Many quiet points, two kinds: still one warning, naming both.
        {
            "dynamics": {"kind": "stochastic_flow"},
            "sweep": {
                "dynamics.kind": ["stochastic_flow", "sgd_gaussian"],
                "dynamics.sigma": [0.0, 0.1],
                "seed": [0, 1],
            },
        },
    ],
)
def test_stochastic_dynamics_without_noise_warn_once_per_resolve(cfg):
    import warnings

    for _ in range(2):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            C.resolve(cfg)
        assert len(_sigma_warnings(record)) == 1, [str(w.message) for w in record]
    message = str(_sigma_warnings(record)[0].message)
    kinds = cfg.get("sweep", {}).get("dynamics.kind", [cfg["dynamics"]["kind"]])
    assert all(k in message for k in kinds), message


def test_noisy_stochastic_dynamics_do_not_warn():
    import warnings

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        C.resolve({"dynamics": {"kind": "stochastic_flow", "sigma": 0.1}})
        C.resolve({"dynamics": {"kind": "gd"}})
    assert _sigma_warnings(record) == []


def test_stochastic_dynamics_without_noise_still_run():
    import warnings

    import numpy as np

    cfg = {
        "dynamics": {"kind": "sgd_gaussian", "eta": 0.1, "paths": 2},
        "save": {"t1": 10, "num": 3},
    }
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        df = rankflow.run(cfg)
    assert len(_sigma_warnings(record)) == 1
    assert (df["status"] == "ok").all() and len(df) == 2 * 3
    assert df["loss"].notna().all()
    # No noise: both paths are the same deterministic run.
    a, b = (run["loss"].to_numpy() for _, run in df.groupby("path"))
    np.testing.assert_array_equal(a, b)


# --- validation separate from derivation -------------------------------------------------


@pytest.mark.parametrize(
    "sweep",
    [
        {},
        {"dynamics.lam": [0.0, 0.1]},
        {"save.num": [3, 5]},  # structural: one program per value
        {"model.r": [2, 3], "seed": [0, 1]},
    ],
)
def test_saved_config_holds_the_derived_values_whatever_the_sweep(sweep):
    cfg = C.resolve({"save": {"ts": [0.0, 4.0, 8.0]}, "sweep": sweep})
    assert cfg["problem"]["m"] == cfg["problem"]["n"] == 5
    assert cfg["problem"]["singular_values"] == list(vocabulary.DIAGONAL_DEFAULT)
    assert cfg["solver"]["method"] == "tsit5" and cfg["solver"]["adaptive"] is True
    assert cfg["save"]["t1"] == 8.0
    # Resolving again and expanding give the same: the base is a fixed point.
    assert C.resolve(cfg) == cfg
    assert C.expand(cfg) == C.expand(C.resolve({"save": {"ts": [0.0, 4.0, 8.0]}, "sweep": sweep}))


def test_a_derived_value_that_differs_between_points_stays_as_given():
    cfg = C.resolve({"sweep": {"dynamics.kind": ["gradient_flow", "gd"]}})
    assert cfg["solver"]["adaptive"] is None and cfg["solver"]["method"] is None
    assert [p["solver"]["adaptive"] for p in C.expand(cfg)] == [True, False]
    assert cfg["problem"]["m"] == 5  # shared by both points


def test_validate_changes_nothing_and_derive_fills():
    import copy

    point = C.load_config(C.DEFAULTS)
    point["sweep"] = {}
    before = copy.deepcopy(point)
    C.validate(point)
    assert point == before
    C.derive(point)
    assert point["problem"]["m"] == 5 and point["solver"]["method"] == "tsit5"


# --- one vocabulary: one name per quantity across the families (issue #27) ---------------


def test_attention_takes_the_core_names():
    from rankflow.attention import config as A

    cfg = A.resolve(
        {
            "dynamics": {"kind": "momentum", "lam": 0.3, "eta": 0.01, "mu": 0.2, "batch": 8},
            "save": {"t1": 20, "rank_tol": 1e-2, "cross_gaps": False},
            "solver": {"diverge_norm": 1e3},
            "train": {"eval_every": 10},
            "init": {"scale": 0.5},
            "sweep": {"dynamics.lam": [0.1, 0.2]},
        }
    )
    assert cfg["dynamics"] == {
        "kind": "momentum",
        "eta": 0.01,
        "mu": 0.2,
        "lam": 0.3,
        "batch": 8,
        "schedule": "constant",
        "warmup": None,
        "final_fraction": None,
        "decay_steps": None,
    }
    assert cfg["save"] == {"t1": 20, "rank_tol": 1e-2, "cross_gaps": False}
    assert cfg["init"] == {"scale": 0.5}
    assert cfg["solver"]["diverge_norm"] == 1e3
    assert A.save_steps(cfg) == [0, 10, 20]
    over = A.resolve({}, {"dynamics.eta": 0.02, "sweep.init.scale": [1.0, 2.0]})
    assert over["dynamics"]["eta"] == 0.02 and over["sweep"] == {"init.scale": [1.0, 2.0]}
    # The traced keys (and so the tables' columns) in the order they always had.
    assert A.NUMERIC_KEYS[:5] == (
        "seed",
        "init.scale",
        "dynamics.eta",
        "dynamics.mu",
        "dynamics.lam",
    )
    # The former names are gone from the schema, the keys' help and every section.
    from rankflow.cli.helptext import keys_help

    help_text = keys_help(A.SCHEMA, A.NUMERIC_KEYS)
    for old, new in A.RENAMED.items():
        assert old not in A.ALL_KEYS and new in A.ALL_KEYS
        assert f"{new} = " in help_text and f"{old} = " not in help_text
    assert "aliases" not in help_text


def _renamed(old: str, new: str, where: str = "", how: str = "") -> str:
    return (
        f"{where}{old}: renamed {new} (one name across rankflow's families); "
        f"write {how or where + new}"
    )


def _renamed_cases():
    from rankflow.attention.config import RENAMED

    return sorted(RENAMED.items())


@pytest.mark.parametrize("old, new", _renamed_cases())
def test_attention_former_name_in_toml_is_one_line_naming_the_new(tmp_path, old, new):
    from rankflow.attention import config as A

    sec, _, name = old.rpartition(".")
    path = tmp_path / "old.toml"
    path.write_text(f"[{sec}]\n{name} = 1\n")
    with pytest.raises(rankflow.ConfigError) as e:
        A.resolve(path)
    assert str(e.value) == _renamed(old, new)
    # ... and in a Python config, a --set override and a [sweep] key.
    with pytest.raises(rankflow.ConfigError) as e:
        A.resolve({sec: {name: 1}})
    assert str(e.value) == _renamed(old, new)
    with pytest.raises(rankflow.ConfigError) as e:
        A.resolve({}, {old: 1})
    assert str(e.value) == _renamed(old, new)
    with pytest.raises(rankflow.ConfigError) as e:
        A.resolve({"sweep": {old: [1]}})
    assert str(e.value) == _renamed(old, new, "sweep.", f'"{new}" in [sweep]')
    with pytest.raises(rankflow.ConfigError) as e:
        A.resolve({}, {f"sweep.{old}": [1]})
    assert str(e.value) == _renamed(old, new, "sweep.")


@pytest.mark.parametrize(
    "text, sets, message",
    [
        (
            "[train]\nlam = 0.1\n",
            [],
            _renamed("train.lam", "dynamics.lam"),
        ),
        ("", ["train.steps=8"], _renamed("train.steps", "save.t1")),
        ("", ["attention.init_scale=0.5"], _renamed("attention.init_scale", "init.scale")),
        (
            '[sweep]\n"train.eta" = [0.1, 0.2]\n',
            [],
            _renamed("train.eta", "dynamics.eta", "sweep.", '"dynamics.eta" in [sweep]'),
        ),
        ("", ["sweep.train.kind=['sgd']"], _renamed("train.kind", "dynamics.kind", "sweep.")),
    ],
)
def test_attention_cli_former_name_exits_2_with_one_line(tmp_path, capsys, text, sets, message):
    from rankflow.attention import TRACE_COUNTS as ATTENTION_TRACES

    path = tmp_path / "old.toml"
    path.write_text(text)
    before = dict(ATTENTION_TRACES)
    argv = ["attention", "train", str(path), "--out", str(tmp_path / "o")]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err == f"rankflow: error: {message}\n", err
    assert "Traceback" not in out + err
    assert not (tmp_path / "o").exists() and dict(ATTENTION_TRACES) == before


def test_core_configs_are_unchanged_by_the_attention_renames():
    # An attention-only name in a core config is an unknown key, as before (no renaming).
    with pytest.raises(rankflow.ConfigError) as e:
        C.resolve({}, {"train.lam": 0.1})
    assert str(e.value).startswith("train.lam: unknown key") and "renamed" not in str(e.value)
    with pytest.raises(rankflow.ConfigError) as e:
        C.resolve({"train": {"lam": 0.1}})
    assert str(e.value).startswith("train: unknown key") and "renamed" not in str(e.value)


def test_both_families_take_the_wsd_decay_tail():
    """``dynamics.decay_steps`` (issue #43) is a schedule key of both families, checked
    alike: its default is the last 20% of the run, and out of range it is one line."""
    from rankflow.attention import config as A
    from rankflow.numerics.schedules import Schedule, schedule_of

    core = C.resolve({"dynamics": {"schedule": "wsd", "warmup": 2}, "save": {"t1": 20}})
    assert schedule_of(core["dynamics"], 20.0) == Schedule("wsd", 2.0, 0.0, 20.0, 4.0)
    att = A.resolve(
        {
            "dynamics": {"schedule": "wsd_cosine", "decay_steps": 6},
            "save": {"t1": 20},
            "train": {"eval_every": 10},
        }
    )
    A.validate(att)
    assert schedule_of(att["dynamics"], 20.0) == Schedule("wsd_cosine", 0.0, 0.0, 20.0, 6.0)
    bad = {**att, "dynamics": {**att["dynamics"], "decay_steps": 21}}
    with pytest.raises(rankflow.ConfigError) as e:
        A.validate(bad)
    assert str(e.value).startswith("dynamics.decay_steps: must be in (0, save.t1 − ")
    assert "\n" not in str(e.value)
