"""The documentation site's mkdocs hook (``hooks:`` in mkdocs.yml).

Generated text is never committed: a page holds a marker, and while the site is built
the marker is replaced by Markdown made from what the code declares.

- ``<!-- rankflow:config -->`` → :func:`config_reference`: every key of both families'
  schemas (``rankflow.core.config.SCHEMA``, ``rankflow.attention.config.SCHEMA``, walked
  by ``rankflow.cli.helptext.key_rows`` as ``--help`` walks them) and the ``[compare]``
  options, each with its type, default, allowed values, whether a sweep over it shares
  one compiled program (``Field.traced``) and its meaning; the ``RANKFLOW_*`` variables.
- ``<!-- rankflow:columns -->`` → :func:`columns_reference`: the columns of every
  results table, listed from the code that declares them (``OBSERVABLES``,
  ``STRUCT_COLUMNS``, ``compare.COLUMNS``, ``inspect.STATISTICS``, …, or the table
  itself, made from a tiny input), each with its meaning: the schema field's, the
  comment beside the column's name in the code, ``rankflow.plots.common.LABELS``, else
  :data:`MEANINGS` below. A column without a meaning is a warning, so ``mkdocs build
  --strict`` fails on it.

- ``<!-- rankflow:notebook PATH.ipynb -->`` → :func:`notebook_markdown`: the cells of the
  notebook at PATH (from the repository's root) as Markdown, its code cells as Python
  blocks (the committed notebook has no outputs: tests/docs/test_notebook.py executes it);
  :func:`on_files` publishes the notebook beside the page, for a link to download it.

The Examples section of the nav lists ``examples/index.md`` and then every other page of
``docs/examples/`` by name, so that an example page needs no edit of mkdocs.yml.

The functions are plain and importable (tests/docs/test_site.py imports this file).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import json
import logging
import re
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

DOCS = Path(__file__).resolve().parent
LOG = logging.getLogger("mkdocs.hooks.rankflow")
CONFIG_MARKER = "<!-- rankflow:config -->"
COLUMNS_MARKER = "<!-- rankflow:columns -->"
# The two families: (title, config module, what runs it).
FAMILIES = (
    ("Core sweeps", "rankflow.core.config", "`rankflow run` and `rankflow.run`"),
    (
        "Attention models",
        "rankflow.attention.config",
        "`rankflow attention train` and `rankflow.attention.run`",
    ),
)

# Meanings of the columns that the code names without a comment, schema field or label.
MEANINGS = {
    "run_id": "index of the run (one point of the sweep) in the sweep",
    "path": "Monte Carlo path of a stochastic run (0 for a deterministic one)",
    "sv_1 … sv_k": "singular values of W, descending, k = min(m, n, r)",
    "lr_clock": "the learning rate accumulated by t: ∫₀ᵗη for flows, Σ_{k<t} η_k for "
    "optimizers (η times `rankflow.numerics.schedules.unit_clock`)",
    # attention
    "layer": "transformer block, from 0",
    "head": "attention head of the layer, from 0",
    "pair": "`qk`: the key–query factors A = W_Q^h, B = W_K^h (product W_Q^h W_K^hᵀ); "
    "`vo`: the value–output factors A = W_V^h, B = W_O^hᵀ (product W_V^h W_O^h)",
    "sv_1 … sv_{d_h}": "singular values of the pair's product, descending",
    "cross_gap_rel_0 … cross_gap_rel_{H−1}": "only with `save.cross_gaps`: column v is "
    "‖A_hᵀA_h − B_vᵀB_v‖_F / ½(‖A_hᵀA_h‖_F + ‖B_vᵀB_v‖_F), the row's A (head h) against "
    "the pair's B of head v of the same layer (0 where both Grams vanish); "
    "`cross_gap_rel_{h}` is `balance_gap_rel`; the gap matrix of `rankflow inspect`'s "
    "permutation test, along training",
    "train_loss": "loss on the training data: gradient flow's fixed full batch, else a "
    "fixed sample of `task.val_size` training sequences",
    "val_loss": "loss on the fixed validation set",
    "train_accuracy": "images: accuracy on the same training sample as `train_loss`",
    "val_accuracy": "images: accuracy on the validation set",
    # compare
    "flow.kind": "the flow the optimizer discretises (`dynamics.kind`'s flow)",
    "q10": "10% quantile over paths",
    "q90": "90% quantile over paths",
    "relative_distance": "distance / ‖θ(k)‖_F",
    "point": "index of the point in the sweep",
    "sweep.KEY": "the point's value of the swept key KEY (one column per swept key)",
    "weak_order.OBSERVABLE": "the weak order of each observable of the `weak` table "
    "(`weak_order.loss`, …), with its `_stderr`",
    "ratio_max": "largest measured ‖D_(k+1)‖/‖D_k‖ over the window",
    "relative_distance_final": "relative distance at the last save",
    "optimizer.z_max": "max |z| of the optimizer's mean against T6 over the saves",
    "flow.z_max": "max |z| of the flow's mean against T6 over the saves",
    # inspect
    "unit": "`head`, or `group`: a key/value group of grouped-query attention",
    "group": "key/value group of the head (its own index without grouped-query attention)",
    "null_partner": "the unit whose B the null pairing takes (−1: none)",
    "theory": "whether theory predicts this unit's pair to balance (heads of "
    "multi-head attention, groups of grouped-query attention)",
    "bias": "whether the pair's projections have biases (the product form then fails)",
    "m": "rows of A",
    "n": "rows of B",
    "r": "head dimension d_h, the columns of A and B",
    "null_STATISTIC": "each statistic above of the null pairing (A of this unit with B "
    "of `null_partner`)",
    "matrix": "`qk`, `vo`: a head's products; `q`, `k`, `v`, `o`: the layer's projection",
    "rand_STATISTIC": "each of these statistics of the matrix with its entries shuffled "
    "(per-head products: each factor shuffled)",
    "index": "the unit's head or group index",
    "role": "`pair`: the unit's own B; `null`: its null partner's",
    "b_index": "index of the unit whose B is compared",
    "i": "row of the Gram entry",
    "j": "column of the Gram entry",
    "diagonal": "whether i = j",
    "gram_a": "entry (i, j) of AᵀA",
    "gram_b": "entry (i, j) of BᵀB",
    "step": "the checkpoint's training step",
    "checkpoint": "the checkpoint's path or repo id",
    "statistic": "the fitted statistic (`--statistic`, default `balance_gap_rel`)",
    "n_points": "steps with a finite, positive value in the fit",
    "step_first": "first step of the fit",
    "step_last": "last step of the fit",
    "gap_first": "the statistic at the first step",
    "gap_last": "the statistic at the last step",
    "rate": "decay rate per step: least squares slope of −log(statistic) against the step",
    "rate_se": "its standard error",
    "null_rate": "the same fit of the null pairing's statistic",
    "null_rate_se": "its standard error",
    "predicted_rate": "T5/T11's prediction, −log Π(1 − η_kλ)² fitted at the same steps "
    "(with `--lam` and a learning rate; NaN otherwise)",
    "predicted_rate_gf": "gradient flow's prediction, 2λ∫η, fitted at the same steps",
    "rate_over_predicted": "rate / predicted_rate",
    "units": "theory units of the layer and pair",
    "rate_median": "median of the units' rates",
    "rate_q25": "lower quartile of the units' rates",
    "rate_q75": "upper quartile of the units' rates",
    "null_rate_median": "median of the units' null rates",
    "median_gap_rate": "the rate fitted to the per-step median statistic over the units",
    "median_gap_rate_se": "its standard error",
    # reproduce
    "experiment": "the experiment (`rankflow reproduce --only NAME`) that checked it",
}
# At depth L ≥ 3 (rankflow.core.factors.depth_observables) some names mean more factors.
DEPTH_MEANINGS = {
    "l2_loss": "loss + λ·l2_penalty (the objective)",
    "schatten_loss": "loss + λ·schatten_penalty (the objective's value at balance)",
    "star_loss": "loss + λ·nuclear_norm",
    "l2_penalty": "½Σ‖W_j‖_F²",
    "schatten_penalty": "(L/2)Σσ_i^{2/L} (T13)",
    "schatten_gap": "l2_penalty − schatten_penalty ≥ 0, zero iff balanced",
    "balance_gap_1 … balance_gap_{L−1}": "‖W_{j+1}ᵀW_{j+1} − W_jW_jᵀ‖_F of each adjacent pair j",
}

# --- Markdown --------------------------------------------------------------------------

_ROLE = re.compile(r":(?:func|data|mod|class|meth|attr|obj):`~?\.?([^`]+)`")


def _escape(text: str) -> str:
    """Markdown's special characters escaped, ``$…$`` math kept (``\\|`` as ``\\Vert``,
    which a table cell cannot hold)."""
    parts = text.split("$") if text.count("$") % 2 == 0 else [text]
    for i, part in enumerate(parts):
        if i % 2:
            parts[i] = part.replace(r"\|", r"\Vert ").replace("|", r"\vert ")
        else:
            parts[i] = re.sub(r"([\\*_\[\]>#|])", r"\\\1", part).replace("<", "&lt;")
    return "$".join(parts)


def md_text(text: str) -> str:
    """Text as one line of Markdown (a table cell): special characters escaped outside
    code spans and ``$…$`` math; RST roles (``:func:`x```) and ````x```` as code."""
    text = _ROLE.sub(r"`\1`", " ".join(str(text).split())).replace("``", "`")
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = _escape(parts[i])
    return "`".join(parts)


def code(name: str) -> str:
    return f"`{name}`"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; cells are Markdown already."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- the config reference --------------------------------------------------------------


def type_name(f) -> str:
    """A field's accepted values, in words."""
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    words = []
    for t in f.types:
        if t is int and float in f.types:
            continue
        if t in (list, tuple):
            items = [names[i] + "s" for i in f.items if not (i is int and float in f.items)]
            words.append("list of " + " or ".join(items))
        elif t in names:
            words.append(names[t])
    if f.callables:
        words.append("Python callable (Python API)")
    return " or ".join(dict.fromkeys(words))


def allowed(f) -> str:
    """A field's allowed values: an enumerated key's values, else the range its check
    states for a value below every range (``ge(0)`` → ``≥ 0``), else "any"."""
    if f.choices is not None:
        return ", ".join(code(c) for c in f.choices)
    if f.types == (bool,):
        return "`true`, `false`"
    message = None
    if f.check is not None and {int, float} & set(f.types):
        try:
            message = f.check(float("-inf"))
        except Exception:  # noqa: BLE001 - a check that cannot take a number states no range
            message = None
    return md_text(message.removeprefix("must be ")) if message else "any"


def family_keys(module: str) -> list[tuple[str, str, Any, bool]]:
    """``(section, dotted key, field, traced)`` of every key of a family's schema."""
    from rankflow.cli.helptext import key_rows

    config = importlib.import_module(module)
    return list(key_rows(config.SCHEMA, config.NUMERIC_KEYS))


def key_table(rows: Sequence[tuple[str, str, Any, bool]]) -> str:
    """The Markdown table of some keys of a schema."""
    from rankflow.cli.helptext import toml_literal

    header = ("key", "type", "default", "allowed values", "swept in one program", "meaning")
    cells = [
        (
            code(key),
            md_text(type_name(f)),
            code(toml_literal(f.default)),
            allowed(f),
            "yes" if traced else "no",
            md_text(f.doc),
        )
        for _, key, f, traced in rows
    ]
    return table(header, cells)


def compare_options() -> str:
    """The ``[compare]`` options (``rankflow.compare.OPTIONS``, defaults of ``Options``)."""
    from rankflow.cli.helptext import toml_literal
    from rankflow.compare import OPTIONS, Options

    defaults = {f.name: f.default for f in dataclasses.fields(Options)}
    rows = []
    for key, (types, _, doc) in OPTIONS.items():
        kind = " or ".join({int: "integer"}.get(t, t.__name__) for t in types)
        default = code(toml_literal(defaults[key]))
        rows.append((code(f"compare.{key}"), kind, default, md_text(doc)))
    return table(("key", "type", "default", "meaning"), rows)


def config_reference() -> str:
    """The config reference: every key of both families by TOML table, the ``[compare]``
    options and the environment variables."""
    from rankflow.cli.helptext import ENVIRONMENT, SWEEP_EXAMPLE

    out = []
    for title, module, runs in FAMILIES:
        out += [f"## {title}", f"The keys of {runs} (`{module}.SCHEMA`)."]
        rows = family_keys(module)
        for sec in dict.fromkeys(r[0] for r in rows):
            name = f"`[{sec}]`" if sec else "Top level"
            family = title.split()[0].lower()
            out += [f"### {name} ({family})", key_table([r for r in rows if r[0] == sec])]
    out += [
        "## Sweeps",
        "A `[sweep]` table maps dotted keys to lists of values and runs the product of "
        f"its lists; on the command line, `{SWEEP_EXAMPLE}`. A sweep over keys that are "
        "swept in one program shares one compiled program; any other key compiles one "
        "program per value.",
        "## `[compare]` (`rankflow compare`)",
        compare_options(),
        "## Environment variables",
        table(("variable", "meaning"), ((code(k), md_text(v)) for k, v in ENVIRONMENT)),
    ]
    return "\n\n".join(out) + "\n"


# --- meanings declared in the code ------------------------------------------------------


def _assignment(tree: ast.Module, name: str) -> tuple[int, ast.AST]:
    """(line, value) of a top-level assignment to ``name``, or (line, class) of a class."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node.lineno, node
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", 0)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node.lineno, node.value
    raise LookupError(f"no top-level {name}")


def declared(module: str, name: str, key: str | None = None) -> tuple[dict[str, str], str]:
    """The comments of a declaration in ``module``'s source: ``({column: comment},
    note)``. ``name`` is a top-level assignment or class (``key``: one entry of its
    dict). A comment belongs to a column when its line declares that one name: a single
    string literal (``"gap",  # ‖D_k‖_F``) or an annotated field. The note is the comment
    above the declaration, or that of a one-line entry naming several columns."""
    source = inspect.getsource(importlib.import_module(module))
    tree, lines = ast.parse(source), source.splitlines()
    first, node = _assignment(tree, name)
    if key is not None:
        (node,) = [v for k, v in zip(node.keys, node.values) if ast.literal_eval(k) == key]
        first = node.lineno
    tokens: dict[int, list[tokenize.TokenInfo]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        tokens.setdefault(tok.start[0], []).append(tok)
    comments, note = {}, []
    for line in range(node.lineno, node.end_lineno + 1):
        toks = tokens.get(line, [])
        comment = [t.string[1:].strip() for t in toks if t.type == tokenize.COMMENT]
        if not comment or comment[0].startswith(("fmt:", "noqa")):
            continue
        strings = [ast.literal_eval(t.string) for t in toks if t.type == tokenize.STRING]
        words = [t.string for t in toks if t.type in (tokenize.NAME, tokenize.OP)]
        if words[1:2] == [":"] and words[0] != "lambda":  # an annotated field
            comments[words[0]] = comment[0]
        elif len(strings) == 1:
            comments[strings[0]] = comment[0]
        elif node.lineno == node.end_lineno:
            note.append(comment[0])
    above = first - 2
    while above >= 0 and lines[above].strip().startswith("#"):
        note.insert(0, lines[above].strip()[1:].strip())
        above -= 1
    return comments, " ".join(note)


def labels() -> dict[str, str]:
    """The axis labels of the columns (``rankflow.plots.common.LABELS``)."""
    from rankflow.plots.common import LABELS

    return dict(LABELS)


def schema_docs(module: str) -> dict[str, str]:
    """``{dotted key: meaning}`` of a family's schema."""
    return {key: f.doc for _, key, f, _ in family_keys(module)}


def merged(*sources: Mapping[str, str]) -> dict[str, str]:
    """The first meaning of each column among ``sources``, then :data:`MEANINGS`."""
    out: dict[str, str] = {}
    for s in (*sources, MEANINGS):
        for k, v in s.items():
            out.setdefault(k, v)
    return out


def derived(columns: Iterable[str], meanings: Mapping[str, str]) -> dict[str, str]:
    """``meanings`` with those of the columns named after another: ``flow.X`` after
    ``optimizer.X`` (the same, of the flow) and ``X_stderr`` (standard error of X)."""
    out = dict(meanings)
    for c in columns:
        if c.startswith("flow.") and "optimizer." + c[5:] in out:
            out.setdefault(c, f"the same as `optimizer.{c[5:]}`, of the flow")
        if c.endswith("_stderr"):
            out.setdefault(c, f"standard error of `{c.removesuffix('_stderr')}`")
    return out


# --- the columns reference -------------------------------------------------------------


class Table(NamedTuple):
    """One results table: its heading, a paragraph, its columns and their meanings."""

    title: str
    text: str
    columns: Sequence[str]
    meanings: Mapping[str, str]

    def missing(self) -> list[str]:
        return [c for c in self.columns if not self.meanings.get(c)]

    def markdown(self) -> str:
        rows = ((code(c), md_text(self.meanings.get(c, ""))) for c in self.columns)
        return "\n\n".join([self.title, self.text, table(("column", "meaning"), rows)])


def status_meaning() -> dict[str, str]:
    from rankflow.engine.store import STATUS

    values = ", ".join(f"`{s}`" for s in STATUS)
    return {
        "status": f"{values}: a run that blows up (a non-finite state, or an entry beyond "
        "`solver.diverge_norm`) is `diverged` from that save on, with NaN observables; an "
        "adaptive solve out of `solver.max_steps` is `max_steps` from there on"
    }


def core_tables() -> list[Table]:
    """The core family's table (``rankflow.run``), at depth 2 and L ≥ 3, with a schedule."""
    from rankflow.core import config
    from rankflow.core.factors import depth_observable_names
    from rankflow.core.observables import OBSERVABLES
    from rankflow.core.program import STRUCT_COLUMNS
    from rankflow.numerics.schedules import schedule_columns

    docs = schema_docs("rankflow.core.config")
    meanings = merged(status_meaning(), docs, labels())
    ids = ("run_id", "path", "t", "status")
    deep = [
        "balance_gap_1 … balance_gap_{L−1}" if c == "balance_gap_1" else c
        for c in depth_observable_names(2)
    ]
    # Every schedule column, those of the wsd schedules included (their decay_steps).
    wsd = {"schedule": "wsd", "warmup": 0, "final_fraction": 0, "decay_steps": 1}
    sched = schedule_columns("dynamics", wsd)
    return [
        Table(
            "### Core sweeps: `DIR/results.parquet/`",
            "Written by `rankflow run` and `rankflow.run(..., out=DIR)`, returned by "
            "`rankflow.run` and read by `rankflow.load(DIR)`; one row per run × path × "
            "saved time: the run, its numeric keys, its structure (and every swept key, "
            "named by its dotted key), the observables and the singular values of W.",
            ids + config.NUMERIC_KEYS + STRUCT_COLUMNS + OBSERVABLES + ("sv_1 … sv_k",),
            meanings,
        ),
        Table(
            "#### Depth L ≥ 3 (`model.depth`)",
            "A product of L factors W = W_L ⋯ W_1 has the column `model.depth` and these "
            "observables in place of those above (`rankflow.core.factors.depth_observables`).",
            ("model.depth", *deep, "sv_1 … sv_k"),
            merged(DEPTH_MEANINGS, meanings),
        ),
        Table(
            "#### A learning-rate schedule (`dynamics.schedule` ≠ `constant`)",
            "A constant schedule adds no column; any other adds these, in the core and "
            "the attention tables alike.",
            (*sched, "lr_clock"),
            merged(docs),
        ),
    ]


def attention_tables() -> list[Table]:
    """The attention family's two tables (``rankflow.attention.run``)."""
    from rankflow.attention import config
    from rankflow.attention.observables import HEAD_COLUMNS
    from rankflow.attention.sweep import STRUCT_COLUMNS

    meanings = merged(status_meaning(), schema_docs("rankflow.attention.config"), labels())
    keys = ("run_id", "path", "t", "status") + config.NUMERIC_KEYS + STRUCT_COLUMNS
    per_head = (*HEAD_COLUMNS, "sv_1 … sv_{d_h}", "cross_gap_rel_0 … cross_gap_rel_{H−1}")
    return [
        Table(
            "### Attention: heads table `DIR/results.parquet/`",
            "Written by `rankflow attention train` and `rankflow.attention.run`, read by "
            "`rankflow.attention.load(DIR)`; one row per run × saved step × layer × head × "
            "pair. The observables are those of the core table, of the pair's factors A, "
            "B. A learning-rate multiplier `train.lr_*` is a column where it is swept or "
            "≠ 1; every swept key is a column.",
            (*keys, "layer", "head", "pair", *per_head),
            meanings,
        ),
        Table(
            "### Attention: loss table `DIR/loss.parquet/`",
            "One row per run × saved step, with the run columns of the heads table.",
            (*keys, "train_loss", "val_loss", "train_accuracy", "val_accuracy"),
            meanings,
        ),
    ]


def compare_tables() -> list[Table]:
    """``rankflow compare``'s tables (``rankflow.compare.COLUMNS``, the setting columns
    once) and those of a compare sweep (``SWEEP_COLUMNS``)."""
    from rankflow.compare import COLUMNS, SWEEP_COLUMNS
    from rankflow.compare.tables import NOISE_SETTING, SETTING

    docs = schema_docs("rankflow.core.config")
    _, setting = declared("rankflow.compare.tables", "SETTING")
    _, noise = declared("rankflow.compare.tables", "NOISE_SETTING")
    out = [
        Table(
            "### `rankflow compare`: the setting",
            md_text(setting.rstrip(".")) + "; the first columns of every table of `DIR/`.",
            SETTING,
            merged(docs),
        ),
        Table(
            "#### The SME pairs' setting",
            md_text(noise.rstrip(".")) + ", after the setting.",
            NOISE_SETTING,
            docs,
        ),
    ]
    declarations = {name: declared("rankflow.compare.tables", "COLUMNS", name) for name in COLUMNS}
    every = merged(*(comments for comments, _ in declarations.values()))
    for name, (comments, text) in declarations.items():
        own = [c for c in COLUMNS[name] if c not in SETTING + NOISE_SETTING]
        title = f"#### `{name}.parquet` (`{name}.csv`)"
        out.append(
            Table(title, md_text(text), own, derived(own, merged(comments, every, labels())))
        )
    _, text = declared("rankflow.compare.sweep", "SWEEP_COLUMNS")
    out.append(
        Table(
            "### `rankflow compare` over a sweep: `sweep.parquet`",
            md_text(text) + " Every other table of a sweep has `point` and the `sweep.KEY` "
            "columns first too.",
            ("point", "sweep.KEY"),
            merged(),
        )
    )
    for name, columns in SWEEP_COLUMNS.items():
        own, _ = declared("rankflow.compare.sweep", "SWEEP_COLUMNS", name)
        if name == "weak":  # one pair of columns per observable; loss is the example
            columns = [c for c in columns if not c.startswith("weak_order.")]
            columns.append("weak_order.OBSERVABLE")
        meanings = derived(columns, merged(own, declarations[name][0], docs))
        text = f"Each point's summary of its `{name}` table, where the point has one."
        out.append(Table(f"#### From `{name}`", text, columns, meanings))
    return out


def _series_columns() -> tuple[list[str], list[str]]:
    """The columns of ``fit_series``'s two tables (``rates``, ``layer_rates``), fitted
    to a series of one unit over two steps whose gap halves."""
    import numpy as np
    import pandas as pd

    from rankflow.inspect import fit_series
    from rankflow.inspect._series import UNIT_KEYS

    unit = dict.fromkeys(UNIT_KEYS, 0) | {"pair": "qk", "theory": True}
    stat = "balance_gap_rel"
    rows = [unit | {"step": s, stat: g, f"null_{stat}": 1.0} for s, g in ((0, 1.0), (1, 0.5))]
    exponents = {"gd": np.array([0.0, 1.0]), "gf": np.array([0.0, 1.0])}
    rates, layer = fit_series(pd.DataFrame(rows), stat, exponents)
    return list(rates.columns), [c for c in layer.columns if c not in rates.columns]


def _gram_columns() -> list[str]:
    """The columns of the ``grams`` table, from the Grams of 2×2 identity factors."""
    import numpy as np

    from rankflow.inspect import Factor
    from rankflow.inspect._run import _gram_rows

    f = Factor.of(np.eye(2))
    return list(_gram_rows(0, "qk", "head", 0, 1, f, f, f)[0].columns)


def inspect_tables() -> list[Table]:
    """``rankflow inspect``'s tables: heads, grams, spectra, and a series' tables."""
    from rankflow.inspect import SPECTRUM_COLUMNS, STATISTICS
    from rankflow.inspect._run import ID_COLUMNS

    stats, _ = declared("rankflow.inspect._stats", "STATISTICS")
    spectra, _ = declared("rankflow.inspect._spectra", "SPECTRUM_COLUMNS")
    _, rand = declared("rankflow.inspect._spectra_layers", "RAND_COLUMNS")
    rand_columns = importlib.import_module("rankflow.inspect._spectra_layers").RAND_COLUMNS
    rates, layer_rates = _series_columns()
    return [
        Table(
            "### `rankflow inspect`: `heads.parquet` (`heads.csv`)",
            "Written by `rankflow inspect` and `rankflow.inspect.inspect_checkpoint`; one "
            "row per layer × pair × unit: its identity, each statistic of the pair, and "
            "the same statistics of the null pairing.",
            (*ID_COLUMNS, *STATISTICS, "null_STATISTIC"),
            merged(stats, {"head": "attention head of the layer, from 0 (−1 on a group's row)"}),
        ),
        Table(
            "### `grams.parquet`",
            "The Gram entries (i ≤ j) of the units shown in `scatter.png` (`--scatter`).",
            _gram_columns(),
            merged(),
        ),
        Table(
            "### `rankflow inspect --spectra`: `spectra.parquet` (`spectra.csv`)",
            "One row per layer × matrix × head (`head` −1: the layer's whole matrix). "
            + md_text(rand.rstrip("."))
            + ": "
            + ", ".join(code(c) for c in rand_columns)
            + ".",
            ("layer", "matrix", "head", "group", *SPECTRUM_COLUMNS, "rand_STATISTIC"),
            merged(spectra),
        ),
        Table(
            "### Checkpoint series: `heads.parquet`, `rates.parquet`, `layer_rates.parquet`",
            "`heads.parquet` is every checkpoint's heads table with `step` and "
            "`checkpoint` first; `rates.parquet` (`rates.csv`) has one row per unit "
            "(the heads table's identity columns, then the fit); `layer_rates.parquet` one "
            "row per layer and pair over the theory units (`layer`, `pair`, `statistic`, "
            "the predictions, and these).",
            ("step", "checkpoint", *rates, *layer_rates),
            merged(),
        ),
    ]


def reproduce_tables() -> list[Table]:
    """``rankflow reproduce``'s claims table (the fields of ``Claim``)."""
    from rankflow.reproduce._common import Claim

    comments, _ = declared("rankflow.reproduce._common", "Claim")
    return [
        Table(
            "### `rankflow reproduce`: `DIR/tables/claims.csv`",
            "One row per claim of `DIR/report.md`. The other tables of `DIR/tables/` are "
            "each experiment's own, from runs with the columns above.",
            [f.name for f in dataclasses.fields(Claim)],
            merged(comments),
        )
    ]


def column_tables() -> dict[str, list[Table]]:
    """Every results table, by section of the columns page."""
    return {
        "Sweeps": core_tables() + attention_tables(),
        "Comparisons": compare_tables(),
        "Inspections": inspect_tables(),
        "Reproduction": reproduce_tables(),
    }


def columns_reference() -> str:
    """Every results table's columns, as Markdown; a column without a meaning is
    logged as a warning (which fails ``mkdocs build --strict``)."""
    out = []
    for heading, tables in column_tables().items():
        out.append(f"## {heading}")
        for t in tables:
            for c in t.missing():
                LOG.warning("columns: %s has no meaning for %r (docs/hooks.py)", t.title, c)
            out.append(t.markdown())
    return "\n\n".join(out) + "\n"


MARKERS = {CONFIG_MARKER: config_reference, COLUMNS_MARKER: columns_reference}

# --- notebooks ----------------------------------------------------------------------------

# A page's marker naming a notebook by its path from the repository's root.
NOTEBOOK_MARKER = re.compile(r"<!-- rankflow:notebook ([\w./-]+\.ipynb) -->")


def notebook_markdown(path: Path) -> str:
    """The cells of the notebook at ``path`` as Markdown: markdown cells as written,
    code cells as Python blocks fenced by more backticks than any run in their source.
    Outputs are not shown (the committed notebook has none)."""
    cells = []
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]).strip("\n")
        if cell["cell_type"] == "code":
            fence = "`" * max(3, 1 + max(map(len, re.findall("`+", source)), default=0))
            source = f"{fence}python\n{source}\n{fence}"
        cells.append(source)
    return "\n\n".join(cells) + "\n"


def page_notebooks(docs: Path) -> dict[str, Path]:
    """``{site path: notebook}`` of every notebook a page of ``docs`` names by its marker,
    each published in the page's folder under its own name."""
    out = {}
    for page in sorted(docs.rglob("*.md")):
        for name in NOTEBOOK_MARKER.findall(page.read_text()):
            src = (docs.parent / name).resolve()
            out[(page.parent.relative_to(docs) / src.name).as_posix()] = src
    return out


# --- mkdocs events ---------------------------------------------------------------------


def examples_nav(nav: list, docs: Path = DOCS) -> list:
    """``nav`` with its Examples section listing its own entries (``examples/index.md``)
    and then every other page of ``docs/examples/``, by file name."""
    pages = sorted(p.relative_to(docs).as_posix() for p in (docs / "examples").glob("*.md"))
    out = []
    for entry in nav:
        if isinstance(entry, dict) and "Examples" in entry:
            listed = entry["Examples"]
            listed = list(listed) if isinstance(listed, list) else [listed]
            entry = {"Examples": listed + [p for p in pages if p not in listed]}
        out.append(entry)
    return out


def on_config(config, **kwargs):
    if config["nav"] is not None:
        config["nav"] = examples_nav(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    for uri, src in page_notebooks(Path(config["docs_dir"])).items():
        files.append(File.generated(config, uri, abs_src_path=str(src)))
    return files


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    for marker, generate in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    root = Path(config["docs_dir"]).parent
    return NOTEBOOK_MARKER.sub(lambda m: notebook_markdown(root / m[1]), markdown)
