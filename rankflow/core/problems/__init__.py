"""Losses of a factorised matrix W = ABᵀ, their data, and initialisations of (A, B).

Every problem is a static (hashable) description plus a data pytree generated in JAX
from a PRNG key, so that problem data can vary with a traced seed inside one compiled,
vmapped program. Losses are pure functions of ``W`` and the data.

A problem kind is a registered subclass of :class:`Problem` (:mod:`.base` says what it
declares); :data:`PROBLEMS` holds them by name and is the vocabulary of ``problem.kind``.
One module per kind: :mod:`.diagonal`, :mod:`.sensing`, :mod:`.completion`,
:mod:`.regression`, :mod:`.codiagonal`, :mod:`.custom`; :mod:`.initial` holds the
initialisations.

All data losses are normalised so that, on noiseless data, their expectation over the
sampling is ``½‖W − W*‖_F²`` — the same scale as ``diagonal`` — but ``codiagonal``'s,
whose inputs are not white: ``½ tr((W − W*) C (W − W*)ᵀ)``, C its input covariance.
"""

from .base import (
    PROBLEMS,
    Minibatch,
    Problem,
    RegisteredKinds,
    declared_fields,
    draw_minibatch,
    make_problem,
    problem_class,
    problem_section,
    register_problem,
    registered,
    unregister_problem,
)

# The kinds register in this order, the order of the vocabulary (and of --help).
# isort: off
from .diagonal import DIAGONAL_DEFAULT, Diagonal
from .sensing import Sensing
from .completion import Completion
from .regression import Regression
from .codiagonal import Codiagonal
from .custom import Custom, check_custom_loss

# isort: on
from .initial import init_factors

# A new kind: one module defining its registered class, imported above (its place here is
# its place in the vocabulary and --help); its own config keys are its class's ``fields``.

__all__ = [
    "DIAGONAL_DEFAULT",
    "PROBLEMS",
    "Codiagonal",
    "Completion",
    "Custom",
    "Diagonal",
    "Minibatch",
    "Problem",
    "Regression",
    "RegisteredKinds",
    "Sensing",
    "check_custom_loss",
    "declared_fields",
    "draw_minibatch",
    "init_factors",
    "make_problem",
    "problem_class",
    "problem_section",
    "register_problem",
    "registered",
    "unregister_problem",
]
