"""Shared test set-up: float64 everywhere and strict rank promotion, as in diffrax."""

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


def tree_allclose(x, y, *, rtol=0.0, atol=0.0):
    """Leaf-wise ``np.allclose`` with explicit tolerances (no silent defaults)."""
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    return tx == ty and all(
        np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)
        for a, b in zip(lx, ly)
    )


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)
