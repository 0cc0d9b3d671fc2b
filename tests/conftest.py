"""Shared test set-up: float64 everywhere and strict rank promotion, as in diffrax."""

import jax
import pytest

from rankflow.engine import programs

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


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
