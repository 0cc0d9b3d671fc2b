"""The tracker's window: a gap following T5 to a noise floor (a minibatch run's shape)
agrees over the automatic window, which ends at the floor; over every logged step (the
old fit, and ``t_max`` at the last step) it disagrees; ``t_max`` before the floor agrees."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rankflow.track import Optimizer, prediction_table

ETA, LAM = 0.1, 0.1


def _rows():
    k = np.arange(0, 3000, 20)
    noise = np.exp(0.05 * np.random.default_rng(0).standard_normal(k.size))
    gap = np.maximum((1 - ETA * LAM) ** (2 * k), 1e-9) * noise  # floor from k ≈ 1030
    return pd.DataFrame({"t": k, "layer": 0, "pair": "qk", "head": 0, "status": "ok",
                         "balance_gap": gap})  # fmt: skip


def test_noise_floor_left_out_automatically_and_t_max():
    rows, opt = _rows(), Optimizer("sgd", ETA, LAM)
    auto = prediction_table(rows, opt).iloc[0]
    assert auto["end"] == "floor" and 900 <= auto["t_max"] <= 1060 and bool(auto["agrees"])
    whole = prediction_table(rows, opt, t_max=3000).iloc[0]  # the floor fitted too
    assert not bool(whole["agrees"]) and whole["end"] == "t_max (set)"
    early = prediction_table(rows, opt, t_min=0, t_max=800).iloc[0]
    assert bool(early["agrees"]) and early["t_max"] == 800
