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

import datetime
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine.writer import check_out, claimed
from ._archive import ARCHIVES, archive_error, file_kind
from ._checkpoint import InspectError, open_checkpoint
from ._families import check_shapes, infer_layout
from ._hub import is_repo_id, locate, split_revision
from ._lr import learning_rate
from ._run import Inspection, inspect_checkpoint, parse_layers
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
# The identity of one unit across checkpoints.
UNIT_KEYS = ["layer", "pair", "unit", "head", "group", "theory"]
_WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")


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


# --- sources: paths and steps ----------------------------------------------------------


def _step_of(name: str) -> int | None:
    """The step in a revision's name: ``step1000``, ``checkpoint-1000``,
    ``global_step1000``, ``iter_0001000``, ``1000`` (None: no step in it)."""
    m = re.fullmatch(r"(?:global_step|checkpoint|step|iter|revision|ckpt)?[-_]?(\d+)", name)
    return int(m[1]) if m else None


def series_sources(path: str | Path) -> tuple[list[str], list[int]]:
    """(checkpoints, steps) of a folder of revisions or a list file.

    A folder of revisions holds one sub-folder per checkpoint named by its step
    (``step1000``, ``checkpoint-1000``, ``global_step1000``, ``1000``); sub-folders
    without a step in the name are ignored. A list file (any other file) has one
    checkpoint per line, ``STEP PATH`` (whitespace or comma between; ``#`` comments;
    relative paths are relative to the list file; PATH may be a Hub repo id
    ``org/name@revision``).

    Examples:
        >>> import pathlib, tempfile
        >>> from rankflow.inspect import series_sources
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("step1000", "checkpoint-500", "plots"):  # plots: no step
        ...         pathlib.Path(d, name).mkdir()
        ...     paths, steps = series_sources(d)
        >>> [pathlib.Path(p).name for p in paths], steps
        (['checkpoint-500', 'step1000'], [500, 1000])
    """
    p = Path(path)
    if p.is_dir():
        subs = [(_step_of(d.name), str(d)) for d in p.iterdir() if d.is_dir()]
        found = sorted((s, d) for s, d in subs if s is not None)
        if len(found) < 2:
            raise InspectError(
                f"{p}: a folder of revisions needs at least 2 sub-folders named by their "
                f"step (step1000, checkpoint-1000, …); found {len(found)}"
            )
        return [f for _, f in found], [s for s, _ in found]
    if not p.is_file():
        raise InspectError(f"{p}: no such file or directory")
    kind = file_kind(p)  # the parser below reads text only
    if kind in ARCHIVES:
        raise archive_error(p, kind, "a list file of `STEP PATH` lines")
    if kind != "text":
        raise InspectError(
            f"{p}: a {kind} file, not a list file of `STEP PATH` lines (a checkpoint is a "
            ".safetensors file, an index or a folder)"
        )
    paths, steps = [], []
    for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = re.split(r"[\s,]+", line, maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"\d+", parts[0]):
            raise InspectError(f"{p}: line {n}: field 'step': expected `STEP PATH`, got {line!r}")
        target = parts[1].strip()
        here = p.parent / target
        paths.append(target if is_repo_id(target) and not here.exists() else str(here))
        steps.append(int(parts[0]))
    return paths, steps


def _check_steps(steps: Sequence[int], paths: Sequence[str], where: str) -> list[int]:
    """Steps as ints, one per checkpoint, strictly increasing, ≥ 0."""
    if len(steps) != len(paths):
        raise InspectError(
            f"{where}: {len(steps)} steps for {len(paths)} checkpoints; give one step each"
        )
    if len(paths) < 2:
        raise InspectError(f"{where}: a series needs at least 2 checkpoints, got {len(paths)}")
    out = []
    for s in steps:
        try:
            v = int(s)
        except (TypeError, ValueError):
            raise InspectError(f"{where}: step {s!r} is not a whole number") from None
        if v != float(s) or v < 0:
            raise InspectError(f"{where}: step {s!r} is not a whole number ≥ 0")
        out.append(v)
    for i in range(1, len(out)):
        if out[i] == out[i - 1]:
            raise InspectError(f"{where}: step {out[i]} appears twice ({paths[i - 1]}, {paths[i]})")
        if out[i] < out[i - 1]:
            raise InspectError(
                f"{where}: steps are not increasing: {out[i - 1]} ({paths[i - 1]}) before "
                f"{out[i]} ({paths[i]}); list the checkpoints in training order"
            )
    return out


# --- the fits ----------------------------------------------------------------------------


def _rate(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """(rate, stderr, points used) of ``y ≈ e^{a − rate·x}`` (NaN with < 2 usable)."""
    from ..theory import fit_rate

    keep = np.isfinite(y) & (y > 0)
    if keep.sum() < 2:
        return float("nan"), float("nan"), int(keep.sum())
    rate, se = fit_rate(x[keep], y[keep])
    return rate, se, int(keep.sum())


def fit_series(
    heads: pd.DataFrame, statistic: str = "balance_gap_rel", exponents: Mapping | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rates per unit, rates per layer) of a stacked heads table (columns ``step``,
    :data:`UNIT_KEYS`, ``statistic`` and ``null_<statistic>``).

    Per unit: ``rate`` ± ``rate_se`` (per step) of ``statistic``, ``null_rate`` ±
    ``null_rate_se`` of its null twin, ``gap_first``/``gap_last``; with ``exponents``
    (:func:`predicted_exponents`): ``predicted_rate`` and ``predicted_rate_gf`` (the
    predictions fitted at the same steps) and ``rate_over_predicted``. Per (layer,
    pair) over the theory units: the median and quartiles of ``rate``, the median of
    ``null_rate``, and ``median_gap_rate`` fitted to the per-step median gap.

    Examples:
        One head whose gap falls by e^{−1} in 100 steps, its null pairing's by 10%:

        >>> import pandas as pd
        >>> from rankflow.inspect import fit_series
        >>> heads = pd.DataFrame({"step": [0, 100], "layer": 0, "pair": "qk", "unit": "head",
        ...                       "head": 0, "group": 0, "theory": True,
        ...                       "balance_gap_rel": [0.2, 0.2 * 0.36787944117144233],
        ...                       "null_balance_gap_rel": [0.5, 0.45]})
        >>> rates, layer_rates = fit_series(heads)
        >>> rates[["rate", "null_rate"]].round(6).values.tolist()
        [[0.01, 0.001054]]
        >>> layer_rates[["layer", "pair", "units", "rate_median"]].values.tolist()
        [[0, 'qk', 1, 0.01]]
    """
    steps = np.sort(heads["step"].unique()).astype(np.float64)
    pred = {}
    for key, name in (("gd", "predicted_rate"), ("gf", "predicted_rate_gf")):
        pred[name] = _rate(steps, np.exp(-exponents[key]))[0] if exponents else float("nan")
    rows = []
    for key, g in heads.groupby(UNIT_KEYS, sort=True):
        g = g.sort_values("step")
        x = g["step"].to_numpy(np.float64)
        rate, se, n = _rate(x, g[statistic].to_numpy(np.float64))
        null, null_se, _ = _rate(x, g["null_" + statistic].to_numpy(np.float64))
        rows.append(
            dict(zip(UNIT_KEYS, key), statistic=statistic, n_points=n,
                 step_first=int(x[0]), step_last=int(x[-1]),
                 gap_first=float(g[statistic].iloc[0]), gap_last=float(g[statistic].iloc[-1]),
                 rate=rate, rate_se=se, null_rate=null, null_rate_se=null_se, **pred,
                 rate_over_predicted=_ratio(rate, pred["predicted_rate"]))
        )  # fmt: skip
    rates = pd.DataFrame(rows)
    return rates, _layer_rates(heads, rates, statistic, pred)


def _ratio(a: float, b: float) -> float:
    """``a/b``, NaN where b is 0 (λ = 0 predicts no decay: no ratio to it)."""
    return a / b if b != 0 else float("nan")


def _layer_rates(heads, rates, statistic, pred) -> pd.DataFrame:
    """Per (layer, pair): distribution over the theory units of their fitted rates."""
    rows = []
    t = heads[heads["theory"]]
    for (layer, pair), r in rates[rates["theory"]].groupby(["layer", "pair"], sort=True):
        med = t[(t["layer"] == layer) & (t["pair"] == pair)].groupby("step")[statistic].median()
        mrate, mse, _ = _rate(med.index.to_numpy(np.float64), med.to_numpy(np.float64))
        q = r["rate"].quantile([0.25, 0.5, 0.75]).to_numpy()
        rows.append(
            dict(layer=layer, pair=pair, statistic=statistic, units=len(r),
                 rate_median=q[1], rate_q25=q[0], rate_q75=q[2],
                 null_rate_median=r["null_rate"].median(),
                 median_gap_rate=mrate, median_gap_rate_se=mse, **pred)
        )  # fmt: skip
    return pd.DataFrame(rows)


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


def _expand(paths, revisions) -> list[str]:
    """One checkpoint name per revision: ``org/name@rev`` for a repo id (or a path's
    revision sub-folder is not a thing: revisions need a repo id)."""
    if not revisions:
        return [str(p) for p in paths]
    if len(paths) != 1 or not is_repo_id(str(paths[0])) or "@" in str(paths[0]):
        raise InspectError(
            "--revision: give one Hugging Face repo id (org/name) with the revisions, e.g. "
            "EleutherAI/pythia-70m --revision step1000 step2000"
        )
    return [f"{paths[0]}@{r}" for r in revisions]


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
    t0 = datetime.datetime.now(datetime.UTC)
    if out is not None:
        check_out(out, "inspect-series")
    names, steps = _names_and_steps(paths, steps, revisions)
    if statistic not in STATISTICS:
        raise InspectError(f"--statistic: {statistic!r} is not one of {', '.join(STATISTICS)}")
    exps, lr_meta = learning_rate(lr, lam, schedule, steps)
    local = _open_all(names, arch, heads, layers)
    show = sys.stderr.isatty() if progress is None else progress
    frames, first = [], None
    for i, (name, path, step) in enumerate(zip(names, local, steps)):
        if show:
            print(f"[{i + 1}/{len(names)}] step {step}: {name}", file=sys.stderr)
        insp: Inspection = inspect_checkpoint(
            path,
            arch=arch,
            layers=layers,
            heads=heads,
            rank_tol=rank_tol,
            scatter=(),
            progress=show,
        )
        first = first or insp
        cols = ["step", "checkpoint", *insp.heads.columns]
        frames.append(insp.heads.assign(step=step, checkpoint=i)[cols])
    table = pd.concat(frames, ignore_index=True)
    rates, layer_rates = fit_series(table, statistic, exps)
    meta = {
        "checkpoints": [str(n) for n in names],
        "resolved": [str(p) for p in local],
        "steps": steps,
        "statistic": statistic,
        "layout": first.layout.as_dict(),
        "layers": first.meta["layers"],
        "rank_tol": rank_tol,
        "prediction": "T5/T11 (GD/SGD): Π(1 − η_kλ)²; T4/T11 (GF) beside" if exps else None,
        **lr_meta,
        "created": t0.isoformat(timespec="seconds"),
    }
    res = SeriesInspection(table, rates, layer_rates, tuple(steps), meta, "")
    res = SeriesInspection(table, rates, layer_rates, tuple(steps), meta, series_summary(res))
    if out is None:
        return res
    out = Path(out)
    with claimed(out, "inspect-series"):
        _write(out, res, figures)
    return SeriesInspection(table, rates, layer_rates, tuple(steps), meta, res.summary, out)


def _is_source(path: str | Path) -> bool:
    """Whether ``path`` is a folder of revisions or a list file (not a checkpoint): a
    list file is text by its first bytes (:func:`~._archive.file_kind`), so that an
    archive or a binary file goes to the checkpoint reader, which reads or refuses it."""
    p = Path(path)
    if not p.exists():
        return False
    if p.is_dir():
        return not any(next(p.glob(g), None) for g in _WEIGHT_GLOBS)
    if p.name.endswith((".safetensors", ".bin", ".pt", ".pth", ".json")):
        return False
    try:
        return file_kind(p) == "text"
    except OSError:  # unreadable: the checkpoint reader says so in one line
        return False


def is_series(paths: Sequence[str | Path], steps=None, revisions=None) -> bool:
    """Whether these arguments name a series (several checkpoints, steps, several
    revisions, a folder of revisions or a list file) rather than one checkpoint.

    Examples:
        >>> from rankflow.inspect import is_series
        >>> is_series(["step0/model.safetensors", "step100/model.safetensors"])
        True
        >>> is_series(["org/model"], revisions=["step1000", "step2000"])
        True
        >>> is_series("model.safetensors")
        False
    """
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    return bool(
        len(paths) > 1 or steps or (revisions and len(revisions) > 1) or _is_source(paths[0])
    )


def _names_and_steps(paths, steps, revisions) -> tuple[list[str], list[int]]:
    """The checkpoint names of a series and their checked steps."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    where = "--steps"
    if len(paths) == 1 and not revisions and _is_source(paths[0]):
        p = Path(paths[0])
        names, found = series_sources(p)
        return names, _check_steps(found if steps is None else steps, names, str(p))
    names = _expand(paths, revisions)
    if steps is None:
        found = [_step_of(split_revision(n)[1] or Path(n).name) for n in names]
        if None in found:
            bad = names[found.index(None)]
            raise InspectError(f"--steps: no step in the name of {bad}; give --steps S …")
        steps = found
    return names, _check_steps(steps, names, where)


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
