"""The training reference (issue #30): the permutation test computed in training (from the
heads table's ``cross_gap_rel_*``, which the training program computes from its own
factors) equals the one computed by ``rankflow inspect`` on the checkpoints the same runs
export, to float32 rounding: gap matrices, effects and p-values. The transposed gap
matrix (B of head u against A of head v), a plausible indexing slip, does not match."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rankflow.attention as ra
from rankflow.inspect import REFERENCE_COLUMNS, reference_text
from rankflow.reproduce import reference

CONFIG = {
    "attention": {"D": 16, "H": 4, "layers": 2, "context": 16},
    "task": {"kind": "char_lm", "seq_len": 16, "val_size": 16},
    "dynamics": {"kind": "adamw", "eta": 0.01, "batch": 8},
    "train": {"eval_every": 20, "export_every": 20},
    "save": {"t1": 40, "cross_gaps": True},
    "sweep": {"dynamics.lam": [0.0, 1.0]},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "run"
    return out, ra.run(CONFIG, out=out).heads


def test_training_equals_the_exported_checkpoints(run):
    out, heads = run
    train = {(r, s, p): g for r, s, p, g in reference.training_gaps(heads)}
    export = {(r, s, p): g for r, s, p, g in reference.export_gaps(out / "export")}
    assert set(train) == set(export) and len(train) == 2 * 3 * 2  # runs × exports × pairs
    for key, g in train.items():
        np.testing.assert_allclose(g, export[key], rtol=1e-5, atol=1e-7)
        transposed = np.swapaxes(export[key], 1, 2)
        assert np.abs(g - transposed).max() > 1e-3, key  # the slip is visible
    table = reference.effects(heads, out / "export")
    assert list(table.columns) == list(REFERENCE_COLUMNS)
    assert set(table["source"]) == {"training", "export"}
    worst, n = reference.agreement(table)
    assert n == 12 and worst <= reference.AGREEMENT, worst
    pivot = table.pivot_table(index=["seed", "lam", "step", "pair"], columns="source", values="p")
    assert (pivot["training"] == pivot["export"]).all()  # p: counts of the same pairings


def test_regimes_and_the_reference_sentence(run):
    _, heads = run
    table = reference.effects(heads, None)
    assert set(table["regime"]) == {"AdamW without decay", "AdamW λ = 1"}
    assert set(table["source"]) == {"training"}
    ranges = reference.final_ranges(table)
    assert set(ranges["step"]) == {40} and (ranges["seeds"] == 1).all()
    text = reference_text("vo", "balance_gap_rel", effect=0.9, table=table)
    assert text.startswith("effect at step 40 (1 seed") and "AdamW λ = 1" in text


def test_shipped_reference_is_the_experiment_table():
    """The shipped table has the experiment's columns, both optimizers with and without
    decay, both pairs, and its exported rows agree with its training rows."""
    from rankflow.inspect import reference_meta, reference_table

    table = reference_table()
    assert list(table.columns) == list(REFERENCE_COLUMNS)
    assert set(table["optimizer"]) == {"adamw", "sgd"} and 0.0 in set(table["lam"])
    worst, n = reference.agreement(table)
    assert n > 0 and worst <= reference.AGREEMENT
    assert {"model", "command", "machine", "date"} <= set(reference_meta())
    assert isinstance(table, pd.DataFrame)
