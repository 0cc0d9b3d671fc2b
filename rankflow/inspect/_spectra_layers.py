"""``inspect_spectra``: the spectra of :mod:`._spectra` for every head and layer of a
checkpoint, one layer in memory at a time, beside their shuffled-entries null."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ._checkpoint import open_checkpoint
from ._families import LayerWeights, Layout, check_shapes, infer_layout
from ._run import layer_weights, parse_layers
from ._spectra import SPECTRUM_COLUMNS, matrix_spectrum, product_spectrum, shuffled

__all__ = ["SPECTRA_TABLE", "SV_TABLE", "inspect_spectra", "layer_spectra", "with_spectra"]

SPECTRA_TABLE, SV_TABLE = "spectra.parquet", "spectra_sv.parquet"
# Statistics repeated on the shuffled matrix, as weightwatcher's rand_ columns.
RAND_COLUMNS = ("spectral_norm", "stable_rank", "mp_edge", "num_spikes", "mp_softrank", "alpha")
MATRICES = ("qk", "vo", "q", "k", "v", "o")


def _svals(W: np.ndarray) -> np.ndarray:
    return np.linalg.svd(W, compute_uv=False)


def _product_svals(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return _svals(np.linalg.qr(A, mode="r") @ np.linalg.qr(B, mode="r").T)


def _row(layer, matrix, head, group, true, null) -> dict:
    return {
        "layer": layer,
        "matrix": matrix,
        "head": head,
        "group": group,
        **true,
        **{f"rand_{k}": null[k] for k in RAND_COLUMNS},
    }


def layer_spectra(
    lw: LayerWeights, layout: Layout, layer: int, rng: np.random.Generator
) -> tuple[list[dict], list[pd.DataFrame]]:
    """Rows of the spectra table for one layer and its singular values.

    Per query head h (key/value head g = h // (H/H_kv)): ``matrix = "qk"``, W_QK^h =
    W_Q^h W_K^gᵀ, and ``"vo"``, W_OV^h = W_V^g W_O^h, by :func:`product_spectrum`, the
    null shuffling the entries of each factor. Per layer (``head = -1``): the full
    ``q`` (D×H·d_h), ``k``, ``v``, ``o`` by :func:`matrix_spectrum`, the null shuffling
    the matrix. Singular values: one frame per matrix with ``index``, ``sv``, ``rand_sv``.

    Examples:
        >>> import numpy as np
        >>> from rankflow.inspect import LayerWeights, Layout, layer_spectra
        >>> rng = np.random.default_rng(0)
        >>> W = [rng.standard_normal((16, 16)) for _ in range(4)]  # Wq, Wk, Wv, Wo
        >>> lw = LayerWeights(*W, None, None, None, head_dim=8)
        >>> lay = Layout("gpt2", None, "h.", 1, 16, 2, 2, 8, 0, False, "doc")
        >>> rows, svs = layer_spectra(lw, lay, 0, rng)
        >>> [(r["matrix"], r["head"]) for r in rows]  # doctest: +NORMALIZE_WHITESPACE
        [('qk', 0), ('vo', 0), ('qk', 1), ('vo', 1),
         ('q', -1), ('k', -1), ('v', -1), ('o', -1)]
        >>> rows[0]["num_evals"], svs[0].columns.tolist()
        (8, ['layer', 'matrix', 'head', 'index', 'sv', 'rand_sv'])
    """
    rows, svs = [], []

    def add(matrix, head, group, spec, factors):
        null_f = [shuffled(f, rng) for f in factors]
        true, null = spec(*factors), spec(*null_f)
        svals = _product_svals if len(factors) == 2 else _svals
        s, s_null = svals(*factors), svals(*null_f)
        rows.append(_row(layer, matrix, head, group, true, null))
        frame = {"layer": layer, "matrix": matrix, "head": head, "index": np.arange(len(s))}
        svs.append(pd.DataFrame({**frame, "sv": s, "rand_sv": s_null[: len(s)]}))

    for h in range(layout.n_heads):
        g = h // layout.group_size
        add("qk", h, g, product_spectrum, (lw.query(h), lw.key(g)))
        add("vo", h, g, product_spectrum, (lw.value(g), lw.output_t(h)))
    for name, W in zip("qkvo", (lw.Wq, lw.Wk, lw.Wv, lw.Wo)):
        add(name, -1, -1, matrix_spectrum, (np.asarray(W, dtype=np.float64),))
    return rows, svs


def inspect_spectra(
    path: str | Path,
    *,
    arch: str = "auto",
    layers: str | int | Iterable[int | str] | None = None,
    heads: int | None = None,
    seed: int = 0,
    progress: bool | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(spectra, singular values)`` of a checkpoint (arguments as
    :func:`~._run.inspect_checkpoint`'s; ``seed`` draws the shuffles). The spectra table
    has ``layer, matrix, head, group``, :data:`~._spectra.SPECTRUM_COLUMNS` and the
    ``rand_`` twins of :data:`RAND_COLUMNS`; bad input raises ``InspectError`` before any
    tensor is read. Memory: one layer's attention tensors at a time.

    Examples:
        A one-layer GPT-2 checkpoint of random weights, D = 16 in two heads:

        >>> import tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import inspect_spectra
        >>> rng = np.random.default_rng(0)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({"h.0.attn.c_attn.weight": rng.standard_normal((16, 48)),
        ...                "h.0.attn.c_proj.weight": rng.standard_normal((16, 16))},
        ...               d + "/model.safetensors")
        ...     table, sv = inspect_spectra(d, heads=2)
        >>> table.shape, sorted(table["matrix"].unique()), sv.shape
        ((8, 23), ['k', 'o', 'q', 'qk', 'v', 'vo'], (96, 6))
    """
    ckpt = open_checkpoint(path)
    layout = infer_layout(ckpt, arch=arch, heads=heads)
    chosen = parse_layers(layers, layout.n_layers)
    names = check_shapes(ckpt, layout, chosen)
    rng = np.random.default_rng(seed)
    rows, svs = [], []
    show = sys.stderr.isatty() if progress is None else progress
    for layer, lw in layer_weights(ckpt, layout, names, chosen, "spectra", show):
        r, s = layer_spectra(lw, layout, layer, rng)
        rows += r
        svs += s
        del lw
    cols = ["layer", "matrix", "head", "group", *SPECTRUM_COLUMNS]
    cols += [f"rand_{k}" for k in RAND_COLUMNS]
    return pd.DataFrame(rows)[cols], pd.concat(svs, ignore_index=True)


def with_spectra(
    spectra: tuple[pd.DataFrame, pd.DataFrame],
    figures: Callable | None = None,
    figure: Callable[[pd.DataFrame, pd.DataFrame], Callable[[Path], object]] | None = None,
) -> Callable[[object], Mapping[str, Callable[[Path], object]]]:
    """An ``outputs`` argument for ``inspect_checkpoint(..., figures=...)`` that writes,
    besides ``figures``' files, ``spectra.parquet``/``.csv`` and ``spectra_sv.parquet``
    (and ``spectra.png`` from ``figure(table, singular values)`` when given), so that
    they too are written atomically before the inspection's finished marker.

    Examples:
        >>> import pandas as pd
        >>> from rankflow.inspect import with_spectra
        >>> outputs = with_spectra((pd.DataFrame(), pd.DataFrame()))
        >>> sorted(outputs(None))  # file name → its writer, for inspect_checkpoint
        ['spectra.csv', 'spectra.parquet', 'spectra_sv.parquet']
    """
    table, sv = spectra

    def outputs(insp) -> dict[str, Callable[[Path], object]]:
        out = dict(figures(insp)) if figures else {}
        out[SPECTRA_TABLE] = lambda p: table.to_parquet(p, index=False)
        out["spectra.csv"] = lambda p: table.to_csv(p, index=False)
        out[SV_TABLE] = lambda p: sv.to_parquet(p, index=False)
        if figure is not None:
            out["spectra.png"] = figure(table, sv)
        return out

    return outputs
