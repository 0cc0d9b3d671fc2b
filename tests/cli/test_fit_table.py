"""``rankflow fit``'s printed table for a sweep with λ = 0 in it (the README's own sweep,
sims/diagonal_gd.toml, has one): the rate per step, not a division by 2ηλ = 0."""

import math

import numpy as np
import pandas as pd

from rankflow.cli.fit import table_text
from rankflow.fitting import predict


def _row(lam: float, rate: float) -> dict:
    p = predict("gd", 0.1, lam)
    base = 2 * 0.1 * lam
    return {
        "run_id": 0, "series": "balance_gap", "dynamics.kind": "gd", "dynamics.eta": 0.1,
        "dynamics.lam": lam, "rate": rate, "rate_se": 1e-7,
        "ratio": rate / base if base else math.nan, "ratio_se": 1e-7 / base if base else math.nan,
        "predicted_low": p.low, "predicted_high": p.high, "source": p.source,
        "verdict": "pass", "t_min": 0.0, "t_max": 100.0, "end": "end of run", "slow_ratio": np.nan,
    }  # fmt: skip


def test_lambda_zero_prints_the_rate_per_step():
    text = table_text(pd.DataFrame([_row(0.0, 2.4e-7), _row(0.1, 0.0201)]))
    zero, decayed = text.splitlines()[1:]
    assert "2.4e-07/step" in zero and "T4/T5" in zero
    assert "1.00500 ± 0.00000" in decayed and "[1.00503, 1.01014]" in decayed  # ηλ = 0.01
