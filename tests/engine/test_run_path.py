"""The cheap path from ``rankflow.run`` to its compiled program (issue #27 item 5): each
shortcut gives exactly what the general code it replaced gives (config copies, the status
summary, the one-chunk table), on cases the sims do not reach (missing statuses, rows
out of order, callables)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rankflow.config import fields
from rankflow.core import config as config_lib
from rankflow.engine import store
from rankflow.engine.execute import _last_status, _rows
from rankflow.engine.status import STATUS

SIMS = Path(__file__).resolve().parents[2] / "sims"


def _deepcopy_config(cfg, schema):
    """copy_config as it was: a deepcopy, callables at schema keys set back."""
    shared = {k: v for k, v in fields.flatten(cfg, schema).items() if callable(v)}
    out = copy.deepcopy(dict(cfg))
    for k, v in shared.items():
        fields.set_dotted(out, k, v, schema)
    return out


def _shares_nothing_mutable(a, b):
    if isinstance(a, dict | list):
        assert a is not b
        for x, y in zip(
            a.values() if isinstance(a, dict) else a, b.values() if isinstance(b, dict) else b
        ):
            _shares_nothing_mutable(x, y)


def _loss(W):
    return (W**2).sum()


class _Loss:
    def __call__(self, W):
        return (W**2).sum()

    def __eq__(self, other):  # a copy equals its original
        return isinstance(other, _Loss)

    __hash__ = object.__hash__


@pytest.mark.parametrize("name", ["diagonal_gd", "sensing", "custom", "reproduce/depth_diagonal"])
def test_copy_config_is_a_deepcopy_sharing_callables(name):
    cfg = config_lib.resolve(SIMS / f"{name}.toml")
    cfg["sweep"] = {**cfg["sweep"], "model.r": [[3, 2], [4]], "problem.loss": [_Loss(), _loss]}
    cfg["problem"]["loss"] = _Loss()
    new, old = fields.copy_config(cfg, config_lib.SCHEMA), _deepcopy_config(cfg, config_lib.SCHEMA)
    assert new == old and list(new) == list(old)
    assert all(list(new[k]) == list(old[k]) for k in new if isinstance(new[k], dict))
    assert new["problem"]["loss"] is cfg["problem"]["loss"]  # shared, as before
    # Elsewhere, as deepcopy: a function is itself, a callable object a copy.
    assert new["sweep"]["problem.loss"][1] is _loss
    assert new["sweep"]["problem.loss"][0] is not cfg["sweep"]["problem.loss"][0]
    del cfg["problem"]["loss"], new["problem"]["loss"]
    del cfg["sweep"]["problem.loss"], new["sweep"]["problem.loss"]
    _shares_nothing_mutable(cfg, new)


def _table(rng, runs=7, paths=2, saves=5, missing=False, shuffle=False):
    n = runs * paths * saves
    df = pd.DataFrame(
        {
            "run_id": np.repeat(np.arange(runs), paths * saves),
            "path": np.tile(np.repeat(np.arange(paths), saves), runs),
            "t": np.tile(np.linspace(0, 1, saves), runs * paths),
            "status": pd.Categorical.from_codes(
                rng.integers(-1 if missing else 0, len(STATUS), n), categories=list(STATUS)
            ),
            "x": rng.normal(size=n),
        }
    )
    return df.sample(frac=1, random_state=0) if shuffle else df


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("categorical", [True, False])
def test_last_status_counts_as_groupby_last(missing, shuffle, categorical):
    rng = np.random.default_rng(1)
    for _ in range(5):
        df = _table(rng, missing=missing, shuffle=shuffle)
        if not categorical:
            df["status"] = df["status"].astype(object)
        last = df.groupby(["run_id", "path"], sort=False)["status"].last()
        runs, counts = _last_status(df)
        assert runs == len(last)
        for s in STATUS:
            assert counts.get(s, 0) == int((last == s).sum())
    assert _last_status(df.iloc[:0]) == (0, {})


@pytest.mark.parametrize("case", ["sorted", "shuffled", "named_index", "offset_index", "tie"])
def test_one_chunk_table_as_sorted_concat(case):
    df = _table(np.random.default_rng(2), shuffle=case == "shuffled")
    if case == "named_index":
        df.index.name = "row"
    if case == "offset_index":
        df.index = pd.RangeIndex(3, 3 + len(df))
    if case == "tie":  # equal (run_id, path, t): the stable sort keeps their order
        df.loc[1, "t"] = df.loc[0, "t"]
    want = store.sort_rows(pd.concat([df], ignore_index=True))
    got = _rows([df])
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert type(got.index) is type(want.index) and got.index.name == want.index.name
    frames = [df.iloc[: len(df) // 2], df.iloc[len(df) // 2 :]]
    pd.testing.assert_frame_equal(
        _rows(frames), store.sort_rows(pd.concat(frames, ignore_index=True)), check_exact=True
    )
