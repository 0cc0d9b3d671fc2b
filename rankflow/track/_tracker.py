"""The tracker: measure every k steps inside a user's own training loop, write rankflow's
tidy table, and put the theory's prediction beside the measurement.

    tracker = rankflow.track.Tracker("runs/mine", every=100,
                                     optimizer=rankflow.track.Optimizer("sgd", 0.1, 0.01))
    for step in range(steps):
        params, opt_state = train_step(params, opt_state, batch)
        tracker.log(step, params)          # measures when step % every == 0
    summary = tracker.close()              # the prediction table; the folder is final

The folder is a rankflow results directory (``manifest.json``, ``config.json``,
``results.parquet/chunk-00000.parquet``): ``rankflow.load`` reads it and ``rankflow plot``
draws it, while training runs (the chunk is rewritten atomically at every flush) and
after; ``prediction.csv`` is written by :meth:`Tracker.close`. The measurement is one
jitted function of the parameters (compiled once, at the first log), run between the
user's steps; ``callback(step, rows)`` and a TensorBoard-style ``writer`` (anything with
``add_scalar(tag, value, step)``) receive each measurement.

A PyTorch / Hugging Face model (or its ``state_dict``) is measured as ``rankflow
inspect`` measures its checkpoint (:func:`rankflow.track.state_dict_rows`, numpy,
between the steps): the rows are inspect's heads table with the tracker's ``t`` and
``status``.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import pandas as pd

from ..config.fields import ConfigError
from ..engine import store
from ..engine.writer import WriterLock, check_out
from ._measure import measure, rows
from ._pairs import Pair, TrackError, resolve_pairs
from ._predict import Optimizer, prediction_table
from ._torch import is_torch, state_dict_layout, state_dict_rows, tracker_rows

__all__ = ["KIND", "Tracker"]

KIND = "track"
PREDICTION = "prediction.csv"


class Tracker:
    """Balance and rank of a model's factor pairs along a user's training.

    Args:
        out: the results directory (new, empty, or a tracker's own: a folder holding
            anything else is refused before anything is written); None: keep the rows in
            memory only (:attr:`table`).
        pairs: ``"auto"`` (attention pairs by name, else LoRA's), or a list of
            :class:`rankflow.track.Pair`; resolved at the first :meth:`log`.
        every: measure at steps divisible by ``every`` (and whenever ``log(...,
            force=True)``).
        optimizer: the user's optimizer (:class:`rankflow.track.Optimizer`) for the
            predicted decay; None: no prediction.
        rank_tol: numerical rank counts singular values above ``rank_tol · s_1``.
        flush_every: rewrite the table every this many measurements (and at close).
        callback: ``callback(step, rows)`` after each measurement (rows: a DataFrame).
        writer: a TensorBoard-style writer; receives the median ``balance_gap_rel`` and
            ``effective_rank`` per pair and layer as scalars.
        config: extra JSON-able settings recorded in ``config.json`` (model, data, …).
        model_config: the config (``config.json``'s content) of a PyTorch ``state_dict``
            given to :meth:`log`: its architecture and heads (a Hugging Face model's own
            is used when the model itself is given).

    Examples:
        >>> import numpy as np
        >>> from rankflow.track import Factor, Optimizer, Pair, Tracker
        >>> pair = Pair("w", 0, Factor("A"), Factor("B"))
        >>> tracker = Tracker(None, [pair], every=10, optimizer=Optimizer("gd", 0.1, 0.5))
        >>> for step in range(50):  # the gap of a toy pair decays as T5's leading term
        ...     c = 0.95 ** step
        ...     _ = tracker.log(step, {"A": np.diag([1 + c, 1.0]), "B": np.eye(2)})
        >>> tracker.table["t"].unique().tolist()
        [0, 10, 20, 30, 40]
    """

    def __init__(
        self,
        out: str | Path | None,
        pairs: Sequence[Pair] | str = "auto",
        *,
        every: int = 100,
        optimizer: Optimizer | None = None,
        rank_tol: float = 1e-3,
        flush_every: int = 10,
        callback: Callable[[int, pd.DataFrame], Any] | None = None,
        writer: Any = None,
        config: dict | None = None,
        model_config: dict | None = None,
    ):
        if not (isinstance(every, int) and every >= 1):
            raise TrackError(f"every: must be an integer ≥ 1, got {every!r}")
        if not rank_tol > 0:
            raise TrackError(f"rank_tol: must be > 0, got {rank_tol!r}")
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise TrackError("optimizer: expected rankflow.track.Optimizer or None")
        if writer is not None and not callable(getattr(writer, "add_scalar", None)):
            raise TrackError("writer: expected an object with add_scalar(tag, value, step)")
        self.out = None if out is None else Path(out)
        self.every, self.optimizer, self.rank_tol = every, optimizer, rank_tol
        self.flush_every, self.callback, self.writer = flush_every, callback, writer
        self.config = dict(config or {})
        self.model_config = model_config
        self._state_dict = False  # params read as a PyTorch state_dict (decided at first)
        self._want = pairs
        self.pairs: list[Pair] | None = None
        self._frames: list[pd.DataFrame] = []
        self._fn = None
        self._lock: WriterLock | None = None
        self._ident = None
        self._pending = 0
        if self.out is not None:
            check_out(self.out, KIND)  # before anything is measured or written

    # -- measuring -------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether :meth:`log` measures at ``step``."""
        return step % self.every == 0

    def measure(self, params) -> pd.DataFrame:
        """The rows of ``params`` now (step ``-1``), without logging them."""
        return self._rows(-1, params)

    def _rows(self, step: int, params) -> pd.DataFrame:
        if self.pairs is None and not self._state_dict:
            self._state_dict = self._reads_state_dict(params)
            if not self._state_dict:
                self._fn = _compiled(tuple(self.pairs), self.rank_tol)
        if self._state_dict:
            try:
                table = state_dict_rows(params, config=self.model_config, rank_tol=self.rank_tol)
            except ConfigError as e:
                if "non-finite" not in str(e) or not self._frames:
                    raise
                return self._diverged(step)  # a diverged model is recorded, not fatal
            return tracker_rows(step, table)
        return rows(step, self.pairs, self._fn(params))

    def _diverged(self, step: int) -> pd.DataFrame:
        """The rows of the last measurement at ``step``, every statistic NaN and the
        status ``diverged``: what the JAX path records for non-finite parameters."""
        df = self._frames[-1].copy()
        ids = ("t", "layer", "head", "run_id", "path")
        numeric = [c for c in df.select_dtypes("number").columns if c not in ids]
        df[numeric] = float("nan")
        return df.assign(t=step, status="diverged")

    def _reads_state_dict(self, params) -> bool:
        """Whether ``params`` is read as a PyTorch / Hugging Face state_dict: a torch
        model or tensors, or a mapping where no JAX pair matches but Hugging Face's
        attention names do (else one line saying what was looked for both ways). If
        not, :attr:`pairs` is resolved."""
        if self._want == "auto" and is_torch(params):
            return True
        try:
            self.pairs = resolve_pairs(params, self._want)
            return False
        except TrackError as e:
            if self._want != "auto" or not isinstance(params, Mapping):
                raise
            try:
                state_dict_layout(params, config=self.model_config)
            except ConfigError as e2:
                raise TrackError(f"{e}; nor a PyTorch state_dict: {e2}") from None
            return True

    def log(self, step: int, params, *, force: bool = False) -> pd.DataFrame | None:
        """Measure ``params`` at ``step`` when due (or ``force``): the new rows, appended
        to :attr:`table` and, every ``flush_every`` measurements, to the folder."""
        if not (force or self.due(step)):
            return None
        df = self._rows(int(step), params)
        self._frames.append(df)
        self._pending += 1
        if self.callback is not None:
            self.callback(int(step), df)
        if self.writer is not None:
            for (pair, layer), g in df.groupby(["pair", "layer"], sort=True):
                for col in ("balance_gap_rel", "effective_rank"):
                    self.writer.add_scalar(
                        f"rankflow/{pair}/{layer}/{col}", float(g[col].median()), int(step)
                    )
        if self._pending >= self.flush_every:
            self.flush()
        return df

    @property
    def table(self) -> pd.DataFrame:
        """Every row logged so far, in rankflow's tidy format."""
        if not self._frames:
            return pd.DataFrame()
        df = pd.concat(self._frames, ignore_index=True)
        df.insert(0, "run_id", 0)
        df.insert(1, "path", 0)
        df["status"] = pd.Categorical(df["status"], categories=list(store.STATUS))
        return df

    # -- the folder -----------------------------------------------------------------------

    def _settings(self) -> dict:
        opt = self.optimizer
        return {
            "family": KIND,
            "every": self.every,
            "rank_tol": self.rank_tol,
            "pairs": [
                {"name": p.name, "layer": p.layer, "A": vars(p.A), "B": vars(p.B)}
                for p in self.pairs or ()
            ],
            "optimizer": None
            if opt is None
            else {
                "kind": opt.kind,
                "eta": opt.eta,
                "lam": opt.lam,
                "mu": opt.mu,
                "schedule": None if opt.schedule is None else opt.schedule._asdict(),
            },
            **({"params": "state_dict"} if self._state_dict else {}),
            **self.config,
        }

    def flush(self) -> None:
        """Write every row logged so far to ``out`` (one chunk, replaced atomically)."""
        self._pending = 0
        if self.out is None or not self._frames:
            return
        if self._lock is None:
            self._lock = WriterLock(self.out, KIND).acquire()
            self._clear_previous()
            settings = json.loads(json.dumps(self._settings(), default=str))
            self._ident = store.prepare(
                self.out, settings, chunk_size=None, chunks=1, resume=False, runs=1
            )
        store.write_chunk(self.out, 0, self.table, ident=self._ident)

    def _clear_previous(self) -> None:
        """A tracker's folder written again: the earlier tracker's outputs go as a whole
        (its table, manifest, config and prediction), so that no row of it survives
        beside the new ones."""
        for name in (store.MANIFEST, store.CONFIG, PREDICTION):
            (self.out / name).unlink(missing_ok=True)
        shutil.rmtree(self.out / store.RESULTS, ignore_errors=True)

    def prediction(self, t_min: float | None = None, t_max: float | None = None) -> pd.DataFrame:
        """The predicted decay beside the measured one, per unit
        (:func:`rankflow.track.prediction_table`), over ``[t_min, t_max]`` or, unset, the
        window found automatically (a noise floor left out); empty without an optimizer."""
        table = self.table
        if table.empty:
            return pd.DataFrame()
        return prediction_table(table, self.optimizer, t_min=t_min, t_max=t_max)

    def close(self) -> pd.DataFrame:
        """Flush, write ``prediction.csv`` and release the folder; returns the
        prediction table."""
        self.flush()
        pred = self.prediction()
        if self._lock is not None:
            if len(pred):
                store.atomic_write(self.out / PREDICTION, lambda p: pred.to_csv(p, index=False))
            self._lock.release()
            self._lock = None
        return pred

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@functools.lru_cache(maxsize=32)
def _compiled(pairs: tuple[Pair, ...], rank_tol: float):
    """The jitted measure of ``pairs``: one per set of pairs in a process, so that a
    second tracker of the same model does not compile it again."""
    return jax.jit(lambda p: measure(p, pairs, rank_tol))
