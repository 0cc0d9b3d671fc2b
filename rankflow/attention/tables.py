"""The tables of the rebuttal experiments (``sims/attention/{lambda_table, vit_ablation,
lr_control, dh}.toml``): pure functions of the ``loss`` and ``heads`` tables of
:func:`rankflow.attention.run`, plus their markdown.

Every table is built in two steps. :func:`run_finals` reduces each run to one row at
its last saved step: its losses (and accuracies), and the mean over layers and heads of
each pair's effective rank. :func:`summarize` groups those rows by the swept keys and
gives, per group, the number of seeds, the mean and the standard deviation over seeds
(ddof 1; NaN for one seed) of every value. A difference of means inside the spread over
seeds is no difference at this number of seeds; the tables show both so that the reader
can tell.

    python -m rankflow.attention.tables lambda DIR
    python -m rankflow.attention.tables contrast VIT_DIR CHAR_LM_DIR
    python -m rankflow.attention.tables lr_control DIR
    python -m rankflow.attention.tables dh DIR
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "VARIANTS",
    "ablation_markdown",
    "ablation_table",
    "by_variant",
    "contrast_table",
    "decay_label",
    "dh_finals",
    "dh_summary",
    "lambda_summary",
    "lr_control_summary",
    "experiment",
    "markdown",
    "parameter_count",
    "run_finals",
    "summarize",
    "variant_label",
]

# The weight-decay variants of an ablation, by whether λ_qk, λ_vo are > 0.
VARIANTS = {
    (True, True): "decay on all",
    (False, False): "off attention",
    (False, True): "off key–query",
    (True, False): "off value–output",
}
# Per-run values summarised by :func:`summarize` (those present in the tables).
VALUES = ("val_loss", "train_loss", "val_accuracy", "train_accuracy", "rank_qk", "rank_vo")


def variant_label(lam_qk: float, lam_vo: float) -> str:
    """The ablation variant of a run with these λ_qk, λ_vo."""
    return VARIANTS[(bool(float(lam_qk) > 0), bool(float(lam_vo) > 0))]


def decay_label(decay: str, lam_qk: float = 1.0, lam_vo: float = 1.0) -> str:
    """``on attention`` when both attention groups are decayed (in the comma-joined
    ``train.decay``, with λ > 0), ``off attention`` when neither is, else the groups."""
    groups = set(str(decay).split(","))
    on = {g for g, lam in (("qk", lam_qk), ("vo", lam_vo)) if g in groups and float(lam) > 0}
    if on == {"qk", "vo"}:
        return "on attention"
    if not on:
        return "off attention"
    return f"on {next(iter(on))} only"


def _last(df: pd.DataFrame) -> pd.DataFrame:
    """Each run's rows at its last saved step, ``ok`` runs only."""
    df = df.reset_index(drop=True)
    out = df[df["t"] == df.groupby("run_id")["t"].transform("max")]
    if "status" in out.columns:
        out = out[out["status"].astype(str) == "ok"]
    return out


def run_finals(loss: pd.DataFrame, heads: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """One row per run at its last step: the ``by`` columns, ``seed``, ``run_id``, the
    losses (and accuracies) of ``loss``, and ``rank_qk`` / ``rank_vo``: the mean over
    layers and heads of the pair's ``effective_rank`` in ``heads``."""
    by = list(by)
    keep = [c for c in ("val_loss", "train_loss", "val_accuracy", "train_accuracy") if c in loss]
    fin = _last(loss)[["run_id", "seed", *by, *keep]].set_index("run_id")
    last = _last(heads)
    rank = last.groupby(["run_id", "pair"])["effective_rank"].mean().unstack("pair")
    for pair in ("qk", "vo"):
        fin[f"rank_{pair}"] = rank[pair].reindex(fin.index) if pair in rank else np.nan
    return fin.reset_index().sort_values([*by, "seed"], kind="stable").reset_index(drop=True)


def summarize(finals: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Per group of ``by`` (in the order of first appearance): ``seeds``, and for each
    value of :data:`VALUES` present, ``<value>_mean`` and ``<value>_std`` over seeds
    (ddof 1; NaN with one seed)."""
    by = list(by)
    values = [v for v in VALUES if v in finals.columns]
    rows = []
    for key, g in finals.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["seeds"] = int(g["seed"].nunique())
        for v in values:
            x = g[v].to_numpy(float)
            row[f"{v}_mean"] = float(x.mean())
            row[f"{v}_std"] = float(x.std(ddof=1)) if x.size > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def by_variant(finals: pd.DataFrame) -> pd.DataFrame:
    """Rows of runs with their ablation ``variant`` (:func:`variant_label` of their
    ``train.lam_qk``, ``train.lam_vo``), ordered as :data:`VARIANTS` (stable)."""
    labels = [variant_label(a, b) for a, b in zip(finals["train.lam_qk"], finals["train.lam_vo"])]
    order = {v: i for i, v in enumerate(VARIANTS.values())}
    out = finals.assign(variant=labels)
    return out.sort_values("variant", key=lambda s: s.map(order), kind="stable")


def contrast_table(tasks: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """The weight-decay ablation of several tasks as one table: ``{task: (loss, heads)}``
    → per task and variant (decay on all, off attention, off key–query, off
    value–output) the :func:`summarize` columns, with ``task`` and ``variant``."""
    parts = []
    for task, (loss, heads) in tasks.items():
        fin = by_variant(run_finals(loss, heads, ["train.lam_qk", "train.lam_vo"]))
        parts.append(summarize(fin, ["variant"]).assign(task=task))
    return pd.concat(parts, ignore_index=True)


def ablation_table(loss: pd.DataFrame) -> pd.DataFrame:
    """The weight-decay ablation of one ``loss`` table (``sims/attention/ablation.toml``):
    per variant present, ``lam_qk`` and ``lam_vo`` (its first run's) and the
    :func:`summarize` columns of each run's losses (and accuracies) at its last step."""
    fin = by_variant(_last(loss))
    lams = fin.groupby("variant", sort=False)[["train.lam_qk", "train.lam_vo"]].first()
    out = summarize(fin, ["variant"])
    out.insert(1, "lam_qk", lams["train.lam_qk"].to_numpy(float))
    out.insert(2, "lam_vo", lams["train.lam_vo"].to_numpy(float))
    return out


def ablation_markdown(loss: pd.DataFrame) -> str:
    """:func:`ablation_table` as a markdown table (mean ± std over seeds)."""
    steps = int(loss["t"].max())
    keys = {"variant": "weight decay", "lam_qk": "λ_qk", "lam_vo": "λ_vo"}
    values = {"val_loss": f"validation loss at step {steps}"}
    values["train_loss"] = f"training loss at step {steps}"
    return markdown(ablation_table(loss), keys, values)


def lambda_summary(loss: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """The Table-1 analogue: per λ (``dynamics.lam``), loss and mean effective rank of
    each pair over seeds."""
    return summarize(run_finals(loss, heads, ["dynamics.lam"]), ["dynamics.lam"])


def lr_control_summary(loss: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """The effective-learning-rate control: per (λ_vo, value learning-rate multiplier
    ``train.lr_v``), decay on value–output first, the multiplier falling."""
    by = ["train.lam_vo", "train.lr_v"]
    fin = run_finals(loss, heads, by)
    fin = fin.sort_values(by, ascending=[False, False], kind="stable")
    out = summarize(fin, by)
    out.insert(
        0,
        "setting",
        [
            f"decay {'on' if lam > 0 else 'off'} value–output, lr_v × {lr:g}"
            for lam, lr in zip(out["train.lam_vo"], out["train.lr_v"], strict=True)
        ],
    )
    return out


def dh_finals(loss: pd.DataFrame, heads: pd.DataFrame, D: int) -> pd.DataFrame:
    """:func:`run_finals` of the key–query-dimension sweep with ``d_h = D/H`` and
    ``decay`` (:func:`decay_label`: by ``train.decay`` or by λ_qk, λ_vo), sorted by d_h
    rising, decay on first."""
    by = ["attention.H", "train.decay", "train.lam_qk", "train.lam_vo"]
    fin = run_finals(loss, heads, by)
    fin.insert(0, "d_h", D // fin["attention.H"].astype(int))
    fin.insert(1, "decay", [decay_label(*r) for r in fin[by[1:]].itertuples(index=False)])
    return fin.sort_values(["d_h", "decay"], ascending=[True, False], kind="stable")


def dh_summary(loss: pd.DataFrame, heads: pd.DataFrame, D: int) -> pd.DataFrame:
    """The key–query dimension: per head dimension ``d_h = D/H`` (rising) and decay on or
    off attention, at width ``D``."""
    return summarize(dh_finals(loss, heads, D), ["d_h", "attention.H", "decay"])


def _pm(mean: float, std: float, digits: int) -> str:
    if not np.isfinite(mean):
        return "—"
    return f"{mean:.{digits}f}" + ("" if not np.isfinite(std) else f" ± {std:.{digits}f}")


def markdown(summary: pd.DataFrame, keys: Mapping[str, str], values: Mapping[str, str]) -> str:
    """A markdown table of a :func:`summarize` frame: ``keys`` (column → header) as they
    are, then ``seeds``, then each of ``values`` (value → header) as mean ± std over seeds
    (losses and accuracies to 3 decimals, ranks to 2)."""
    head = [*keys.values(), "seeds", *values.values()]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary.to_dict("records"):
        cells = [f"{r[k]:g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        cells.append(str(r["seeds"]))
        for v in values:
            digits = 2 if v.startswith("rank") else 3
            cells.append(_pm(r.get(f"{v}_mean", np.nan), r.get(f"{v}_std", np.nan), digits))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parameter_count(point: Mapping[str, Any]) -> int:
    """The number of trained parameters of a resolved attention config (shapes only:
    nothing is initialised)."""
    import jax

    from .program import program_for

    shapes = jax.eval_shape(program_for(point).model.init, jax.random.PRNGKey(0))
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)))


# Per experiment: the markdown columns (key → header) and values (value → header).
_LOSS = {"val_loss": "validation loss", "train_loss": "training loss"}
_RANKS = {"rank_qk": "eff. rank key–query", "rank_vo": "eff. rank value–output"}
LAYOUTS = {
    "lambda": ({"dynamics.lam": "λ"}, {**_LOSS, **_RANKS}),
    "lr_control": ({"setting": "setting"}, {**_LOSS, **_RANKS}),
    "dh": ({"d_h": "d_h", "attention.H": "H", "decay": "weight decay"}, {**_LOSS, **_RANKS}),
    "contrast": (
        {"task": "task", "variant": "weight decay"},
        {"val_accuracy": "validation accuracy", "val_loss": "validation loss", **_RANKS},
    ),
}


def experiment(kind: str, results: Sequence[Any], D: int = 32) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(summary, finals)`` of one rebuttal experiment (a key of :data:`LAYOUTS`) from
    its results (``(loss, heads)`` pairs; ``contrast``: the ViT's, then char_lm's)."""
    if kind == "contrast":
        vit, lm = results
        summary = contrast_table({"ViT (shapes)": vit, "char_lm": lm})
        parts = []
        for task, (loss, heads) in (("ViT (shapes)", vit), ("char_lm", lm)):
            fin = run_finals(loss, heads, ["train.lam_qk", "train.lam_vo"])
            fin["variant"] = [
                variant_label(a, b) for a, b in zip(fin["train.lam_qk"], fin["train.lam_vo"])
            ]
            parts.append(fin.assign(task=task))
        order = {v: i for i, v in enumerate(VARIANTS.values())}
        fin = pd.concat(parts, ignore_index=True)
        return summary, fin.sort_values("variant", key=lambda s: s.map(order), kind="stable")
    ((loss, heads),) = results
    if kind == "lambda":
        return lambda_summary(loss, heads), run_finals(loss, heads, ["dynamics.lam"])
    if kind == "lr_control":
        fin = run_finals(loss, heads, ["train.lam_vo", "train.lr_v"])
        fin["decay"] = [
            "decay " + ("on" if x > 0 else "off") + " value–output" for x in fin["train.lam_vo"]
        ]
        fin = fin.sort_values(["train.lam_vo", "train.lr_v"], ascending=False, kind="stable")
        return lr_control_summary(loss, heads), fin
    if kind == "dh":
        return dh_summary(loss, heads, D), dh_finals(loss, heads, D)
    raise ValueError(f"kind: one of {', '.join(LAYOUTS)}, got {kind!r}")
