"""``inspect_checkpoint``: the balance fingerprint of weight decay, layer by layer.

For every inspected layer: read its attention tensors (and nothing else), cut the
per-head factors, compute :data:`~._stats.STATISTICS` for each key–query and
value–output pair and for a null pairing, then drop the layer before the next one.
Outputs are written only after every layer has been computed, each file atomically,
and ``inspect.json`` last: a directory without it is not a finished inspection.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine.resources import check_fits, host_memory
from ..engine.writer import check_out, claimed
from ._archive import unpacked
from ._blas import single_threaded_blas
from ._checkpoint import Checkpoint, InspectError, open_checkpoint
from ._families import Layout, canonical, check_shapes, infer_layout
from ._findings import balance_findings
from ._findings_text import findings_text
from ._hub import locate
from ._layer import gram_rows as _gram_rows  # noqa: F401 (docs/hooks.py reads it here)
from ._layer import layer_rows_and_gaps
from ._stats import STATISTICS
from ._summary import PAIRS, layout_notes, summarize

__all__ = ["Inspection", "PAIRS", "inspect_checkpoint", "load_inspection", "parse_layers"]

HEADS_TABLE, GRAMS_TABLE, META = "heads.parquet", "grams.parquet", "inspect.json"
FINDINGS_TABLE = "findings.parquet"
# Identity columns of the heads table, before the statistics and their null_ twins.
ID_COLUMNS = (
    "layer",
    "pair",
    "unit",
    "head",
    "group",
    "null_partner",
    "theory",
    "bias",
    "m",
    "n",
    "r",
)


@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect_checkpoint` found.

    ``heads``: one row per (layer, pair, unit), columns :data:`ID_COLUMNS`, the
    statistics and ``null_<statistic>``; ``grams``: the Gram entries of the scatter
    heads; ``summary``: the per-layer text that the CLI prints; ``out``: the directory
    written, if any. ``pair_gaps``: ``(pair, statistic) → (L, U, U)`` array over the L
    inspected layers and the U theory units of each: ``[l, u, v]`` is the relative gap
    of unit u's A against unit v's B (the diagonal: the true pairs), for each statistic
    of :func:`~._permutation.unit_statistics`; the input of the permutation test
    (:mod:`._permutation`); and per pair ``(pair, "gram_corr_offdiag")``, ``[l, u, v]``
    the off-diagonal Gram correlation of unit u's A with unit v's B, the input of the
    Gram-correlation test (:mod:`._correlation`). Kept in memory only, U² numbers per
    layer. ``findings``: the graded findings per pair, over all layers and per layer,
    with the effect's interval, the false-positive rates, the training reference and
    the Gram-correlation test (:func:`~._findings.balance_findings`); written as
    ``findings.parquet``.

    Examples:
        Made by :func:`inspect_checkpoint` (whose example shows one); its fields:

        >>> import dataclasses
        >>> from rankflow.inspect import Inspection
        >>> [f.name for f in dataclasses.fields(Inspection)]
        ['heads', 'grams', 'layout', 'meta', 'summary', 'out', 'pair_gaps', 'findings']
    """

    heads: pd.DataFrame
    grams: pd.DataFrame
    layout: Layout
    meta: dict
    summary: str
    out: Path | None = None
    pair_gaps: dict = field(default_factory=dict)
    findings: pd.DataFrame = field(default_factory=pd.DataFrame)


# --- choosing layers and scatter heads -----------------------------------------------


def parse_layers(spec: str | int | Iterable[int | str] | None, n_layers: int) -> list[int]:
    """Layer indices from ``None`` (all), ints (negative: from the end) or strings
    such as ``"0,3,5-7,-1"`` (``A-B`` inclusive). Sorted, without repeats.

    Examples:
        >>> from rankflow.inspect import parse_layers
        >>> parse_layers("0,2-3,-1", n_layers=6), parse_layers(None, 3)
        ([0, 2, 3, 5], [0, 1, 2])
    """
    if spec is None:
        return list(range(n_layers))
    items = [spec] if isinstance(spec, str | int) else list(spec)
    out: set[int] = set()
    for item in items:
        for tok in str(item).replace(",", " ").split():
            m = re.fullmatch(r"(\d+)-(\d+)", tok)
            if m:
                lo, hi = int(m[1]), int(m[2])
                if lo > hi:
                    raise InspectError(f"--layers: empty range {tok!r}")
                idx = list(range(lo, hi + 1))
            elif re.fullmatch(r"-?\d+", tok):
                idx = [int(tok)]
            else:
                raise InspectError(f"--layers: {tok!r} is not a layer, e.g. 0,3,5-7,-1")
            for i in idx:
                j = i + n_layers if i < 0 else i
                if not 0 <= j < n_layers:
                    raise InspectError(
                        f"--layers: layer {i} does not exist (the model has {n_layers}: "
                        f"0–{n_layers - 1})"
                    )
                out.add(j)
    if not out:
        raise InspectError("--layers: no layer selected")
    return sorted(out)


def _scatter_units(
    scatter: Sequence[tuple[int, int] | str] | None, layers: list[int], layout: Layout
) -> list[tuple[int, int]]:
    """(layer, head) pairs for the scatter figure; default: head 0 of the first,
    middle and last inspected layer."""
    if scatter is None:
        picks = [layers[0], layers[len(layers) // 2], layers[-1]]
        return [(i, 0) for i in dict.fromkeys(picks)]
    out = []
    for item in scatter:
        if isinstance(item, str):
            m = re.fullmatch(r"(-?\d+):(\d+)", item.strip())
            if not m:
                raise InspectError(f"--scatter: {item!r} is not LAYER:HEAD, e.g. 3:0")
            item = (int(m[1]), int(m[2]))
        layer, head = (int(v) for v in item)
        if layer < 0:
            layer += layout.n_layers
        if layer not in layers:
            raise InspectError(f"--scatter: layer {item[0]} is not among the inspected layers")
        if not 0 <= head < layout.n_heads:
            raise InspectError(
                f"--scatter: head {head} does not exist ({layout.n_heads} heads: "
                f"0–{layout.n_heads - 1})"
            )
        out.append((layer, head))
    return list(dict.fromkeys(out))


# --- outputs ---------------------------------------------------------------------------


@functools.cache
def _versions() -> dict[str, str]:
    from ..engine.store import package_versions

    return package_versions(("rankflow", "safetensors", "numpy", "pandas", "pyarrow", "matplotlib"))


def _write(out: Path, insp: Inspection, figures: Callable | None) -> list[str]:
    from ..engine.store import write_outputs

    files = {HEADS_TABLE: insp.heads, "heads.csv": insp.heads, GRAMS_TABLE: insp.grams}
    files["summary.md"] = insp.summary
    if len(insp.findings):
        files[FINDINGS_TABLE] = insp.findings
        files["findings.csv"] = insp.findings
    return write_outputs(out, META, insp.meta, files, figures and (lambda: figures(insp)))


def inspect_checkpoint(
    path: str | Path,
    out: str | Path | None = None,
    *,
    arch: str = "auto",
    layers: str | int | Iterable[int | str] | None = None,
    heads: int | None = None,
    scatter: Sequence[tuple[int, int] | str] | None = None,
    rank_tol: float = 1e-3,
    figures: Callable[[Inspection], Mapping[str, Callable[[Path], object]]] | None = None,
    progress: bool | None = None,
    findings: bool = True,
) -> Inspection:
    """Inspect a safetensors checkpoint for the balance fingerprint of weight decay.

    Args:
        path: a ``.safetensors`` file, a ``*.safetensors.index.json`` index of shards,
            a folder holding either, or a Hugging Face repo id ``org/name[@revision]``
            (its snapshot in the local cache; PyTorch ``.bin`` through torch), or a
            ``.zip`` of one model folder (its ``config.json`` and safetensors copied to
            a temporary folder, removed after reading; :func:`~._archive.unpacked`).
            ``config.json`` beside the weights gives the architecture and head layout.
        out: directory for ``heads.parquet``/``heads.csv`` (the table), ``grams.parquet``
            (Gram entries of the scatter heads), ``summary.md``, the figures and
            ``inspect.json`` (written last). ``None``: write nothing.
        arch: ``auto`` (config.json's ``model_type``, else the tensor names), ``bert``,
            ``gpt2``, ``llama`` or ``vit``.
        layers: the layers to inspect (default all): ints, negative from the end, or a
            string like ``"0,3,5-7,-1"``.
        heads: number of query heads, overriding config.json (needed without it,
            unless the family's usual head dimension is right).
        scatter: ``(layer, head)`` pairs (or ``"layer:head"``) whose Gram entries go to
            ``grams`` and the scatter figure; default head 0 of the first, middle and
            last inspected layers. For GQA the head's group is shown.
        rank_tol: numerical rank counts singular values above ``rank_tol · s_1``.
        figures: the figures to write into ``out``, as a function of the inspection
            returning file name → writer of that file: ``rankflow inspect`` passes
            ``rankflow.plots.inspection_figures`` (``scatter.png``, ``layers.png``).
            ``None``: tables and summary only. Nothing here draws.
        progress: a progress bar over layers (default: when stderr is a terminal).
        findings: grade the balance per pair (:func:`~._findings.balance_findings`:
            permutation tests, bootstrap intervals, false-positive rates on random
            initialisations, about a second), in the summary and ``findings.parquet``.

    Returns:
        An :class:`Inspection`. Raises :class:`InspectError` (a ``ConfigError``) naming
        the file and tensor on bad input, before anything is written.

    Memory: one layer's attention tensors at a time (plus per-head float64 copies);
    each file is memory-mapped only while that layer is read. Across layers only the
    tables and the U×U pair gaps per layer are kept.

    Examples:
        A GPT-2 layer (``c_attn = [W_Q | W_K | W_V]``) of two heads whose Grams are
        1.1·c_h·I (W_Q, W_V) and 0.9·c_h·I (W_K, W_O), c = (1, 2): each true pair has
        gap 0.2; the null pairs (head h's A, head h+1's B) more.

        >>> import tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import inspect_checkpoint
        >>> A, B = np.diag([1.1, 1.1, 2.2, 2.2]) ** 0.5, np.diag([0.9, 0.9, 1.8, 1.8]) ** 0.5
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({"h.0.attn.c_attn.weight": np.hstack([A, B, A]),
        ...                "h.0.attn.c_proj.weight": B}, d + "/model.safetensors")
        ...     res = inspect_checkpoint(d, heads=2)
        >>> res.heads[["pair", "head", "balance_gap_rel", "null_balance_gap_rel"]].round(3)
          pair  head  balance_gap_rel  null_balance_gap_rel
        0   qk     0              0.2                 0.483
        1   vo     0              0.2                 0.483
        2   qk     1              0.2                 0.839
        3   vo     1              0.2                 0.839
    """
    t0 = datetime.datetime.now(datetime.UTC)
    show = _checked_inputs(out, rank_tol, progress)
    heads_df, grams_df, layout, meta, gaps = _read_located(
        path, arch, layers, heads, scatter, rank_tol, show, t0
    )
    insp = _graded(heads_df, grams_df, layout, meta, gaps, findings)
    return insp if out is None else _written(insp, Path(out), figures)


def _checked_inputs(out, rank_tol: float, progress: bool | None) -> bool:
    """Refuse a bad ``out`` or ``rank_tol`` before reading anything; whether to show
    the progress bar."""
    if out is not None:
        check_out(out, "inspect")  # before reading: never into a folder not rankflow's
    if not rank_tol > 0:
        raise InspectError(f"rank_tol must be > 0, got {rank_tol}")
    return sys.stderr.isatty() if progress is None else progress


def _read_located(path, arch, layers, heads, scatter, rank_tol, show, t0):
    """:func:`_read` of the checkpoint at ``path`` (a Hub repo id: its cached snapshot; a
    zipped model folder: its weights in a temporary folder, named in ``meta`` as
    ``archive:file``)."""
    where = locate(path)
    with unpacked(where) as local:
        heads_df, grams_df, layout, meta, gaps = _read(
            open_checkpoint(local), arch, layers, heads, scatter, rank_tol, show, t0
        )
    if local != where:
        meta |= {"checkpoint": str(where.resolve()), "name": where.name, "archive": True}
        meta["files"] = [f"{where}:{Path(f).name}" for f in meta["files"]]
        meta["config"] = meta["config"] and f"{where}:config.json"
    return heads_df, grams_df, layout, meta, gaps


def _graded(heads_df, grams_df, layout, meta, gaps, findings: bool) -> Inspection:
    """The :class:`Inspection` of the tables read, with its findings (when ``findings``)
    and the summary text."""
    graded = balance_findings(gaps, layout, layers=meta["layers"]) if findings else pd.DataFrame()
    summary = summarize(heads_df, layout, meta)
    summary += "\n" + findings_text(graded) if len(graded) else ""
    return Inspection(heads_df, grams_df, layout, meta, summary, None, gaps, graded)


def _written(insp: Inspection, out: Path, figures: Callable | None) -> Inspection:
    """``insp`` written into ``out`` (claimed for ``inspect`` while writing)."""
    with claimed(out, "inspect"):
        _write(out, insp, figures)
    return dataclasses.replace(insp, out=out)


def _read(ckpt: Checkpoint, arch, layers, heads, scatter, rank_tol, show, t0):
    """``(heads, grams, layout, meta, pair_gaps)`` of an open checkpoint: the layout and
    every shape checked before any tensor is read, then one layer at a time."""
    layout = infer_layout(ckpt, arch=arch, heads=heads)
    chosen = parse_layers(layers, layout.n_layers)
    names = check_shapes(ckpt, layout, chosen)  # every shape, before reading anything
    check_memory(ckpt, layout, names)
    picks = _scatter_units(scatter, chosen, layout)
    rows, grams, gaps = _inspect_layers(ckpt, layout, names, chosen, picks, rank_tol, show)
    heads_df = pd.DataFrame(rows)
    stats_cols = list(STATISTICS) + [f"null_{s}" for s in STATISTICS]
    heads_df = heads_df[list(ID_COLUMNS) + stats_cols]
    grams_df = pd.concat(grams, ignore_index=True) if grams else pd.DataFrame()
    meta = _meta(ckpt, layout, chosen, picks, rank_tol, heads_df, t0)
    return heads_df, grams_df, layout, meta, gaps


# Bytes per entry of each weight dtype as read.
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


def check_memory(ckpt: Checkpoint, layout: Layout, names: Mapping[int, Mapping[str, str]]):
    """Refuse, from the headers alone, a checkpoint whose largest chosen layer does not
    fit in memory: its attention tensors as read, and a float64's worth of copies (the
    canonical layout and the per-head factors; measured: 2× a float32 layer's bytes)."""

    def layer_bytes(layer: int) -> int:
        return sum(
            int(np.prod(ckpt.shapes[n], dtype=np.float64)) * (DTYPE_BYTES[ckpt.dtypes[n]] + 8)
            for n in names[layer].values()
        )

    if names:
        layer = max(names, key=layer_bytes)
        sizes = f"layer {layer}: d_model = {layout.d_model}, {layout.n_heads} heads"
        fix = "inspect it on a machine with more memory"
        need, where = layer_bytes(layer), [str(ckpt.path)]
        check_fits(need, where, sizes, "reading one layer", host_memory(), fix)


def layer_weights(ckpt, layout, names, chosen, desc: str, show: bool):
    """``(layer, LayerWeights)`` of each chosen layer, its tensors (``names``, from
    ``check_shapes``) read when it is reached, under single-threaded BLAS and a progress
    bar ``desc`` when ``show``. Memory: one layer at a time, if the caller drops each."""
    from tqdm.auto import tqdm

    with single_threaded_blas():
        for layer in tqdm(chosen, desc=desc, disable=not show, file=sys.stderr):
            tensors = ckpt.read(names[layer].values())
            yield layer, canonical(layout, {role: tensors[n] for role, n in names[layer].items()})
            del tensors


def _inspect_layers(ckpt, layout, names, chosen, picks, rank_tol, show):
    """Rows, Gram entries and stacked pair gaps (``Inspection.pair_gaps``) of the chosen
    layers, reading one layer's tensors at a time."""
    rows, grams, gaps = [], [], {}
    for layer, lw in layer_weights(ckpt, layout, names, chosen, "layers", show):
        want = {h // layout.group_size for i, h in picks if i == layer}
        r, g, pg = layer_rows_and_gaps(lw, layout, layer, rank_tol, want)
        rows += r
        grams += g
        for key, m in pg.items():
            gaps.setdefault(key, []).append(m)
        del lw
    return rows, grams, {key: np.stack(ms) for key, ms in gaps.items()}


def _meta(ckpt, layout, chosen, picks, rank_tol, heads_df, t0) -> dict:
    """``inspect.json``: the checkpoint, its layout, the choices made and the notes."""
    return {
        "checkpoint": str(ckpt.path.resolve()),
        "name": ckpt.path.resolve().name
        if ckpt.path.is_dir()
        else f"{ckpt.path.resolve().parent.name}/{ckpt.path.name}",
        "files": [str(f) for f in ckpt.files],
        "bytes": ckpt.nbytes,
        "config": None if ckpt.config_path is None else str(ckpt.config_path),
        "layout": layout.as_dict(),
        "layers": chosen,
        "scatter": [list(p) for p in picks],
        "rank_tol": rank_tol,
        "notes": layout_notes(layout, heads_df),
        "versions": dict(_versions()),
        "created": t0.isoformat(timespec="seconds"),
    }


def load_inspection(out: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """``(heads, grams, meta)`` of a finished inspection directory (one whose
    ``inspect.json`` exists; a directory without it was not completed).

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import inspect_checkpoint, load_inspection
        >>> rng = np.random.default_rng(0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({"h.0.attn.c_attn.weight": rng.standard_normal((4, 12)),
        ...                "h.0.attn.c_proj.weight": rng.standard_normal((4, 4))},
        ...               d + "/model.safetensors")
        ...     _ = inspect_checkpoint(d, d + "/out", heads=2)
        ...     heads, grams, meta = load_inspection(d + "/out")
        >>> heads.shape, grams.shape, meta["layers"], meta["layout"]["n_heads"]
        ((4, 47), (12, 11), [0], 2)
    """
    out = Path(out)
    if not (out / META).is_file():
        raise InspectError(f"{out}: no {META}: not a finished `rankflow inspect` directory")
    meta = json.loads((out / META).read_text())
    return pd.read_parquet(out / HEADS_TABLE), pd.read_parquet(out / GRAMS_TABLE), meta
