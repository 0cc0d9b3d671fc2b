"""The tables of every config in ``sims/`` stay what they were before the refactors: each
config through its public entry point (``rankflow.run``, ``rankflow compare``,
``rankflow attention train``) gives the captured tables of ``tests/claims/golden/`` — same rows
and columns, the same values in every non-float column, the same NaN pattern, and floats
within ``SCALE_TOL`` of their column's scale in float64; and, on the machine that captured
them (``tests/claims/golden/f32/MACHINE.txt``), the float32 tables bit for bit. Why both:
``tests/claims/golden_tables.py``, which captures them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from golden_tables import (
    CONFIGS,
    GOLDEN,
    GOLDEN_F32,
    RENAMED_COLUMNS,
    SLOW,
    machine,
    path,
    produce_as_captured,
)

# The largest deviation measured between the pre-refactor code and today's is 9.2e-8 of
# the column's scale (attention heads, balance_gap_rel; adaptive solves at rtol 1e-6
# and 1e-8 elsewhere). A changed table moves far more: λ or η 1e-4 (relative) off moves
# some column by 3.7e-5 to 0.1 of its scale (measured on diagonal_gd, diagonal_flow and
# sensing), 37 times the tolerance at the least.
SCALE_TOL = 1e-6
# Columns that are zero up to rounding (frob_minus_nuc on balanced runs, ~1e-13) change in
# their last bits with the order of XLA:CPU's reductions: 2.7e-15 measured between a
# process with Eigen's threads and one without. An absolute 1e-12 absorbs that; the
# smallest change a wrong λ makes (above) is 1e4 times larger on O(1) observables. The
# tables are made as the capture made them (``produce_as_captured``: every core, Eigen
# single-threaded): AdamW amplifies last-bit differences (its step normalises tiny
# gradients), so in float64 its loss moved by 8e-4 of its scale between the two
# settings, far beyond SCALE_TOL, with identical code.
ATOL = 1e-12
# Float32 tables: statistics that numpy takes of a run's float32 values in float64 (a
# mean over paths, a distance, a fitted order) round differently where the float32 values
# differ in the last bit of a tiny entry (Eigen's threads, the device count) or numpy's
# vector kernels differ between hosts. Measured on a second 2-core AVX-512 EPYC host on
# 2026-12-02, at this commit and at the capture's alike: up to 2.4e-12 of a column's scale
# (compare_gd's order_stderr; 2.9e-16 to 4e-13 in compare_gd's contraction gap,
# compare_sgd's and noise/compare_sme's means, compare_sweep's distance). A wrong λ or η
# (1e-4 relative) moves some column by 3.7e-5 of its scale at least (above), 3.7e4 times
# F32_TOL. Columns that are float64 rounding themselves (compare's t5_deviation, ~2e-16)
# get F32_ATOL.
F32_TOL = 1e-9
F32_ATOL = 1e-14


def assert_close_to_scale(
    a: np.ndarray, b: np.ndarray, what: str, tol: float, atol: float = 0.0
) -> None:
    """``|a − b| ≤ tol · max|b| + atol`` entrywise, and NaN/inf exactly where ``b`` has
    them."""
    finite = np.isfinite(b)
    assert (np.isfinite(a) == finite).all(), f"{what}: the non-finite entries differ"
    assert (a[~finite].astype(str) == b[~finite].astype(str)).all(), f"{what}: ±inf/NaN differ"
    if finite.any():
        scale = float(np.max(np.abs(b[finite])))
        dev = float(np.max(np.abs(a[finite] - b[finite])))
        assert dev <= tol * scale + atol, f"{what}: {dev:.3g} off, scale {scale:.3g}"


def compare_tables(name: str, tables: dict[str, pd.DataFrame], x64: bool) -> None:
    """Every table of ``name`` against its golden file: float64 within ``SCALE_TOL`` of
    each column's scale, float32 within ``F32_TOL`` of each column's scale."""
    stem = path(name, "", x64).stem
    folder = GOLDEN if x64 else GOLDEN_F32
    expected = {
        p.stem.split("__")[-1] if p.stem != stem else "": p
        for p in folder.glob(f"{stem}*.parquet")
        if p.stem == stem
        or p.stem[len(stem) :].startswith("__")
        and "__" not in p.stem[len(stem) + 2 :]
    }
    assert set(tables) == set(expected), f"{stem}: tables {sorted(tables)} vs {sorted(expected)}"
    for table, df in tables.items():
        # Captured under the former column names: renamed, values untouched.
        ref = pd.read_parquet(expected[table]).rename(columns=RENAMED_COLUMNS)
        df = df.reset_index(drop=True)
        assert list(df.columns) == list(ref.columns), f"{stem} {table}: columns differ"
        assert len(df) == len(ref), f"{stem} {table}: {len(df)} rows, expected {len(ref)}"
        for col in ref.columns:
            a, b = df[col], ref[col]
            if pd.api.types.is_float_dtype(b) and pd.api.types.is_float_dtype(a):
                tol, atol = (SCALE_TOL, ATOL) if x64 else (F32_TOL, F32_ATOL)
                what = f"{stem} {table} {col}"
                assert_close_to_scale(a.to_numpy(), b.to_numpy(), what, tol, atol)
            else:
                assert a.astype(str).tolist() == b.astype(str).tolist(), f"{stem} {table} {col}"


def _require_capture(name: str, x64: bool) -> None:
    """Skip, saying so, a config whose tables have not been captured yet (a slow config's
    capture takes minutes: ``python tests/claims/golden_tables.py --only NAME`` from the
    commit before the refactor)."""
    stem = path(name, "", x64).stem
    folder = GOLDEN if x64 else GOLDEN_F32
    if not any(folder.glob(f"{stem}.parquet")) and not any(folder.glob(f"{stem}__*.parquet")):
        pytest.skip(f"{name}: no {'float64' if x64 else 'float32'} golden table captured")


def _params(all_slow: bool = False):
    for name in CONFIGS:
        marks = [pytest.mark.slow] if all_slow or name in SLOW else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", _params())
def test_float64_tables_unchanged(name, tmp_path):
    _require_capture(name, x64=True)
    compare_tables(name, produce_as_captured(name, tmp_path, x64=True), x64=True)


CAPTURED_ON = (GOLDEN_F32 / "MACHINE.txt").read_text().strip()


@pytest.mark.skipif(
    machine() != CAPTURED_ON,
    reason=f"float32 tables were captured on {CAPTURED_ON}; this is {machine()}",
)
# Every float32 comparison is in the slow set: the default run keeps the float64 ones, which
# hold on any machine, within its 15 minutes on 2 cores.
@pytest.mark.parametrize("name", _params(all_slow=True))
def test_float32_tables_unchanged_on_the_capturing_machine(name, tmp_path):
    _require_capture(name, x64=False)
    compare_tables(name, produce_as_captured(name, tmp_path, x64=False), x64=False)
