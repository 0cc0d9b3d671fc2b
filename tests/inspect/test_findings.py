"""The graded findings of ``rankflow inspect`` (issue #30): every outcome is reachable
from a real safetensors checkpoint (random initialisation: not detected; a planted
balanced model: balanced; balanced factors with noise on B: partially balanced), the
finding is written with its interval and the training reference, and the effect's
bootstrap interval covers a known population effect about as often as it says, where
the plausible wrong bootstrap (null pairings among the drawn heads) does not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import Spec, make_factors, write_checkpoint

from rankflow.inspect import (
    ALPHA,
    FINDINGS,
    MARGIN,
    balance_findings,
    effect_interval,
    grade,
    inspect_checkpoint,
    permutation_test,
    reference_table,
    reference_text,
)

SPEC = Spec(arch="gpt2", layers=3, heads=4, d_model=32)  # 24³ pairings: p reaches 0.001


def _random(spec: Spec, seed: int):
    rng = np.random.default_rng(seed)
    D, d, H = spec.d_model, spec.head_dim, spec.heads
    return [
        {k: [rng.normal(0, 0.02, (D, d) if k != "O" else (d, D)) for _ in range(H)] for k in "QKVO"}
        for _ in range(spec.layers)
    ]


def _noisy(spec: Spec, c: float, seed: int = 1):
    """Balanced factors with iid noise of relative size ``c`` added to K and O."""
    factors = make_factors(spec, 0)
    rng = np.random.default_rng(seed)
    for layer in factors:
        for key in ("K", "O"):
            layer[key] = [
                x + c * np.abs(x).mean() * rng.standard_normal(x.shape) for x in layer[key]
            ]
    return factors


def _all(findings: pd.DataFrame) -> dict[str, pd.Series]:
    rows = findings[findings["scope"] == "all"]
    return {r["pair"]: r for _, r in rows.iterrows()}


@pytest.mark.parametrize(
    "factors, expected",
    [
        (lambda: _random(SPEC, 0), "not detected"),
        (lambda: make_factors(SPEC, 0), "balanced"),
        (lambda: _noisy(SPEC, 1.0), "partially balanced"),
    ],
    ids=["random-init", "planted-balanced", "noisy-B"],
)
def test_every_finding_is_reachable_from_a_checkpoint(tmp_path, factors, expected):
    res = inspect_checkpoint(write_checkpoint(tmp_path / "ckpt", SPEC, factors()))
    found = _all(res.findings)
    assert {pair: row["finding"] for pair, row in found.items()} == {
        "qk": expected,
        "vo": expected,
    }
    for row in found.values():
        assert row["effect_lo"] <= row["effect"] <= row["effect_hi"]
        if expected == "balanced":  # exact balance: the effect and its interval at rounding
            assert row["effect_hi"] < 1e-12 and row["p"] == pytest.approx(row["p_min"])
        if expected == "partially balanced":  # measured 0.81 and 0.84
            assert MARGIN < row["effect_lo"] and row["effect_hi"] < 1
        if expected == "not detected":
            assert row["p"] > ALPHA and row["effect_lo"] < 1 < row["effect_hi"]
        assert row["fp_seeds"] == 100 and row["fp_pass_rate"] == 0
    # per layer: 4! = 24 pairings, p ≥ 1/24 > α: the test cannot decide a single layer
    layers = res.findings[res.findings["scope"] == "layer"]
    assert len(layers) == 2 * SPEC.layers and set(layers["finding"]) == {"too few pairings"}


def test_wrong_rules_misgrade():
    """The plausible wrong rules: grading by the effect alone calls a random model with a
    lucky effect balanced-ish; by p alone calls the partial model balanced."""
    L, U = 2, 5
    partial = permutation_test(np.ones((L, U, U)) - 0.2 * np.eye(U))  # effect 0.8, p 0.001
    noise = permutation_test(np.ones((L, U, U)) - 0.05 * np.eye(U))  # effect 0.95, p 0.001
    assert grade(partial) == grade(noise) == "partially balanced"
    chance = permutation_test(np.ones((L, U, U)))
    assert grade(chance) == "not detected" and set(FINDINGS) >= {grade(partial), grade(chance)}
    by_p_alone = "balanced" if partial.p <= ALPHA else "not detected"
    assert by_p_alone != grade(partial)


def test_findings_in_the_summary_the_table_and_the_figure(tmp_path):
    out = tmp_path / "out"
    from rankflow import cli

    path = write_checkpoint(tmp_path / "ckpt", SPEC, _noisy(SPEC, 1.0))
    assert cli.main(["inspect", str(path), "--out", str(out)]) == 0
    table = pd.read_parquet(out / "findings.parquet")
    assert set(table["scope"]) == {"all", "layer"} and (out / "findings.png").is_file()
    summary = (out / "summary.md").read_text()
    assert "**key–query: partially balanced**" in summary
    assert "Training reference:" in summary and "AdamW" in summary


def _population(rng, L: int, U: int) -> np.ndarray:
    """True gaps ~ U(0.2, 0.6), mismatched ~ U(0.8, 1.2), iid over heads."""
    gaps = rng.uniform(0.8, 1.2, (L, U, U))
    gaps[:, np.arange(U), np.arange(U)] = rng.uniform(0.2, 0.6, (L, U))
    return gaps


def _pairs_among_drawn(gaps, n_boot=199, n_null=99, seed=0):
    """The wrong bootstrap: null pairings among the drawn heads (a duplicate meets its
    own B far more often than 1/U)."""
    L, U, _ = gaps.shape
    rng = np.random.default_rng([seed, 1])
    layer = np.arange(L)[None, :, None]
    idx = rng.integers(0, U, size=(n_boot, L, U))
    obs = np.median(gaps[layer, idx, idx].reshape(n_boot, -1), axis=1)
    perms = rng.permuted(np.broadcast_to(np.arange(U), (n_boot, n_null, L, U)), axis=3)
    partner = np.take_along_axis(idx[:, None], perms, axis=3)
    vals = gaps[layer[:, None], idx[:, None], partner].reshape(n_boot, n_null, -1)
    effect = obs / np.median(np.median(vals, axis=2), axis=1)
    return tuple(np.quantile(effect, [0.025, 0.975]))


@pytest.mark.slow
def test_interval_coverage_against_a_known_population():
    """6 layers × 4 heads, 300 datasets: the effect's population value is
    0.4 / (median of the null's mixture: a true pair with probability 1/U) = 0.4286.
    Measured coverage of the 95% interval: 0.883 (a percentile interval of a median of
    24 values undercovers a little); the wrong bootstrap 0.787. Binomial SE ≈ 0.019."""
    L, U, n = 6, 4, 300
    pop = 0.4 / (0.8 + 0.4 * (0.5 - 1 / U) / (1 - 1 / U))
    right = wrong = 0
    for k in range(n):
        gaps = _population(np.random.default_rng([7, k]), L, U)
        lo, hi = effect_interval(gaps, n_boot=199, seed=k)
        right += lo <= pop <= hi
        lo, hi = _pairs_among_drawn(gaps, seed=k)
        wrong += lo <= pop <= hi
    print(f"coverage: right {right / n:.3f}, wrong {wrong / n:.3f}")
    assert right / n >= 0.84 > wrong / n


def test_reference_text_places_an_effect():
    ref = reference_table()
    assert {"training", "export"} <= set(ref["source"]) or set(ref["source"]) == {"training"}
    text = reference_text("qk", "balance_gap_rel", effect=0.82)
    assert "AdamW without decay" in text and "SGD" in text and "0.82" in text
    # the wrong statistic has no reference, said in words
    assert reference_text("qk", "rotary_gap_rel").startswith("none for the rotary")


def test_balance_findings_from_gap_matrices_alone():
    """The pure function: planted gap matrices, no checkpoint; per-layer rows named by
    the inspected layers' indices."""
    from rankflow.inspect import Layout

    lay = Layout("gpt2", "gpt2", "h.", 2, 20, 5, 5, 4, 0, False, "doc")
    gaps = np.ones((2, 5, 5)) - 0.9 * np.eye(5)
    f = balance_findings(
        {("qk", "balance_gap_rel"): gaps, ("vo", "balance_gap_rel"): gaps},
        lay,
        layers=[3, 7],
        fp_seeds=0,
    )
    assert list(f.loc[f["scope"] == "layer", "layer"]) == [3, 7, 3, 7]
    assert set(f.loc[f["scope"] == "all", "finding"]) == {"balanced"}
