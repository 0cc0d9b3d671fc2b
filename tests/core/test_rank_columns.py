"""The rank columns of a spectrum at the edges of float32: a product that has decayed
towards zero is a small matrix, not a diverged run."""

import jax.numpy as jnp
import numpy as np
import pytest

from rankflow.core.observables import rank_columns


@pytest.mark.parametrize("scale", [1.0, 1e-10, 1e-20, 1e-25, 1e-30])
def test_stable_rank_is_scale_free_down_to_float32_underflow(scale):
    """Σs²/s_1² of [3, 2, 1]·scale is 14/9 at every scale; from 1e-20 s_1² is below
    float32's normal range (0/0 = NaN or digits lost before: both λ = 10 attention runs
    of sims/attention/rank.toml were marked diverged at step 750)."""
    s = jnp.asarray(np.array([3.0, 2.0, 1.0]) * scale, jnp.float32)
    out = rank_columns(s, 1e-3)
    assert np.isfinite(float(out["stable_rank"]))
    np.testing.assert_allclose(float(out["stable_rank"]), 14 / 9, rtol=1e-6)
    # the wrong version, Σs² / s_1² taken as written, is NaN once s_1² underflows
    naive = float(jnp.sum(s**2) / s[0] ** 2)
    if scale <= 1e-20:
        assert not np.isclose(naive, 14 / 9, rtol=1e-6)


def test_a_zero_spectrum_has_ranks_zero():
    out = rank_columns(jnp.zeros(3, jnp.float32), 1e-3)
    assert [float(out[k]) for k in ("stable_rank", "effective_rank", "rank")] == [0.0, 0.0, 0.0]
