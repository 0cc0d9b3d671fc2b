"""The config rules of ``model.depth`` (products of L factors, :mod:`rankflow.core.factors`):
checks of ``model.r`` and ``init.pairs``, and the warning for a width below the target's
rank. Pure Python, used by :mod:`rankflow.core.config` before anything compiles."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..config.fields import INT, LIST, ConfigError, Field, ge
from .problems import problem_class

__all__ = ["MODEL_FIELDS", "PAIRS_FIELD", "positive_widths", "validate_depth", "warn_narrow"]


def positive_widths(r) -> str | None:
    """Check of ``model.r``: a positive integer, or a non-empty list of them."""
    widths = r if isinstance(r, list) else [r]
    if not widths:
        return "must be an integer ≥ 1 or a non-empty list of them"
    return None if all(w >= 1 for w in widths) else "must be ≥ 1"


# The schema of the core family's [model] section, and init.pairs.
MODEL_FIELDS = {
    "r": Field(
        INT + LIST,
        5,
        "inner dimension: A is m×r, B is n×r; at depth L every inner width, or a list of "
        "the L − 1 widths d_1 … d_{L−1}",
        positive_widths,
        items=(int,),
    ),
    "depth": Field(
        INT,
        2,
        "factors L of W = W_L ⋯ W_1 (W_j is d_j×d_{j−1}), weight decay on each; 2 is W = ABᵀ",
        ge(2),
    ),
}

PAIRS_FIELD = Field(
    LIST,
    None,
    "imbalanced, depth L: the adjacent pairs j whose D_j = W_{j+1}ᵀW_{j+1} − "
    "W_jW_jᵀ start with ‖D_j‖_F = init.imbalance (the others balanced; default: "
    "every pair 1 … L − 1)",
    optional=True,
    items=(int,),
)


def validate_depth(model: Mapping[str, Any], init: Mapping[str, Any]) -> None:
    """The cross-field rules of ``model.depth``: the number of widths in a ``model.r``
    list, and ``init.pairs`` (imbalanced starts only, pairs of this depth)."""
    depth, r = model["depth"], model["r"]
    if isinstance(r, list) and len(r) != depth - 1:
        raise ConfigError(
            f"model.r: depth {depth} has {depth - 1} inner width{'s' * (depth > 2)}; give "
            f"one integer or a list of {depth - 1}, got {len(r)} values {r}"
        )
    pairs = init["pairs"]
    if pairs is None:
        return
    if init["kind"] != "imbalanced":
        raise ConfigError(f"init.pairs: only for init.kind = 'imbalanced', not {init['kind']!r}")
    allowed = list(range(1, depth))
    if not pairs or any(j not in allowed for j in pairs) or len(set(pairs)) != len(pairs):
        raise ConfigError(
            f"init.pairs: depth {depth} has the adjacent pairs "
            f"{', '.join(map(str, allowed))} (D_j = W_{{j+1}}ᵀW_{{j+1}} − W_jW_jᵀ); give "
            f"distinct ones of them, got {pairs}"
        )


def warn_narrow(points: list[Mapping[str, Any]]) -> None:
    """Say once when an inner width at depth L ≥ 3 is below the target's rank: the
    product's rank is at most the narrowest width, so a minimiser of higher rank is out
    of reach (a choice a study may make on purpose: a warning, not an error)."""
    narrow = set()
    for p in points:
        prob, model = p["problem"], p["model"]
        kind = problem_class(prob["kind"])
        if model["depth"] == 2 or not kind.has_target:
            continue
        rank = kind.target_rank_of(prob)
        width = min(model["r"]) if isinstance(model["r"], list) else model["r"]
        if width < rank:
            narrow.add((width, rank))
    for width, rank in sorted(narrow):
        warnings.warn(
            f"model.r: an inner width {width} < the target's rank {rank}: W = W_L ⋯ W_1 has "
            f"rank ≤ {width} and cannot reach a minimiser of higher rank",
            stacklevel=2,
        )
