# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The ``codiagonal`` problem: ``L = (1/2N) ‖W X − Y‖_F²`` with input covariance
``XXᵀ/N = V diag(c) Vᵀ`` sharing its basis V with ``YXᵀ/N = U diag(s) Vᵀ`` (Saxe et al.
2013; docs/theory.md, T3′). Its nuclear-norm minimiser is known in closed form,
``wᵢ = max(sᵢ − λ, 0)/cᵢ`` in the shared basis: :meth:`Codiagonal.minimiser`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, Scalar

from ...config.fields import LIST, ConfigError, Field
from ...numerics import linalg
from . import base
from .base import Data, Keys, Problem, register_problem
from .regression import Regression


def default_variances(n: int) -> tuple[float, ...]:
    """The input variances when none are given: evenly spaced from 2 down to 1/2 (1 for
    ``n = 1``), so that the target's directions (the first ``rank``) differ from 1."""
    if n == 1:
        return (1.0,)
    return tuple(2.0 - 1.5 * i / (n - 1) for i in range(n))


def check_variances(c: Sequence[float], n: int, samples: int) -> None:
    """ConfigError naming the field unless ``c`` (``problem.input_variances``) holds
    ``n`` finite values ``≥ 0``, one of them ``> 0``, and ``samples ≥ n``."""
    if len(c) != n:
        raise ConfigError(f"problem.input_variances: needs problem.n = {n} values, got {len(c)}")
    if not all(math.isfinite(v) and v >= 0 for v in c):
        raise ConfigError(f"problem.input_variances: must be finite and ≥ 0, got {list(c)}")
    if max(c) == 0:
        raise ConfigError("problem.input_variances: needs one value > 0 (all 0: L is constant)")
    if samples < n:
        raise ConfigError(
            f"problem.samples: codiagonal needs samples ≥ problem.n = {n} (its inputs have "
            f"covariance V diag(c) Vᵀ exactly), got {samples}"
        )


@register_problem
@dataclasses.dataclass(frozen=True)
class Codiagonal(Problem):
    """``L = (1/2N) ‖W X − Y‖_F²`` with inputs of covariance ``XXᵀ/N = V diag(c) Vᵀ``
    exactly (to rounding) and ``Y = W* X + noise·E``, where ``W* = U diag(t) V_kᵀ`` is
    the target (``t = problem.singular_values``, ``V_k`` V's first ``rank`` columns) and
    ``c = problem.input_variances``. Then ``S = YXᵀ/N = W* C = U diag(tᵢcᵢ) V_kᵀ``: S and
    C are co-diagonal, ``sᵢ = tᵢcᵢ`` (0 past the rank).

    The noise ``E`` is projected off the inputs' row space (``E Xᵀ = 0``): it adds a
    constant to L and leaves S, the minimiser and T3′ unchanged at every noise level
    (with ``samples = n`` no room is left and the noise is 0). Directions with
    ``cᵢ = 0`` are never observed (``X`` has no component there): ``sᵢ = 0`` and the
    nuclear norm sends them to 0.
    """

    input_variances: tuple[float, ...] = ()

    name = "codiagonal"
    description = (
        "(1/2N) ‖W X − Y‖_F², input covariance XXᵀ/N = V diag(c) Vᵀ co-diagonal with YXᵀ/N"
    )
    has_samples = True
    fields: ClassVar[dict[str, Field]] = {
        "input_variances": Field(
            LIST,
            None,
            "codiagonal: the input variances c (problem.n values ≥ 0), the eigenvalues of "
            "XXᵀ/N along W*'s right singular vectors first (default evenly spaced from 2 "
            "down to 1/2)",
            optional=True,
        )
    }

    def __post_init__(self) -> None:
        """No variances given (``()``): :func:`default_variances`; else they are checked."""
        super().__post_init__()
        if not self.input_variances:
            object.__setattr__(self, "input_variances", default_variances(self.n))
        check_variances(self.input_variances, self.n, self.samples)

    # -- from the config section p = cfg["problem"] -------------------------------------

    @classmethod
    def variances_of(cls, p: Mapping[str, Any]) -> tuple[float, ...]:
        """The input variances: given, or :func:`default_variances` of ``problem.n``."""
        c = p.get("input_variances")
        return default_variances(p["n"]) if c is None else tuple(float(v) for v in c)

    @classmethod
    def validate(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        """Also :func:`check_variances` (the variances and ``samples ≥ n``)."""
        super().validate(p, init)
        check_variances(cls.variances_of(p), p["n"], p["samples"])

    @classmethod
    def derive(cls, p: dict[str, Any]) -> None:
        """The input variances, given or the default."""
        p["input_variances"] = list(cls.variances_of(p))

    @classmethod
    def data_memory(cls, p: Mapping[str, Any], item: int) -> dict[Keys, int]:
        """The n×N inputs and m×N noise, drawn as normal variates, and beside them their
        orthonormalised and projected copies."""
        m, n = cls.shape_of(p)
        N = p["samples"]
        return cls.data_part(base.drawn_bytes((m + n) * N, item) + item * (m + n) * N)

    @classmethod
    def from_config(cls, p: Mapping[str, Any]) -> Problem:
        return dataclasses.replace(super().from_config(p), input_variances=cls.variances_of(p))

    # -- the static problem -------------------------------------------------------------

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        m, n, N, k = self.m, self.n, self.samples, self.rank
        ku, kv, kx, ke = jax.random.split(key, 4)
        U, _ = linalg.qr(base.normal(ku, (m, k), dtype))
        V, _ = linalg.qr(base.normal(kv, (n, n), dtype))  # the shared basis, n×n
        t = jnp.asarray(self.singular_values, dtype)
        target = (U * t[None, :]) @ V[:, :k].T
        # Q (N×n) has orthonormal columns, so X = √N V diag(√c) Qᵀ has XXᵀ/N = V diag(c) Vᵀ.
        Q, _ = linalg.qr(base.normal(kx, (N, n), dtype))
        c = jnp.asarray(self.input_variances, dtype)
        X = jnp.sqrt(jnp.asarray(N, dtype)) * (V * jnp.sqrt(c)[None, :]) @ Q.T
        E = base.normal(ke, (m, N), dtype)
        E = E - (E @ Q) @ Q.T  # off the inputs' row space: E Xᵀ = 0, S stays W* C
        return {"target": target, "X": X, "Y": target @ X + noise * E}

    # The loss is regression's, (1/2N)‖WX − Y‖_F² per point and on a minibatch: only the
    # inputs' covariance differs, and that lives in the data.
    sample_losses = Regression.sample_losses
    batch_loss = Regression.batch_loss

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """``max cᵢ``: the Hessian of L is ``C ⊗ I_m``, whose top eigenvalue is C's."""
        return jnp.asarray(max(self.input_variances), jnp.result_type(data["X"]))

    def minimiser(self, data: Data, lam: Scalar) -> Float[Array, "m n"]:
        """T3′: the minimiser of ``L(W) + λ‖W‖_*`` in closed form, from the data:
        ``W = Σ_g SVT_λ(S P_g)/c_g`` over the eigenspaces ``P_g`` of ``C = XXᵀ/N`` with
        ``c_g > 0`` (``Σᵢ max(sᵢ − λ, 0)/cᵢ · uᵢvᵢᵀ`` where the cᵢ are distinct). The
        eigenspaces are C's eigenvectors grouped by the values of ``input_variances``
        (sorted, as ``eigh`` orders them), so the data must be this kind's (co-diagonal).

        Values closer than ``√ε · max c`` (ε of the data's dtype) form one group, of
        their mean: ``eigh`` mixes the eigenvectors of so close eigenvalues (by about
        ``ε max c / gap``), and thresholding a mixed vector's ``S vᵢ`` separately is off
        by O(λ) (measured: 2e-3 at a gap of 1e-14, 1e-5 at 1e-12, float64), while one
        group's ``SVT_λ(S P_g)`` does not depend on the basis of ``P_g``; its mean moves
        ``wᵢ`` by at most ``√ε`` relative. Exact zeros stay their own group (never seen)."""
        X, Y = data["X"], data["Y"]
        N = X.shape[1]
        C, S = X @ X.T / N, Y @ X.T / N
        _, vecs = linalg.eigh(C)  # ascending, as sorted(input_variances)
        c = sorted(self.input_variances)
        close = math.sqrt(float(jnp.finfo(X.dtype).eps)) * c[-1]
        W = jnp.zeros((self.m, self.n), X.dtype)
        lo = 0
        while lo < len(c):
            hi = lo + 1
            while hi < len(c) and c[lo] > 0 and c[hi] - c[hi - 1] <= close:
                hi += 1
            if c[lo] > 0:
                Vg = vecs[:, lo:hi]
                W = W + _svt(S @ Vg, lam) @ Vg.T / (sum(c[lo:hi]) / (hi - lo))
            lo = hi
        return W


def _svt(M: Float[Array, "m k"], lam: Scalar) -> Float[Array, "m k"]:
    """``U max(σ − λ, 0) Vᵀ`` (T3's soft-thresholding; the problems layer sits below
    :mod:`rankflow.theory`)."""
    U, s, Vt = jnp.linalg.svd(M, full_matrices=False)
    return (U * jnp.maximum(s - lam, 0)[None, :]) @ Vt
