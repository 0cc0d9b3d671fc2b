"""Losses of a factorised matrix W = ABᵀ, their data, and initialisations of (A, B).

Every problem is a static (hashable) description plus a data pytree generated in JAX
from a PRNG key, so that problem data can vary with a traced seed inside one compiled,
vmapped program. Losses are pure functions of ``W`` and the data.

All data losses are normalised so that, on noiseless data, their expectation over the
sampling is ``½‖W − W*‖_F²`` — the same scale as ``diagonal``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ..config.callables import load_callable
from ..config.fields import ConfigError
from ..numerics import linalg

__all__ = [
    "Minibatch",
    "Problem",
    "check_custom_loss",
    "draw_minibatch",
    "init_factors",
    "make_problem",
]

Data = dict[str, Array]


class Minibatch(NamedTuple):
    """A minibatch of traced size: the data points ``idx`` (pad,) of which the first
    ``size`` (b ≤ pad, an integer scalar, traced) are the minibatch. A loss on it
    (:meth:`Problem.batch_loss`) sums its first ``size`` points and divides by ``size``,
    so programs of one ``pad`` serve every b ≤ pad."""

    idx: Int[Array, " pad"]
    size: Int[Array, ""]


def draw_minibatch(key: PRNGKeyArray, samples: int, size, pad: int) -> Minibatch:
    """``pad`` of the ``samples`` points drawn without replacement, uniformly, of which the
    first ``size`` are used: ``jax.random.choice(key, samples, (pad,), replace=False)``,
    a permutation's first ``pad`` entries, so that its first b are the batch-b draw of the
    same key (the same points as an unpadded ``choice(key, samples, (b,))``, T10)."""
    idx = jax.random.choice(key, samples, (pad,), replace=False)
    return Minibatch(idx, jnp.asarray(size))


def _batch_mean(terms: Array, idx) -> Array:
    """The mean of per-point ``terms`` over a minibatch: all of them for data points given
    as an array (or all data), the first ``idx.size`` of a :class:`Minibatch`."""
    if not isinstance(idx, Minibatch):
        return jnp.mean(terms)
    used = jnp.arange(terms.shape[0]) < idx.size
    return jnp.sum(jnp.where(used, terms, 0)) / idx.size.astype(terms.dtype)


def _normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype) -> Array:
    """Standard normal draws made in float32 and cast, so that ``x64`` changes the
    precision of a run, not its random problem and start."""
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


@dataclass(frozen=True)
class Problem:
    """A loss ``L(W)`` of ``W ∈ R^{m×n}`` (docs/theory.md: the data loss).

    Kinds:
      - ``diagonal``: ``L = ½‖W − diag(s)‖_F²`` (square, no data).
      - ``sensing``: ``L = (1/2N) Σ_k (⟨X_k, W⟩ − y_k)²``, ``X_k`` i.i.d. N(0, 1) entries,
        ``y_k = ⟨X_k, W*⟩ + noise·ε_k``.
      - ``completion``: ``L = (mn/2N) Σ_k (W[i_k, j_k] − y_k)²`` over N entries drawn
        uniformly (with replacement), ``y_k = W*[i_k, j_k] + noise·ε_k``.
      - ``regression``: ``L = (1/2N) ‖W X − Y‖_F²`` with whitened inputs
        ``X X ᵀ/N = I`` (X is n×N) and ``Y = W* X + noise·E``.
      - ``custom``: a user's ``L(W)`` (no data, no target).

    The target ``W* = U diag(s) Vᵀ`` has rank ``rank`` with Haar-random orthonormal
    ``U, V`` and singular values ``s`` (default ``1, (rank−1)/rank, …, 1/rank``).
    """

    kind: str
    m: int
    n: int
    rank: int
    samples: int
    singular_values: tuple[float, ...]
    custom_loss: Callable[[Array], Array] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.m, self.n)

    @property
    def has_samples(self) -> bool:
        """Whether the loss is an average over data points (minibatches make sense)."""
        return self.kind in ("sensing", "completion", "regression")

    @property
    def has_target(self) -> bool:
        return self.kind != "custom"

    # -- data ---------------------------------------------------------------------------

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        """The problem's data (and target ``W*`` under ``"target"``), from ``key``."""
        s = jnp.asarray(self.singular_values, dtype)
        if self.kind == "diagonal":
            return {"target": jnp.diag(s)}
        if self.kind == "custom":
            return {}
        m, n, k, N = self.m, self.n, self.rank, self.samples
        ku, kv, kx, ke = jax.random.split(key, 4)
        U, _ = linalg.qr(_normal(ku, (m, k), dtype))
        V, _ = linalg.qr(_normal(kv, (n, k), dtype))
        target = (U * s[None, :]) @ V.T
        if self.kind == "sensing":
            X = _normal(kx, (N, m, n), dtype)
            y = jnp.einsum("kij,ij->k", X, target) + noise * _normal(ke, (N,), dtype)
            return {"target": target, "X": X, "y": y}
        if self.kind == "completion":
            ki, kj = jax.random.split(kx)
            rows = jax.random.randint(ki, (N,), 0, m)
            cols = jax.random.randint(kj, (N,), 0, n)
            y = target[rows, cols] + noise * _normal(ke, (N,), dtype)
            return {"target": target, "rows": rows, "cols": cols, "y": y}
        if self.kind == "regression":
            X = _normal(kx, (n, N), dtype)
            # Whiten: X ← √N (XXᵀ)^{-1/2} X, so that XXᵀ/N = I exactly (to rounding).
            evals, evecs = linalg.eigh(X @ X.T)
            X = jnp.sqrt(jnp.asarray(N, dtype)) * ((evecs / jnp.sqrt(evals)[None, :]) @ evecs.T) @ X
            Y = target @ X + noise * _normal(ke, (m, N), dtype)
            return {"target": target, "X": X, "Y": Y}
        raise ValueError(f"problem.kind: unknown kind {self.kind!r}")

    # -- losses -------------------------------------------------------------------------

    def loss(self, W: Float[Array, "m n"], data: Data) -> Float[Array, ""]:
        """The full-data loss ``L(W)``."""
        if self.kind == "diagonal":
            return 0.5 * jnp.sum((W - data["target"]) ** 2)
        if self.kind == "custom":
            return self.custom_loss(W)
        return self.batch_loss(W, data, None)

    def sample_losses(self, W: Float[Array, "m n"], data: Data) -> Float[Array, " N"]:
        """The loss of each data point (problems with samples), normalised so that their
        mean is :meth:`loss`: ``L(W) = (1/N) Σ_k ℓ_k(W)``. Their gradients are the
        per-sample gradients ``g_k`` whose spread is minibatch noise (docs/theory.md, T10)."""
        if self.kind == "sensing":
            return 0.5 * (jnp.einsum("kij,ij->k", data["X"], W) - data["y"]) ** 2
        if self.kind == "completion":
            r = W[data["rows"], data["cols"]] - data["y"]
            return 0.5 * self.m * self.n * r**2
        if self.kind == "regression":
            return 0.5 * jnp.sum((W @ data["X"] - data["Y"]) ** 2, axis=0)
        raise ValueError(f"problem.kind: {self.kind!r} has no data points")

    def batch_loss(
        self,
        W: Float[Array, "m n"],
        data: Data,
        idx: Int[Array, " batch"] | Minibatch | None,
    ) -> Float[Array, ""]:
        """The loss on the data points ``idx`` (all of them when ``None``; the first
        ``idx.size`` of a :class:`Minibatch`), normalised like :meth:`loss`, so that its
        mean over uniform minibatches is ``L(W)``."""
        if not self.has_samples:
            return self.loss(W, data)
        points = idx.idx if isinstance(idx, Minibatch) else idx
        take = (
            (lambda x, axis=0: x)
            if points is None
            else (lambda x, axis=0: jnp.take(x, points, axis))
        )
        if self.kind == "sensing":
            r = jnp.einsum("kij,ij->k", take(data["X"]), W) - take(data["y"])
            return 0.5 * _batch_mean(r**2, idx)
        if self.kind == "completion":
            r = W[take(data["rows"]), take(data["cols"])] - take(data["y"])
            return 0.5 * self.m * self.n * _batch_mean(r**2, idx)
        # regression
        R = W @ take(data["X"], 1) - take(data["Y"], 1)
        return 0.5 * _batch_mean(jnp.sum(R**2, axis=0), idx)


def _default_singular_values(rank: int) -> tuple[float, ...]:
    return tuple((rank - i) / rank for i in range(rank))


def make_problem(cfg: dict[str, Any]) -> Problem:
    """The :class:`Problem` of a resolved config."""
    p = cfg["problem"]
    sv = p["singular_values"]
    if p["kind"] == "diagonal":
        m = n = len(sv)
        rank = sum(1 for v in sv if v != 0)
    else:
        m, n, rank = p["m"], p["n"], p["rank"]
        sv = sv if sv is not None else _default_singular_values(rank)
    custom = load_callable(p["loss"]) if p["kind"] == "custom" else None
    return Problem(p["kind"], m, n, rank, p["samples"], tuple(float(v) for v in sv), custom)


def check_custom_loss(spec: str | Callable, m: int, n: int, x64: bool) -> None:
    """Check a custom loss's contract before anything compiles: it loads, takes one
    argument W (m×n), traces (under :func:`jax.eval_shape`, gradient included) and
    runs once on a sample W, returning a real scalar. Raises ConfigError naming
    ``problem.loss`` and what is wrong."""
    fn = load_callable(spec)
    name = spec if isinstance(spec, str) else getattr(fn, "__qualname__", repr(fn))
    what = f"problem.loss: {name!r}"
    try:
        inspect.signature(fn).bind(None)
    except TypeError:
        raise ConfigError(
            f"{what} must take one argument, W ({m}×{n}); it cannot be "
            f"called as L(W): {inspect.signature(fn)}"
        ) from None
    except ValueError:  # no signature to read (a builtin): the calls below tell
        pass
    dtype = jnp.float64 if x64 else jnp.float32
    with jax.enable_x64(x64):
        W = 0.1 * _normal(jax.random.PRNGKey(0), (m, n), dtype)
        for how, call in (
            ("cannot be traced by JAX (is it jittable?)", lambda: jax.eval_shape(fn, W)),
            ("is not differentiable by JAX", lambda: jax.eval_shape(jax.grad(fn), W)),
            ("fails when run", lambda: fn(W)),
        ):
            try:
                out = call()
            except Exception as e:  # noqa: BLE001 - any failure of user code is reported
                first = (str(e).strip().splitlines() or [""])[0]
                raise ConfigError(
                    f"{what} {how} on a sample W ({m}×{n}): {type(e).__name__}: {first}"
                ) from None
            if how.startswith("cannot"):
                _check_scalar(what, out)


def _check_scalar(what: str, out) -> None:
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape is None or dtype is None:
        raise ConfigError(f"{what} must return a scalar array, got {type(out).__name__}")
    if shape != ():
        raise ConfigError(f"{what} must return a scalar, got an array of shape {shape}")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ConfigError(f"{what} must return a real floating-point scalar, got {dtype}")


# --- initialisations ---------------------------------------------------------------------


def _pad_columns(X: Array, r: int) -> Array:
    return jnp.pad(X[:, :r], ((0, 0), (0, max(0, r - X.shape[1]))))


def _balanced_from(W: Float[Array, "m n"], r: int):
    """Balanced factors of ``W``'s best rank-r part: ``A = U√S``, ``B = V√S``."""
    U, S, Vt = linalg.svd(W)
    root = jnp.sqrt(S)
    return _pad_columns(U * root[None, :], r), _pad_columns(Vt.T * root[None, :], r)


def init_factors(
    kind: str,
    key: PRNGKeyArray,
    problem: Problem,
    data: Data,
    r: int,
    scale: Float[Array, ""],
    imbalance: Float[Array, ""],
    dtype,
) -> tuple[Float[Array, "m r"], Float[Array, "n r"]]:
    """Initial factors ``(A, B)``.

    - ``gaussian``: i.i.d. N(0, scale²) entries.
    - ``balanced``: the balanced factorisation ``A = U√S``, ``B = V√S`` of the product
      of two such Gaussian factors, so ``AᵀA = BᵀB`` exactly (to rounding) and the
      product is random of rank ``min(m, n, r)``.
    - ``spectral``: ``A = U_r√scale``, ``B = V_r√scale`` from the target's SVD, so
      ``W(0) = scale·U_r V_rᵀ``.
    - ``imbalanced``: the balanced start rescaled to ``(cA, B/c)`` — same product — with
      ``c`` chosen so that ``‖AᵀA − BᵀB‖_F = imbalance`` exactly.
    """
    m, n = problem.shape
    ka, kb = jax.random.split(key)
    A0 = scale * _normal(ka, (m, r), dtype)
    B0 = scale * _normal(kb, (n, r), dtype)
    if kind == "gaussian":
        return A0, B0
    if kind == "spectral":
        U, _, Vt = linalg.svd(data["target"])
        root = jnp.sqrt(scale)
        return _pad_columns(U * root, r), _pad_columns(Vt.T * root, r)
    A, B = _balanced_from(A0 @ B0.T, r)
    if kind == "balanced":
        return A, B
    if kind == "imbalanced":
        # D = (c² − c⁻²)·AᵀA for the balanced (A, B); solve c² − c⁻² = x for c² > 0.
        x = imbalance / jnp.linalg.norm(A.T @ A)
        c2 = 0.5 * (x + jnp.sqrt(x**2 + 4.0))
        c = jnp.sqrt(c2)
        return c * A, B / c
    raise ValueError(f"init.kind: unknown kind {kind!r}")
