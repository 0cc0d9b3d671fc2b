"""Status codes of a run's saves, shared by every family's program and table: the
enumeration :class:`Status` (as diffrax names its ``RESULTS``), ``Status.ok = 0``,
``Status.diverged = 1``, ``Status.max_steps = 2``, whose names are
:data:`rankflow.engine.store.STATUS`, the categories a table's ``status`` column prints.
Inside jitted code the codes are the plain integers ``int(Status.x)``.

A save whose saved values are not all finite is never ok: a loss or observable that
overflowed (depth L's product of large but finite factors, a LAPACK routine given one)
marks the run diverged from that save on, as a blown-up state does."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import jax
import jax.numpy as jnp

from .store import STATUS

__all__ = ["STATUS", "Status", "diverge_nonfinite", "finite_at", "with_status"]

# The codes, named by STATUS (the one list of names, in code order): Status.ok == 0,
# Status(2).name == "max_steps"; worse codes are larger (a summary keeps the largest).
Status = IntEnum("Status", [(name, code) for code, name in enumerate(STATUS)], module=__name__)
Status.__doc__ = "A save's status code: ok (0), diverged (1), max_steps (2)."


def finite_at(obs: dict[str, Any], ndim: int) -> jax.Array:
    """Whether every value of ``obs`` is finite, per index of the leading ``ndim`` axes
    (the saves, or runs × saves): leaves ``(*lead, …)`` → bool ``lead``."""
    finite = None
    for x in jax.tree.leaves(obs):
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            continue
        f = jnp.all(jnp.isfinite(x), axis=tuple(range(ndim, x.ndim)))
        finite = f if finite is None else finite & f
    return finite


def _nan_where(obs: dict[str, Any], bad) -> dict[str, Any]:
    """``obs`` with NaN wherever ``bad`` (shape: the leaves' leading axes)."""

    def mask(x):
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            return x
        return jnp.where(jnp.reshape(bad, bad.shape + (1,) * (x.ndim - bad.ndim)), jnp.nan, x)

    return jax.tree.map(mask, obs)


def with_status(obs: dict[str, Any], ok, reached, max_steps_hit) -> dict[str, Any]:
    """``obs`` (arrays with leading axis: saves) with a ``status`` per save (int8
    :class:`Status` codes) and NaN wherever it is not ok. ``ok`` is False at a save whose state is
    blown up (non-finite or too large: NaN compares False, so ``max_abs <= limit`` counts
    NaN as blown) or was not ``reached``; a save where any value of ``obs`` is not finite
    is not ok either. From the first such save on, the run is ``diverged`` (sticky), or
    ``max_steps`` where the solver ran out of steps."""
    finite = finite_at(obs, 1)
    if finite is not None:
        ok = ok & finite
    blown = jnp.cumsum(~ok) > 0
    worst = jnp.where(max_steps_hit & ~reached, int(Status.max_steps), int(Status.diverged))
    status = jnp.where(blown, worst, int(Status.ok)).astype(jnp.int8)
    obs = _nan_where(obs, blown)
    obs["status"] = status
    return obs


def diverge_nonfinite(obs: dict[str, Any], status) -> dict[str, Any]:
    """``obs`` (leaves ``(*lead, …)``, ``status`` of shape ``lead``, saves last) after
    values computed outside the run's program (the attention family's per-head
    observables): an ok save with a non-finite value becomes ``diverged``, and so does
    every ok save after it; every value is NaN wherever the status is not ok."""
    finite = finite_at(obs, status.ndim)
    ok = status == int(Status.ok)
    if finite is not None:
        newly = jnp.cumsum(ok & ~finite, axis=-1) > 0
        status = jnp.where(ok & newly, int(Status.diverged), status).astype(status.dtype)
    obs = _nan_where(obs, status != int(Status.ok))
    obs["status"] = status
    return obs
