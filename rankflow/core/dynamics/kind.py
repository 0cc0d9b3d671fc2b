"""The dynamics kind's base class :class:`DynamicsKind` and its registry :data:`DYNAMICS`,
which is the vocabulary of ``dynamics.kind`` (as :data:`rankflow.core.problems.PROBLEMS`
is of ``problem.kind``).

A dynamics kind is one subclass of :class:`DynamicsKind`, registered with
:func:`register_dynamics` (the registry holds one instance of it). It declares what it
can do in class attributes, read without building anything (the capabilities:
continuous or discrete, an SDE, with momentum, taking the Gaussian σ, stochastic, its
noise models, coupled decay, minibatches, its continuous counterpart), and as methods:
its discrete step (:meth:`~DynamicsKind.optimizer`, an optax transformation) or its
vector field (:meth:`~DynamicsKind.drift`), its balance law for ``track``/``fit``
(:meth:`~DynamicsKind.balance_law`) and the factors' decay on a zero loss
(:meth:`~DynamicsKind.zero_loss_decay`, or the reason there is no closed form in
``no_closed_decay``). Registration refuses capabilities that contradict one another.

A new optimizer is one class (here heavy-ball momentum, optax.trace, with decoupled decay; its
zero-loss decay GD's since its momentum stays 0)::

    @register_dynamics
    class HeavyBall(DiscreteKind):
        name = "heavy_ball"
        momentum = True
        zero_loss_decay = staticmethod(laws.gd_decay)

        def optimizer(self, learning_rate, hyper, key):
            return optax.chain(
                optax.trace(decay=1.0 - hyper["mu"]),
                optax.add_decayed_weights(hyper["lam"]),
                optax.scale_by_learning_rate(learning_rate),
            )

Every list of kinds (``dynamics.kind``'s allowed values, the tuples of
:mod:`rankflow.core.vocabulary`) is read from the registry when used
(:class:`KindNames`, :class:`KindMap`), so a kind registered later is in them.
tests/core/test_dynamics_contract.py runs every registered kind through one contract.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ...config.fields import ConfigError
from ..problems import RegisteredKinds

# How the noise of stochastic dynamics enters (docs/theory.md, T6, T9, T10): on the factors
# (σ dW on A and B), on the gradient of W (σ dΞ, reaching the factors as dΞ B and
# dΞᵀA), or as a minibatch gradient's own covariance (the stochastic modified
# equation of sgd).
NOISE_MODELS = ("parameter", "gradient", "minibatch")


class BalanceLaw(NamedTuple):
    """A predicted per-step decay rate of ``‖D‖`` in ``[low, high]`` (``exact``: one
    value), the theory item it comes from (``"T5"``) and the law in words."""

    low: float
    high: float
    source: str
    law: str
    exact: bool = False


class DynamicsKind:
    """One ``dynamics.kind``. Subclass :class:`~.discrete.DiscreteKind` (implement
    :meth:`optimizer`, and :meth:`direction` for decoupled decay) or
    :class:`~.flows.FlowKind` (implement :meth:`drift`), set the capabilities, give
    :meth:`zero_loss_decay` (or ``no_closed_decay``) and :func:`register_dynamics` it.

    Capabilities (class attributes):
        name: the value of ``dynamics.kind``.
        continuous: a flow solved by diffrax (time in steps); else a discrete optimizer.
        sde: a stochastic differential equation (a noise term besides the drift).
        momentum: carries a momentum ``M`` (reads ``dynamics.mu``; a flow's state is
            ``(θ, M)``, ``M(0) = 0``).
        takes_sigma: its noise is the Gaussian σ of docs/theory.md (``dynamics.sigma``).
        stochastic: random (``dynamics.paths`` > 1 allowed).
        noise_models: the ``dynamics.noise`` values it runs, the default first.
        coupled: its decay is L2 in the loss (inside the update), not decoupled.
        minibatches: its gradients are of minibatches of the data (``dynamics.batch``).
        flow: the continuous kind it discretises with dt = 1 (``rankflow compare``).
        noiseless: the kind whose step it takes when its noise is put in the gradient
            (``noise = "gradient"``), or None.
        no_balance_law: why it has no closed balancing rate (None: :meth:`balance_law`).
        no_closed_decay: why :meth:`zero_loss_decay` has no closed form (None: it has).
    """

    name: ClassVar[str] = ""
    continuous: ClassVar[bool] = False
    sde: ClassVar[bool] = False
    momentum: ClassVar[bool] = False
    takes_sigma: ClassVar[bool] = False
    stochastic: ClassVar[bool] = False
    noise_models: ClassVar[tuple[str, ...]] = ()
    coupled: ClassVar[bool] = False
    minibatches: ClassVar[bool] = False
    flow: ClassVar[str | None] = None
    noiseless: ClassVar[str | None] = None
    no_balance_law: ClassVar[str | None] = None
    no_closed_decay: ClassVar[str | None] = None

    # -- discrete dynamics ----------------------------------------------------------------

    def optimizer(self, learning_rate, hyper: Mapping[str, Any], key):
        """The optax transformation of one step, with learning rate ``learning_rate`` (a
        number or a function of the step), the traced ``hyper`` (``lam``, ``sigma``,
        ``mu``) and noise key ``key``."""
        raise ValueError(f"dynamics.kind: no optimizer named {self.name!r}")

    def direction(self, hyper, *, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        """The update direction ``u`` before decoupled decay and learning rate (also the
        attention family's, with per-group decay; ``b1``, ``b2``, ``eps``: Adam's), or
        None where the decay is coupled into the update or the noise drawn inside it."""
        return None

    # -- continuous dynamics --------------------------------------------------------------

    def drift(self, problem, schedule=None) -> Callable:
        """The (drift) vector field ``(t, state, (data, hyper)) → dstate/dt``, η following
        ``schedule``."""
        raise ValueError(f"dynamics.kind: no flow named {self.name!r}")

    def initial_state(self, theta0):
        """The state at t = 0 from the factors: θ, or ``(θ, M = 0)`` with momentum."""
        if self.momentum:
            return theta0, jax.tree.map(jnp.zeros_like, theta0)
        return theta0

    def factors(self, state):
        """The factors ``θ`` of a flow's state."""
        return state[0] if self.momentum else state

    # -- what the theory says -------------------------------------------------------------

    def balance_law(
        self, eta: float, lam: float, *, mu=None, noise=None, sigma=0.0, shape=None
    ) -> BalanceLaw | str:
        """The per-step decay rate of ``‖D‖`` at ``λ > 0`` (docs/theory.md), or the
        reason there is none."""
        return self.no_balance_law or f"no theory for dynamics {self.name!r}"

    def zero_loss_decay(self, t: float, eta: float, lam: float, mu: float) -> float:
        """``c(t)`` with ``θ(t) = c(t)·θ(0)`` on a zero loss (``∇L ≡ 0``, ``M(0) = 0``,
        no noise), after ``t`` steps (a kind without a closed form says why in
        ``no_closed_decay`` instead)."""
        raise NotImplementedError(f"{self.name}: {self.no_closed_decay}")


# --- the registry --------------------------------------------------------------------------

# Every dynamics kind by name (its one instance), in registration order: the vocabulary of
# ``dynamics.kind``.
DYNAMICS: dict[str, DynamicsKind] = {}


def _refusal(cls: type[DynamicsKind]) -> str | None:
    """Why a kind's declaration is refused (capabilities that contradict one another), or
    None."""
    name = cls.name
    if not name:
        return f"{cls.__name__}: needs a name"
    if name in DYNAMICS:
        return f"dynamics.kind {name!r} is registered already ({type(DYNAMICS[name]).__qualname__})"
    if cls.sde and not (cls.continuous and cls.stochastic):
        return f"{name}: an SDE is continuous and stochastic"
    if cls.takes_sigma and not cls.stochastic:
        return f"{name}: a kind taking σ is stochastic"
    if bool(cls.noise_models) != cls.stochastic:
        return f"{name}: stochastic kinds, and only they, list noise models"
    if any(m not in NOISE_MODELS for m in cls.noise_models):
        return f"{name}: noise models are among {', '.join(NOISE_MODELS)}"
    needed = DynamicsKind.drift if cls.continuous else DynamicsKind.optimizer
    if getattr(cls, needed.__name__) is needed:
        what = "continuous" if cls.continuous else "discrete"
        return f"{name}: a {what} kind implements {needed.__name__}"
    if cls.continuous and cls.flow is not None:
        return f"{name}: a flow is its own continuous counterpart (flow = None)"
    if cls.flow is not None and not (cls.flow in DYNAMICS and DYNAMICS[cls.flow].continuous):
        return f"{name}: its flow {cls.flow!r} is no registered continuous kind"
    if (cls.zero_loss_decay is DynamicsKind.zero_loss_decay) == (cls.no_closed_decay is None):
        return f"{name}: gives its zero_loss_decay or, without a closed form, no_closed_decay"
    return None


def register_dynamics(cls: type[DynamicsKind]) -> type[DynamicsKind]:
    """Register a dynamics kind (a class decorator): ``DYNAMICS[cls.name] = cls()``.
    Refuses a class that is no :class:`DynamicsKind`, a name already registered or
    capabilities that contradict one another (ValueError)."""
    if not (isinstance(cls, type) and issubclass(cls, DynamicsKind)):
        raise TypeError(f"register_dynamics: {cls!r} is not a subclass of DynamicsKind")
    why = _refusal(cls)
    if why:
        raise ValueError(f"register_dynamics: {why}")
    DYNAMICS[cls.name] = cls()
    return cls


def unregister_dynamics(name: str) -> None:
    """Remove the kind ``name`` from :data:`DYNAMICS` (KeyError if it is not there)."""
    del DYNAMICS[name]


@contextlib.contextmanager
def registered(cls: type[DynamicsKind]) -> Iterator[DynamicsKind]:
    """``with registered(Kind) as kind:`` the kind (its instance) is registered inside the
    block only."""
    register_dynamics(cls)
    try:
        yield DYNAMICS[cls.name]
    finally:
        unregister_dynamics(cls.name)


def dynamics_of(name: str) -> DynamicsKind:
    """The registered kind ``dynamics.kind = name`` (ConfigError naming the allowed ones)."""
    try:
        return DYNAMICS[name]
    except KeyError:
        raise ConfigError(
            f"dynamics.kind: must be one of {', '.join(DYNAMICS)}, got {name!r}"
        ) from None


class RegisteredDynamics(RegisteredKinds):
    """The check of ``dynamics.kind``: one of the registered kinds, read from
    :data:`DYNAMICS` when checked (a kind registered after import is accepted)."""

    @property
    def options(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(DYNAMICS)


class KindNames(Sequence):
    """The names of the registered kinds that ``select`` (a predicate on a kind) keeps,
    read from :data:`DYNAMICS` whenever used: a live, read-only sequence of strings that
    compares equal to the tuple of its names. ``order``: a sort key on a kind (a stable
    sort of the registration order; default: that order)."""

    def __init__(self, select: Callable[[DynamicsKind], bool], order: Callable | None = None):
        self._select, self._order = select, order

    def names(self) -> tuple[str, ...]:
        kinds = [k for k in DYNAMICS.values() if self._select(k)]
        if self._order is not None:
            kinds.sort(key=self._order)
        return tuple(k.name for k in kinds)

    def __getitem__(self, i):
        return self.names()[i]

    def __len__(self) -> int:
        return len(self.names())

    def __iter__(self):
        return iter(self.names())

    def __contains__(self, name) -> bool:
        return name in self.names()

    def __add__(self, other):
        return self.names() + tuple(other)

    def __radd__(self, other):
        return tuple(other) + self.names()

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(other) == self.names()

    def __hash__(self) -> int:
        return hash(self.names())

    def __repr__(self) -> str:
        return repr(self.names())


class KindMap(Mapping):
    """``name → value(kind)`` for the names :class:`KindNames` ``names`` holds, read live
    (e.g. each stochastic kind's noise models)."""

    def __init__(self, names: KindNames, value: Callable[[DynamicsKind], Any]):
        self._names, self._value = names, value

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        return self._value(DYNAMICS[name])

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self.items()))
