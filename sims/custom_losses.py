"""Example losses for ``problem.kind = "custom"``: any jittable ``L(W) -> scalar``."""

import jax.numpy as jnp


def pseudo_huber(W):
    """Σ (√(1 + (W − T)²) − 1) against a fixed 6×4 matrix T of rank 2."""
    u = jnp.arange(1.0, 7.0, dtype=W.dtype) / 6.0
    v = jnp.array([1.0, -1.0, 0.5, 0.0], dtype=W.dtype)
    w = jnp.array([0.0, 1.0, 1.0, -1.0], dtype=W.dtype)
    T = jnp.outer(u, v) + jnp.outer(u[::-1], w)
    return jnp.sum(jnp.sqrt(1.0 + (W - T) ** 2) - 1.0)
