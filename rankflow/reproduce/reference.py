"""Experiment ``reference``: what the balance fingerprint's effect reaches in
transformers rankflow trains itself, under the optimizers real checkpoints use.

``rankflow inspect``'s permutation test gives a checkpoint's effect (the true pairs'
median relative Gram gap over that of pairings of different heads of a layer; 1 is
chance, 0 exact balance). What number to expect depends on the optimizer: T4's
e^{−2ηλt} is a law of gradient flow with decay, and real checkpoints are trained with
AdamW. This experiment trains rankflow's char_lm transformer (``sims/reproduce/
reference_adamw.toml``: AdamW with λ on a grid and without decay;
``reference_sgd.toml``: SGD with decoupled decay, T4's regime, and without), with
``save.cross_gaps`` on, and computes the test per pair at every save twice:

- *in training*: from the heads table's ``cross_gap_rel_*`` columns, which the training
  program computes from its own factors;
- *on the exported checkpoints* (``train.export_every``; Hugging Face GPT-2 safetensors),
  through :func:`rankflow.inspect.inspect_checkpoint`, as for any real checkpoint.

The two agree to float32 rounding (the report states the largest difference).

Claims: with decay, every seed's effect at the last step is below every seed's without
decay, for both pairs (``reference.sgd_decay_balances``: T4's balancing, for SGD;
``reference.adamw_decay_balances``: the paper's empirical claim for AdamW). No overlap of
the seeds' ranges is the margin; its mutant (the decayed runs' table replaced by the
undecayed runs', what dropping the decay from the optimizer gives) fails. The ranges
reached are observations (``reference.qk_effect``, ``reference.vo_effect``). The table
``reference_effects`` is the one shipped with the package as
``rankflow/inspect/reference_effects.csv``, which ``rankflow inspect`` and the
``pretrained`` experiment quote beside a checkpoint's effect. Observations only: the
theory predicts no value of the effect for AdamW, nor for minibatch SGD's relative gaps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from ..inspect import REFERENCE_COLUMNS, inspect_checkpoint, permutation_test
from ._common import (
    Claim,
    Context,
    attention_config,
    fmt,
    run_attention,
    validate_attention,
    verdict,
)

NAME = "reference"
CONFIGS = ("reference_adamw", "reference_sgd")
# The claims whose verdict can be pass; tests/claims/test_mutants.py holds a mutant for each.
CLAIMS = ("reference.sgd_decay_balances", "reference.adamw_decay_balances")
DECAY_SOURCES = {
    "sgd": "T4 (gradient flow with decay), for minibatch SGD",
    "adamw": "paper (empirical): AdamW's weight decay balances",
}
# The statistic of rankflow's heads (no rotary embeddings) and its test's settings: those
# of rankflow inspect's findings.
STATISTIC = "balance_gap_rel"
N_PERM, SEED = 999, 0
# Largest |effect in training − effect on the export| accepted as float32 rounding.
AGREEMENT = 1e-4
OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd": "SGD"}
# Each claim is an ordering (decay ends lower than no decay); where the theory gives a
# two-sided value for the same kind of training, the claim that checks it.
SIDES = {
    "sgd": "an ordering: decay ends more balanced; T4/T5 give SGD's rate two-sided, checked "
    "per head on the attention model by attention.sgd_rate",
    "adamw": "an ordering: decay ends more balanced; the theory gives AdamW no rate, so "
    "there is no two-sided check",
}


def validate(mode: str) -> None:
    validate_attention(CONFIGS, mode)


def regime(optimizer: str, lam: float) -> str:
    """The label of one optimizer and decay: ``AdamW λ = 0.1``, ``SGD without decay``."""
    name = OPTIMIZER_NAMES.get(optimizer, optimizer)
    return f"{name} without decay" if lam == 0 else f"{name} λ = {lam:g}"


def training_gaps(heads: pd.DataFrame) -> Iterator[tuple[int, int, str, np.ndarray]]:
    """``(run_id, step, pair, gaps)`` for every ok save of the heads table of an
    attention run with ``save.cross_gaps``: ``gaps[l, u, v]`` the relative Gram gap of
    head u's A with head v's B of layer l (the permutation test's input)."""
    cols = sorted(
        (c for c in heads.columns if c.startswith("cross_gap_rel_")),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )
    if not cols:
        raise ValueError("training_gaps: no cross_gap_rel_* columns (save.cross_gaps off)")
    ok = heads[heads["status"].astype(str) == "ok"]
    for (run, step, pair), g in ok.groupby(["run_id", "t", "pair"], sort=True):
        g = g.sort_values(["layer", "head"])
        L, U = g["layer"].nunique(), len(cols)
        yield int(run), int(step), str(pair), g[cols].to_numpy(np.float64).reshape(L, U, U)


def _test_row(meta: dict, step: int, pair: str, source: str, gaps: np.ndarray) -> dict:
    t = permutation_test(gaps, n_perm=N_PERM, seed=SEED, statistic=STATISTIC)
    return meta | {
        "step": step,
        "pair": pair,
        "statistic": STATISTIC,
        "source": source,
        "observed_median": t.observed,
        "null_median": t.null_median,
        "effect": t.effect,
        "p": t.p,
    }


def _run_meta(heads: pd.DataFrame) -> dict[int, dict]:
    first = heads.groupby("run_id").first()
    return {
        int(run): {
            "regime": regime(str(r["dynamics.kind"]), float(r["dynamics.lam"])),
            "optimizer": str(r["dynamics.kind"]),
            "lam": float(r["dynamics.lam"]),
            "eta": float(r["dynamics.eta"]),
            "seed": int(r["seed"]),
        }
        for run, r in first.iterrows()
    }


def export_gaps(export: Path) -> Iterator[tuple[int, int, str, np.ndarray]]:
    """``(run_id, step, pair, gaps)`` of every checkpoint exported under ``export``
    (``run_{id}/step_{step:08d}``), read by :func:`rankflow.inspect.inspect_checkpoint`."""
    pattern = re.compile(r"run_(\d+)/step_(\d+)$")
    for folder in sorted(export.glob("run_*/step_*")):
        match = pattern.search(folder.as_posix())
        if match is None:
            continue
        res = inspect_checkpoint(folder, progress=False, findings=False)
        for pair in ("qk", "vo"):
            yield int(match[1]), int(match[2]), pair, res.pair_gaps[pair, STATISTIC]


def effects(heads: pd.DataFrame, export: Path | None) -> pd.DataFrame:
    """The reference table (:data:`rankflow.inspect.REFERENCE_COLUMNS`) of one attention
    run: the test at every save in training, and on every exported checkpoint."""
    meta = _run_meta(heads)
    rows = [_test_row(meta[r], s, p, "training", g) for r, s, p, g in training_gaps(heads)]
    if export is not None and export.is_dir():
        rows += [_test_row(meta[r], s, p, "export", g) for r, s, p, g in export_gaps(export)]
    return pd.DataFrame(rows, columns=list(REFERENCE_COLUMNS))


def agreement(table: pd.DataFrame) -> tuple[float, int]:
    """The largest |effect in training − effect on the export| over the exported
    (regime, seed, step, pair), and their number."""
    keys = ["regime", "seed", "step", "pair", "statistic"]
    train = table[table["source"] == "training"].set_index(keys)["effect"]
    export = table[table["source"] == "export"].set_index(keys)["effect"]
    both = train.to_frame("training").join(export.rename("export"), how="inner")
    if both.empty:
        return float("nan"), 0
    return float((both["training"] - both["export"]).abs().max()), len(both)


def final_ranges(table: pd.DataFrame) -> pd.DataFrame:
    """Per (regime, pair): the effect at step 0 and at the last step, min/median/max over
    seeds, and how many seeds have p ≤ 0.01 at the last step (in training)."""
    t = table[table["source"] == "training"]
    last = t[t["step"] == t["step"].max()]
    first = t[t["step"] == 0]
    rows = []
    for (reg, pair), g in last.groupby(["regime", "pair"], sort=False):
        g0 = first[(first["regime"] == reg) & (first["pair"] == pair)]
        rows.append(
            {
                "regime": reg,
                "pair": pair,
                "step": int(g["step"].iloc[0]),
                "seeds": len(g),
                "effect_min": g["effect"].min(),
                "effect_median": g["effect"].median(),
                "effect_max": g["effect"].max(),
                "effect_init_median": g0["effect"].median(),
                "significant": int((g["p"] <= 0.01).sum()),
            }
        )
    return pd.DataFrame(rows)


def decay_claim(table: pd.DataFrame, optimizer: str) -> Claim:
    """``reference.{optimizer}_decay_balances``: for both pairs, the largest effect over
    seeds at the largest λ at the last step is below the smallest without decay."""
    t = table[(table["source"] == "training") & (table["optimizer"] == optimizer)]
    last = t[t["step"] == t["step"].max()]
    lam = float(last["lam"].max())
    parts, ok = [], lam > 0
    for pair, name in (("qk", "key–query"), ("vo", "value–output")):
        on = last[(last["pair"] == pair) & (last["lam"] == lam)]["effect"]
        off = last[(last["pair"] == pair) & (last["lam"] == 0)]["effect"]
        ok = ok and len(on) > 0 and len(off) > 0 and bool(on.max() < off.min())
        parts.append(
            f"{name}: λ = {lam:g} {fmt(on.min(), 3)}–{fmt(on.max(), 3)} against without "
            f"decay {fmt(off.min(), 3)}–{fmt(off.max(), 3)}"
        )
    label = OPTIMIZER_NAMES[optimizer]
    return Claim(
        experiment=NAME,
        name=f"reference.{optimizer}_decay_balances",
        source=DECAY_SOURCES[optimizer],
        statement=f"Trained by {label}, weight decay balances each head's factors: the "
        "permutation test's effect ends lower with decay than without.",
        prediction="at the last step, every seed's effect at the largest λ below every "
        "seed's without decay, for key–query and value–output",
        measurement=f"At step {int(last['step'].max())} ({last['seed'].nunique()} seeds): "
        + "; ".join(parts)
        + ".",
        tolerance="no overlap of the seeds' ranges (the margin); the effect is the "
        "permutation test's (999 pairings, seed 0) on the training program's gaps",
        verdict=verdict(ok),
        figure="reference_effect.png",
        one_sided=SIDES[optimizer],
    )


def _describe(cfg: dict) -> str:
    a, task = cfg["attention"], cfg["task"]
    d_h = a["D"] // a["H"]
    return (
        f"{task['kind']} transformer, D = {a['D']}, {a['layers']} layers × {a['H']} heads "
        f"of d_h = {d_h}, {cfg['save']['t1']} steps, batch {cfg['dynamics']['batch']}"
    )


def run_experiment(ctx: Context) -> None:
    from ..plots.findings import reference_figure

    frames = []
    for name in CONFIGS:
        res = run_attention(ctx, name)
        frames.append(effects(res.heads, ctx.runs(name) / "export"))
    table = pd.concat(frames, ignore_index=True)
    ctx.table("reference_effects", table)
    ranges = final_ranges(table)
    ctx.table("reference_ranges", ranges)
    reference_figure(table, ctx.figures / "reference_effect.png")
    worst, n = agreement(table)
    cfg = attention_config(CONFIGS[0], ctx.mode)
    ctx.notes.append(
        f"Model: {_describe(cfg)}; effects in `tables/reference_effects.csv`. The test on "
        f"the {n} exported checkpoints × pairs equals the one computed in training to "
        f"{fmt(worst, 2)} (largest |difference| of the effect; float32 rounding: ≤ {AGREEMENT})."
    )
    ctx.claims.extend(decay_claim(table, opt) for opt in ("sgd", "adamw"))
    for pair, name in (("qk", "key–query"), ("vo", "value–output")):
        g = ranges[ranges["pair"] == pair]
        parts = [
            f"{r['regime']}: {fmt(r['effect_min'], 3)}–{fmt(r['effect_max'], 3)} "
            f"(p ≤ 0.01 in {r['significant']}/{r['seeds']} seeds)"
            for _, r in g.iterrows()
        ]
        init = fmt(g["effect_init_median"].median(), 3)
        measured = f"At step {int(g['step'].max())}, range over seeds: {'; '.join(parts)}"
        measured += f"; at initialisation {init} (median)."
        ctx.claim(
            experiment=NAME,
            name=f"reference.{pair}_effect",
            source="training reference (AdamW outside the theory; T4 for SGD's flow)",
            statement=f"What the {name} effect of the permutation test reaches when "
            "rankflow trains a small transformer with AdamW or SGD, with and without decay.",
            prediction="none for AdamW; for SGD with decay T4's flow balances each head "
            "as e^{−2ηλt}, so its effect should fall below that without decay",
            measurement=measured,
            tolerance="—",
            verdict="observation",
            figure="reference_effect.png",
        )
