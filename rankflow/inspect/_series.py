"""``inspect_series``: the balance gap of every head across a model's training.

A series is checkpoints of one architecture at increasing training steps. Each is
inspected as by :func:`~._run.inspect_checkpoint` (one checkpoint, one layer at a time),
and the per-head gap (``balance_gap_rel`` by default) is fitted, per head and per layer,
by least squares of its log against the step: the measured decay rate per step, with
its standard error (:func:`rankflow.theory.fit_rate`), beside the same fit of the null
pairing's gap.

With a learning rate (constant ``lr``, or a schedule of (step, lr) rows) and ``lam``
the fit is tabulated against two predictions, fitted the same way at the same steps:

- ``predicted_rate`` (drawn): T5/T11 for GD and SGD, the leading factor
  ``Π_k (1 − η_kλ)²`` (rate ``−2 log|1 − η_kλ|`` per step; ``(1 − ηλ)²`` per step for a
  constant η, up to T5's O(η²) term);
- ``predicted_rate_gf``: T4/T11 for gradient flow, ``e^{−2λ∫η}`` with ``η`` constant
  on each step (``2ηλ`` per step).

These are observations for any other optimizer (AdamW is outside the theory).
Everything is checked (paths, steps, schedule, architectures and shapes from the
headers) before any tensor is read; outputs are written at the end, each atomically,
``series.json`` last.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine.writer import check_out, claimed
from ._checkpoint import InspectError, open_checkpoint
from ._families import check_shapes, infer_layout
from ._hub import locate
from ._lr import learning_rate
from ._rates import UNIT_KEYS as UNIT_KEYS
from ._rates import fit_series as fit_series
from ._run import Inspection, inspect_checkpoint, parse_layers
from ._sources import is_series as is_series
from ._sources import names_and_steps
from ._sources import series_sources as series_sources
from ._stats import STATISTICS

__all__ = [
    "SeriesInspection",
    "fit_series",
    "inspect_series",
    "is_series",
    "load_series",
    "series_sources",
]

SERIES_TABLE, RATES_TABLE = "heads.parquet", "rates.parquet"
LAYER_RATES_TABLE = "layer_rates.parquet"
SERIES_META = "series.json"
# Layout fields that every checkpoint of a series must share (the tensor shapes follow).
_SAME = ("arch", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "rotary_dim")


@dataclass(frozen=True)
class SeriesInspection:
    """What :func:`inspect_series` found.

    ``heads``: the heads tables of every checkpoint, stacked, with ``step`` and
    ``checkpoint`` (index in the series) first; ``rates``: one row per unit (layer,
    pair, head or group): the fitted decay rate per step of ``statistic`` and of its
    null twin, and the predictions; ``layer_rates``: per (layer, pair), the median and
    quartiles over its theory units of those rates, and the rate fitted to the per-step
    median gap; ``steps``: the steps; ``meta``: ``series.json``; ``out``: the directory.

    Examples:
        >>> from rankflow.inspect import SeriesInspection
        >>> res = SeriesInspection(*(None,) * 3, steps=(0, 100), meta={}, summary="")
        >>> res.steps, res.out  # out: None until written (inspect_series shows one made)
        ((0, 100), None)
    """

    heads: pd.DataFrame
    rates: pd.DataFrame
    layer_rates: pd.DataFrame
    steps: tuple[int, ...]
    meta: dict
    summary: str
    out: Path | None = None


# --- the series --------------------------------------------------------------------------


def _open_all(paths, arch, heads, layers) -> list[Path]:
    """The local folder or file of each checkpoint, after checking from the headers that
    they share one architecture and every inspected tensor's shape."""
    local, first = [], None
    for p in paths:
        ckpt = open_checkpoint(locate(p))
        layout = infer_layout(ckpt, arch=arch, heads=heads)
        check_shapes(ckpt, layout, parse_layers(layers, layout.n_layers))
        if first is None:
            first = (p, layout)
        for f in _SAME:
            mine, theirs = getattr(layout, f), getattr(first[1], f)
            if mine != theirs:
                raise InspectError(
                    f"{p}: field {f!r} is {mine}, but {first[0]} has {theirs}: a series "
                    "must be checkpoints of one architecture"
                )
        local.append(ckpt.path)
    return local


def inspect_series(
    paths: Sequence[str | Path],
    steps: Sequence[int] | None = None,
    out: str | Path | None = None,
    *,
    lr: float | None = None,
    lam: float | None = None,
    schedule: str | Path | None = None,
    revisions: Sequence[str] | None = None,
    statistic: str = "balance_gap_rel",
    arch: str = "auto",
    layers: str | int | Sequence[int | str] | None = None,
    heads: int | None = None,
    rank_tol: float = 1e-3,
    figures: Callable[[SeriesInspection], Mapping[str, Callable[[Path], object]]] | None = None,
    progress: bool | None = None,
) -> SeriesInspection:
    """Inspect checkpoints of one model across training and fit the decay of each
    head's balance gap against the step.

    Args:
        paths: the checkpoints in training order (each as :func:`inspect_checkpoint`
            takes it, Hub repo ids ``org/name@revision`` included); or one folder of
            revisions or one list file (:func:`series_sources`), which also give the
            steps; or one repo id with ``revisions``.
        steps: the training step of each checkpoint, strictly increasing. Default: from
            the folder or list file, or the digits of each revision's name
            (``step1000`` → 1000).
        out: directory for ``heads.parquet`` (every checkpoint's heads table with
            ``step``), ``rates.parquet``/``rates.csv`` (per unit), ``layer_rates.parquet``
            (per layer), ``summary.md``, the figures and ``series.json`` (last).
        lr: a constant learning rate (or give ``schedule``).
        lam: the weight decay: the decay is then tabulated against the predictions of
            ``lr`` or ``schedule`` (module docstring). Without it, measured rates only.
        schedule: a learning-rate schedule file (:func:`read_lr_schedule`).
        statistic: the gap column fitted (:data:`~._stats.STATISTICS`; e.g.
            ``rotary_gap_rel`` for rotary models).
        arch: as for :func:`inspect_checkpoint`.
        layers: as for :func:`inspect_checkpoint`.
        heads: as for :func:`inspect_checkpoint`.
        rank_tol: as for :func:`inspect_checkpoint`.
        figures: file name → writer of the figures to put in ``out``, as a function of
            the result (``rankflow.plots.series_figures``).

    Returns:
        A :class:`SeriesInspection`. Bad input (too few checkpoints, steps not matching,
        repeated or unsorted, architectures or shapes differing, a revision not in the
        cache, a schedule not covering the steps) raises :class:`InspectError` naming
        the file and field before any tensor is read and before anything is written.

    Memory: one layer of one checkpoint at a time; only the tables are kept.

    Examples:
        A folder of two revisions of a GPT-2 layer whose every head's gap is
        2δ = 0.2·e^{−0.01·step} (Grams (1 ± δ)·c_h·I), against GD with η = 0.1, λ = 0.05,
        whose predicted rate is −2 log(1 − ηλ) ≈ 0.01 per step:

        >>> import pathlib, tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import inspect_series
        >>> root = tempfile.TemporaryDirectory()
        >>> for step in (0, 100):
        ...     delta, c = 0.1 * np.exp(-0.01 * step), np.array([1.0, 1.0, 2.0, 2.0])
        ...     A, B = np.diag(c * (1 + delta)) ** 0.5, np.diag(c * (1 - delta)) ** 0.5
        ...     pathlib.Path(root.name, f"step{step}").mkdir()
        ...     save_file({"h.0.attn.c_attn.weight": np.hstack([A, B, A]),
        ...                "h.0.attn.c_proj.weight": B}, f"{root.name}/step{step}/m.safetensors")
        >>> res = inspect_series([root.name], heads=2, lr=0.1, lam=0.05)
        >>> res.steps, res.rates["rate"].round(6).unique().tolist()
        ((0, 100), [0.01])
        >>> res.rates[["predicted_rate", "predicted_rate_gf"]].round(6).values[0].tolist()
        [0.010025, 0.01]
        >>> root.cleanup()
    """
    plan = _series_plan(paths, steps, revisions, out, statistic, (lr, lam, schedule))
    read = {"arch": arch, "layers": layers, "heads": heads, "rank_tol": rank_tol}
    table, first, local = _heads_over_steps(plan, read, progress)
    res = _fitted(plan, local, table, first, rank_tol)
    return res if out is None else _series_written(res, Path(out), figures)


@dataclass(frozen=True)
class _Plan:
    """A checked series: its checkpoints' names and steps, the gap statistic fitted, the
    exponents of the predicted decay and the learning rate's fields of ``series.json``
    (:func:`~._lr.learning_rate`), and when it started."""

    names: list[str]
    steps: list[int]
    statistic: str
    exps: dict | None
    lr_meta: dict
    t0: datetime.datetime


def _series_plan(paths, steps, revisions, out, statistic, lr_given) -> _Plan:
    """Refuse a bad ``out``, source, step, statistic or learning rate (``lr_given``:
    ``(lr, lam, schedule)``) before any file is opened."""
    t0 = datetime.datetime.now(datetime.UTC)
    if out is not None:
        check_out(out, "inspect-series")
    names, steps = names_and_steps(paths, steps, revisions)
    if statistic not in STATISTICS:
        raise InspectError(f"--statistic: {statistic!r} is not one of {', '.join(STATISTICS)}")
    exps, lr_meta = learning_rate(*lr_given, steps)
    return _Plan(names, steps, statistic, exps, lr_meta, t0)


def _heads_over_steps(plan: _Plan, read: dict, progress: bool | None):
    """``(table, first inspection, local paths)``: every checkpoint's heads table with
    ``step`` and ``checkpoint`` (its index) first, read one checkpoint at a time
    (``read``: :func:`inspect_checkpoint`'s arguments), after :func:`_open_all` checked
    every header."""
    local = _open_all(plan.names, read["arch"], read["heads"], read["layers"])
    show = sys.stderr.isatty() if progress is None else progress
    frames, first = [], None
    for i, (name, path, step) in enumerate(zip(plan.names, local, plan.steps)):
        if show:
            print(f"[{i + 1}/{len(plan.names)}] step {step}: {name}", file=sys.stderr)
        insp: Inspection = inspect_checkpoint(path, **read, scatter=(), progress=show)
        first = first or insp
        cols = ["step", "checkpoint", *insp.heads.columns]
        frames.append(insp.heads.assign(step=step, checkpoint=i)[cols])
    return pd.concat(frames, ignore_index=True), first, local


def _fitted(plan: _Plan, local, table, first: Inspection, rank_tol) -> SeriesInspection:
    """The :class:`SeriesInspection` of the stacked ``table``: its fits, ``series.json``
    and the summary."""
    rates, layer_rates = fit_series(table, plan.statistic, plan.exps)
    meta = {
        "checkpoints": [str(n) for n in plan.names],
        "resolved": [str(p) for p in local],
        "steps": plan.steps,
        "statistic": plan.statistic,
        "layout": first.layout.as_dict(),
        "layers": first.meta["layers"],
        "rank_tol": rank_tol,
        "prediction": "T5/T11 (GD/SGD): Π(1 − η_kλ)²; T4/T11 (GF) beside" if plan.exps else None,
        **plan.lr_meta,
        "created": plan.t0.isoformat(timespec="seconds"),
    }
    res = SeriesInspection(table, rates, layer_rates, tuple(plan.steps), meta, "")
    return dataclasses.replace(res, summary=series_summary(res))


def _series_written(res: SeriesInspection, out: Path, figures) -> SeriesInspection:
    """``res`` written into ``out`` (claimed for ``inspect-series`` while writing)."""
    with claimed(out, "inspect-series"):
        _write(out, res, figures)
    return dataclasses.replace(res, out=out)


# --- the summary and the outputs ------------------------------------------------------


def _g(x) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:.4g}"


def series_summary(res: SeriesInspection) -> str:
    """Per (layer, pair): the median [quartiles] over theory units of the fitted decay
    rate per step, the null pairing's median, and the predictions when known."""
    m = res.meta
    pred = m.get("prediction")
    lines = [
        f"# rankflow inspect (series): {len(res.steps)} checkpoints, steps "
        f"{res.steps[0]}–{res.steps[-1]}",
        "",
        f"Fitted per unit: rate of {m['statistic']} per step, least squares of its log "
        "against the step; null = the same fit of the null pairing's gap.",
    ]
    if pred:
        lr = f"η = {m['lr']:g}" if "lr" in m else f"η from {m['lr_schedule']}"
        lines += [
            f"Prediction ({lr}, λ = {m['lam']:g}): {pred}; an observation outside GD/SGD "
            "(AdamW is outside the theory)."
        ]
    head = f"{'layer':>5} {'pair':<4} {'rate median [q25, q75]':>34} {'null':>10} "
    lines += ["", "```", head + f"{'median-gap rate':>16} {'predicted':>10} {'pred. GF':>10}"]
    for r in res.layer_rates.itertuples():
        q = f"{_g(r.rate_median)} [{_g(r.rate_q25)}, {_g(r.rate_q75)}]"
        lines.append(
            f"{r.layer:>5} {r.pair:<4} {q:>34} {_g(r.null_rate_median):>10} "
            f"{_g(r.median_gap_rate):>16} {_g(r.predicted_rate):>10} {_g(r.predicted_rate_gf):>10}"
        )
    lines += ["```", ""]
    return "\n".join(lines)


def _write(out: Path, res: SeriesInspection, figures) -> None:
    from ..engine.store import write_outputs

    files = {SERIES_TABLE: res.heads, RATES_TABLE: res.rates, "rates.csv": res.rates}
    files |= {LAYER_RATES_TABLE: res.layer_rates, "summary.md": res.summary}
    write_outputs(out, SERIES_META, res.meta, files, figures and (lambda: figures(res)))


def load_series(out: str | Path) -> SeriesInspection:
    """The :class:`SeriesInspection` of a finished series directory (one whose
    ``series.json`` exists).

    Examples:
        Two revisions of a one-layer GPT-2 of random weights, inspected into ``out``:

        >>> import pathlib, tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import inspect_series, load_series
        >>> rng = np.random.default_rng(0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for step in (0, 100):
        ...         pathlib.Path(d, f"step{step}").mkdir()
        ...         save_file({"h.0.attn.c_attn.weight": rng.standard_normal((4, 12)),
        ...                    "h.0.attn.c_proj.weight": rng.standard_normal((4, 4))},
        ...                   f"{d}/step{step}/model.safetensors")
        ...     _ = inspect_series([d], out=d + "/out", heads=2)
        ...     res = load_series(d + "/out")
        >>> res.steps, res.heads.shape, res.rates.shape, res.meta["statistic"]
        ((0, 100), (8, 49), (4, 19), 'balance_gap_rel')
    """
    out = Path(out)
    if not (out / SERIES_META).is_file():
        raise InspectError(f"{out}: no {SERIES_META}: not a finished `rankflow inspect` series")
    meta = json.loads((out / SERIES_META).read_text())
    heads = pd.read_parquet(out / SERIES_TABLE)
    rates, layer = pd.read_parquet(out / RATES_TABLE), pd.read_parquet(out / LAYER_RATES_TABLE)
    summary = (out / "summary.md").read_text()
    return SeriesInspection(heads, rates, layer, tuple(meta["steps"]), meta, summary, out)
