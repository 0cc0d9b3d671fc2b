"""``rankflow.track`` (issue #31): the tracker's per-head rows on rankflow's own attention
model equal the attention family's table at every logged step; its prediction for SGD
with decoupled decay is T5's, and the measured decay agrees with it, while the same
training without decay (the tracker still told λ) disagrees in every head (the mutant);
the folder is a rankflow results directory; bad input is one line and writes nothing."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd
import pytest

import rankflow
import rankflow.attention as ra
from rankflow import cli, theory
from rankflow.attention.observables import HEAD_COLUMNS
from rankflow.attention.program import params_of, program_for
from rankflow.track import (
    COLUMNS,
    Factor,
    Optimizer,
    Pair,
    Tracker,
    TrackError,
    attention_pairs,
    measure,
    prediction_table,
)

ETA, LAM = 0.05, 0.1
CONFIG = {
    "attention": {"D": 16, "H": 2, "layers": 2, "context": 16},
    "task": {"kind": "char_lm", "seq_len": 16, "val_size": 16},
    "dynamics": {"kind": "sgd", "eta": ETA, "lam": LAM, "batch": 8},
    "train": {"eval_every": 50, "export_every": 50},
    "save": {"t1": 300},
}


def _train(decay: bool):
    """One SGD run of rankflow's attention program: its outputs (the heads' observables
    at every save) and its parameters at every save (the exports)."""
    cfg = {k: dict(v) for k, v in CONFIG.items()}
    cfg["train"]["decay"] = ["qk", "vo", "mlp", "embed"] if decay else []
    point = ra.resolve(cfg)
    program = program_for(point)
    out = program.run({k: np.asarray([v]) for k, v in params_of(point).items()})
    return program, out


def _track(program, out, tracker: Tracker) -> Tracker:
    for k, step in enumerate(program.export_steps):
        tracker.log(int(step), jax.tree.map(lambda x, k=k: x[0, k], out["params"]))
    return tracker


@pytest.fixture(scope="module")
def sgd():
    return _train(decay=True)


def test_rows_equal_the_attention_table_and_the_prediction_is_gds_bracket(sgd, tmp_path):
    program, out = sgd
    assert list(program.export_steps) == list(program.steps)  # every save is exported
    tracker = _track(
        program, out, Tracker(tmp_path / "trk", every=50, optimizer=Optimizer("sgd", ETA, LAM))
    )
    pred = tracker.close()
    table = rankflow.load(tmp_path / "trk")
    assert len(table) == len(program.steps) * 2 * 2 * 2  # saves × layers × heads × pairs
    pair_index = {"qk": 0, "vo": 1}
    for col in HEAD_COLUMNS:
        got = table[col].to_numpy()
        want = out[col][0][
            np.searchsorted(program.steps, table["t"]),
            table["layer"],
            table["head"],
            table["pair"].map(pair_index),
        ]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=col)
    assert set(COLUMNS) == set(HEAD_COLUMNS)
    # the prediction is T5's bracket, and every head's measured rate agrees with it
    low, high = (float(x) * 2 * ETA * LAM for x in theory.gd_rate_bracket(ETA, LAM))
    assert pred["predicted_low"].unique() == pytest.approx([low], rel=1e-12)
    assert pred["predicted_high"].unique() == pytest.approx([high], rel=1e-12)
    assert low == pytest.approx(float(theory.gd_balance_rate(ETA, LAM)), rel=1e-12)
    # key–query: T5's leading term to 1e-6 (measured 0.010025 in every head); value–output
    # 0.01006–0.01014, at most 1% above the bracket (the fit starts far from a minimum,
    # where the η² term is larger), which the tracker's three standard errors accept here
    assert len(pred) == 8, pred
    assert pred.loc[pred["pair"] == "qk", "agrees"].all(), pred
    assert ((pred["rate"] > 0.99 * low) & (pred["rate"] < 1.02 * high)).all(), pred
    assert (tmp_path / "trk" / "prediction.csv").is_file()


@pytest.mark.slow
def test_mutant_decay_off_fails_the_prediction(sgd):
    """Trained without decay, told λ: every head's gap stays put (measured rates ≤ 1e-5
    per step against T5's 0.01): the prediction fails in every head."""
    program, out = _train(decay=False)
    pred = _track(
        program, out, Tracker(None, every=50, optimizer=Optimizer("sgd", ETA, LAM))
    ).prediction()
    assert len(pred) == 8 and not pred["agrees"].any(), pred
    assert (pred["rate"].abs() < 1e-4).all()


def test_adamw_and_schedules():
    """AdamW: no prediction, said in words; a warmup schedule: the clock is T11's
    accumulated learning rate, so a gap following T5 under the schedule agrees."""
    from rankflow.numerics.schedules import Schedule

    k = np.arange(0, 400, 20)
    sched = Schedule("linear", warmup=100.0, final_fraction=1.0, t1=400.0)
    gap = theory.gd_scheduled_contraction(0.1, 0.05, k, sched)
    df = pd.DataFrame(
        {"t": k, "layer": 0, "pair": "w", "head": 0, "status": "ok", "balance_gap": gap}
    )
    pred = prediction_table(df, Optimizer("sgd", 0.1, 0.05, schedule=sched)).iloc[0]
    assert bool(pred["agrees"]) and pred["rate"] == pytest.approx(pred["predicted_low"], rel=1e-6)
    wrong = prediction_table(df, Optimizer("sgd", 0.1, 0.05)).iloc[0]  # schedule ignored
    assert not bool(wrong["agrees"])
    adamw = prediction_table(df, Optimizer("adamw", 1e-3, 0.1)).iloc[0]
    assert np.isnan(adamw["predicted_low"]) and adamw["source"].startswith("no prediction")


def test_folder_is_loaded_and_plotted(tmp_path):
    pair = Pair("w", 0, Factor("A"), Factor("B"))
    seen = []

    class Writer:
        def add_scalar(self, tag, value, step):
            seen.append((tag, step))

    with Tracker(
        tmp_path / "t", [pair], every=5, writer=Writer(), callback=lambda s, r: seen.append(s)
    ) as tr:
        for step in range(20):
            tr.log(step, {"A": np.diag([1.0 + 0.9**step, 1.0]), "B": np.eye(2)})
    df = rankflow.load(tmp_path / "t")
    assert df["t"].unique().tolist() == [0, 5, 10, 15] and (df["status"] == "ok").all()
    assert ("rankflow/w/0/balance_gap_rel", 5) in seen and 10 in seen
    fig = tmp_path / "gap.png"
    assert cli.main(["plot", str(tmp_path / "t"), "--y", "balance_gap", "--out", str(fig)]) == 0
    assert fig.is_file()
    # a tracker's folder is its own: a second tracker may write there; a user's is refused
    user = tmp_path / "user"
    user.mkdir()
    (user / "train.py").write_text("print('mine')\n")
    with pytest.raises(rankflow.ConfigError, match="train.py"):
        Tracker(user, [pair])
    assert sorted(p.name for p in user.iterdir()) == ["train.py"]


def test_jit_flax_and_lora_detection():
    from flax import nnx

    mha = nnx.MultiHeadAttention(
        num_heads=2, in_features=8, qkv_features=8, decode=False, rngs=nnx.Rngs(0)
    )
    pairs = attention_pairs(nnx.state(mha, nnx.Param))
    assert [(p.name, p.A.layout, p.B.layout) for p in pairs] == [
        ("qk", "mhr", "mhr"),
        ("vo", "mhr", "hrm"),
    ]
    out = jax.jit(lambda p: measure(p, tuple(pairs)))(nnx.state(mha, nnx.Param))
    q = np.asarray(mha.query.kernel[...])  # (D, H, d_h): head 0's W_Q is q[:, 0, :]
    k = np.asarray(mha.key.kernel[...])
    gap0 = np.linalg.norm(q[:, 0].T @ q[:, 0] - k[:, 0].T @ k[:, 0])
    assert float(out[0]["balance_gap"][0]) == pytest.approx(gap0, rel=1e-5)
    wrong = np.linalg.norm(q[:, :, 0].T @ q[:, :, 0] - k[:, :, 0].T @ k[:, :, 0])  # heads ↔ dims
    assert abs(wrong - gap0) > 1e-3 * gap0
    lora = {"layer": {"lora_A": {"weight": np.ones((2, 6))}, "lora_B": {"weight": np.ones((5, 2))}}}
    tr = Tracker(None, every=1)
    row = tr.log(0, lora)
    assert row["pair"].tolist() == ["lora"] and row["nuclear_norm"].iloc[0] == pytest.approx(
        np.linalg.norm(np.ones((5, 2)) @ np.ones((2, 6)), "nuc"), rel=1e-6
    )


@pytest.mark.parametrize(
    "params, pairs, match",
    [
        ({"dense": {"kernel": np.ones((3, 3))}}, "auto", "no factor pairs found by name"),
        (
            {"A": np.ones((4, 2)), "B": np.ones((5, 3))},
            [Pair("w", 0, Factor("A"), Factor("B"))],
            "must match",
        ),
        (
            {"A": np.ones((4, 2))},
            [Pair("w", 0, Factor("A"), Factor("Bx"))],
            "no parameter at path 'Bx'",
        ),
    ],
    ids=["no-layout", "mismatched", "missing-path"],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, params, pairs, match):
    out = tmp_path / "never"
    tracker = Tracker(out, pairs, every=1)
    with pytest.raises(TrackError, match=match) as err:
        tracker.log(0, params)
    assert "\n" not in str(err.value)
    assert not out.exists()
    with pytest.raises(TrackError, match="layout"):
        Factor("x", "mq")
    with pytest.raises(TrackError, match="every"):
        Tracker(None, every=0)


def test_no_decay_and_whole_segment_names():
    """λ = 0 predicts no decay (not NaN); a leaf named ``subquery`` is not flax's
    ``query``, so a model with LoRA adapters beside it gets its LoRA pair."""
    from rankflow.track import predicted_rates, resolve_pairs

    assert predicted_rates(Optimizer("sgd", 0.1, 0.0))[:2] == (0.0, 0.0)
    params = {
        "enc": {"subquery": {"kernel": np.ones((4, 2))}},
        "q_proj": {"lora_A": {"weight": np.ones((2, 4))}, "lora_B": {"weight": np.ones((4, 2))}},
    }
    assert [p.name for p in resolve_pairs(params)] == ["lora"]
