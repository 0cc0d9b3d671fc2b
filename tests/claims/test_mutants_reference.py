"""Mutants of the ``reference`` experiment's claims (issue #30): weight decay balances
each head, for SGD (T4) and AdamW (the paper), judged by the permutation test's effect at
the last step, every seed with decay below every seed without.

The data are the training reference shipped with the package
(``rankflow/inspect/reference_effects.csv``, made by ``rankflow reproduce --quick --only
reference``): the positive control. The mutant is the table that an optimizer which
drops the decay would produce: runs are deterministic given the seed, so its decayed
runs are the undecayed runs of the same seeds, recorded at the decayed λ. A second
mutant applies the decay to the wrong pair only (the value–output rows of the decayed
run with the key–query rows of the undecayed one)."""

from __future__ import annotations

import pandas as pd
import pytest

from rankflow.inspect import reference_table
from rankflow.reproduce import reference

MUTANT_CLAIMS = reference.CLAIMS


def _decay_dropped(table: pd.DataFrame, optimizer: str, pairs=("qk", "vo")) -> pd.DataFrame:
    t = table[table["optimizer"] == optimizer]
    lam = t["lam"].max()
    off = t[(t["lam"] == 0) & t["pair"].isin(pairs)].assign(lam=lam)
    keep = table[
        ~((table["optimizer"] == optimizer) & (table["lam"] == lam) & table["pair"].isin(pairs))
    ]
    return pd.concat([keep, off], ignore_index=True)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_mutant_reference_decay_balances(optimizer):
    name = f"reference.{optimizer}_decay_balances"
    table = reference_table()
    right = reference.decay_claim(table, optimizer)
    assert right.name == name and right.verdict == "pass", right.measurement
    for pairs in (("qk", "vo"), ("qk",), ("vo",)):
        wrong = reference.decay_claim(_decay_dropped(table, optimizer, pairs), optimizer)
        assert wrong.verdict == "fail", (pairs, wrong.measurement)
