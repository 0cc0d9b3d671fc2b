"""T10 floor in the fit's table: minibatch SGD's predicted stationary mean balance
``E[D]`` (:func:`rankflow.theory.minibatch_balance_floor`) at a run's own saved states,
against the measured ``D`` over the same saves and paths (docs/theory.md, T10 floor).

The prediction is of the *mean matrix*: over the floor phase, ``‖mean D*‖_F`` against
``‖mean D‖_F``, not the table's ``balance_gap`` (``‖D‖_F`` per path, whose mean is
larger: D fluctuates about its mean). rankflow's ``sgd`` samples without replacement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import theory

__all__ = ["FLOOR_COLUMNS", "floor_phase", "minibatch_floor"]

FLOOR_COLUMNS = (
    "floor_predicted", "floor_measured", "floor_ratio", "floor_se", "floor_t_min",
    "floor_from", "floor_note",
)  # fmt: skip
NO_STATES = "no states (save.states = false)"


def _none(note: str, phase: str = "") -> dict[str, Any]:
    """The floor columns where there is no prediction, with the reason."""
    nan = float("nan")
    return dict(zip(FLOOR_COLUMNS, (nan, nan, nan, nan, nan, phase, note), strict=True))


def floor_phase(t_max: float, end: str, t1: float) -> tuple[float, str]:
    """The saves a floor is averaged over: from the fit's window end ``t_max`` when the
    window ends at ``floor``, else the run's last half (from ``t1/2``); the start and
    its name (the ``floor_from`` column)."""
    if end == "floor" and np.isfinite(t_max) and t_max < t1:
        return float(t_max), "after the window (end: floor)"
    return 0.5 * float(t1), "last half of the run"


_JITTED: dict[str, Any] = {}


def _floors_of(program):
    """Jitted ``(A, B, data, η, λ, b, replace) → D*`` over ``(paths, saves)`` states:
    the per-sample gradients ``g_k = ∂ℓ_k/∂W`` at ``W = ABᵀ`` (N×m×n), then T10's floor
    (one per program structure, ``program.key``)."""
    if program.key in _JITTED:
        return _JITTED[program.key]

    def one(a, b, data, eta, lam, batch, replace):
        g = jax.jacrev(program.problem.sample_losses)(a @ b.T, data)
        gbar = g.mean(0)
        delta = g - gbar[None]
        return theory.minibatch_balance_floor(a, b, gbar, delta, eta, lam, batch, replace)

    over = jax.vmap(jax.vmap(one, (0, 0) + (None,) * 5), (0, 0) + (None,) * 5)
    return _JITTED.setdefault(program.key, jax.jit(over, static_argnums=(6,)))


def minibatch_floor(
    paths: Sequence, point: Mapping[str, Any], *, t_from: float, replace: bool = False
) -> dict[str, Any]:
    """T10 floor of one ``sgd`` run: its paths' saved states (``paths``, each a
    :class:`rankflow.engine.states.RunStates` with ``A`` ``(saves, m, r)``, ``B``
    ``(saves, n, r)``) at the saves ``t ≥ t_from``, against the run's resolved config
    ``point`` (one point of :func:`rankflow.core.config.expand`). ``replace``: the
    with-replacement scale (rankflow's ``sgd`` samples without).

    Returns the floor columns (:data:`FLOOR_COLUMNS`): ``floor_predicted`` ``‖mean
    D*‖_F`` (D* of :func:`rankflow.theory.minibatch_balance_floor` at each state; the
    mean over saves and paths), ``floor_measured`` ``‖mean D‖_F`` over the same states,
    ``floor_ratio`` (predicted/measured), ``floor_se`` (the standard error over paths of
    ``‖mean (D − D*)‖_F``: the root sum of its entries' squared SEs; NaN for one path),
    ``floor_t_min`` (the first save used); NaN with the reason in ``floor_note``
    otherwise (``not sgd``, ``λ = 0``, a schedule, depth ≥ 3, no saves from ``t_from``).

    Examples:
        >>> import rankflow
        >>> from rankflow.core import config
        >>> from rankflow.fitting import minibatch_floor
        >>> cfg = rankflow.resolve({"x64": True, "problem": {"kind": "regression", "m": 4,
        ...     "n": 2, "rank": 1, "samples": 16, "noise": 0.5}, "model": {"r": 2},
        ...     "dynamics": {"kind": "sgd", "eta": 0.1, "lam": 0.1, "batch": 4},
        ...     "save": {"t1": 400, "num": 41, "states": True}})
        >>> states = rankflow.run(cfg).attrs["states"]
        >>> row = minibatch_floor([states[0]], config.expand(cfg)[0], t_from=200)
        >>> row["floor_t_min"], row["floor_note"], bool(row["floor_predicted"] > 0)
        (200.0, '', True)
    """
    d = point["dynamics"]
    if d["kind"] != "sgd":
        return _none("not sgd")
    if not d["lam"] > 0:
        return _none("λ = 0")
    if d.get("schedule", "constant") != "constant":
        return _none("under a schedule: T10's floor is of a constant η")
    if any(set(run.factors) != {"A", "B"} for run in paths):
        return _none("depth ≥ 3: T10's floor is of one pair W = ABᵀ")
    t = np.asarray(paths[0].t)
    sel = (t >= t_from) & np.all([np.asarray(r.status).astype(str) == "ok" for r in paths], 0)
    if not sel.any():
        return _none(f"no saves from t = {t_from:g}")
    from ..core.program import params_of, program_for

    program = program_for(point)
    with jax.enable_x64(bool(point["x64"])):
        A = jnp.asarray(np.stack([r.A[sel] for r in paths]))  # (paths, saves, m, r)
        B = jnp.asarray(np.stack([r.B[sel] for r in paths]))
        data = program.data(params_of(point, 0))  # the problem's data: the same every path
        star = _floors_of(program)(A, B, data, d["eta"], d["lam"], d["batch"], replace)
        D = jnp.swapaxes(A, -1, -2) @ A - jnp.swapaxes(B, -1, -2) @ B
        measured, predicted = np.asarray(D.mean(1)), np.asarray(star.mean(1))
    return _compared(measured, predicted, float(t[sel][0]))


def _compared(measured: np.ndarray, predicted: np.ndarray, t_min: float) -> dict[str, Any]:
    """The floor columns from the per-path time means of D and D* ``(paths, r, r)``."""
    diff = measured - predicted
    n = len(diff)
    se = float(np.sqrt(np.sum(diff.var(0, ddof=1) / n))) if n > 1 else float("nan")
    floor = float(np.linalg.norm(predicted.mean(0)))
    level = float(np.linalg.norm(measured.mean(0)))
    values = (floor, level, floor / level if level > 0 else float("nan"), se, t_min, "", "")
    return dict(zip(FLOOR_COLUMNS, values, strict=True))


class RunFloors:
    """The floor columns of a fit's runs from ``source`` (a results directory, or a
    table whose ``attrs["states"]`` holds its states) and its config ``cfg``; the states
    and the points are read once, on the first ``sgd`` run that needs them."""

    def __init__(self, source, cfg: Mapping[str, Any]):
        self.source, self.cfg = source, cfg
        self._states: Any = None
        self._points: Any = None

    def states(self):
        if self._states is None:
            if isinstance(self.source, Path | str):
                from ..engine.states import load_states
                from ..engine.store import STATES

                has = (Path(self.source) / STATES).exists()
                self._states = load_states(self.source) if has else False
            else:
                self._states = self.source.attrs.get("states") or False
        return self._states

    def point(self, run_id: int):
        if self._points is None:
            from ..core import config as config_lib

            self._points = config_lib.expand(config_lib.resolve(dict(self.cfg)))
        return self._points[int(run_id)]

    def row(self, run_id, kind: str, lam: float, t_max: float, end: str, t1: float):
        """The floor columns of run ``run_id`` (its fit's window ``t_max``, ``end``; its
        last save ``t1``): over :func:`floor_phase`'s saves, or NaN with the reason."""
        start, phase = floor_phase(t_max, end, t1)
        if kind != "sgd" or not lam > 0:
            return _none("not sgd" if kind != "sgd" else "λ = 0", phase)
        if run_id is None or not self.states():
            return _none(NO_STATES, phase)
        if not self.cfg or self.cfg.get("family") not in (None, "core"):
            return _none("no config of the run (fit(df, config=...))", phase)
        states = self.states()
        paths = [states[int(run_id), p] for p in sorted(p for r, p in states if r == run_id)]
        out = minibatch_floor(paths, self.point(run_id), t_from=start)
        return {**out, "floor_from": phase}
