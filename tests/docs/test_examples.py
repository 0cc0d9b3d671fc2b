"""The worked examples (examples/*.py, docs/examples/*.md): each script runs with
``--quick`` into a temporary folder, writes its figures, and prints numbers that are
measurements of the theory; those are checked against the theory's prediction with the
tolerance the page states, and each check is shown to fail on a plausible wrong
prediction (a rate of ηλ instead of 2ηλ, gradient flow's rate for GD, a weak order of ½,
soft-thresholding at depth 3, the exponent 1 in place of 2/L).

The checks are pure functions of the printed numbers, so the wrong predictions cost no
second run. Measured on 2026-12-02 on a 2-core AMD EPYC shared with other work (load
average 2): 50 s for the file, of which 26 s the SME example (two compilations: the SGD
program and the SME's), 10 s balance decay, 7 s depth, 6 s the checkpoint series."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT

import rankflow
from rankflow import theory

EXAMPLES = ("balance_decay", "sgd_sme", "depth_rank", "checkpoint_series")
TRACK_EXAMPLES = ("track_flax", "track_lora", "track_torch")  # test_track_examples.py
PNG = b"\x89PNG\r\n\x1a\n"


def run_example(name: str, out: Path) -> dict:
    """Run ``examples/NAME.py --quick --out OUT`` in a fresh interpreter (from ``out``,
    so nothing depends on the working directory); its ``numbers:`` line as a dict, after
    checking that every figure it names was written as a PNG."""
    script = ROOT / "examples" / f"{name}.py"
    cmd = [sys.executable, str(script), "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out, timeout=600)
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    lines = [x for x in proc.stdout.splitlines() if x.startswith("numbers: ")]
    assert len(lines) == 1, f"{name}: expected one 'numbers:' line\n{proc.stdout[-2000:]}"
    numbers = json.loads(lines[0][len("numbers: ") :])
    assert numbers["figures"], f"{name}: no figure"
    for fig in map(Path, numbers["figures"]):
        assert fig.parent == out and fig.name.startswith(name), fig
        data = fig.read_bytes()
        assert data[:8] == PNG and len(data) > 20_000, f"{fig}: not a drawn PNG"
    return numbers


@pytest.fixture(scope="module")
def numbers(tmp_path_factory):
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = run_example(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


# --- the checks: pure functions of the printed numbers ---------------------------------


def rates_match(rows, predicted, tol: float) -> bool:
    """Gradient flow (T4): every fitted rate within ``tol`` (relative) of ``predicted(η, λ)``."""
    return all(abs(r["rate"] / predicted(r["eta"], r["lam"]) - 1) <= tol for r in rows)


def inside_bracket(ratios, ratio_ses, brackets, tol: float, k: float = 3.0) -> bool:
    """GD (T5): every rate/(2ηλ) inside its bracket [low, high], widened by k standard
    errors of the fit and by ``tol``."""
    return all(
        lo - k * se - tol <= x <= hi + k * se + tol
        for x, se, (lo, hi) in zip(ratios, ratio_ses, brackets, strict=True)
    )


def weak_order_ok(n: dict, order: float = 1.0, tol: float = 0.2, z_min: float = 2.0) -> bool:
    """T10 (as the weak-order part of the claim noise.sme_weak_order): the fitted order within
    ``tol`` of ``order``, its standard error at most ``tol``, every η's error resolved."""
    ok = abs(n["order"] - order) <= tol and n["order_se"] <= tol
    return ok and all(abs(z) >= z_min for z in n["z"])


def depth_stationary(runs, S, exponent, tol: float) -> bool:
    """T13: every final nonzero singular value w is a root of w − s + λw^{exponent(L)}
    for one of the target's values s (``exponent(L) = 2/L − 1`` by the theory)."""
    for r in runs:
        L, lam = r["depth"], r["lam"]
        for w in (v for v in r["sv"] if v > 1e-6):
            if min(abs(w - s + lam * w ** exponent(L)) for s in S) > tol:
                return False
    return True


def matches_minimiser(runs, S, minimiser, depths, tol: float) -> bool:
    """The final singular values at the given depths equal ``minimiser(s, λ)`` (sorted)."""
    for r in (r for r in runs if r["depth"] in depths):
        want = np.sort(np.asarray(minimiser(np.array(S), r["lam"])))[::-1]
        if np.max(np.abs(np.array(r["sv"]) - want)) > tol:
            return False
    return True


# --- the examples -------------------------------------------------------------------------

GF_TOL = 1e-5  # 10× the adaptive solve's rtol (1e-6)
GD_TOL = 1e-5  # beside brackets at least 2.5e-4 wide


def test_balance_decay_rates_are_2_eta_lambda(numbers):
    n = numbers("balance_decay")
    gf, gd = n["gradient_flow"], n["gd"]
    assert len(gf) == len(gd) == 4
    assert rates_match(gf, lambda eta, lam: 2 * eta * lam, GF_TOL)
    ratios, ses = [r["ratio"] for r in gd], [r["ratio_se"] for r in gd]
    brackets = [theory.gd_rate_bracket(r["eta"], r["lam"]) for r in gd]
    assert all(np.allclose(b, r["bracket"], rtol=1e-12) for b, r in zip(brackets, gd))
    assert inside_bracket(ratios, ses, brackets, GD_TOL)
    # Wrong: the rate ηλ (T4 without its factor 2) for gradient flow; gradient flow's
    # rate 2ηλ (the bracket [1, 1]) for GD, whose late rate is above it by O(ηλ).
    assert not rates_match(gf, lambda eta, lam: eta * lam, GF_TOL)
    assert not inside_bracket(ratios, ses, [(1.0, 1.0)] * len(gd), GD_TOL)


def test_sgd_sme_weak_order_is_one(numbers):
    n = numbers("sgd_sme")
    assert n["observable"] == "balance_trace" and len(n["eta"]) == 3
    assert weak_order_ok(n)
    # Wrong: a claimed weak order ½ (or 2); an SME with √η noise measures about 0.
    assert not weak_order_ok(n, order=0.5)
    assert not weak_order_ok(n, order=2.0)


def test_depth_rank_final_values_are_stationary(numbers):
    n = numbers("depth_rank")
    runs, S = n["runs"], n["S"]
    assert {r["depth"] for r in runs} == {2, 3, 4} and all(r["status"] == "ok" for r in runs)
    assert depth_stationary(runs, S, lambda L: 2 / L - 1, tol=1e-9)
    soft = lambda s, lam: np.maximum(s - lam, 0.0)  # T3: soft-thresholding
    assert matches_minimiser(runs, S, soft, depths={2}, tol=1e-9)
    assert all(abs(r["schatten_gap"]) <= 1e-9 for r in runs)  # balanced at the end (T13)
    mean_rank = {L: np.mean([r["rank"] for r in runs if r["depth"] == L]) for L in (2, 3, 4)}
    assert mean_rank[2] > mean_rank[3] > mean_rank[4]
    # Wrong: the exponent 1 in place of 2/L (the nuclear norm's stationarity at every
    # depth), and soft-thresholding at depth 3.
    assert not depth_stationary(runs, S, lambda L: 0.0, tol=1e-9)
    assert not matches_minimiser(runs, S, soft, depths={3}, tol=1e-9)


def test_checkpoint_series_rates_are_in_gds_bracket(numbers):
    n = numbers("checkpoint_series")
    two_eta_lam = 2 * n["eta"] * n["lam"]
    ratios = [r / two_eta_lam for r in n["rate"]]
    ses = [s / two_eta_lam for s in n["rate_se"]]
    assert len(ratios) == 8  # 2 layers × 2 pairs × 2 heads
    bracket = tuple(theory.gd_rate_bracket(n["eta"], n["lam"]))
    assert np.allclose(bracket, n["bracket"], rtol=1e-12)
    assert inside_bracket(ratios, ses, [bracket] * 8, tol=0.0)
    # The null pairing (A of one head, B of another) does not decay.
    assert all(abs(x) < 0.01 * r for x, r in zip(n["null_rate"], n["rate"]))
    # Wrong: half the rate (ηλ) and gradient flow's 2ηλ, both outside every bracket.
    assert not inside_bracket([2 * x for x in ratios], ses, [bracket] * 8, tol=0.0)
    assert not inside_bracket(ratios, ses, [(1.0, 1.0)] * 8, tol=0.0)


# --- the pages ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_has_a_page_with_its_code_and_figures(name):
    """docs/examples/NAME.md includes the script (pymdownx.snippets), shows figures that
    are committed, and is listed in docs/examples/index.md."""
    docs = ROOT / "docs" / "examples"
    page = (docs / f"{name}.md").read_text()
    assert f'--8<-- "examples/{name}.py"' in page
    figures = re.findall(r"\]\((figures/[^)\s]+\.png)\)", page)
    assert figures and all(f.startswith(f"figures/{name}") for f in figures)
    for f in figures:
        assert (docs / f).read_bytes()[:8] == PNG, f
    assert f"({name}.md)" in (docs / "index.md").read_text()
    assert f"python examples/{name}.py" in page


def test_every_example_script_is_listed():
    scripts = {p.stem for p in (ROOT / "examples").glob("*.py")}
    assert scripts == set(EXAMPLES) | set(TRACK_EXAMPLES)


def test_the_first_sweep_of_getting_started():
    """docs/getting-started.md's sweep: examples/first_sweep.toml is a valid config of
    3 λ × 2 η × 2 seeds, included in the page, and its committed figure is the one the
    page's `rankflow plot` command writes."""
    cfg = rankflow.resolve(ROOT / "examples" / "first_sweep.toml")
    sweep = cfg["sweep"]
    assert sweep == {"dynamics.lam": [0.01, 0.03, 0.1], "dynamics.eta": [0.05, 0.1], "seed": [0, 1]}
    assert cfg["dynamics"]["kind"] == "gd" and cfg["x64"]
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert '--8<-- "examples/first_sweep.toml"' in page
    assert "--out docs/examples/figures/first_sweep.png" in page
    assert "](examples/figures/first_sweep.png)" in page
    assert (ROOT / "docs/examples/figures/first_sweep.png").read_bytes()[:8] == PNG
