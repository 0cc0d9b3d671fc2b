"""``solver.pcoeff``, ``solver.icoeff`` and ``solver.dcoeff``: the coefficients of the
PID step-size controller of adaptive solves reach diffrax's controller, change the steps
the solver takes, keep the solve within its tolerance, and bad values are refused before
anything compiles."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
from rankflow import cli
from rankflow.core import config as C
from rankflow.engine import TRACE_COUNTS, programs
from rankflow.numerics.solve import PID_DEFAULTS


def flow_config(lams=(0.0, 0.05), num=4, **solver) -> dict:
    """Gradient flow (float64, adaptive Tsit5) on a 3 × 3 diagonal problem."""
    return {
        "x64": True,
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5, 0.25]},
        "init": {"scale": 0.1},
        "dynamics": {"kind": "gradient_flow", "eta": 1.0},
        "solver": {"method": "tsit5", "rtol": 1e-6, "atol": 1e-8, **solver},
        "save": {"t1": 60.0, "num": num},
        "sweep": {"dynamics.lam": list(lams)},
    }


@pytest.fixture
def spy(monkeypatch):
    """Record the step-size controller of every adaptive ``diffeqsolve`` rankflow traces
    and, at run time, the steps (accepted + rejected) each solve took."""
    seen = {"controllers": [], "steps": []}
    real = diffrax.diffeqsolve

    def recording(*args, **kw):
        controller = kw["stepsize_controller"]
        if isinstance(controller, diffrax.PIDController):
            seen["controllers"].append(controller)
            sol = real(*args, **kw)
            jax.debug.callback(
                lambda n: seen["steps"].append(np.asarray(n).sum()), sol.stats["num_steps"]
            )
            return sol
        return real(*args, **kw)

    monkeypatch.setattr(diffrax, "diffeqsolve", recording)
    programs.release()  # trace afresh, through the spy
    yield seen
    programs.release()


def test_the_defaults_are_diffrax_integral_controller():
    s = C.DEFAULTS["solver"]
    assert (s["pcoeff"], s["icoeff"], s["dcoeff"]) == (0.0, 1.0, 0.0)
    assert PID_DEFAULTS == {"pcoeff": 0.0, "icoeff": 1.0, "dcoeff": 0.0}
    from rankflow.cli.helptext import keys_help

    help_text = keys_help(C.SCHEMA, C.NUMERIC_KEYS)
    for key in ("solver.pcoeff", "solver.icoeff", "solver.dcoeff"):
        assert key in help_text


def test_the_coefficients_reach_the_controller(spy):
    df = rankflow.run(flow_config(lams=(0.05,), num=2, pcoeff=0.3, icoeff=0.4, dcoeff=0.05))
    assert (df["status"] == "ok").all()
    (pid,) = {(c.pcoeff, c.icoeff, c.dcoeff, c.rtol, c.atol) for c in spy["controllers"]}
    assert pid == (0.3, 0.4, 0.05, 1e-6, 1e-8)
    assert sum(spy["steps"]) > 0


@pytest.mark.slow
def test_a_pi_controller_takes_other_steps_and_keeps_the_tolerance(spy):
    """Against a float64 Dopri8 solve at rtol 1e-12: both the integral-only and a PI
    controller (0.3, 0.3) land within 1e-5 (each column relative to its scale: loss,
    singular values, balance; measured 2.4e-6 and 3.2e-6) at rtol 1e-6, with different
    step counts; a loose tolerance (rtol 1e-3: 2.6e-3) does not (the bound can fail)."""
    columns = ["loss", "sv_1", "sv_2", "sv_3", "balance_trace"]

    def solve(**solver):
        spy["steps"].clear()
        df = rankflow.run(flow_config(**solver))
        assert (df["status"] == "ok").all()
        return df[columns].to_numpy(), int(sum(spy["steps"]))

    ref, _ = solve(method="dopri8", rtol=1e-12, atol=1e-14)

    def error(values):  # each column relative to its largest value over the table
        return float(np.max(np.abs(values - ref) / np.abs(ref).max(axis=0)))

    plain, plain_steps = solve()
    pi, pi_steps = solve(pcoeff=0.3, icoeff=0.3)
    loose, _ = solve(rtol=1e-3, atol=1e-5)
    assert pi_steps != plain_steps and pi_steps > 0 and plain_steps > 0
    assert error(plain) < 1e-5 and error(pi) < 1e-5
    assert not np.array_equal(pi, plain)
    assert error(loose) > 1e-5  # the mutant: a solve outside the tolerance is caught


FLOW_TOML = """
[problem]
kind = "diagonal"
singular_values = [1.0, 0.5]
[dynamics]
kind = "gradient_flow"
[save]
t1 = 4.0
num = 3
"""

BAD = [
    ("solver.pcoeff=-0.1", "solver.pcoeff: must be ≥ 0"),
    ("solver.icoeff=0", "solver.icoeff: must be > 0"),
    ("solver.icoeff=-1.0", "solver.icoeff: must be > 0"),
    ("solver.dcoeff=-0.5", "solver.dcoeff: must be ≥ 0"),
    ("solver.pcoeff='fast'", "solver.pcoeff: expected"),
    ("solver.dcoeff=true", "solver.dcoeff: expected"),
    ("solver.icoeff=nan", "solver.icoeff: must be finite"),
]


@pytest.mark.parametrize("assignment, fragment", BAD)
def test_bad_coefficients_are_one_line_before_compiling(
    tmp_path, monkeypatch, capsys, assignment, fragment
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flow.toml").write_text(FLOW_TOML)
    before = dict(TRACE_COUNTS)
    assert cli.main(["run", "flow.toml", "--set", assignment, "--out", "out"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("rankflow: error: "), err
    assert fragment in err, err
    assert "Traceback" not in out + err
    assert not (tmp_path / "out").exists()
    assert dict(TRACE_COUNTS) == before


@pytest.mark.parametrize(
    "solver, fragment",
    [({"pcoeff": -1}, "solver.pcoeff"), ({"icoeff": 0.0}, "solver.icoeff")],
)
def test_bad_coefficients_from_python_raise_config_error(solver, fragment):
    before = dict(TRACE_COUNTS)
    with pytest.raises(rankflow.ConfigError) as e:
        rankflow.run(flow_config(**solver))
    assert str(e.value).startswith(fragment) and "\n" not in str(e.value)
    assert dict(TRACE_COUNTS) == before


def test_a_sweep_over_a_coefficient_is_validated_per_value():
    cfg = flow_config()
    cfg["sweep"] = {"solver.pcoeff": [0.0, 0.3, -0.2]}
    with pytest.raises(rankflow.ConfigError, match="solver.pcoeff: must be ≥ 0"):
        C.expand(C.resolve(cfg))


def test_the_attention_flow_takes_the_same_coefficients(spy):
    """``[solver]`` of an attention config has the same fields, checked alike, and its
    gradient flow (``rankflow.attention.flow.integrate``) hands them to the controller."""
    from rankflow.attention import config as AC
    from rankflow.attention.flow import integrate

    assert {k: AC.DEFAULTS["solver"][k] for k in PID_DEFAULTS} == PID_DEFAULTS
    with pytest.raises(rankflow.ConfigError, match=r"^solver\.icoeff: must be > 0"):
        AC.resolve({"solver": {"icoeff": 0.0}})
    loss = lambda params, batch: 0.5 * jnp.sum(params["w"] ** 2)  # noqa: E731
    pid = {"pcoeff": 0.2, "icoeff": 0.4, "dcoeff": 0.0}
    out = integrate(
        loss, {"w": jnp.zeros(())}, 1.0, {"w": jnp.ones(3)}, {}, np.arange(3.0),
        lambda params: params["w"][0], solver=pid,
    )  # fmt: skip
    assert np.allclose(out.ys, np.exp(-np.arange(3.0)), rtol=1e-5)
    (seen,) = {(c.pcoeff, c.icoeff, c.dcoeff) for c in spy["controllers"]}
    assert seen == (0.2, 0.4, 0.0)
