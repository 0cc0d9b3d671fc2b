"""Shared test set-up: float64 everywhere and strict rank promotion, as in diffrax."""

import jax
import numpy as np
import pytest

from rankflow.engine import programs

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


@pytest.fixture(autouse=True, scope="module")
def _release_programs_after_each_module():
    """One process runs every test: without this its compiled executables' memory maps
    (~300 each) pass vm.max_map_count (65,530) late in the session, and XLA:CPU's
    compiler segfaults (measured: 12,600 maps at a fifth of the suite)."""
    yield
    programs.release()


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)
