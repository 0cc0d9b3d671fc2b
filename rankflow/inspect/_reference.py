"""The training reference: what the permutation test's effect reaches in transformers
rankflow trains itself, under the optimizers real checkpoints use.

``rankflow reproduce --only reference`` trains small transformers of rankflow's attention
family (AdamW with decay λ on a small grid and without decay; SGD with decoupled decay,
T4's regime) with ``save.cross_gaps`` on, computes the layer-stratified permutation test
of each pair at every save from the training program's own factors, and repeats it on
the checkpoints it exports (they agree to float32 rounding). Its table ships with the
package (``reference_effects.csv``, with ``reference_effects.json``: the model, task,
grid, seeds, the command, commit and machine that produced it), so that ``rankflow
inspect`` can place a checkpoint's effect beside it without training anything.

A real checkpoint's shapes differ from the reference's (a stated smaller model): the
effect is scale-free (a ratio of relative gaps), but how fast it falls depends on the
model, the task and the schedule; the reference says which range each optimizer
reaches on one task, not what a given checkpoint's training did.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["REFERENCE_COLUMNS", "reference_meta", "reference_table", "reference_text"]

TABLE = "reference_effects.csv"
META = "reference_effects.json"
# One row per (regime, seed, step, pair, statistic, source).
REFERENCE_COLUMNS = (
    "regime",
    "optimizer",
    "lam",
    "eta",
    "seed",
    "step",
    "pair",
    "statistic",
    "source",
    "observed_median",
    "null_median",
    "effect",
    "p",
)
STAT_NAMES = {
    "balance_gap_rel": "relative Gram gap",
    "rotary_gap_rel": "rotary-block energy gap",
    "nonrotary_gap_rel": "non-rotary Gram gap",
}


def _shipped(name: str) -> Path:
    return Path(str(resources.files("rankflow.inspect") / name))


@functools.cache
def reference_table(path: str | None = None) -> pd.DataFrame:
    """The training reference's effects (:data:`REFERENCE_COLUMNS`): the shipped table,
    or that of ``path`` (a ``reference_effects.csv`` written by ``rankflow reproduce
    --only reference``).

    Examples:
        >>> from rankflow.inspect import reference_table
        >>> ref = reference_table()
        >>> sorted(ref["optimizer"].unique()), sorted(ref["pair"].unique())
        (['adamw', 'sgd'], ['qk', 'vo'])
    """
    return pd.read_csv(_shipped(TABLE) if path is None else path)


@functools.cache
def reference_meta() -> dict:
    """How the shipped reference was made: model, task, grid, seeds, command, commit,
    machine (``reference_effects.json``).

    Examples:
        >>> from rankflow.inspect import reference_meta
        >>> sorted(reference_meta())[:4]
        ['command', 'commit', 'configs', 'date']
    """
    return json.loads(_shipped(META).read_text())


def _range(values: np.ndarray) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"


def reference_text(
    pair: str, statistic: str, effect: float | None = None, table: pd.DataFrame | None = None
) -> str:
    """One sentence: the effect each reference regime reaches at its last step (range
    over seeds) and at initialisation, for ``pair`` and ``statistic``; with ``effect``
    (a checkpoint's), the first step at which each regime's median over seeds is at or
    below it. ``table``: default the shipped :func:`reference_table`.

    Examples:
        >>> from rankflow.inspect import reference_text
        >>> reference_text("qk", "rotary_gap_rel")
        'none for the rotary-block energy gap (the reference models have no rotary embeddings)'
    """
    ref = reference_table() if table is None else table
    ref = ref[(ref["pair"] == pair) & (ref["statistic"] == statistic)]
    ref = ref[ref["source"] == "training"]
    if ref.empty:
        return (
            f"none for the {STAT_NAMES.get(statistic, statistic)} (the reference models "
            "have no rotary embeddings)"
        )
    last = int(ref["step"].max())
    parts, ranges = [], {}
    for regime, g in ref.groupby("regime", sort=False):
        final = g.loc[g["step"] == last, "effect"].to_numpy()
        ranges[regime] = (float(np.min(final)), float(np.max(final)))
        text = f"{regime}: {_range(final)}"
        med = g.groupby("step")["effect"].median()
        if effect is not None and np.isfinite(effect) and effect < med.iloc[0]:
            below = med.index[med.to_numpy() <= effect]
            text += f" (≤ {effect:.2f} from step {int(below[0])})" if len(below) else ""
        parts.append(text)
    init = _range(ref.loc[ref["step"] == 0, "effect"].to_numpy())
    seeds = ref["seed"].nunique()
    model = ""
    if table is None:
        m = reference_meta()
        model = f"{m['model']}, {m['task']}; "
    text = (
        f"{model}effect at step {last} ({seeds} seed{'s' * (seeds != 1)}, range over "
        "seeds): " + "; ".join(parts) + f"; at initialisation {init}."
    )
    if effect is None or not np.isfinite(effect):
        return text
    init_lo = float(ref.loc[ref["step"] == 0, "effect"].min())
    if effect >= init_lo:
        return text + f" The effect {effect:.2f} is at the level of initialisation (chance)."
    return text + " " + _placed(effect, ranges)


def _placed(effect: float, ranges: dict[str, tuple[float, float]]) -> str:
    """Where ``effect`` falls among the regimes' last-step ranges, and whether training
    without decay reaches it, in words."""
    return _position(effect, ranges) + " " + _without_decay(effect, ranges)


def _without_decay(effect: float, ranges: dict[str, tuple[float, float]]) -> str:
    off = {r: lo_hi for r, lo_hi in ranges.items() if r.endswith("without decay")}
    if not off:
        return ""
    reached = [f"{r} {lo:.2f}" for r, (lo, _) in off.items() if lo <= effect]
    if reached:
        return (
            f"Training without decay reaches effects this low in the reference "
            f"({'; '.join(reached)}): an effect of this size does not by itself show weight "
            "decay."
        )
    return (
        "Every reference regime without decay ends above it: an effect this low is, in the "
        "reference, reached only with decay."
    )


def _position(effect: float, ranges: dict[str, tuple[float, float]]) -> str:
    inside = [r for r, (lo, hi) in ranges.items() if lo <= effect <= hi]
    if inside:
        return f"The effect {effect:.2f} lies within the range of {', '.join(inside)}."
    below = [(hi, r) for r, (lo, hi) in ranges.items() if hi < effect]
    above = [(lo, r) for r, (lo, hi) in ranges.items() if lo > effect]
    if below and above:
        return (
            f"The effect {effect:.2f} lies between {max(below)[1]} (≤ {max(below)[0]:.2f}) "
            f"and {min(above)[1]} (≥ {min(above)[0]:.2f})."
        )
    if above:
        return f"The effect {effect:.2f} is below every regime's range (no regime reaches it)."
    return f"The effect {effect:.2f} is above every regime's range at the last step."
