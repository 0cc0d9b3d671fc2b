"""What a solver can do comes from diffrax's types, never from lists of names (issue #27):
``rankflow.numerics.solve.SOLVERS`` (config name → solver class) is the one list of solver
names in the source; the capabilities (Itô, SDE, ODE, error estimate, Lévy area) agree
with what diffrax declares and does; and the config's validation follows them (the wrong
version: a capability that calls Heun Itô lets through what must be refused)."""

from __future__ import annotations

import ast
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
from rankflow.core import config as C
from rankflow.core import vocabulary
from rankflow.numerics import solve as S

PKG = Path(__file__).resolve().parents[2] / "rankflow"
NAMES = frozenset(S.SOLVERS)


# --- the one list of names -------------------------------------------------------------


def solver_lists(source: str) -> list[tuple[int, list[str]]]:
    """``(line, names)`` of every tuple, list or set literal in ``source`` holding two or
    more solver names or only solver names, and of every dict literal keyed by two or
    more, except the dict assigned to ``SOLVERS``."""
    tree = ast.parse(source)
    mapping = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "SOLVERS"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = node.elts
        elif isinstance(node, ast.Dict) and id(node) not in mapping:
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = [e.value for e in items if isinstance(e, ast.Constant) and e.value in NAMES]
        only_names = bool(names) and len(names) == len(items)
        if len(names) >= 2 or (only_names and not isinstance(node, ast.Dict)):
            found.append((node.lineno, names))
    return found


def test_the_mapping_is_the_only_list_of_solver_names():
    found = {
        f"{p.relative_to(PKG.parent)}:{line}": names
        for p in sorted(PKG.rglob("*.py"))
        for line, names in solver_lists(p.read_text())
    }
    assert not found, f"solver names listed outside numerics.solve.SOLVERS: {found}"


def test_the_detector_finds_a_hand_kept_list():
    """The wrong version: each way of listing solvers by hand is caught; the mapping is
    not."""
    planted = [
        'ADAPTIVE = ("tsit5", "dopri5", "bosh3")',
        'ITO = ("euler",)',
        'if method in ["shark", "sea"]: pass',
        'LEVY = {"sea": 1, "shark": 1}',
    ]
    for source in planted:
        assert solver_lists(source), source
    assert not solver_lists('SOLVERS = {"tsit5": Tsit5, "euler": Euler}')
    assert not solver_lists('method = "tsit5"; default = ("shark" if sde else "tsit5")')


# --- the capabilities agree with diffrax -----------------------------------------------


def test_the_capabilities_of_named_solvers():
    assert S.is_ito("euler") and not S.is_ito("heun")
    assert isinstance(S.make_solver("heun"), diffrax.AbstractStratonovichSolver)
    assert vocabulary.ito_methods() == ("euler",)
    for name in ("sea", "shark", "sra1"):
        assert S.levy_area(name) is diffrax.SpaceTimeLevyArea
        assert S.solves_sdes(name) and not S.solves_odes(name)
    for name in ("euler", "heun", "tsit5"):
        assert S.levy_area(name) is diffrax.BrownianIncrement
    assert S.has_error_estimate("tsit5") and S.has_error_estimate("shark")
    assert not any(S.has_error_estimate(m) for m in ("rk4", "euler", "sea"))
    assert vocabulary.adaptive_by_default_methods() == ("tsit5", "dopri5", "dopri8", "bosh3")
    assert not S.solves_sdes("tsit5") and not S.solves_sdes("rk4")


def _decay(t, y, args):
    return -y


@pytest.mark.parametrize("method", S.methods(S.solves_odes))
def test_an_error_estimate_is_what_lets_diffrax_adapt(method):
    """Adaptive steps on dy/dt = −y meet the tolerance exactly for the solvers said to
    estimate their error; without an estimate diffrax refuses (Euler) or the steps grow
    unchecked (RK4's zero estimate)."""
    ts = np.asarray([0.0, 5.0])
    how = S.setup({"method": method, "rtol": 1e-8, "atol": 1e-10}, ts)
    try:
        out = S.solve(_decay, jnp.ones((), jnp.float64), None, how)
        error = abs(float(out.ys[-1]) - np.exp(-5.0))
    except RuntimeError as e:
        assert "error estimates" in str(e)
        error = np.inf
    assert (error < 1e-6) == S.has_error_estimate(method), error


@pytest.mark.parametrize("method", S.methods(S.solves_sdes))
def test_the_levy_area_is_what_diffrax_asks_for(method):
    """Each SDE solver runs on a path carrying :func:`levy_area`; a solver said to need
    space-time Lévy area is refused by diffrax on a path of plain increments."""
    ts = np.asarray([0.0, 1.0])
    key = jax.random.PRNGKey(0)
    how = S.setup({"method": method, "adaptive": False, "dt": 0.25}, ts, key=key)

    def additive(brownian):
        return diffrax.ControlTerm(lambda t, y, args: jnp.ones(()), brownian(()))

    out = S.solve(how.terms(_decay, additive), jnp.ones(()), None, how)
    assert np.isfinite(float(out.ys[-1]))
    plain = lambda shape: diffrax.UnsafeBrownianPath(shape, key)  # noqa: E731
    if S.levy_area(method) is not diffrax.BrownianIncrement:
        terms = diffrax.MultiTerm(diffrax.ODETerm(_decay), additive(plain))
        with pytest.raises(Exception, match="(?i)levy|lévy"):
            S.solve(terms, jnp.ones(()), None, how)


# --- the config follows the capabilities ---------------------------------------------

HEUN_GRADIENT_NOISE = {
    "problem": {"kind": "sensing", "m": 4, "n": 4, "rank": 2, "samples": 20},
    "dynamics": {"kind": "stochastic_flow", "sigma": 0.1, "noise": "gradient"},
    "solver": {"method": "heun", "dt": 0.1},
}


def test_validation_refuses_what_the_capabilities_refuse():
    with pytest.raises(rankflow.ConfigError, match="^solver.method: .* use one of euler$"):
        C.resolve(HEUN_GRADIENT_NOISE)
    ode = {"dynamics": {"kind": "gradient_flow"}, "solver": {"method": "rk4", "adaptive": True}}
    with pytest.raises(rankflow.ConfigError, match="^solver.adaptive: rk4 has no error"):
        C.resolve(ode)


def test_a_wrong_capability_lets_through_what_must_be_refused(monkeypatch):
    """The wrong version: if Heun were Itô, Heun with gradient noise would pass the
    config; so the validation reads the capability, and the capability tests above are
    what keeps it right."""
    real = S.is_ito
    monkeypatch.setattr(S, "is_ito", lambda m: m == "heun" or real(m))
    assert C.resolve(HEUN_GRADIENT_NOISE)["solver"]["method"] == "heun"
    monkeypatch.setattr(S, "has_error_estimate", lambda m: True)
    ode = {"dynamics": {"kind": "gradient_flow"}, "solver": {"method": "rk4", "adaptive": True}}
    assert C.resolve(ode)["solver"]["adaptive"] is True
