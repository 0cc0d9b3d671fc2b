"""numerics owns the solver's and the schedules' defaults (issue #42): they are written
once, in ``rankflow.numerics.solve`` (``SECTION_DEFAULTS``, ``DIVERGE_NORM``,
``PID_DEFAULTS``) and ``rankflow.numerics.schedules`` (``SCHEDULE_DEFAULTS``), and both
families' config schemas take them from there; no ``Field`` of a solver or schedule key
elsewhere writes its default as a literal."""

from __future__ import annotations

import ast
from pathlib import Path

from rankflow.attention import config as AC
from rankflow.core import config as C
from rankflow.numerics import schedules as SC
from rankflow.numerics import solve as S

PKG = Path(__file__).resolve().parents[2] / "rankflow"
# The keys whose defaults numerics owns.
KEYS = frozenset(S.SECTION_DEFAULTS) | frozenset(S.PID_DEFAULTS) | frozenset(SC.SCHEDULE_DEFAULTS)


def test_both_families_take_the_solver_defaults_from_numerics():
    for family in (C, AC):
        s = family.DEFAULTS["solver"]
        assert {k: s[k] for k in ("rtol", "atol", "max_steps")} == {
            k: S.SECTION_DEFAULTS[k] for k in ("rtol", "atol", "max_steps")
        }
        assert {k: s[k] for k in S.PID_DEFAULTS} == S.PID_DEFAULTS
        assert s["diverge_norm"] == S.DIVERGE_NORM
    assert C.DEFAULTS["solver"]["dt"] == S.SECTION_DEFAULTS["dt"]
    assert AC.DEFAULTS["solver"]["method"] == S.SECTION_DEFAULTS["method"]


def test_both_families_read_the_schedule_defaults_of_numerics():
    d = SC.SCHEDULE_DEFAULTS
    expected = SC.Schedule(d["schedule"], d["warmup"], d["final_fraction"], 10.0)
    for family in (C, AC):
        assert SC.schedule_of(family.DEFAULTS["dynamics"], 10.0) == expected
        assert family.DEFAULTS["dynamics"]["schedule"] == d["schedule"]


def literal_defaults(source: str) -> list[tuple[int, str]]:
    """``(line, key)`` of each ``"key": Field(types, default, …)`` entry in ``source``
    whose key is one of :data:`KEYS` and whose default is a literal other than None."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if (
                isinstance(key, ast.Constant)
                and key.value in KEYS
                and isinstance(value, ast.Call)
                and getattr(value.func, "id", None) == "Field"
                and len(value.args) >= 2
                and isinstance(value.args[1], ast.Constant)
                and value.args[1].value is not None
            ):
                found.append((node.lineno, key.value))
    return found


def test_no_schema_writes_a_solver_or_schedule_default_itself():
    found = {
        f"{p.relative_to(PKG.parent)}:{line}": key
        for p in sorted(PKG.rglob("*.py"))
        for line, key in literal_defaults(p.read_text())
    }
    assert not found, f"solver or schedule defaults written outside numerics: {found}"


def test_the_literal_default_check_finds_a_copy():
    """The wrong version: a schema writing ``rtol``'s or ``schedule``'s default again is
    caught; one taking it from numerics, or leaving it None, is not."""
    assert literal_defaults('F = {"rtol": Field(NUM, 1e-6, "tolerance", gt(0))}')
    assert literal_defaults('F = {"schedule": Field(STR, "constant", "schedule")}')
    assert not literal_defaults('F = {"rtol": Field(NUM, D["rtol"], "tolerance")}')
    assert not literal_defaults('F = {"warmup": Field(NUM, None, "w", optional=True)}')
