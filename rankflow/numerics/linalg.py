"""Matrix decompositions that are safe to ``vmap`` on XLA:CPU with several devices.

jaxlib's batched CPU LAPACK kernels (the ``vmap`` of an SVD, QR or eigh) split a batch
into tasks on XLA's intra-op thread pool and block the calling pool thread until the
tasks are done. When every pool thread runs such a kernel at once — two batched SVDs
side by side in one program, or one per device when a batch is sharded over one CPU
device per core — each waits for tasks that no free thread will run, and the program
never returns (jax 0.10.2, 2 cores: seen in sweeps, benchmarks, tests, and with 2
devices in the balanced initialisation; benchmarks/README.md, "XLA:CPU deadlocks").

:func:`one_at_a_time` gives a function whose ``vmap`` maps it over the batch one matrix
at a time (``lax.map``) on the CPU backend: a single matrix is computed inline on the
calling thread, so it cannot deadlock, and at rankflow's sizes it costs the same. Every
decomposition in rankflow's traced programs (data, initialisations, observables) goes
through the wrappers below. This is a CPU workaround only: on GPU and TPU ``vmap``
batches as usual (cuSOLVER's batched kernels are fast). The wrappers have no
derivative rule, so they serve values that are never differentiated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["eigh", "eigvalsh", "one_at_a_time", "qr", "svd", "svdvals"]


def one_at_a_time(fn: Callable) -> Callable:
    """``fn`` whose ``vmap`` (on the CPU backend) maps it over the batch one element at a
    time (``lax.map``) instead of batching its operations (module docstring). Nested
    ``vmap``s nest the maps. On other backends ``vmap`` batches as usual."""

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fn(*args)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        args = [
            a if b else jnp.broadcast_to(a, (axis_size, *jnp.shape(a)))
            for a, b in zip(args, in_batched, strict=True)
        ]
        if jax.default_backend() == "cpu":
            out = jax.lax.map(lambda xs: wrapped(*xs), tuple(args))
        else:
            out = jax.vmap(fn)(*args)
        return out, jax.tree.map(lambda _: True, out)

    return functools.wraps(fn)(wrapped)


@one_at_a_time
def svd(W: Float[Array, "m n"]) -> tuple[Array, Array, Array]:
    """Thin SVD ``(U, S, Vᵀ)`` of ``W``, singular values descending."""
    return jnp.linalg.svd(W, full_matrices=False)


@one_at_a_time
def svdvals(W: Float[Array, "m n"]) -> Float[Array, " k"]:
    """Singular values of ``W``, descending."""
    return jnp.linalg.svd(W, compute_uv=False)


@one_at_a_time
def qr(X: Float[Array, "m k"]) -> tuple[Array, Array]:
    """Reduced QR ``(Q, R)`` of ``X``."""
    return jnp.linalg.qr(X)


@one_at_a_time
def eigh(M: Float[Array, "n n"]) -> tuple[Array, Array]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric ``M``."""
    return jnp.linalg.eigh(M)


@one_at_a_time
def eigvalsh(M: Float[Array, "n n"]) -> Float[Array, " n"]:
    """Eigenvalues of the symmetric ``M``, ascending."""
    return jnp.linalg.eigvalsh(M)
