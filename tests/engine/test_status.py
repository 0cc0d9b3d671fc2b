"""The status enumeration (issue #42): ``Status`` names the codes 0, 1, 2 that the tables
store and print as ``ok``, ``diverged``, ``max_steps`` (the golden tables hold them), and
the programs write them through it."""

from __future__ import annotations

from enum import IntEnum

import jax.numpy as jnp
import numpy as np

from rankflow.engine.status import STATUS, Status, diverge_nonfinite, with_status

TABLE_CODES = {"ok": 0, "diverged": 1, "max_steps": 2}  # as the golden tables store them


def _codes_of(enum: type[IntEnum]) -> dict[str, int]:
    return {s.name: int(s) for s in enum}


def test_the_codes_are_the_tables_and_the_wrong_order_fails():
    assert _codes_of(Status) == TABLE_CODES
    assert tuple(s.name for s in Status) == STATUS and Status(2) is Status.max_steps
    assert Status.ok == 0 and max(Status) is Status.max_steps  # summaries keep the worst
    swapped = IntEnum("Status", [("ok", 0), ("max_steps", 1), ("diverged", 2)])
    assert _codes_of(swapped) != TABLE_CODES


def test_with_status_writes_each_code_where_the_run_stops():
    """Saves 0–1 ok, a blown state from save 2 on: diverged; the same save not reached
    with the step budget spent: max_steps; a non-finite value at an ok save: diverged."""
    obs = {"loss": jnp.arange(4.0)}
    ok = jnp.array([True, True, False, True])
    reached = jnp.array([True, True, False, False])
    for hit, code in ((False, Status.diverged), (True, Status.max_steps)):
        out = with_status(dict(obs), ok, reached, jnp.asarray(hit))
        assert out["status"].dtype == jnp.int8
        np.testing.assert_array_equal(out["status"], [Status.ok] * 2 + [code] * 2)
        assert np.isnan(out["loss"][2:]).all() and out["loss"][1] == 1.0
    status = jnp.array([[0, 0, 0]], jnp.int8)
    out = diverge_nonfinite({"x": jnp.array([[1.0, jnp.inf, 2.0]])}, status)
    np.testing.assert_array_equal(out["status"], [[Status.ok, Status.diverged, Status.diverged]])
