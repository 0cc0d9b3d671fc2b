"""The core family's dynamics kinds: one registered :class:`~.kind.DynamicsKind` per value
of ``dynamics.kind``, and the registry :data:`~.kind.DYNAMICS`, which is the vocabulary
(:mod:`.kind`). The continuous kinds (the flows of docs/theory.md, solved by diffrax) are
:mod:`.flows`, their vector fields and noise terms :mod:`.vector_fields`; the discrete
kinds (optax optimizers) :mod:`.discrete`; what the theory says of each (balance laws,
decay on a zero loss) :mod:`.laws`. A new kind is one subclass, registered with
:func:`~.kind.register_dynamics`; ``tests/core/test_dynamics_contract.py`` checks every
registered kind.
"""

from .kind import (
    DYNAMICS,
    NOISE_MODELS,
    BalanceLaw,
    DynamicsKind,
    KindMap,
    KindNames,
    RegisteredDynamics,
    dynamics_of,
    register_dynamics,
    registered,
    unregister_dynamics,
)

# The kinds register in this order, the order of the vocabulary (and of --help): the flows
# first (a discrete kind's flow is registered before it), then the discrete kinds.
# isort: off
from . import flows
from . import discrete

# isort: on

__all__ = [
    "DYNAMICS",
    "NOISE_MODELS",
    "BalanceLaw",
    "DynamicsKind",
    "KindMap",
    "KindNames",
    "RegisteredDynamics",
    "discrete",
    "dynamics_of",
    "flows",
    "register_dynamics",
    "registered",
    "unregister_dynamics",
]
