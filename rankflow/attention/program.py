"""One structure of an attention config → one compiled program for a batch of runs.

Points that differ only in :data:`config.NUMERIC_KEYS` (seed, λ per group, η, μ, init
scale) share a :class:`Program`: those values are traced, so a sweep over λ and seeds
trains a batch of models in one compiled program (the parameter pytrees stacked along a
leading run axis). The batch is sharded over the devices; on CPU each device trains its
runs one after another, elsewhere they are vmapped (:func:`over_runs`).

A run saves, at steps 0, eval_every, …, ``save.t1``: every per-head observable of both
pairs (:mod:`.observables`), ``train_loss`` (the loss on the training data: gradient flow's
fixed full batch; otherwise a fixed sample of ``task.val_size`` training sequences) and
``val_loss`` (the fixed validation set); classification tasks (images) also save
``train_accuracy`` and ``val_accuracy`` on the same sets.

With ``train.export_every`` = K the program also returns ``params``: every run's
parameter pytree at steps 0, K, 2K, …, t1 (leaves (runs, exports, …)), for
:mod:`.export` to write as checkpoints. Discrete training stacks only those
(exports × parameters per run); gradient flow observes the parameters at every save
and keeps the exported ones (saves × parameters inside the program).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..engine import programs
from ..engine.programs import TRACE_COUNTS
from ..engine.status import STATUS, Status, diverge_nonfinite, with_status
from ..numerics.batching import per_device, shard
from ..numerics.schedules import schedule_of
from . import config as config_lib
from .flow import integrate
from .model import Model, model_spec
from .observables import cross_gap_rel, head_factors, head_observables
from .optimizers import make_optimizer, per_leaf_lam, per_leaf_lr
from .tasks import accuracy, make_task
from .train import iterate, loss_fn

__all__ = [
    "PARAM_KEYS",
    "STATUS",
    "TRACE_COUNTS",
    "Program",
    "over_runs",
    "params_of",
    "program_for",
]

PARAM_KEYS = config_lib.NUMERIC_KEYS


@dataclass
class Program:
    """``run(params)`` takes a dict of 1-d arrays (one entry per run, keys
    :data:`PARAM_KEYS`) and returns numpy arrays: each of
    :data:`.observables.HEAD_COLUMNS` with shape (runs, saves, layers, H, 2) (pairs
    last), ``sv`` (runs, saves, layers, H, 2, d_h),
    ``train_loss``, ``val_loss``, (classification tasks) ``train_accuracy``,
    ``val_accuracy``, ``status`` (runs, saves), with ``save.cross_gaps``
    ``cross_gap_rel`` (runs, saves, layers, H, 2, H) (:func:`.observables.cross_gap_rel`)
    and, with ``train.export_every``, ``params`` (the parameter pytree, leaves
    (runs, exports, …))."""

    point: dict[str, Any]
    key: str
    task: Any = field(init=False)
    model: Model = field(init=False)

    def __post_init__(self):
        pt = self.point
        self.task = make_task(pt)
        self.spec = model_spec(pt, self.task)
        self.model = Model(self.spec)
        self.kind = pt["dynamics"]["kind"]
        self.decay = tuple(pt["train"]["decay"])
        self.steps = np.asarray(config_lib.save_steps(pt))
        self.export_steps = np.asarray(config_lib.export_steps(pt), np.int64)
        self.schedule = schedule_of(pt["dynamics"], float(pt["save"]["t1"]))
        self.dtype = self.spec.dtype
        self.loss = loss_fn(self.model, self.task)
        self._jitted = jax.jit(per_device(self._batch))
        # The per-head observables (QR, SVD, eigh of every head) run as a program of
        # their own, after training: inside the training loop, XLA:CPU was seen to
        # deadlock on batched LAPACK calls running beside the rest of the step.
        self._heads = jax.jit(self._head_observables)

    @property
    def continuous(self) -> bool:
        return self.kind == "gradient_flow"

    def data(self) -> dict[str, Any]:
        """Everything the runs share: char_lm's training split or the image task's
        training set, and the fixed evaluation sets."""
        with jax.enable_x64(self.spec.x64):
            out: dict[str, Any] = {"val": self.task.eval_set("val", self.dtype)}
            if not self.continuous:
                out["train_eval"] = self.task.eval_set("train", self.dtype)
            train = self.task.train_data(self.dtype)
            if train is not None:
                out["train"] = train
            return out

    def run(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run a batch of runs, sharded over all devices (padded to a multiple of
        their number); each run's arithmetic is the same whatever that number."""
        n = len(params["seed"])
        with jax.enable_x64(self.spec.x64):
            batch = shard(
                {k: params[k] for k in PARAM_KEYS},
                lambda k: jnp.int32 if k == "seed" else self.dtype,
            )
            out = self._jitted(batch, self.data())
            exported = out.pop("params", None)
            out = self._heads(out)
            if exported is not None:
                out["params"] = exported
            return jax.tree.map(lambda x: np.asarray(x)[:n], out)

    # -- the traced program --------------------------------------------------------------

    def hyper(self, p: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """The optimizer's traced hyperparameters of one run."""
        out = {"eta": p["dynamics.eta"], "mu": p["dynamics.mu"]}
        out.update({f"lam_{g}": p[f"train.lam_{g}"] for g in config_lib.GROUPS})
        out.update({f"lr_{u}": p[f"train.lr_{u}"] for u in config_lib.GROUPS + config_lib.FACTORS})
        return out

    def keys(self, seed):
        """``(init_key, batch_key)`` of a run."""
        base = jax.random.PRNGKey(seed)
        return jax.random.fold_in(base, 1), jax.random.fold_in(base, 2)

    def init(self, p: Mapping[str, jax.Array]):
        """A run's initial parameters."""
        return self.model.init(self.keys(p["seed"])[0], p["init.scale"])

    def _batch(self, P: dict[str, jax.Array], data: dict[str, Any]) -> dict[str, jax.Array]:
        """The runs of ``P`` (on each device, those it holds): initialised one after
        another, then trained by :func:`over_runs`."""
        TRACE_COUNTS[self.key] += 1
        # Initialisation runs as a loop over runs, not vmapped: batched PRNG code takes
        # XLA several times longer to compile, and init is cheap to run.
        params0 = jax.lax.map(self.init, P)
        full = jax.lax.map(lambda p: self.full_batch(p, data), P) if self.continuous else None
        return over_runs(lambda p, p0, f: self._single(p, p0, f, data), (P, params0, full))

    def full_batch(self, p: Mapping[str, jax.Array], data: Mapping[str, Any]):
        """Gradient flow's fixed training batch of a run."""
        key = self.keys(p["seed"])[1]
        return self.task.sample(key, self.point["dynamics"]["batch"], data, self.dtype)

    def _single(self, p, params0, full, data: dict[str, Any]) -> dict[str, jax.Array]:
        pt, task, dtype = self.point, self.task, self.dtype
        batch_key = self.keys(p["seed"])[1]
        hyper = self.hyper(p)
        layers = self.spec.layers
        exporting = len(self.export_steps) > 0

        def observe(params, train_set):
            out = {"factors": head_factors(params, layers)}
            if exporting and self.continuous:
                out["params"] = params
            out["train_loss"] = self.loss(params, train_set)
            out["val_loss"] = self.loss(params, data["val"])
            if task.classifier:
                for split, batch in (("train", train_set), ("val", data["val"])):
                    logits = self.model.apply(params, batch["inputs"])
                    out[f"{split}_accuracy"] = accuracy(logits, batch)
            out["_max_abs"] = jnp.max(
                jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree.leaves(params)])
            )
            return out

        tr = pt["train"]
        if self.continuous:
            lam = {g: hyper[f"lam_{g}"] for g in config_lib.GROUPS}
            lam_tree = per_leaf_lam(params0, lam, self.decay)
            lr = {u: hyper[f"lr_{u}"] for u in config_lib.GROUPS + config_lib.FACTORS}
            obs, reached, max_steps_hit = integrate(
                self.loss,
                lam_tree,
                hyper["eta"],
                params0,
                full,
                self.steps.astype(np.float64),
                lambda params: observe(params, full),
                solver=pt["solver"],
                schedule=self.schedule,
                lr_tree=per_leaf_lr(params0, lr),
            )
        else:
            opt = make_optimizer(
                self.kind,
                params0,
                hyper,
                self.decay,
                b1=tr["b1"],
                b2=tr["b2"],
                eps=tr["eps"],
                schedule=self.schedule,
            )
            obs, reached, max_steps_hit = iterate(
                self.loss,
                opt,
                lambda key: task.sample(key, pt["dynamics"]["batch"], data, dtype),
                params0,
                batch_key,
                every=tr["eval_every"],
                saves=len(self.steps),
                observe=lambda params: observe(params, data["train_eval"]),
                export_every=tr["export_every"],
            )
        exported = obs.pop("params", None)
        out = self._finish(obs, reached, max_steps_hit)
        if exported is not None:
            if self.continuous:
                at = np.searchsorted(self.steps, self.export_steps)
                exported = jax.tree.map(lambda x: x[at], exported)
            out["params"] = exported
        return out

    def _head_observables(self, out):
        """The training outputs ``out`` (its ``factors`` replaced) with the observables
        of every head at every save (the factors of saves that are not ok are zeroed
        first, so that LAPACK never sees a NaN). A save whose head observables are not
        all finite is diverged from there on, as one whose loss is not (:meth:`_finish`):
        every output is NaN where the status is not ok."""
        out = dict(out)
        factors, status = out.pop("factors"), out["status"]
        ok = status == int(Status.ok)
        expand = lambda x: jnp.reshape(ok, ok.shape + (1,) * (x.ndim - ok.ndim))
        factors = jax.tree.map(lambda x: jnp.where(expand(x), x, 0.0), factors)
        out |= head_observables(factors, self.point["save"]["rank_tol"])
        if self.point["save"]["cross_gaps"]:
            out["cross_gap_rel"] = cross_gap_rel(factors)
        return diverge_nonfinite(out, status)

    def _finish(self, obs, reached, max_steps_hit):
        """Status per save: diverged from the first save with a non-finite loss or other
        output (:func:`~rankflow.engine.status.with_status`) or a parameter entry beyond
        ``solver.diverge_norm`` (or that the solver never reached); every output is NaN
        where the status is not ok. The per-head observables, computed after training,
        are checked there (:meth:`_head_observables`)."""
        max_abs = obs.pop("_max_abs")
        ok = (max_abs <= self.point["solver"]["diverge_norm"]) & reached
        return with_status(obs, ok, reached, max_steps_hit)


def over_runs(single: Callable, runs: Any) -> Any:
    """``single`` over the runs of ``runs`` (a tuple of pytrees with a leading run axis).

    On CPU one after another (``lax.map``): measured here (jax 0.10.2, 2 cores, the
    ablation config's model, 12 runs; ``python -m benchmarks.attention``, BENCHMARKS.md),
    a hand-written training step vmapped over the runs took 1.3–1.5× the time of the
    same step mapped over them: every matrix product of a vmapped run becomes a batched
    one, slower on XLA:CPU than the unbatched products. Elsewhere ``vmap`` (unmeasured:
    GPUs and TPUs have batched kernels of their own)."""
    if jax.default_backend() == "cpu":
        return jax.lax.map(lambda args: single(*args), runs)
    return jax.vmap(single)(*runs)


def program_for(point: Mapping[str, Any]) -> Program:
    """The (cached) program of a point's structure."""
    key = config_lib.structure_key(point)
    return programs.program(key, lambda: Program(dict(point), key))


def params_of(point: Mapping[str, Any]) -> dict[str, Any]:
    """A point's traced values (each group's λ filled in)."""
    flat = config_lib.flatten(point)
    return {k: flat[k] for k in PARAM_KEYS}
