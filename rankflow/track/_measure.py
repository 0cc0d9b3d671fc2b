"""The statistics of every unit of every pair: a jittable function of the parameters.

Per unit (head) of each pair the columns of docs/theory.md's observables table that do
not need a loss (``rankflow.attention``'s per-head columns, the same function): L2
penalty, nuclear norm, their gap ``frob_minus_nuc`` (L2 − nuclear), the balance gap
``‖AᵀA − BᵀB‖_F``, its trace and nuclear norm, the scale-free ``balance_gap_rel``,
effective, stable and numerical rank of the product, and its singular values.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..core.observables import OBSERVABLES, observables
from ._pairs import Pair, flat_params

__all__ = ["COLUMNS", "measure", "rows"]

# The per-unit columns, in table order (``sv_1 …`` follow them).
COLUMNS = tuple(c for c in OBSERVABLES if c not in ("loss", "l2_loss", "star_loss"))


def measure(params, pairs: Sequence[Pair], rank_tol: float = 1e-3) -> list[dict[str, jax.Array]]:
    """Per pair (in ``pairs`` order), ``{column: (units,)}`` and ``"sv"`` (units, r):
    jittable in ``params`` (``pairs`` and ``rank_tol`` static).

    Examples:
        A balanced pair (B = A) of one unit: balance gap 0, L2 penalty = nuclear norm (T1).

        >>> import numpy as np
        >>> from rankflow.track import Factor, Pair, measure
        >>> A = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
        >>> pair = Pair("w", 0, Factor("A"), Factor("B"))
        >>> out = measure({"A": A, "B": A}, [pair])[0]
        >>> [round(float(out[c][0]), 6) for c in ("balance_gap", "frob_minus_nuc", "nuclear_norm")]
        [0.0, 0.0, 5.0]
    """
    flat = flat_params(params)
    out = []
    zero = jnp.zeros(())
    for pair in pairs:
        A, B = pair.factors(flat)
        dtype = jnp.result_type(A.dtype, B.dtype, jnp.float32)
        zero = jnp.zeros((), dtype)
        one = functools.partial(observables, loss=zero, lam=zero, rank_tol=rank_tol)
        res = jax.vmap(one)(A.astype(dtype), B.astype(dtype))
        out.append({k: res[k] for k in COLUMNS + ("sv",)})
    return out


def rows(step: int, pairs: Sequence[Pair], measured: Sequence[dict]) -> pd.DataFrame:
    """The tidy rows of one measurement: ``t`` (the step), ``layer``, ``head`` (the unit),
    ``pair``, ``status`` (``diverged`` where a column is not finite), the columns and
    ``sv_1 …``.

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import Factor, Pair, measure, rows
        >>> pair = Pair("w", 3, Factor("A"), Factor("B"))
        >>> p = {"A": np.eye(2), "B": 2 * np.eye(2)}
        >>> df = rows(10, [pair], measure(p, [pair]))
        >>> df[["t", "layer", "head", "pair", "status", "balance_gap"]].round(4)
            t  layer  head pair status  balance_gap
        0  10      3     0    w     ok       4.2426
    """
    frames = []
    for pair, cols in zip(pairs, measured, strict=True):
        cols = {k: np.asarray(v, np.float64) for k, v in cols.items()}
        units = len(cols[COLUMNS[0]])
        df = pd.DataFrame(
            {"t": step, "layer": pair.layer, "head": np.arange(units), "pair": pair.name}
        )
        finite = np.all([np.isfinite(cols[c]) for c in COLUMNS], axis=0)
        df["status"] = np.where(finite, "ok", "diverged")
        for c in COLUMNS:
            df[c] = cols[c]
        for j in range(cols["sv"].shape[1]):
            df[f"sv_{j + 1}"] = cols["sv"][:, j]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)
