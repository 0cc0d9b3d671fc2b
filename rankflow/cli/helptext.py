"""The epilogues of the sweep commands' ``--help`` (``run``, ``attention train``), made
from what the code declares, so that they cannot drift from it: every key of the family's
schema (its default, meaning and, for an enumerated key, every allowed value), the
columns of the results tables, the ``RANKFLOW_*`` environment variables and how ``--set``
sets a key or a sweep axis. Printed as written (``RawDescriptionHelpFormatter``),
wrapped here to :data:`WIDTH` columns."""

from __future__ import annotations

import json
import shlex
import textwrap
from collections.abc import Iterable, Iterator
from typing import Any

from ..config.fields import MAX_RUNS, Field, Sections, parse_set
from ..engine import devices
from ..engine.store import STATUS

__all__ = [
    "ENVIRONMENT",
    "SWEEP_EXAMPLE",
    "WIDTH",
    "attention_epilog",
    "epilog",
    "key_rows",
    "keys_help",
    "run_epilog",
    "toml_literal",
]

WIDTH = 79
# Every RANKFLOW_* environment variable rankflow reads, with what it sets.
ENVIRONMENT = (
    (devices.ENV, "CPU devices JAX shows: N, or all (default: one per physical core)"),
    ("RANKFLOW_EIGEN_THREADS", "any value: keep XLA:CPU's multi-threaded Eigen kernels"),
    (
        "RANKFLOW_CACHE_DIR",
        "folder of JAX's compilation cache (default ~/.cache/rankflow/jax; off: none)",
    ),
    ("RANKFLOW_MAX_RUNS", f"the largest sweep run (default {MAX_RUNS:,})"),
    ("RANKFLOW_MAX_STRUCTURES", "the most structures (programs) a sweep may have (default 1,024)"),
    ("RANKFLOW_MAX_SAVES", "the most saves one run may write (default 100,000)"),
    ("RANKFLOW_MAX_STATES_GIB", "the most GiB of factors save.states may write (default 16)"),
    (
        "RANKFLOW_PROGRESS_INTERVAL",
        "seconds without a line after which a command whose stderr is not a terminal "
        "prints 'still running' (default 30)",
    ),
)
# The --set line of a sweep axis in every epilogue (tests parse it as a shell would).
SWEEP_EXAMPLE = "--set 'sweep.dynamics.lam=[0.01,0.1]'"


def _wrap(text: str, indent: str, more: str) -> list[str]:
    """``text`` wrapped to WIDTH: the first line after ``indent``, the others ``more``;
    never inside a word (a value such as ``warmup_cosine`` stays whole)."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=more,
        break_long_words=False,
        break_on_hyphens=False,
    )


def toml_literal(value: Any) -> str:
    """A default as it is written in TOML (and in ``--set``)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    return repr(value)


def key_rows(
    schema: Sections, numeric_keys: Iterable[str]
) -> Iterator[tuple[str, str, Field, bool]]:
    """``(section, dotted key, field, numeric)`` of every key of ``schema``, in schema order:
    what :func:`keys_help` prints, and what the documentation's config reference
    (``docs/hooks.py``) tabulates."""
    numeric = set(numeric_keys)
    for sec, fields in schema.items():
        for name, f in fields.items():
            key = f"{sec}.{name}" if sec else name
            yield sec, key, f, key in numeric


def keys_help(schema: Sections, numeric_keys: Iterable[str]) -> str:
    """Every key of ``schema``, one TOML table after another: ``key = default: meaning``,
    numeric keys marked ``*``, and below an enumerated key ``one of: a, b, …``."""
    lines = [
        "config keys, by TOML table (key = default: meaning); keys marked * are numeric:",
        "sweeping them shares one compiled program. Enumerated keys list their values.",
    ]
    last = None
    for sec, key, f, numeric in key_rows(schema, numeric_keys):
        if sec != last:
            lines.append("")
            last = sec
        star = "*" if numeric else " "
        lines += _wrap(f"{key} = {toml_literal(f.default)}: {f.doc}", f"  {star}", "      ")
        if f.choices is not None:
            lines += _wrap(f"one of: {', '.join(f.choices)}", "      ", "        ")
    return "\n".join(lines)


def _section(title: str, entries: Iterable[tuple[str, str]]) -> list[str]:
    """A titled block of ``name: text`` entries, each wrapped."""
    lines = ["", *_wrap(title, "", "")]
    for name, text in entries:
        lines += _wrap(f"{name}: {text}" if text else name, "  ", "      ")
    return lines


def set_help(schema: Sections) -> list[str]:
    """How ``--set`` sets a key and a sweep axis (an example ``dynamics.kind``: its first
    value other than the default)."""
    kind = schema["dynamics"]["kind"]
    other = next(k for k in kind.choices or () if k != kind.default)
    ((key, values),) = parse_set(shlex.split(SWEEP_EXAMPLE)[1:]).items()
    in_toml = f"{json.dumps(key.removeprefix('sweep.'))} = {toml_literal(values)}"
    return [
        "",
        *_wrap(
            "--set KEY=VALUE (repeatable) sets a key, VALUE a TOML literal (a bare word is "
            "a string); --set sweep.KEY=[VALUE, ...] sweeps it:",
            "",
            "",
        ),
        f"  --set dynamics.lam=0.1 --set dynamics.kind={other}",
        f"  {SWEEP_EXAMPLE}",
        *_wrap(
            f"(quoted for the shell) is `{in_toml}` in the config's [sweep] table; a "
            "sweep runs the product of its lists",
            "      ",
            "      ",
        ),
    ]


def epilog(config, columns: list[str]) -> str:
    """A family's epilogue: its keys (``config``: its config module, with ``SCHEMA`` and
    ``NUMERIC_KEYS``), the ``columns`` of its tables, ``--set`` and the ``RANKFLOW_*``
    environment variables (:data:`ENVIRONMENT`)."""
    body = [*columns, *set_help(config.SCHEMA), *_section("environment variables:", ENVIRONMENT)]
    return keys_help(config.SCHEMA, config.NUMERIC_KEYS) + "\n" + "\n".join(body)


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


def run_epilog() -> str:
    """``rankflow run --help``'s epilogue: the core family's keys, its table's columns
    (:mod:`rankflow.core.program`'s, :data:`rankflow.core.observables.OBSERVABLES`),
    ``--set`` and the environment."""
    from ..core import config
    from ..core.factors import depth_observable_names
    from ..core.observables import OBSERVABLES
    from ..core.program import STRUCT_COLUMNS

    deep = [
        "balance_gap_1 … balance_gap_{L−1}" if c == "balance_gap_1" else c
        for c in depth_observable_names(2)
    ]
    columns = _section(
        "results columns (DIR/results.parquet/, read by rankflow.load(DIR); one row per "
        "run × path × saved time; meanings: docs/reference/columns.md):",
        [
            (f"run_id, path, t, status ({_names(STATUS)})", ""),
            ("numeric keys", "every key marked * above"),
            ("structure", f"{_names(STRUCT_COLUMNS)}, and every swept key"),
            ("observables", _names(OBSERVABLES)),
            ("sv_1 … sv_k", "singular values of W, descending, k = min(m, n, r)"),
            ("model.depth L ≥ 3", f"model.depth; observables {_names(deep)}"),
            (
                "dynamics.schedule ≠ constant",
                "dynamics.schedule, .warmup, .final_fraction, lr_clock",
            ),
        ],
    )
    return epilog(config, columns)


def attention_epilog() -> str:
    """``rankflow attention train --help``'s epilogue: the attention family's keys, its
    two tables' columns (:mod:`rankflow.attention.sweep`'s), ``--set`` and the
    environment."""
    from ..attention import config
    from ..attention.observables import HEAD_COLUMNS, PAIRS
    from ..attention.sweep import STRUCT_COLUMNS

    run_columns = "run_id, path, t, status"
    columns = _section(
        "results columns (read by rankflow.attention.load(DIR); meanings: "
        "docs/reference/columns.md):",
        [
            (
                "DIR/results.parquet/ (heads)",
                f"one row per run × saved step × layer × head × pair: {run_columns}, "
                f"layer, head, pair ({_names(PAIRS)}), the numeric keys (*; "
                f"train.lr_* where swept or ≠ 1), {_names(STRUCT_COLUMNS)}, every swept "
                f"key, {_names(HEAD_COLUMNS)}, sv_1 … sv_{{d_h}}",
            ),
            (
                "DIR/loss.parquet/ (loss)",
                f"one row per run × saved step: {run_columns}, the same keys, train_loss, "
                "val_loss (images: train_accuracy, val_accuracy)",
            ),
            (
                "dynamics.schedule ≠ constant",
                "dynamics.schedule, .warmup, .final_fraction, lr_clock in both",
            ),
        ],
    )
    return epilog(config, columns)
