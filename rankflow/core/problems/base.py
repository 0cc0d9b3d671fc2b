# ruff: noqa: F722  (jaxtyping shape strings such as "m n" are not forward references)
"""The problem kind's base class :class:`Problem`, its registry :data:`PROBLEMS` and the
pieces every kind shares (minibatches, normal draws, the memory of drawn data).

A problem kind is one subclass of :class:`Problem`, registered with
:func:`register_problem`; the registry is the vocabulary (``problem.kind`` accepts its
names, read live, so a kind registered after import is accepted too). A kind declares:

- class attributes: ``name`` (its ``problem.kind``), ``description`` (one line),
  ``has_samples`` (its loss averages over data points, so minibatches make sense),
  ``has_target`` (its data hold a target ``W*`` under ``"target"``), ``shape_keys``
  (the config keys that set W's shape), ``fields`` (the ``problem.*`` config keys of its
  own, :class:`~rankflow.config.fields.Field` s by name, merged into the problem
  section's schema after the common ones: :func:`problem_section`; a key set to other
  than its default for a kind that does not declare it is a ConfigError);
- class methods of the resolved config section ``p`` (a mapping, ``cfg["problem"]``):
  :meth:`~Problem.validate` (its cross-field rules, raising ConfigError naming the
  field; :meth:`~Problem.check_config` adds the rule on other kinds' fields),
  :meth:`~Problem.shape_of` ``(m, n)``, :meth:`~Problem.target_rank_of`,
  :meth:`~Problem.singular_values_of`, :meth:`~Problem.derive` (its derived values,
  written in place), :meth:`~Problem.data_memory` (bytes of its data by the keys that
  set them), :meth:`~Problem.precheck` (before compiling) and
  :meth:`~Problem.from_config` (the static problem);
- methods of the static problem: :meth:`~Problem.make_data`, :meth:`~Problem.loss`,
  :meth:`~Problem.sample_losses`, :meth:`~Problem.batch_loss` and
  :meth:`~Problem.lipschitz_constant` (T3's step-size bound).

A kind with samples defines ``make_data``, ``sample_losses`` and ``batch_loss`` (its
``loss`` is ``batch_loss`` on all points); one without defines ``make_data`` and ``loss``.
The static problem is a frozen dataclass (hashable: a static argument of compiled
programs); ``Problem(kind, m, n, rank, samples, singular_values)`` builds the registered
class of ``kind``. A minimal kind (``L = ½‖W − W*‖_F²`` scaled by 3, no data points)::

    @register_problem
    class Scaled(Problem):
        name = "scaled"
        description = "3/2 ‖W − W*‖_F² for a random W* of rank problem.rank"

        def make_data(self, key, noise, dtype):
            target, _, _ = random_target(self, key, dtype)
            return {"target": target}

        def loss(self, W, data):
            return 1.5 * jnp.sum((W - data["target"]) ** 2)

tests/core/test_problem_contract.py runs every registered kind through one contract
(the gradient against ``jax.grad`` and finite differences, the memory estimate against
a measured peak, the loss at the known minimiser, float64 and float32 runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ...config.fields import ConfigError, Field, OneOf
from ...numerics import linalg

Data = dict[str, Array]
# The memory keys of a part: the config keys that set it.
Keys = tuple[str, ...]


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


def batch_mean(terms: Array, idx) -> Array:
    """The mean of per-point ``terms`` over a minibatch: all of them for data points given
    as an array (or all data), the first ``idx.size`` of a :class:`Minibatch`."""
    if not isinstance(idx, Minibatch):
        return jnp.mean(terms)
    used = jnp.arange(terms.shape[0]) < idx.size
    return jnp.sum(jnp.where(used, terms, 0)) / idx.size.astype(terms.dtype)


def taker(idx) -> Callable[..., Array]:
    """``take(x, axis=0)``: the data points ``idx`` of ``x`` along ``axis`` (all of them
    when ``idx`` is None; a :class:`Minibatch`'s padded points)."""
    points = idx.idx if isinstance(idx, Minibatch) else idx
    if points is None:
        return lambda x, axis=0: x
    return lambda x, axis=0: jnp.take(x, points, axis)


def normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype) -> Array:
    """Standard normal draws made in float32 and cast, so that ``x64`` changes the
    precision of a run, not its random problem and start."""
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def drawn_bytes(entries: int, item: int) -> int:
    """Peak bytes while ``entries`` normal variates are drawn (:func:`normal`): XLA:CPU
    holds the PRNG's bits, their float32 values and the cast (measured: 24 bytes per
    entry in float32, 30 in float64; tests/engine/test_resource_guards.py). ``item``:
    bytes per float of the run."""
    return entries * (16 + 2 * item)


def default_singular_values(rank: int) -> tuple[float, ...]:
    """The target's default singular values ``1, (rank−1)/rank, …, 1/rank``."""
    return tuple((rank - i) / rank for i in range(rank))


def random_target(
    problem: Problem, key: PRNGKeyArray, dtype
) -> tuple[Float[Array, "m n"], PRNGKeyArray, PRNGKeyArray]:
    """``(W*, kx, ke)``: the target ``W* = U diag(s) Vᵀ`` of rank ``problem.rank`` with
    Haar-random orthonormal U (m×rank), V (n×rank) from ``key``, and the two keys left
    for the kind's inputs ``kx`` and noise ``ke``."""
    s = jnp.asarray(problem.singular_values, dtype)
    m, n, k = problem.m, problem.n, problem.rank
    ku, kv, kx, ke = jax.random.split(key, 4)
    U, _ = linalg.qr(normal(ku, (m, k), dtype))
    V, _ = linalg.qr(normal(kv, (n, k), dtype))
    return (U * s[None, :]) @ V.T, kx, ke


def check_nonnegative(sv) -> None:
    """ConfigError naming ``problem.singular_values`` if one is negative."""
    if sv is not None and any(v < 0 for v in sv):
        raise ConfigError("problem.singular_values: must be ≥ 0")


@dataclass(frozen=True)
class Problem:
    """A loss ``L(W)`` of ``W ∈ R^{m×n}`` (docs/theory.md: the data loss); the base of
    every problem kind (the module's docstring says what a kind declares).

    The target ``W* = U diag(s) Vᵀ`` (kinds with a target) has rank ``rank`` and
    singular values ``s`` (default ``1, (rank−1)/rank, …, 1/rank``). Data losses are
    normalised so that, on noiseless data, their expectation over the sampling is
    ``½‖W − W*‖_F²`` — the same scale as ``diagonal``.

    Fields: ``kind`` (the class's ``name``), W's shape ``m × n``, the target's
    ``rank``, ``samples`` (data points, kinds with samples), the target's
    ``singular_values`` and ``custom_loss`` (``custom``'s ``L(W)``).
    """

    kind: str
    m: int
    n: int
    rank: int
    samples: int
    singular_values: tuple[float, ...]
    custom_loss: Callable[[Array], Array] | None = None

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    has_samples: ClassVar[bool] = False
    has_target: ClassVar[bool] = True
    shape_keys: ClassVar[Keys] = ("problem.m", "problem.n")
    fields: ClassVar[Mapping[str, Field]] = {}

    def __new__(cls, *args: Any, **kwargs: Any):
        """``Problem(kind, …)`` builds the registered class of ``kind``."""
        if cls is Problem and (args or "kind" in kwargs):
            cls = problem_class(args[0] if args else kwargs["kind"])
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if self.kind != type(self).name:
            raise ValueError(f"problem.kind: {self.kind!r} is not {type(self).__name__}'s name")

    @property
    def shape(self) -> tuple[int, int]:
        return (self.m, self.n)

    # -- from the config section p = cfg["problem"] -------------------------------------

    @classmethod
    def validate(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        """The kind's cross-field rules (ConfigError naming the field). Here: the
        target's rank fits W and ``singular_values`` (if given) number ``rank`` and are
        ≥ 0."""
        if p["rank"] > min(p["m"], p["n"]):
            raise ConfigError(
                f"problem.rank: must be ≤ min(problem.m, problem.n) = {min(p['m'], p['n'])}, "
                f"got {p['rank']}"
            )
        sv = cls.singular_values_of(p)
        if sv is not None and len(sv) != p["rank"]:
            raise ConfigError(
                f"problem.singular_values: needs problem.rank = {p['rank']} values, got {len(sv)}"
            )
        check_nonnegative(sv)

    @classmethod
    def check_config(cls, p: Mapping[str, Any], init: Mapping[str, Any]) -> None:
        """Every rule of the kind on a resolved section (ConfigError naming the field):
        :meth:`validate`, then no key of another kind's :attr:`fields` set to other
        than its default."""
        cls.validate(p, init)
        for key, (f, owners) in declared_fields().items():
            if cls.name not in owners and p.get(key, f.default) != f.default:
                kinds = " or ".join(repr(k) for k in owners)
                raise ConfigError(
                    f"problem.{key}: only for problem.kind = {kinds}, not {p['kind']!r}"
                )

    @classmethod
    def shape_of(cls, p: Mapping[str, Any]) -> tuple[int, int]:
        """W's shape ``(m, n)``, set by :attr:`shape_keys`."""
        return p["m"], p["n"]

    @classmethod
    def target_rank_of(cls, p: Mapping[str, Any]) -> int:
        """The target's rank (of kinds with a target; the ``rank`` field of others)."""
        return p["rank"]

    @classmethod
    def singular_values_of(cls, p: Mapping[str, Any]) -> list[float] | None:
        """The target's singular values as the config sets them: given, or the kind's
        default (None: :func:`default_singular_values`, filled by :meth:`from_config`)."""
        return p["singular_values"]

    @classmethod
    def derive(cls, p: dict[str, Any]) -> None:
        """Write the kind's derived values into ``p`` (in place; here none)."""

    @classmethod
    def data_memory(cls, p: Mapping[str, Any], item: int) -> dict[Keys, int]:
        """One run's bytes of the kind's data, by the config keys that set them
        (``item``: bytes per float; the target and W are counted by the family).
        Here: none (0 bytes)."""
        return cls.data_part(0)

    @classmethod
    def data_part(cls, nbytes: int) -> dict[Keys, int]:
        """``nbytes`` of data, set by ``problem.samples`` and W's :attr:`shape_keys`."""
        return {("problem.samples", *cls.shape_keys): nbytes}

    @classmethod
    def precheck(cls, p: Mapping[str, Any], x64: bool) -> None:
        """Checks before anything compiles (ConfigError naming the field; here none)."""

    @classmethod
    def from_config(cls, p: Mapping[str, Any]) -> Problem:
        """The static problem of a resolved section."""
        m, n = cls.shape_of(p)
        rank = cls.target_rank_of(p)
        sv = cls.singular_values_of(p)
        sv = sv if sv is not None else default_singular_values(rank)
        return cls(cls.name, m, n, rank, p["samples"], tuple(float(v) for v in sv))

    # -- the static problem -------------------------------------------------------------

    def make_data(self, key: PRNGKeyArray, noise: Float[Array, ""], dtype) -> Data:
        """The problem's data (and target ``W*`` under ``"target"``), from ``key``."""
        raise NotImplementedError(f"problem kind {self.kind!r} defines no make_data")

    def loss(self, W: Float[Array, "m n"], data: Data) -> Float[Array, ""]:
        """The full-data loss ``L(W)`` (kinds with samples: :meth:`batch_loss` on all)."""
        if self.has_samples:
            return self.batch_loss(W, data, None)
        raise NotImplementedError(f"problem kind {self.kind!r} defines no loss")

    def sample_losses(self, W: Float[Array, "m n"], data: Data) -> Float[Array, " N"]:
        """The loss of each data point (problems with samples), normalised so that their
        mean is :meth:`loss`: ``L(W) = (1/N) Σ_k ℓ_k(W)``. Their gradients are the
        per-sample gradients ``g_k`` whose spread is minibatch noise (docs/theory.md, T10)."""
        raise ValueError(f"problem.kind: {self.kind!r} has no data points")

    def batch_loss(
        self,
        W: Float[Array, "m n"],
        data: Data,
        idx: Int[Array, " batch"] | Minibatch | None,
    ) -> Float[Array, ""]:
        """The loss on the data points ``idx`` (all of them when ``None``; the first
        ``idx.size`` of a :class:`Minibatch`), normalised like :meth:`loss`, so that its
        mean over uniform minibatches is ``L(W)``; :meth:`loss` for kinds without samples."""
        if not self.has_samples:
            return self.loss(W, data)
        raise NotImplementedError(f"problem kind {self.kind!r} defines no batch_loss")

    def lipschitz_constant(self, data: Data) -> Float[Array, ""]:
        """T3: the Lipschitz constant of ``∇L`` on ``data`` (the step bound of
        :func:`rankflow.theory.nuclear_minimiser`); a ValueError where none is known."""
        raise ValueError(f"lipschitz_constant: no known constant for problem kind {self.kind!r}")


# --- the registry --------------------------------------------------------------------------

# Every problem kind by name, in registration order: the vocabulary of ``problem.kind``.
PROBLEMS: dict[str, type[Problem]] = {}


# The problem section of the family's schema once :func:`problem_section` built it (None
# before): a kind registered later may declare only the keys it holds.
_SECTION: dict[str, Field] | None = None


def register_problem(cls: type[Problem]) -> type[Problem]:
    """Register a problem kind (a class decorator): ``PROBLEMS[cls.name] = cls``. Refuses
    a class that is no :class:`Problem`, has no ``name`` or reuses a registered one, and
    :attr:`~Problem.fields` that clash with another kind's or (a kind registered after
    the schema was built, e.g. in a test) that the problem section does not hold."""
    if not (isinstance(cls, type) and issubclass(cls, Problem)):
        raise TypeError(f"register_problem: {cls!r} is not a subclass of Problem")
    if not cls.name or not cls.description:
        raise ValueError(f"register_problem: {cls.__name__} needs a name and a description")
    if cls.name in PROBLEMS:
        raise ValueError(
            f"register_problem: problem.kind {cls.name!r} is registered already "
            f"({PROBLEMS[cls.name].__qualname__})"
        )
    known = declared_fields()
    for key, f in cls.fields.items():
        if key in known and known[key][0] != f:
            raise ValueError(
                f"register_problem: {cls.__name__}.fields: problem.{key} is declared "
                f"otherwise by problem.kind {known[key][1][0]!r}"
            )
        if _SECTION is not None and _SECTION.get(key) != f:
            raise ValueError(
                f"register_problem: {cls.__name__}.fields: problem.{key} is not in the "
                f"config schema's problem section, built when rankflow.core.config was "
                f"imported; a kind with config keys of its own registers on import of "
                f"rankflow.core.problems"
            )
    PROBLEMS[cls.name] = cls
    return cls


def declared_fields() -> dict[str, tuple[Field, tuple[str, ...]]]:
    """The keys the registered kinds declare (:attr:`Problem.fields`), in order of
    registration: name → (its field, the kinds declaring it)."""
    out: dict[str, tuple[Field, tuple[str, ...]]] = {}
    for name, cls in PROBLEMS.items():
        for key, f in cls.fields.items():
            out[key] = (f, (*out.get(key, (f, ()))[1], name))
    return out


def problem_section(common: Mapping[str, Field]) -> dict[str, Field]:
    """The ``problem`` section of the family's schema: the ``common`` fields (with
    ``kind``'s check :class:`RegisteredKinds`), then every registered kind's own
    (:attr:`Problem.fields`), in order of registration. A kind's key that is a common
    one is a ValueError. Kinds registered afterwards may declare only keys it holds."""
    global _SECTION
    section = dict(common)
    for key, (f, owners) in declared_fields().items():
        if key in common:
            raise ValueError(
                f"problem.{key}: declared by problem.kind {owners[0]!r} and common to every kind"
            )
        section[key] = f
    _SECTION = section
    return dict(section)


class RegisteredKinds(OneOf):
    """The check of ``problem.kind``: one of the registered kinds, read from
    :data:`PROBLEMS` when checked (a kind registered after import is accepted)."""

    def __init__(self) -> None:
        object.__setattr__(self, "hint", False)

    @property
    def options(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(PROBLEMS)


def unregister_problem(name: str) -> None:
    """Remove the kind ``name`` from :data:`PROBLEMS` (KeyError if it is not there)."""
    del PROBLEMS[name]


@contextlib.contextmanager
def registered(cls: type[Problem]) -> Iterator[type[Problem]]:
    """``with registered(Kind):`` the kind is registered inside the block only."""
    register_problem(cls)
    try:
        yield cls
    finally:
        unregister_problem(cls.name)


def problem_class(kind: str) -> type[Problem]:
    """The registered class of ``problem.kind`` (ConfigError naming the allowed ones)."""
    try:
        return PROBLEMS[kind]
    except KeyError:
        raise ConfigError(
            f"problem.kind: must be one of {', '.join(PROBLEMS)}, got {kind!r}"
        ) from None


def make_problem(cfg: Mapping[str, Any]) -> Problem:
    """The :class:`Problem` of a resolved config."""
    p = cfg["problem"]
    return problem_class(p["kind"]).from_config(p)
