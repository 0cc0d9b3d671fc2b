"""The tables of the user-facing configs stay what they were before the one-engine
refactor: every top-level ``sims/*.toml`` through ``rankflow.run``, ``rankflow compare``
on ``sims/compare_*.toml`` and ``rankflow attention train`` on
``sims/attention/balance_sgd.toml`` give the captured tables of ``tests/golden/`` — same
rows and columns, the same values in every non-float column, the same NaN pattern, and
floats within ``SCALE_TOL`` of their column's scale. Both sides are float64 (why:
``tests/golden_tables.py``, which captures them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from golden_tables import GOLDEN, jobs, path, produce

# The largest deviation measured between the pre-refactor code and today's is 9.2e-8 of
# the column's scale (attention heads, balance_gap_rel; adaptive solves at rtol 1e-6
# and 1e-8 elsewhere). A changed table moves far more: λ or η 1e-4 (relative) off moves
# some column by 3.7e-5 to 0.1 of its scale (measured on diagonal_gd, diagonal_flow and
# sensing), 37 times the tolerance at the least.
SCALE_TOL = 1e-6


def assert_close_to_scale(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """``|a − b| ≤ SCALE_TOL · max|b|`` entrywise, and NaN/inf exactly where ``b`` has them."""
    finite = np.isfinite(b)
    assert (np.isfinite(a) == finite).all(), f"{what}: the non-finite entries differ"
    assert (a[~finite].astype(str) == b[~finite].astype(str)).all(), f"{what}: ±inf/NaN differ"
    if finite.any():
        scale = float(np.max(np.abs(b[finite])))
        dev = float(np.max(np.abs(a[finite] - b[finite])))
        assert dev <= SCALE_TOL * scale + 1e-300, f"{what}: {dev:.3g} off, scale {scale:.3g}"


@pytest.mark.parametrize("kind, name", list(jobs()), ids=lambda x: str(x))
def test_tables_unchanged(kind, name, tmp_path):
    tables = produce(kind, name, tmp_path)
    stem = path(kind, name, "").stem
    expected = {
        p.stem.split("__", 1)[1] if "__" in p.stem else "": p
        for p in GOLDEN.glob(f"{stem}*.parquet")
        if p.stem == stem or p.stem.startswith(stem + "__")
    }
    assert set(tables) == set(expected), f"{stem}: tables {sorted(tables)} vs {sorted(expected)}"
    for table, df in tables.items():
        ref = pd.read_parquet(expected[table])
        df = df.reset_index(drop=True)
        assert list(df.columns) == list(ref.columns), f"{stem} {table}: columns differ"
        assert len(df) == len(ref), f"{stem} {table}: {len(df)} rows, expected {len(ref)}"
        for col in ref.columns:
            a, b = df[col], ref[col]
            if pd.api.types.is_float_dtype(b) and pd.api.types.is_float_dtype(a):
                assert_close_to_scale(a.to_numpy(), b.to_numpy(), f"{stem} {table} {col}")
            else:
                assert a.astype(str).tolist() == b.astype(str).tolist(), f"{stem} {table} {col}"
