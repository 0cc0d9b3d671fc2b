"""The options of a comparison (``--set compare.KEY=VALUE`` or a ``[compare]`` table):
their table, their validation, and their separation from the config proper."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config.fields import ConfigError
from ..core.vocabulary import MAX_STEPS

# The most halvings of η: the order's longest run takes order_t1 · 2^halvings steps, at
# most MAX_STEPS = 2³¹ − 1 (with order_t1 ≥ 1).
MAX_HALVINGS = 30

__all__ = ["MAX_HALVINGS", "OPTIONS", "Options", "parse_options", "split_options"]


@dataclass(frozen=True)
class Options:
    paths: int = 64
    window_start: int = 0
    window: int = 50
    halvings: int = 3
    order_t1: int | None = None


# key: (types, check, meaning); defaults are those of ``Options``.
OPTIONS: dict[str, tuple[tuple[type, ...], Callable[[Any], bool], str]] = {
    "paths": (
        (int,),
        lambda v: v >= 2,
        "Monte Carlo paths of sgd / sgd_gaussian and its flow when dynamics.paths = 1 "
        "(per η for the weak order; ≥ 2)",
    ),
    "window_start": ((int,), lambda v: v >= 0, "gd: first step of the contraction window"),
    "window": ((int,), lambda v: v >= 1, "gd: steps in the contraction window (≥ 1)"),
    "halvings": (
        (int,),
        lambda v: 1 <= v <= MAX_HALVINGS,
        "deterministic pairs and SME pairs (sgd; sgd_gaussian with noise = gradient): "
        f"η is halved this many times for the (weak) order (an integer in [1, {MAX_HALVINGS}]: "
        "each halving doubles the horizon in steps)",
    ),
    "order_t1": (
        (int,),
        lambda v: 1 <= v <= MAX_STEPS,
        "horizon of the order measurement in steps at the config's η "
        f"(default save.t1; an integer in [1, {MAX_STEPS}], a 32-bit step count); it is "
        "doubled with each halving",
    ),
}


def parse_options(table: Mapping[str, Any]) -> Options:
    """The :class:`Options` of a ``[compare]`` table (keys without the ``compare.``
    prefix), each checked against :data:`OPTIONS`."""
    values = {}
    for key, value in table.items():
        if key not in OPTIONS:
            raise ConfigError(f"compare.{key}: unknown key; compare keys are {', '.join(OPTIONS)}")
        types, check, doc = OPTIONS[key]
        if isinstance(value, bool) or not isinstance(value, types) or not check(value):
            raise ConfigError(f"compare.{key}: {doc}; got {value!r}")
        values[key] = value
    return Options(**values)


def split_options(
    raw: dict[str, Any], overrides: Mapping[str, Any] | None
) -> tuple[Options, dict[str, Any]]:
    """The compare options apart from the config proper (which ``config`` validates):
    pops ``raw``'s ``[compare]`` table, and returns the options it and the
    ``compare.*`` overrides set, with the other overrides."""
    table = raw.pop("compare", None) or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"compare: expected a table, got {table!r}")
    table = dict(table)
    rest = {}
    for key, value in (overrides or {}).items():
        if key.startswith("compare."):
            table[key[len("compare.") :]] = value
        else:
            rest[key] = value
    return parse_options(table), rest
