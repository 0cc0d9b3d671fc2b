"""One :class:`rankflow.config.schema.Schema` per family (issue #42): a sweep is expanded
once (the plan reuses resolve's points, and a changed config is expanded anew), both
families' structure keys follow one rule (traced keys and ``name`` left out), a callable
becomes its identity in the JSON copy by the ``callables`` mark, and the families' module
names are the schema's (the plain aliases the docs and tests use)."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest

import rankflow
from rankflow import engine
from rankflow.attention import config as A
from rankflow.config import Schema, fields
from rankflow.config.callables import callable_identity
from rankflow.config.fields import NUM, STR, Field, gt, top_fields
from rankflow.core import config as C
from rankflow.core.family import CORE
from tests.helpers import ROOT

SWEEP = {"dynamics": {"kind": "gd"}, "save": {"t1": 10, "num": 3}}


def counting_schema():
    """A toy schema whose ``validate`` counts the points it checks."""
    seen = []
    sections = {
        "": top_fields("seed"),
        "run": {
            "eta": Field(NUM, 0.1, "step size", gt(0), traced=True),
            "kind": Field(STR, "a", "kind"),
        },
    }
    schema = Schema(sections, validate=seen.append, derive=lambda point: point)
    return schema, seen


def test_a_resolved_config_is_expanded_once():
    """resolve validates every point; expanding (planning) the config it returned
    validates none again and gives the same points; the wrong version — a copy of it, or
    it changed — is expanded anew."""
    schema, seen = counting_schema()
    cfg = schema.resolve({}, {"sweep.run.eta": [0.1, 0.2, 0.3], "sweep.run.kind": ["a", "b"]})
    assert len(seen) == 6
    points = schema.expand(cfg)
    assert list(points) and len(seen) == 6
    assert schema.expand(cfg) is points
    fresh = schema.expand(copy.deepcopy(cfg))  # not the object resolve returned
    assert fresh is not points and list(fresh) == list(points) and len(seen) == 12
    cfg["seed"] = 7  # changed since resolved: its old points would be stale
    changed = list(schema.expand(cfg))
    assert [p["seed"] for p in changed] == [7] * 6 and len(seen) == 18
    assert [p["seed"] for p in points] == [0] * 6


def test_planning_a_resolved_core_config_reuses_its_points():
    """The engine's plan of rankflow.resolve's config holds the very points resolve
    validated (point objects included); a deep copy's plan does not."""
    cfg = rankflow.resolve(SWEEP, {"sweep.dynamics.lam": [0.0, 0.1], "sweep.model.r": [2, 3]})
    points, chunks = engine.plan(CORE, cfg)
    assert points is C.expand(cfg) and len(chunks) == 2
    made = dict(points.cache)
    assert len(made) == 4 and all(points[i] is made[i] for i in made)
    other, _ = engine.plan(CORE, copy.deepcopy(cfg))
    assert other is not points and other[0] is not points[0] and other[0] == points[0]


def sims_configs():
    """``(path, family config module)`` of every sims config one family resolves."""
    out = []
    for path in sorted((ROOT / "sims").rglob("*.toml")):
        raw = tomllib.loads(path.read_text())
        if raw.keys() & {"compare", "toy"}:  # rankflow compare's and reproduce's
            continue
        out.append((path, A if raw.keys() & {"task", "attention", "train"} else C))
    return out


def test_the_reused_expansion_equals_a_fresh_one_for_every_sims_config():
    """resolve's points (made from the config before its shared values were filled in)
    equal the points of the base config it returns, as the plan made them before
    (expanded anew), for every sims config: the reuse changes no point."""
    configs = sims_configs()
    assert len(configs) >= 40
    for path, family in configs:
        cfg = family.resolve(str(path))
        reused, fresh = family.expand(cfg), family.expand(copy.deepcopy(cfg))
        assert reused is not fresh
        assert [family.flatten(p) for p in reused] == [family.flatten(p) for p in fresh], path


def test_a_bad_point_is_refused_at_resolve_not_at_plan():
    with pytest.raises(rankflow.ConfigError, match="dynamics.sigma"):
        rankflow.resolve(SWEEP, {"sweep.dynamics.sigma": [0.0, 0.1]})


# --- one structure-key rule ------------------------------------------------------------


@pytest.mark.parametrize("family", [C, A], ids=["core", "attention"])
def test_name_and_traced_keys_are_left_out_of_both_families_structure_keys(family):
    """Points differing in ``name`` or a traced key share a structure key in both
    families; a structural key (``seed`` is traced, ``x64`` is not) makes another. The
    wrong version — the core's former rule, ``name`` kept — tells the names apart."""
    one, other = (family.expand(family.resolve({"name": n}))[0] for n in ("a", "b"))
    assert family.structure_key(one) == family.structure_key(other)
    lam = family.expand(family.resolve({"dynamics": {"lam": 0.3}}))[0]
    assert family.structure_key(lam) == family.structure_key(one)
    x64 = family.expand(family.resolve({"x64": True}))[0]
    assert family.structure_key(x64) != family.structure_key(one)
    former = lambda p: fields.structure_key(p, family.SCHEMA, family.NUMERIC_KEYS)  # noqa: E731
    assert former(one) != former(other)


def test_sgd_traces_its_batch_and_the_minibatch_sme_does_not():
    """The core's traced_also: sgd's swept batch shares one program (batch left out of
    its key); the minibatch SME's makes one per value."""
    sgd = {"problem": {"kind": "regression", "samples": 64}, "dynamics": {"kind": "sgd"}}
    sgd["save"] = {"t1": 10, "num": 3}
    points = C.expand(C.resolve(sgd, {"sweep.dynamics.batch": [8, 16]}))
    assert len({C.structure_key(p) for p in points}) == 1
    sme = {**sgd, "dynamics": {"kind": "stochastic_flow", "noise": "minibatch"}}
    points = C.expand(C.resolve(sme, {"sweep.dynamics.batch": [8, 16]}))
    assert len({C.structure_key(p) for p in points}) == 2


# --- JSON ------------------------------------------------------------------------------


def square_loss(W):
    return (W**2).sum()


def cube_loss(W):
    return (W**3).sum()


def test_to_json_writes_a_callable_field_as_its_identity_in_the_config_and_its_sweep():
    """A Python loss (a field marked callables) becomes callable_identity's string, in
    the config and in its sweep; the result is what JSON reads back. The wrong version —
    no such rule — cannot be written at all."""
    raw = {"problem": {"kind": "custom", "loss": square_loss, "m": 3, "n": 3}}
    cfg = C.resolve(raw, {"sweep.problem.loss": [square_loss, cube_loss]})
    assert C.SCHEMA.callables == ("problem.loss",) and A.SCHEMA.callables == ()
    out = C.to_json(cfg)
    assert out["problem"]["loss"] == callable_identity(square_loss)
    assert out["sweep"]["problem.loss"] == [callable_identity(f) for f in (square_loss, cube_loss)]
    assert json.loads(json.dumps(out)) == out
    assert cfg["problem"]["loss"] is square_loss  # the config itself is unchanged
    with pytest.raises(TypeError):
        json.dumps(fields.copy_config(cfg, C.SCHEMA))


def test_attention_to_json_is_its_json_copy():
    cfg = A.resolve({}, {"sweep.dynamics.lam": [0.0, 0.1]})
    assert A.to_json(cfg) == json.loads(json.dumps(cfg))


# --- the families' module names --------------------------------------------------------


@pytest.mark.parametrize("family", [C, A], ids=["core", "attention"])
def test_the_config_modules_names_are_their_schemas(family):
    """The module functions and constants the docs and tests use are the schema's
    (bound methods and values, not wrappers); the schema is the mapping of its
    sections."""
    schema = family.SCHEMA
    for name in ("expand", "structure_key", "to_json", "flatten"):
        assert getattr(family, name) == getattr(schema, name), name
    assert family.NUMERIC_KEYS == schema.numeric_keys == fields.traced_keys(schema.sections)
    assert family.ALL_KEYS == schema.all_keys == fields.keys_of(schema.sections)
    assert family.DEFAULTS is schema.defaults
    assert schema["dynamics"] is schema.sections["dynamics"] and list(schema) == list(
        schema.sections
    )
    assert family.flatten(family.DEFAULTS) == fields.flatten(family.DEFAULTS, schema.sections)


def test_attention_refuses_a_former_name_through_its_schema():
    with pytest.raises(rankflow.ConfigError, match="train.lam: renamed dynamics.lam"):
        A.resolve({"train": {"lam": 0.1}})
    assert A.SCHEMA.renamed == A.RENAMED and C.SCHEMA.renamed == {}
