"""The tables of the user-facing configs stay what they were before the one-engine
refactor: every top-level ``sims/*.toml`` through ``rankflow.run``, ``rankflow compare``
on ``sims/compare_*.toml`` and ``rankflow attention train`` on
``sims/attention/balance_sgd.toml`` give the captured tables of ``tests/golden/`` — same
rows and columns, the same values in every non-float column, floats equal to float32
rounding (``tests/golden_tables.py`` captures them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from golden_tables import GOLDEN, jobs, path, produce

RTOL = 1e-5  # float32 rounding, with room for a few ulps of reassociation
ATOL = 1e-7


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
                np.testing.assert_allclose(
                    a.to_numpy(), b.to_numpy(), rtol=RTOL, atol=ATOL, err_msg=f"{stem} {col}"
                )
            else:
                assert a.astype(str).tolist() == b.astype(str).tolist(), f"{stem} {table} {col}"
