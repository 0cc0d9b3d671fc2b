"""Spectra per head: the Marchenko–Pastur noise edge counts planted spikes exactly and
finds none in pure noise (≥ 95% of seeds), where the wrong edges (aspect ratio of the
smaller side, σ from the Frobenius norm instead of the median) fail; the power-law fit;
the per-head product spectrum; ``rankflow inspect --spectra``'s outputs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import build

from rankflow import cli
from rankflow.inspect import matrix_spectrum, noise_sigma, powerlaw_fit, product_spectrum
from rankflow.inspect._blas import single_threaded_blas

M, N, SIGMA = 300, 80, 0.5


@pytest.fixture(autouse=True)
def _one_thread():
    with single_threaded_blas():  # the SVDs are small: threads only contend
        yield


def planted(seed, values, m=M, n=N, sigma=SIGMA):
    """σZ plus a rank-k signal with the given singular values."""
    rng = np.random.default_rng(seed)
    k = len(values)
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    V = np.linalg.qr(rng.standard_normal((n, k)))[0]
    return sigma * rng.standard_normal((m, n)) + U @ np.diag(values) @ V.T


def edge(m=M, n=N, sigma=SIGMA):
    return sigma * (np.sqrt(m) + np.sqrt(n))


def count_wrong(X, rule):
    """Spikes by a wrong edge: ``ratio`` uses the smaller side twice (β = 1 of n);
    ``frobenius`` estimates σ by ‖X‖_F/√(mn), which the spikes inflate."""
    m, n = X.shape
    s = np.linalg.svd(X, compute_uv=False)
    if rule == "ratio":
        return int(np.sum(s > noise_sigma(s, m, n) * 2 * np.sqrt(n)))
    sigma = np.sqrt(np.sum(s**2) / (m * n))
    return int(np.sum(s > sigma * (np.sqrt(m) + np.sqrt(n)) * 1.05))


SPIKES = [1.5, 2.0, 3.0, 5.0, 30.0]  # multiples of the bulk edge


def test_planted_spikes_counted_exactly():
    """k spikes at 1.5–30× the edge (all beyond the BBP transition), 20 seeds each:
    num_spikes = k every time, and σ̂ is within 6% of σ (5 spikes of 80 values push the
    median up by ~3%)."""
    for k in range(1, len(SPIKES) + 1):
        for seed in range(20):
            res = matrix_spectrum(planted(seed, [edge() * v for v in SPIKES[:k]]))
            assert res["num_spikes"] == k, (k, seed)
            assert abs(res["mp_sigma"] / SIGMA - 1) < 0.06
            assert res["mp_edge"] == pytest.approx(edge(), rel=0.06)


def test_wrong_edges_miscount_planted_spikes():
    """The Frobenius σ is inflated by the 30× spike and the 1.5× one drops out."""
    X = planted(0, [edge() * 1.5, edge() * 30])
    assert matrix_spectrum(X)["num_spikes"] == 2
    assert count_wrong(X, "frobenius") == 1


def test_pure_noise_has_no_spikes_in_95_percent_of_seeds():
    """Measured: 200 seeds of pure noise 300×80 (and 64×16); the fraction with a spike
    must be ≤ 5% (it is 1–2.5%: the Tracy–Widom 99% threshold plus σ̂'s error). The
    wrong aspect ratio puts spikes in every seed."""
    for m, n in ((M, N), (64, 16)):
        found = [matrix_spectrum(planted(s, [], m, n))["num_spikes"] > 0 for s in range(200)]
        assert np.mean(found) <= 0.05, (m, n, np.mean(found))
    wrong = [count_wrong(planted(s, []), "ratio") > 0 for s in range(50)]
    assert np.mean(wrong) == 1.0


def test_statistics_identities_and_shuffle():
    X = planted(3, [edge() * 4, edge() * 2])
    s = np.linalg.svd(X, compute_uv=False)
    res = matrix_spectrum(X)
    assert res["stable_rank"] == pytest.approx(np.sum(s**2) / s[0] ** 2, rel=1e-12)
    assert res["spectral_norm"] == pytest.approx(s[0] ** 2, rel=1e-12)
    assert res["mp_softrank"] == pytest.approx(res["mp_edge"] ** 2 / s[0] ** 2, rel=1e-12)
    rng = np.random.default_rng(0)
    rand = matrix_spectrum(rng.permutation(X.ravel()).reshape(X.shape))
    assert rand["num_spikes"] == 0  # shuffling the entries destroys the low-rank signal


def test_powerlaw_fit_recovers_alpha_and_wrong_estimator_does_not():
    """Pareto samples with α = 2.5 above x_min = 1 plus a bulk below: the KS-chosen tail
    gives α̂ within 0.15 (the MLE's sd is (α−1)/√n ≈ 0.05 here); the estimator without
    the +1 (n / Σ log) is off by ~1. Fewer than 10 values: NaN."""
    rng = np.random.default_rng(0)
    tail = (1 - rng.random(1000)) ** (-1 / 1.5)  # p(x) ∝ x^−2.5 on x ≥ 1
    x = np.concatenate([tail, rng.uniform(0.05, 0.6, 300)])
    alpha, ks, xmin, n = powerlaw_fit(x)
    assert abs(alpha - 2.5) < 0.15 and ks < 0.05 and 0.6 <= xmin < 3 and n > 200
    t = np.sort(x)[-n:]
    assert abs(n / np.sum(np.log(t / t[0])) - 2.5) > 0.8
    assert np.isnan(powerlaw_fit(x[:9])[0])


def test_product_spectrum_planted_and_noise():
    """W = ABᵀ, A, B: 256×16 noise; with a shared planted rank-2 signal of strength 6
    the product shows 2 spikes; pure-noise factors show none in ≥ 95% of 100 seeds.
    The singular values are those of ABᵀ computed directly."""
    D, r = 256, 16
    noise = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        A, B = rng.standard_normal((D, r)), rng.standard_normal((D, r))
        noise.append(product_spectrum(A, B)["num_spikes"] > 0)
    assert np.mean(noise) <= 0.05
    rng = np.random.default_rng(7)
    V = np.linalg.qr(rng.standard_normal((r, 2)))[0]
    Ua, Ub = (np.linalg.qr(rng.standard_normal((D, 2)))[0] for _ in range(2))
    scale = 6 * (np.sqrt(D) + np.sqrt(r))
    A = rng.standard_normal((D, r)) + scale * Ua @ V.T
    B = rng.standard_normal((D, r)) + scale * Ub @ V.T
    res = product_spectrum(A, B)
    assert res["num_spikes"] == 2
    s = np.linalg.svd(A @ B.T, compute_uv=False)
    assert res["spectral_norm"] == pytest.approx(s[0] ** 2, rel=1e-12)
    assert res["stable_rank"] == pytest.approx(np.sum(s**2) / s[0] ** 2, rel=1e-10)


def test_cli_spectra_outputs(tmp_path, capsys):
    path, spec, factors = build(tmp_path, arch="llama", d_model=32, heads=4, layers=2)
    out = tmp_path / "out"
    assert cli.main(["inspect", str(path), "--out", str(out), "--spectra", "--quiet"]) == 0
    meta = json.loads((out / "inspect.json").read_text())
    for name in ("spectra.parquet", "spectra.csv", "spectra_sv.parquet", "spectra.png"):
        assert name in meta["outputs"] and (out / name).is_file()
    table = pd.read_parquet(out / "spectra.parquet")
    assert len(table) == 2 * (4 * 2 + 4)  # layers × (heads × {qk, vo} + q, k, v, o)
    for col in ("alpha", "stable_rank", "num_spikes", "mp_softrank", "rand_num_spikes"):
        assert col in table.columns
    row = table.query("layer == 1 and matrix == 'qk' and head == 2").iloc[0]
    f = factors[1]
    s = np.linalg.svd(f["Q"][2] @ f["K"][2].T, compute_uv=False)
    assert row["spectral_norm"] == pytest.approx(s[0] ** 2, rel=1e-12)
    sv = pd.read_parquet(out / "spectra_sv.parquet")
    got = sv.query("layer == 1 and matrix == 'qk' and head == 2")["sv"].to_numpy()
    np.testing.assert_allclose(got, s[:8], rtol=1e-10)
