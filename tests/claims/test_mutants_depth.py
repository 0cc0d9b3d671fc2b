"""Mutants of the ``depth`` experiment's claims (see tests/claims/test_mutants.py): each claim,
fed the table of a wrong implementation, fails; on the right table (a small version of
``sims/reproduce/depth_diagonal.toml``: depth 3, two λ, one compilation) it passes.

Wrong implementations: decay of the wrong size (runs made at λ, recorded as 2λ: the
pairs then balance at ηλ, and the scalar stationarity misses its λ term), and no decay
at all (λ = 0, recorded as 0.1: the penalty never meets the Schatten term)."""

from __future__ import annotations

import pandas as pd
import pytest

import rankflow
from rankflow.core import config as config_lib
from rankflow.reproduce import depth
from rankflow.reproduce._common import config_path

MUTANT_CLAIMS = depth.CLAIMS
SMALL = {"sweep.model.depth": [3], "sweep.dynamics.lam": [0.0, 0.05, 0.2]}


@pytest.fixture(scope="module")
def runs():
    cfg = config_lib.resolve(config_path(depth.DIAGONAL), SMALL)
    df = rankflow.run(cfg)
    right = df[df["dynamics.lam"] > 0]
    half = right.assign(**{"dynamics.lam": right["dynamics.lam"] * 2})
    undecayed = df[df["dynamics.lam"] == 0].assign(**{"dynamics.lam": 0.1})
    return cfg["problem"]["singular_values"], right, half, undecayed


def _check(claim, name, expect):
    assert claim.name == name
    assert claim.verdict == expect, f"{name}: expected {expect}; {claim.measurement}"


def test_mutant_depth_pairwise_decay(runs):
    _, right, half, _ = runs
    _check(depth.pairwise_decay_claim(right), "depth.pairwise_decay", "pass")
    _check(depth.pairwise_decay_claim(half), "depth.pairwise_decay", "fail")


def test_mutant_depth_penalty_meets_schatten(runs):
    _, right, _, undecayed = runs
    _check(depth.penalty_claim(right), "depth.penalty_meets_schatten", "pass")
    _check(depth.penalty_claim(undecayed), "depth.penalty_meets_schatten", "fail")
    both = pd.concat([right, undecayed.assign(run_id=undecayed["run_id"] + 100)])
    _check(depth.penalty_claim(both), "depth.penalty_meets_schatten", "fail")


def test_mutant_depth_scalar_stationarity(runs):
    s, right, half, _ = runs
    name = "depth.scalar_stationarity"
    _check(depth.stationarity_claim(depth.stationarity_table(right, s)), name, "pass")
    _check(depth.stationarity_claim(depth.stationarity_table(half, s)), name, "fail")
