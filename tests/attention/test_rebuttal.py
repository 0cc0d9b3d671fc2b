"""The rebuttal experiments' tables (rankflow.attention.tables) on small hand-made results
tables with known answers, their figure, and (slow) one config end to end at reduced size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rankflow.attention import tables

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tables(points: list[dict], steps=(0, 10)):
    """``loss`` and ``heads`` tables of one run per point (2 layers × 2 heads), where run
    ``i`` has val_loss ``1 + i`` at its last step, train_loss ``2 + i``, and effective rank
    ``i + layer + head/2`` (qk) and twice that (vo); step 0 holds decoys (100)."""
    loss, heads = [], []
    for i, p in enumerate(points):
        for t in steps:
            last = t == max(steps)
            loss.append(
                {
                    "run_id": i,
                    "t": t,
                    "status": "ok",
                    **p,
                    "val_loss": 1.0 + i if last else 100.0,
                    "train_loss": 2.0 + i if last else 100.0,
                }
            )
            for layer in range(2):
                for head in range(2):
                    r = i + layer + head / 2 if last else 100.0
                    for pair, f in (("qk", 1.0), ("vo", 2.0)):
                        heads.append(
                            {
                                "run_id": i,
                                "t": t,
                                "status": "ok",
                                **p,
                                "layer": layer,
                                "head": head,
                                "pair": pair,
                                "effective_rank": f * r,
                            }
                        )
    return pd.DataFrame(loss), pd.DataFrame(heads)


def test_run_finals_takes_the_last_step_and_the_mean_over_heads():
    loss, heads = _tables([{"seed": s, "dynamics.lam": 1.0} for s in range(3)])
    fin = tables.run_finals(loss, heads, ["dynamics.lam"])
    assert fin["val_loss"].tolist() == [1.0, 2.0, 3.0]
    # mean over layer ∈ {0, 1}, head/2 ∈ {0, 0.5}: i + 0.75
    np.testing.assert_allclose(fin["rank_qk"], [0.75, 1.75, 2.75], rtol=0, atol=1e-15)
    np.testing.assert_allclose(fin["rank_vo"], [1.5, 3.5, 5.5], rtol=0, atol=1e-15)


def test_run_finals_drops_runs_that_did_not_finish():
    loss, heads = _tables([{"seed": s, "dynamics.lam": 1.0} for s in range(3)])
    loss.loc[(loss["run_id"] == 1) & (loss["t"] == 10), "status"] = "diverged"
    heads.loc[(heads["run_id"] == 1) & (heads["t"] == 10), "status"] = "diverged"
    fin = tables.run_finals(loss, heads, ["dynamics.lam"])
    assert fin["run_id"].tolist() == [0, 2]


def test_summarize_mean_and_std_over_seeds():
    pts = [{"seed": s, "dynamics.lam": lam} for lam in (0.0, 1.0) for s in range(3)]
    loss, heads = _tables(pts)
    out = tables.lambda_summary(loss, heads)
    assert out["dynamics.lam"].tolist() == [0.0, 1.0]
    assert out["seeds"].tolist() == [3, 3]
    # runs 0, 1, 2 → val 1, 2, 3: mean 2, std (ddof 1) 1; runs 3, 4, 5 → mean 5
    np.testing.assert_allclose(out["val_loss_mean"], [2.0, 5.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(out["val_loss_std"], [1.0, 1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(out["rank_vo_mean"], [3.5, 9.5], rtol=0, atol=1e-15)
    # the wrong spread (ddof 0) is sqrt(2/3), and the table does not give it
    assert abs(out["val_loss_std"].iloc[0] - np.sqrt(2 / 3)) > 0.1


def test_summarize_one_seed_has_no_spread():
    loss, heads = _tables([{"seed": 0, "dynamics.lam": 1.0}])
    out = tables.lambda_summary(loss, heads)
    assert np.isnan(out["val_loss_std"].iloc[0])
    assert "± " not in tables.markdown(out, {"dynamics.lam": "λ"}, {"val_loss": "loss"})


def test_contrast_table_labels_variants_in_order_per_task():
    grid = [(1.0, 1.0), (0.0, 0.0), (0.0, 1.0), (1.0, 0.0)]
    pts = [{"seed": s, "train.lam_qk": a, "train.lam_vo": b} for a, b in grid for s in (0, 1)]
    lm = _tables(pts)
    # the ViT task lists its variants in another order: the table must not follow it
    vit = _tables(pts[::-1])
    vit[0]["val_accuracy"] = vit[0]["val_loss"] / 10
    out = tables.contrast_table({"ViT": vit, "char_lm": lm})
    assert out["task"].tolist() == ["ViT"] * 4 + ["char_lm"] * 4
    assert out["variant"].tolist()[:4] == list(tables.VARIANTS.values())
    # char_lm "off value–output" (λ_qk = 1, λ_vo = 0) is runs 6, 7: val 7, 8
    row = out[(out["task"] == "char_lm") & (out["variant"] == "off value–output")].iloc[0]
    assert row["val_loss_mean"] == 7.5
    # ViT "decay on all" is runs 6, 7 of the reversed list: accuracy 0.7, 0.8
    row = out[(out["task"] == "ViT") & (out["variant"] == "decay on all")].iloc[0]
    np.testing.assert_allclose(row["val_accuracy_mean"], 0.75, rtol=0, atol=1e-15)


def test_lr_control_and_dh_orders_and_labels():
    pts = [
        {"seed": s, "train.lam_vo": lam, "train.lr_v": lr}
        for lr in (0.01, 1.0, 0.1)
        for lam in (0.0, 1.0)
        for s in (0, 1)
    ]
    out = tables.lr_control_summary(*_tables(pts))
    assert out["setting"].tolist() == [
        "decay on value–output, lr_v × 1",
        "decay on value–output, lr_v × 0.1",
        "decay on value–output, lr_v × 0.01",
        "decay off value–output, lr_v × 1",
        "decay off value–output, lr_v × 0.1",
        "decay off value–output, lr_v × 0.01",
    ]
    # decay off attention by train.decay (the committed config) …
    pts = [
        {"seed": s, "attention.H": h, "train.decay": d, "train.lam_qk": lam, "train.lam_vo": lam}
        for h in (1, 8, 4)
        for d, lam in (("mlp,embed", 0.0), ("qk,vo,mlp,embed", 1.0))
        for s in (0, 1)
    ]
    out = tables.dh_summary(*_tables(pts), D=32)
    assert out["d_h"].tolist() == [4, 4, 8, 8, 32, 32]
    assert out["decay"].tolist() == ["on attention", "off attention"] * 3
    # … or by λ_qk = λ_vo = 0 with the groups listed (the --quick config: one program per H)
    pts = [
        {"seed": s, "attention.H": h, "train.decay": "qk,vo,mlp,embed", "train.lam_qk": lam,
         "train.lam_vo": lam}
        for h in (4, 1)
        for lam in (0.0, 1.0)
        for s in (0, 1)
    ]  # fmt: skip
    out = tables.dh_summary(*_tables(pts), D=16)
    assert out["d_h"].tolist() == [4, 4, 16, 16]
    assert out["decay"].tolist() == ["on attention", "off attention"] * 2
    assert out["seeds"].tolist() == [2] * 4
    assert tables.decay_label("qk,mlp", 1.0, 0.0) == "on qk only"
    assert tables.decay_label("qk,vo,mlp", 1.0, 0.0) == "on qk only"
    assert tables.decay_label("qk,vo,mlp", 0.0, 0.0) == "off attention"


def test_markdown_cells():
    loss, heads = _tables([{"seed": s, "dynamics.lam": 0.3} for s in range(2)])
    text = tables.markdown(
        tables.lambda_summary(loss, heads),
        {"dynamics.lam": "λ"},
        {"val_loss": "validation loss", "rank_qk": "rank qk"},
    )
    lines = text.splitlines()
    assert lines[0] == "| λ | seeds | validation loss | rank qk |"
    # val 1, 2: 1.5 ± 0.707; qk rank 0.75, 1.75: 1.25 ± 0.71
    assert lines[2] == "| 0.3 | 2 | 1.500 ± 0.707 | 1.25 ± 0.71 |"


def test_rebuttal_figure_draws(tmp_path):
    from rankflow.plots.rebuttal import rebuttal_figure

    pts = [
        {"seed": s, "attention.H": h, "train.decay": d, "train.lam_qk": 1.0, "train.lam_vo": 1.0}
        for h in (8, 4)
        for d in ("mlp,embed", "qk,vo,mlp,embed")
        for s in (0, 1)
    ]
    loss, heads = _tables(pts)
    fin = tables.run_finals(loss, heads, ["attention.H", "train.decay"])
    fin["decay"] = [tables.decay_label(d) for d in fin["train.decay"]]
    fig = rebuttal_figure(fin, "attention.H", "val_loss", "test", tmp_path / "f.png", group="decay")
    assert (tmp_path / "f.png").stat().st_size > 0
    assert len(fig.axes) == 3


@pytest.mark.slow  # ~11 s of training
def test_lr_control_config_end_to_end_at_reduced_size(tmp_path):
    """The --quick config of the learning-rate control, cut to 20 steps: one program, a
    row per setting with both seeds, finite losses below the uniform prediction's log V,
    and effective ranks inside [1, d_h]."""
    from rankflow import attention
    from rankflow.reproduce._common import config_path

    cfg = attention.resolve(config_path("rebuttal_lr"), {"save.t1": 20, "train.eval_every": 10})
    res = attention.run(cfg, out=tmp_path / "run")
    summary, finals = tables.experiment("lr_control", [(res.loss, res.heads)])
    assert summary["seeds"].tolist() == [2, 2, 2, 2]
    assert summary["train.lr_v"].tolist() == [1.0, 0.01, 1.0, 0.01]
    assert summary["train.lam_vo"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert len(finals) == 8 and np.isfinite(finals["val_loss"]).all()
    assert (finals["val_loss"] < np.log(96)).all()
    d_h = cfg["attention"]["D"] // cfg["attention"]["H"]
    for pair in ("qk", "vo"):
        assert ((finals[f"rank_{pair}"] >= 1) & (finals[f"rank_{pair}"] <= d_h)).all()


def test_parameter_count_is_the_same_for_every_head_split():
    """At fixed D the key–query-dimension sweep changes how the width is split into
    heads, not the model size: W_Q, W_K, W_V, W_O hold H·D·d_h = D² numbers each."""
    from rankflow.attention import resolve
    from rankflow.attention.config import expand
    from rankflow.reproduce._common import config_path

    points = expand(resolve(config_path("rebuttal_dh")))
    counts = {p["attention"]["H"]: tables.parameter_count(p) for p in points}
    assert set(counts) == {4, 1} and len(set(counts.values())) == 1
    # D = 16, 1 layer, MLP ratio 4, untied embedding and unembedding (no bias) of V
    # characters, context 32: 4D² attention + 8D² + 5D MLP + 2 LayerNorms (4D) + the
    # final one (2D) + positions (32D) + 2VD
    D = 16
    rest = counts[4] - (4 * D * D + 8 * D * D + 5 * D + 4 * D + 2 * D + 32 * D)
    assert rest % (2 * D) == 0 and 50 < rest // (2 * D) < 200  # V: the corpus's characters


@pytest.mark.slow
def test_reproduce_quick_rebuttal_records_four_observations(tmp_path):
    """``rankflow reproduce --quick --only rebuttal``: four observations (none pass or
    fail: the rebuttal's statements are not predictions of the theory), each with its
    figure and its summary and per-run tables."""
    from rankflow import cli

    out = tmp_path / "r"
    assert (
        cli.main(["reproduce", "--quick", "--only", "rebuttal", "--out", str(out), "--quiet"]) == 0
    )
    claims = pd.read_csv(out / "tables" / "claims.csv")
    kinds = ["lambda", "contrast", "lr_control", "dh"]
    assert list(claims["name"]) == [f"rebuttal.{k}" for k in kinds]
    assert (claims["verdict"] == "observation").all()
    for k in kinds:
        assert (out / "figures" / f"rebuttal_{k}.png").stat().st_size > 10_000
        summary = pd.read_csv(out / "tables" / f"rebuttal_{k}.csv")
        assert (summary["seeds"] == 2).all() or k == "contrast"
        assert len(pd.read_csv(out / "tables" / f"rebuttal_{k}_runs.csv")) == summary["seeds"].sum()
