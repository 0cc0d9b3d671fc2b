"""The engine ↔ family seam declared once (issue #42): every hook the engine calls is on
:class:`rankflow.engine.Family`; the engine never probes a family with ``getattr``; a
family missing a required hook fails when its class is defined; the optional hooks'
defaults run a sweep of a family that defines none of them."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rankflow import engine
from rankflow.attention.sweep import ATTENTION, AttentionFamily
from rankflow.config.fields import NUM, Field, gt, top_fields
from rankflow.config.schema import Schema
from rankflow.core.family import CORE, CORE_STATES
from rankflow.engine import Family, store
from rankflow.engine.plan import checked_plan

ENGINE = Path(engine.__file__).parent


def family_probes(source: str) -> list[str]:
    """The ``getattr``/``hasattr`` calls of ``source`` whose object is a family or its
    schema (``family``, ``self.family``, ``family.schema``, …), as written."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and "family" in ast.unparse(node.args[0]).lower()
        ):
            out.append(ast.unparse(node))
    return out


def test_the_engine_never_probes_a_family_with_getattr():
    found = {p.name: family_probes(p.read_text()) for p in sorted(ENGINE.glob("*.py"))}
    assert len(found) > 10
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_a_probe_of_a_family_or_its_schema_is_caught():
    """The wrong version: the engine's former probes are reported, other getattrs not."""
    source = """
local = getattr(family, "run_bytes", None) is not None
schema = getattr(family.schema, "SCHEMA", None)
ok = hasattr(self.family, "check")
take = getattr(self.members, "take", None)
"""
    assert sorted(family_probes(source)) == [
        "getattr(family, 'run_bytes', None)",
        "getattr(family.schema, 'SCHEMA', None)",
        "hasattr(self.family, 'check')",
    ]


# --- required hooks at class definition -------------------------------------------------


def complete_hooks() -> dict:
    """The namespace of a family class defining every required hook."""
    return {
        "tables": ("results.parquet",),
        "status_table": "results.parquet",
        "schema": TOY,
        "paths": lambda self, point: 1,
        "chunk_size": lambda self, point: 2,
        "expected_rows": lambda self, point, runs: {"results.parquet": runs},
        "run_chunk": toy_chunk,
        "result": lambda self, tables: tables["results.parquet"],
    }


@pytest.mark.parametrize(
    "hook", ["run_chunk", "result", "paths", "chunk_size", "expected_rows", "tables", "schema"]
)
def test_a_family_missing_a_required_hook_fails_when_defined(hook):
    hooks = complete_hooks()
    del hooks[hook]
    with pytest.raises(TypeError, match=f"lacks the required hook {hook} of"):
        type("Half", (Family,), hooks)


def test_a_family_missing_run_chunk_fails_at_its_class_statement():
    with pytest.raises(TypeError, match="family Half lacks the required hook run_chunk"):

        class Half(Family):
            tables = status_table = "results.parquet"
            schema = None

            def paths(self, point):
                return 1

            def chunk_size(self, point):
                return 1

            def expected_rows(self, point, runs):
                return {}

            def result(self, tables):
                return tables


def test_a_complete_family_and_an_abstract_base_define():
    """The right versions: every required hook given (here or by a base) defines the
    class; ``abstract=True`` defers the check to the subclasses."""
    hooks = complete_hooks()
    run_chunk = hooks.pop("run_chunk")
    base = type("Base", (Family,), hooks, abstract=True)
    full = type("Full", (base,), {"run_chunk": run_chunk})
    assert full().chunk_size({}) == 2
    with pytest.raises(TypeError, match="run_chunk"):
        type("StillHalf", (base,), {})


def test_both_families_are_families_and_pickle():
    for family in (CORE, CORE_STATES, ATTENTION, AttentionFamily(export="x")):
        assert isinstance(family, Family)
        again = pickle.loads(pickle.dumps(family))
        assert again.tables == family.tables and again.schema is family.schema


# --- the optional hooks' defaults ----------------------------------------------------------

TOY = Schema(
    {"": top_fields("seed"), "run": {"lam": Field(NUM, 0.1, "decay", gt(0), traced=True)}},
    validate=lambda point: None,
    derive=lambda point: point,
)


def toy_chunk(self, points, chunk, swept):
    ids, paths = chunk.runs.arrays()
    lam = np.array([points[i]["run"]["lam"] for i in ids])
    return {
        "results.parquet": pd.DataFrame(
            {"run_id": ids, "path": paths, "t": 0.0, "status": "ok", "value": 2 * lam}
        )
    }


Toy = type("Toy", (Family,), complete_hooks())


def test_a_family_with_only_the_required_hooks_runs_a_sweep():
    """No memory model, no saves limit, no check, no size keys: the defaults plan and
    run it (locally, chunks of its own size), and its table is the rows it made."""
    cfg = TOY.resolve({}, {"sweep.run.lam": [0.1, 0.2, 0.3]})
    chunk, points, chunks = checked_plan(Toy(), cfg, None)
    assert (
        chunk is None
        and len(chunks) == 2
        and chunks.facts[0]
        == {
            "one": 0,
            "shared": 0,
            "result": 0,
        }
    )
    table, summary = engine.execute(Toy(), cfg, quiet=True)
    assert table["value"].tolist() == pytest.approx([0.2, 0.4, 0.6])
    assert summary.runs == 3 and summary.chunks_run == 2
    assert Toy().memory_parts({}) == {(): 0} and Toy().saves({}) is None


def test_the_families_hooks_override_the_defaults():
    point = CORE.schema.expand(CORE.schema.resolve({}))[0]
    assert CORE.run_bytes(point) > 0 and CORE.saves(point)[1] == "save.num"
    assert set(CORE.memory_parts(point)) != {tuple(CORE.size_keys)}
    assert CORE_STATES.tables == (store.STATES, store.RESULTS)
