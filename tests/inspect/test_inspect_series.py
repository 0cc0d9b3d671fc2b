"""Issue #17, checkpoint series: ``inspect_series`` fits the decay of every head's
balance gap against the step, and its predictions (T5/T11, T4/T11) are the theory's.

Synthetic GPT-2 series with planted gaps: head h of pair p has Grams
``AᵀA = R_hᵀ diag(k·m + δs) R_h`` and ``BᵀB = R_hᵀ diag(k·m − δs) R_h``, with
``s = (1, −1, …)``, m (in equal pairs, so ⟨m, s⟩ = 0) and the rotation R_h the head's own,
and ``k`` such that ``‖AᵀA‖_F = ‖BᵀB‖_F = ‖m‖`` at every step: the relative gap is exactly
``2δ√d_h/‖m‖``; ``δ`` shrinks by a known factor per step, so the gap's log is
exactly linear in the step (float64 checkpoints: recovered to ~1e-12). Each check
beside a plausible wrong version that must fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rankflow import cli
from rankflow.inspect import (
    InspectError,
    fit_series,
    hub_cache,
    inspect_series,
    load_series,
    predicted_exponents,
    series_sources,
)

D, H, L = 16, 2, 2
DH = D // H


def _factor(rng, delta: float, sign: float, m0: np.ndarray) -> np.ndarray:
    """D×d_h factor with Gram diag(k·m0 + sign·δ·(1, −1, …)), k such that the Gram's
    Frobenius norm is ‖m0‖ whatever δ (m0 comes in equal pairs, so ⟨m0, (1, −1, …)⟩ = 0)."""
    s = np.array([1.0, -1.0] * (DH // 2))
    k = np.sqrt((m0 @ m0 - DH * delta**2) / (m0 @ m0))
    U = np.linalg.qr(rng.standard_normal((D, DH)))[0]
    return U * np.sqrt(k * m0 + sign * delta * s)


def planted_log_factors(steps, rates) -> np.ndarray:
    """log δ(s)/δ(s₀) per (step, layer, pair, head) for per-unit rates per step, shape
    (L, 2, H) → (S, L, 2, H)."""
    s = np.asarray(steps, np.float64) - steps[0]
    return -s[:, None, None, None] * np.asarray(rates)[None]


def write_gpt2(folder: Path, log_factor: np.ndarray, delta0: np.ndarray, seed: int) -> Path:
    """A float64 GPT-2 checkpoint whose (layer, pair, head) has gap 2·δ0·e^{log_factor}."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    tensors = {}
    for layer in range(L):
        f = {}
        for p, pair in enumerate(("qk", "vo")):
            deltas = delta0[layer, p] * np.exp(log_factor[layer, p])
            # Each head's Grams in a basis of its own, the same at every step: the null
            # pairing (A of one head, B of the next) then stays unbalanced.
            unit = [np.random.default_rng(100 * layer + 10 * p + h) for h in range(H)]
            R = [np.linalg.qr(u.standard_normal((DH, DH)))[0] for u in unit]
            m0 = [np.repeat(u.uniform(1.0, 2.0, DH // 2), 2) for u in unit]
            f[pair] = [
                (_factor(rng, d, 1.0, m0[h]) @ R[h], _factor(rng, d, -1.0, m0[h]) @ R[h])
                for h, d in enumerate(deltas)
            ]
        Wq = np.hstack([a for a, _ in f["qk"]])
        Wk = np.hstack([b for _, b in f["qk"]])
        Wv = np.hstack([a for a, _ in f["vo"]])
        Wo = np.vstack([b.T for _, b in f["vo"]])
        tensors[f"h.{layer}.attn.c_attn.weight"] = np.hstack([Wq, Wk, Wv])
        tensors[f"h.{layer}.attn.c_proj.weight"] = Wo
    # safetensors' numpy writer stores a Fortran-ordered array's bytes as if C-ordered.
    save_file(
        {k: np.ascontiguousarray(v) for k, v in tensors.items()}, folder / "model.safetensors"
    )
    cfg = {"model_type": "gpt2", "n_embd": D, "n_head": H, "n_layer": L}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def write_series(root: Path, steps, rates=None, log_factors=None, delta0=None) -> list[str]:
    """One checkpoint folder per step (``root/step{s}``); rates (L, 2, H) per step."""
    rng = np.random.default_rng(0)
    delta0 = rng.uniform(0.2, 0.6, (L, 2, H)) if delta0 is None else delta0
    if log_factors is None:
        log_factors = planted_log_factors(steps, rates)
    return [
        str(write_gpt2(root / f"step{s}", lf, delta0, seed=i))
        for i, (s, lf) in enumerate(zip(steps, log_factors))
    ]


STEPS = [0, 10, 25, 40, 100]
RATES = np.random.default_rng(1).uniform(0.01, 0.08, (L, 2, H))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    return root, write_series(root, STEPS, RATES)


def _rate_of(rates, layer, pair, head):
    r = rates[(rates["layer"] == layer) & (rates["pair"] == pair) & (rates["head"] == head)]
    return r.iloc[0]


def test_fitted_rate_per_head_recovers_the_planted_rate(planted):
    _, paths = planted
    res = inspect_series(paths, STEPS)
    assert len(res.heads) == len(STEPS) * L * 2 * H
    assert res.heads["step"].tolist()[:: L * 2 * H] == STEPS
    for layer in range(L):
        for p, pair in enumerate(("qk", "vo")):
            for h in range(H):
                r = _rate_of(res.rates, layer, pair, h)
                assert r.rate == pytest.approx(RATES[layer, p, h], rel=1e-9)
                assert r.rate_se < 1e-10 and r.n_points == len(STEPS)
                # wrong: the rate per unit of log-time, or the rate of the gap²
                assert abs(r.rate - 2 * RATES[layer, p, h]) > 1e-3
    # The per-layer row: median over heads of the fitted rates.
    lr = res.layer_rates.set_index(["layer", "pair"])
    assert lr.loc[(1, "vo"), "rate_median"] == pytest.approx(np.median(RATES[1, 1]), rel=1e-9)
    # The null pairing's gap does not decay like the true pairs' (wrong: a fit that
    # finds the planted rate in any pairing).
    assert (res.rates["null_rate"].abs() < 0.2 * res.rates["rate"]).all()
    assert np.isnan(res.rates["predicted_rate"]).all()  # no η, λ: nothing predicted


def test_constant_eta_prediction_is_gd_contraction_not_gf(tmp_path):
    """SGD/GD at constant η (T5): the gap contracts by (1 − ηλ)² per step. A series
    planted at that factor matches ``predicted_rate`` to float64 rounding; the
    gradient-flow rate 2ηλ (wrong for discrete steps) and a wrong λ do not."""
    eta, lam = 0.1, 0.5
    rho = (1 - eta * lam) ** 2
    paths = write_series(tmp_path, STEPS, np.full((L, 2, H), -np.log(rho)))
    res = inspect_series(paths, STEPS, lr=eta, lam=lam)
    pred = res.rates["predicted_rate"].iloc[0]
    assert pred == pytest.approx(-2 * np.log(1 - eta * lam), rel=1e-12)
    assert np.allclose(res.rates["rate_over_predicted"], 1.0, rtol=1e-9, atol=0)
    gf = res.rates["predicted_rate_gf"].iloc[0]
    assert gf == pytest.approx(2 * eta * lam, rel=1e-12)
    assert abs(res.rates["rate"].iloc[0] / gf - 1) > 0.02  # GF's clock is off by O(ηλ)
    wrong = inspect_series(paths, STEPS, lr=eta, lam=1.1 * lam).rates
    assert abs(wrong["rate_over_predicted"].iloc[0] - 1) > 0.05


def _schedule(k):
    return 0.2 - 0.18 * k / 100.0  # linear decay, 0.2 → 0.02 over 100 steps


def test_schedule_file_prediction_and_coverage(tmp_path):
    """Under a schedule the leading factor is Π_k (1 − η_kλ)² (T11): a series planted at
    it matches the schedule file's prediction; the constant peak η does not."""
    lam = 0.5
    k = np.arange(0, 100)
    log_per_step = 2 * np.log(1 - _schedule(k) * lam)
    cum = np.concatenate([[0.0], np.cumsum(log_per_step)])
    log_factors = [np.full((L, 2, H), cum[s]) for s in STEPS]
    paths = write_series(tmp_path, STEPS, log_factors=log_factors)
    sched = tmp_path / "lr.csv"
    rows = "\n".join(f"{s},{_schedule(s)!r}" for s in range(0, 101, 5))
    sched.write_text("step,lr\n" + rows + "\n")
    res = inspect_series(paths, STEPS, schedule=sched, lam=lam)
    assert np.allclose(res.rates["rate_over_predicted"], 1.0, rtol=1e-9, atol=0)
    peak = inspect_series(paths, STEPS, lr=0.2, lam=lam).rates
    assert abs(peak["rate_over_predicted"].iloc[0] - 1) > 0.3
    # A schedule that stops before the last checkpoint's steps.
    short = tmp_path / "short.csv"
    short.write_text("step,lr\n0,0.2\n50,0.1\n")
    with pytest.raises(InspectError, match=r"short.csv: field 'step': the schedule covers"):
        inspect_series(paths, STEPS, schedule=short, lam=lam, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_predicted_exponents_are_theory_sums():
    steps = [3, 5, 9]
    e = predicted_exponents(steps, 0.25, lr=0.4)
    assert e["gd"] == pytest.approx([0, -4 * np.log(0.9), -12 * np.log(0.9)], rel=1e-12)
    assert e["gf"] == pytest.approx([0, 0.4, 1.2], rel=1e-12)


def test_fit_series_median_gap_rate(planted):
    _, paths = planted
    res = inspect_series(paths[:3], STEPS[:3])
    rates, layer = fit_series(res.heads)
    assert rates.equals(res.rates) and layer.equals(res.layer_rates)
    row = layer[(layer.layer == 0) & (layer.pair == "qk")].iloc[0]
    assert row.rate_q25 <= row.rate_median <= row.rate_q75


def test_folder_of_revisions_and_list_file(planted, tmp_path):
    root, paths = planted
    names, steps = series_sources(root)
    assert steps == STEPS and [Path(n).name for n in names] == [f"step{s}" for s in STEPS]
    a = inspect_series([root]).rates
    lst = tmp_path / "series.txt"
    lst.write_text("# step path\n" + "".join(f"{s} {p}\n" for s, p in zip(STEPS, paths)))
    b = inspect_series([lst]).rates
    assert np.array_equal(a["rate"], b["rate"])


def test_cli_writes_tables_and_figures(planted, tmp_path, capsys):
    _, paths = planted
    out = tmp_path / "out"
    argv = ["inspect", *paths, "--steps", *map(str, STEPS), "--lr", "0.1", "--lam", "0.5"]
    assert cli.main(argv + ["--out", str(out), "--quiet"]) == 0
    res = load_series(out)
    for name in ("heads.parquet", "rates.csv", "layer_rates.parquet", "summary.md"):
        assert (out / name).is_file()
    assert {"series_gaps.png", "series_rates.png"} <= set(res.meta["outputs"])
    assert res.rates["rate"].to_numpy() == pytest.approx(RATES.reshape(-1), rel=1e-9)


# --- models by name: a fake Hugging Face cache, offline -------------------------------


def _fake_cache(cache: Path, repo: str, revisions: dict[str, Path]) -> None:
    """The hub cache layout: models--org--name/refs/<rev> → commit, snapshots/<commit>/."""
    base = cache / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    for i, (rev, src) in enumerate(revisions.items()):
        commit = f"{i:040x}"
        (base / "refs" / rev).write_text(commit)
        snap = base / "snapshots" / commit
        snap.mkdir(parents=True)
        for f in src.iterdir():
            (snap / f.name).write_bytes(f.read_bytes())


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_repo_id_revisions_from_an_offline_cache(planted, offline_cache, tmp_path):
    root, paths = planted
    _fake_cache(offline_cache, "org/tiny", {f"step{s}": Path(p) for s, p in zip(STEPS, paths)})
    assert hub_cache() == offline_cache
    res = inspect_series(["org/tiny"], revisions=[f"step{s}" for s in STEPS])
    assert res.steps == tuple(STEPS)
    assert res.rates["rate"].to_numpy() == pytest.approx(RATES.reshape(-1), rel=1e-9)
    with pytest.raises(InspectError, match=r"org/tiny@step7: not in the Hugging Face cache"):
        inspect_series(["org/tiny"], revisions=["step0", "step7"], out=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    with pytest.raises(InspectError, match=str(offline_cache)):
        inspect_series(["org/other@step0", "org/other@step10"])


def test_torch_bin_without_torch_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch → ImportError
    f = tmp_path / "m" / "pytorch_model.bin"
    f.parent.mkdir()
    f.write_bytes(b"PK")
    with pytest.raises(InspectError, match=r"pytorch_model.bin: .*rankflow\[torch\]"):
        inspect_series([f.parent, f.parent], [0, 1])


# --- bad input: one line naming the file and the field, nothing written ----------------


@pytest.mark.parametrize(
    "kind, match",
    [
        ("count", r"--steps: 2 steps for 3 checkpoints"),
        ("duplicate", r"--steps: step 10 appears twice"),
        ("unsorted", r"--steps: steps are not increasing: 25 .* before 10"),
        ("shape", r"step25: field 'n_heads' is 4, but .*step0 has 2"),
        ("lam", r"--lam: give the learning rate"),
        ("nolam", r"--lam: a learning rate without λ"),
        ("schedule", r"lr.csv: field 'lr': no such column"),
    ],
)
def test_bad_series(planted, tmp_path, kind, match):
    _, paths = planted
    three, steps = paths[:3], STEPS[:3]
    kw = {}
    if kind == "count":
        steps = STEPS[:2]
    elif kind == "duplicate":
        steps = [0, 10, 10]
    elif kind == "unsorted":
        steps = [0, 25, 10]
    elif kind == "shape":
        other = tmp_path / "step25"
        other.mkdir()
        for f in Path(three[2]).iterdir():
            (other / f.name).write_bytes(f.read_bytes())
        cfg = json.loads((other / "config.json").read_text())
        (other / "config.json").write_text(json.dumps(dict(cfg, n_head=4)))
        three = [*three[:2], str(other)]
    elif kind == "lam":
        kw = dict(lam=0.1)
    elif kind == "nolam":
        kw = dict(lr=0.1)
    else:
        (tmp_path / "lr.csv").write_text("step,rate\n0,0.1\n")
        kw = dict(lam=0.1, schedule=tmp_path / "lr.csv")
    out = tmp_path / "out"
    with pytest.raises(InspectError, match=match):
        inspect_series(three, steps, out=out, **kw)
    assert not out.exists()


def test_env_points_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub_cache() == tmp_path / "c"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "h"))
    assert hub_cache() == tmp_path / "h" / "hub"
    assert os.environ["HF_HOME"].endswith("h")


@pytest.mark.slow
def test_memory_of_a_1gib_series_of_4_checkpoints(tmp_path):
    """Issue #17: a 1 GiB series of 4 checkpoints peaks below 0.5 GiB RSS (one layer of
    one checkpoint at a time; measured 364 MiB here, 352 MiB for 4 two-layer ones)."""
    from benchmarks.inspect_memory import peak_rss, write_checkpoint

    folders = [tmp_path / f"ck{i}" for i in range(4)]
    size = sum(write_checkpoint(f, 16, 1024, "float32", i) for i, f in enumerate(folders))
    assert size > 2**30
    peak, _ = peak_rss(folders, tmp_path / "out")
    assert peak < 2**29, f"peak RSS {peak / 2**20:.0f} MiB"
