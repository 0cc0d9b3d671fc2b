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
from ._families import LayerWeights, Layout, canonical, check_shapes, infer_layout
from ._findings import balance_findings, findings_text
from ._hub import locate
from ._permutation import layer_gap_matrices
from ._stats import STATISTICS, Factor, pair_statistics
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


# --- one layer -------------------------------------------------------------------------


def _upper_entries(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.triu_indices(G.shape[0])
    return i, j, G[i, j]


def _gram_rows(layer, pair, unit, index, partner, a: Factor, b: Factor, b_null: Factor | None):
    i, j, ga = _upper_entries(a.gram)
    parts = [("pair", index, b)] + ([("null", partner, b_null)] if b_null is not None else [])
    frames = []
    for role, which, fb in parts:
        frames.append(
            pd.DataFrame(
                {
                    "layer": layer,
                    "pair": pair,
                    "unit": unit,
                    "index": index,
                    "role": role,
                    "b_index": which,
                    "i": i,
                    "j": j,
                    "diagonal": i == j,
                    "gram_a": ga,
                    "gram_b": fb.gram[i, j],
                }
            )
        )
    return frames


@dataclass(frozen=True)
class _Unit:
    """One row source of the heads table: a head or GQA group, its null partner, and
    per pair ``(A, B, B_null, m, n)``."""

    unit: str  # head | group
    index: int
    group: int
    partner: int | None
    theory: bool
    pairs: dict


def _layer_units(lw: LayerWeights, layout: Layout) -> list[_Unit]:
    """The units of one layer (see :func:`inspect_layer`), each factor reduced to its
    :class:`Factor` once."""
    H, Hkv, G = layout.n_heads, layout.n_kv_heads, layout.group_size
    Q = [Factor.of(lw.query(h)) for h in range(H)]
    O = [Factor.of(lw.output_t(h)) for h in range(H)]
    K = [Factor.of(lw.key(g)) for g in range(Hkv)]
    V = [Factor.of(lw.value(g)) for g in range(Hkv)]
    D = layout.d_model
    units = []
    if G == 1:
        for h in range(H):
            p = (h + 1) % H if H > 1 else None
            units.append(
                _Unit("head", h, h, p, True, {
                    "qk": (Q[h], K[h], None if p is None else K[p], D, D),
                    "vo": (V[h], O[h], None if p is None else O[p], D, D),
                })
            )  # fmt: skip
        return units
    for g in range(Hkv):
        p = (g + 1) % Hkv if Hkv > 1 else None
        members = range(g * G, (g + 1) * G)
        Qg = Factor.stack([Q[i] for i in members])
        Og = Factor.stack([O[i] for i in members])
        Op = None if p is None else Factor.stack([O[i] for i in range(p * G, (p + 1) * G)])
        units.append(
            _Unit("group", g, g, p, True, {
                "qk": (Qg, K[g], None if p is None else K[p], G * D, D),
                "vo": (V[g], Og, Op, D, G * D),
            })
        )  # fmt: skip
    for h in range(H):
        g = h // G
        p = (h + G) % H if Hkv > 1 else None
        units.append(
            _Unit("head", h, g, p, False, {
                "qk": (Q[h], K[g], None if p is None else K[p // G], D, D),
                "vo": (V[g], O[h], None if p is None else O[p], D, D),
            })
        )  # fmt: skip
    return units


def _unit_rows(
    units: list[_Unit], layout: Layout, layer: int, bias: dict, rank_tol: float, scatter: set
) -> tuple[list[dict], list[pd.DataFrame]]:
    """Rows of the heads table (statistics of the true and the null pair) and the Gram
    entries of the scatter units."""
    rows, grams = [], []
    nan = dict.fromkeys(STATISTICS, float("nan"))
    for u in units:
        for pair in PAIRS:
            a, b, b_null, m, n = u.pairs[pair]
            rotary = layout.rotary_dim if pair == "qk" else 0
            stats = pair_statistics(a, b, rank_tol=rank_tol, rotary_dim=rotary)
            null = (
                nan
                if b_null is None
                else pair_statistics(a, b_null, rank_tol=rank_tol, rotary_dim=rotary)
            )
            rows.append(
                {
                    "layer": layer,
                    "pair": pair,
                    "unit": u.unit,
                    "head": u.index if u.unit == "head" else -1,
                    "group": u.group,
                    "null_partner": -1 if u.partner is None else u.partner,
                    "theory": u.theory,
                    "bias": bias[pair],
                    "m": m,
                    "n": n,
                    "r": layout.head_dim,
                    **stats,
                    **{f"null_{k}": v for k, v in null.items()},
                }
            )
            if u.theory and u.index in scatter:
                grams += _gram_rows(layer, pair, u.unit, u.index, u.partner, a, b, b_null)
    return rows, grams


def _pair_gaps(units: list[_Unit], layout: Layout) -> dict[tuple[str, str], np.ndarray]:
    """``(pair, statistic) → (U, U)`` relative gaps between the A of theory unit u and
    the B of unit v of one layer (:func:`~._permutation.layer_gap_matrices`), from the
    Grams already computed for the heads table."""
    theory = [u for u in units if u.theory]
    grams = {
        pair: tuple(np.stack([u.pairs[pair][i].gram for u in theory]) for i in (0, 1))
        for pair in PAIRS
    }
    return layer_gap_matrices(grams, layout.rotary_dim, layout.head_dim)


def inspect_layer(
    lw: LayerWeights,
    layout: Layout,
    layer: int,
    *,
    rank_tol: float = 1e-3,
    scatter: Iterable[int] = (),
) -> tuple[list[dict], list[pd.DataFrame]]:
    """Rows of the heads table for one layer, and Gram entries for the theory units
    whose index is in ``scatter``.

    Multi-head attention (H_kv = H): one row per head and pair, ``unit = "head"``.
    Grouped-query attention (H_kv < H, G = H/H_kv): per key/value group g a row
    ``unit = "group"`` pairing the stacked query factors ``[W_Q^i; …]`` of the group with
    ``W_K^g`` (Gram ``Σ_i W_Q^iᵀW_Q^i`` against ``W_KᵀW_K``), and ``W_V^g`` with the
    stacked ``[W_O^iᵀ; …]`` (``W_VᵀW_V`` against ``Σ_i W_O^i W_O^iᵀ``): these balance
    under weight decay (docs/theory.md, grouped-query attention; the value–output form by
    the same argument). Per query head a row ``unit = "head"`` pairs W_Q^h with its
    shared W_K^g (and W_V^g with W_O^hᵀ); those are not predicted to balance.
    The null partner is the next unit, cyclically (for GQA head rows: the same
    position in the next group), so that it never shares the true partner.

    Examples:
        Two heads of d_h = 2 whose Grams are 1.1·c_h·I (A) and 0.9·c_h·I (B): gap 0.2.

        >>> import numpy as np
        >>> from rankflow.inspect import LayerWeights, Layout, inspect_layer
        >>> A, B = np.diag([1.1, 1.1, 2.2, 2.2]) ** 0.5, np.diag([0.9, 0.9, 1.8, 1.8]) ** 0.5
        >>> lay = Layout("gpt2", None, "h.", 1, 4, 2, 2, 2, 0, False, "doc")
        >>> rows, grams = inspect_layer(LayerWeights(A, B, A, B, None, None, None, 2), lay, 0)
        >>> [(r["pair"], r["head"], round(float(r["balance_gap_rel"]), 3)) for r in rows]
        [('qk', 0, 0.2), ('vo', 0, 0.2), ('qk', 1, 0.2), ('vo', 1, 0.2)]
    """
    rows, grams, _ = _inspect_one(lw, layout, layer, rank_tol, set(scatter))
    return rows, grams


def _inspect_one(lw, layout, layer, rank_tol, scatter):
    """:func:`inspect_layer`'s rows and Gram entries, and the layer's pair gaps."""
    units = _layer_units(lw, layout)
    # A bias stored as zeros (rankflow's exports, for GPT-2's fused layout) is none.
    given = lambda b: b is not None and bool(np.any(b))
    bias = {"qk": given(lw.bq) or given(lw.bk), "vo": given(lw.bv)}
    rows, grams = _unit_rows(units, layout, layer, bias, rank_tol, scatter)
    return rows, grams, _pair_gaps(units, layout)


# --- the summary -----------------------------------------------------------------------


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
    if out is not None:
        check_out(out, "inspect")  # before reading: never into a folder not rankflow's
    if not rank_tol > 0:
        raise InspectError(f"rank_tol must be > 0, got {rank_tol}")
    show = sys.stderr.isatty() if progress is None else progress
    where = locate(path)  # a Hub repo id: its cached snapshot
    with unpacked(where) as local:  # a zipped model folder: its weights, in a temp folder
        heads_df, grams_df, layout, meta, gaps = _read(
            open_checkpoint(local), arch, layers, heads, scatter, rank_tol, show, t0
        )
    if local != where:
        meta |= {"checkpoint": str(where.resolve()), "name": where.name, "archive": True}
        meta["files"] = [f"{where}:{Path(f).name}" for f in meta["files"]]
        meta["config"] = meta["config"] and f"{where}:config.json"
    chosen = meta["layers"]
    graded = balance_findings(gaps, layout, layers=chosen) if findings else pd.DataFrame()
    summary = summarize(heads_df, layout, meta)
    summary += "\n" + findings_text(graded) if len(graded) else ""
    insp = Inspection(heads_df, grams_df, layout, meta, summary, None, gaps, graded)
    if out is not None:
        out = Path(out)
        with claimed(out, "inspect"):
            _write(out, insp, figures)
        insp = dataclasses.replace(insp, out=out)
    return insp


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
        r, g, pg = _inspect_one(lw, layout, layer, rank_tol, want)
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
