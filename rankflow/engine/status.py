"""Status codes of a run's saves, shared by every family's program and table (codes
0, 1, 2 index :data:`rankflow.engine.store.STATUS`: ok, diverged, max_steps)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .store import STATUS

__all__ = ["STATUS", "with_status"]


def with_status(obs: dict[str, Any], ok, reached, max_steps_hit) -> dict[str, Any]:
    """``obs`` (arrays with leading axis: saves) with a ``status`` per save (codes into
    ``STATUS``) and NaN wherever it is not ok. ``ok`` is False at a save whose state is
    blown up (non-finite or too large: NaN compares False, so ``max_abs <= limit`` counts
    NaN as blown) or was not ``reached``; from the first such save on, the run is
    ``diverged`` (sticky), or ``max_steps`` where the solver ran out of steps."""
    blown = jnp.cumsum(~ok) > 0
    status = jnp.where(blown, jnp.where(max_steps_hit & ~reached, 2, 1), 0).astype(jnp.int8)
    obs = jax.tree.map(
        lambda x: jnp.where(jnp.reshape(blown, blown.shape + (1,) * (x.ndim - 1)), jnp.nan, x),
        obs,
    )
    obs["status"] = status
    return obs
