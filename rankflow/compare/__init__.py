"""``rankflow compare``: a discrete optimizer next to the flow it discretises.

A config names a discrete optimizer (``dynamics.kind`` in ``vocabulary.FLOW_OF``: gd,
sgd_gaussian, sgd, momentum, momentum_coupled) with its problem, init and hyperparameters.
:func:`compare` runs the optimizer and its flow (``FLOW_OF[kind]``) on the same problem,
start and hyperparameters (same seed ⇒ same data and start) through
``simulate.program_for(point, save="states")``, and measures, with time t in optimizer
steps (step k against the flow at t = k):

1. ``trajectory``: ‖θ_k − θ(k)‖_F with θ = (A, B) concatenated (docs/theory.md, T8). For
   sgd_gaussian against the stochastic flow the two paths use different noise, so the
   distance is that of the *means over paths*, next to the Monte Carlo floor it would
   have if the true means were equal.
2. ``contraction`` (gd only): the per-step ratio ‖D_{k+1}‖_F/‖D_k‖_F, ``D = AᵀA − BᵀB``,
   at every step of a window, next to the exact one-step prediction of T5
   (``theory.gd_balance_step`` with ``G = ∇L(A_kB_kᵀ)``), its leading factor (1 − ηλ)²
   and the gradient-flow factor e^{−2ηλ} (T4).
3. ``order`` (deterministic pairs): η, η/2, …, η/2^h with the horizon fixed in units of
   ηt (steps doubled at each halving; for momentum μ is halved with η, which keeps the
   flow's path in ηt fixed); the distance at the horizon and the fitted order
   (``theory.convergence_order``, T8: expect 1).
4. ``sde`` (sgd_gaussian with parameter noise): mean, std, 10–90% quantiles and Monte
   Carlo standard error of ``balance_trace`` = tr D over ``dynamics.paths`` paths for
   the optimizer and the stochastic flow, next to the closed form of T6
   (``theory.sgf_mean_balance_trace``).
5. SGD against its stochastic modified equation (:mod:`.sme`; docs/theory.md, T9, T10): sgd
   against ``stochastic_flow`` with ``noise = "minibatch"`` (same ``batch``), and
   sgd_gaussian with ``noise = "gradient"`` against ``stochastic_flow`` with
   ``noise = "gradient"``. ``moments``: mean, std, SE and 10–90% quantiles over paths of
   ``loss``, ``balance_trace`` and ``balance_gap`` at the save times; ``weak``: for η,
   η/2, …, η/2^h at a horizon fixed in ηt (steps doubled at each halving, as for
   ``order``), the difference of the means, its Monte Carlo SE and the fitted weak
   order (:func:`weak_order`; Li, Tai & E: expect 1).

The flow is solved as the config's ``[solver]`` says; unset, ODE flows use adaptive
tsit5, the stochastic flow fixed dt = 0.1 with ShARK (parameter noise) or
Euler–Maruyama, the one Itô solver here (gradient and minibatch noise: multiplicative).
The SME's own discretisation error, O(η·dt) at fixed ηt, is part of what ``weak``
measures; it is first order in η as well, so it moves the constant, not the order.

With a ``[sweep]`` (or ``--set 'sweep.dynamics.eta=[…]'``) every point is compared: the
points of one structure run as one batch on each side (one compilation per structure and
side), each table holds every point's rows after the columns ``point`` and ``sweep.KEY``,
and the ``sweep`` table has one row per point (:mod:`.sweep`): the distance, GD's
contraction, the order in η with its standard error, the SDE's z-scores.

Options of the comparison itself are the keys of :data:`OPTIONS`, given as
``--set compare.KEY=VALUE``, ``overrides={"compare.KEY": value}``, or a ``[compare]``
table of the config (a config with that table is for ``rankflow compare`` only).
Tables (columns in :data:`COLUMNS`) are written as parquet and CSV, with ``summary.md``
and ``config.json``; figures are the caller's (``rankflow compare`` passes
``figures=rankflow.plots.write_compare_figures``: one PNG per table). Nothing here draws.

Judging (:mod:`.verdict`): :func:`judge` turns the ``order`` and ``weak`` tables into
``halvings`` (the order log2(d_j/d_(j+1)) between consecutive learning rates) and
``verdict`` (per point of a sweep, per observable of ``weak``: the fitted order ± SE
against p = 1 within :data:`ORDER_TOL` (T8) or :data:`WEAK_TOL` (T10), the tolerances
``rankflow reproduce`` uses, reading ``pass``, ``fail`` or ``inconclusive`` when the SE
is NaN or above the tolerance); :func:`write` writes them beside the tables, the summary
states them, and ``rankflow compare`` exits 1 unless every verdict passes.

Modules: :mod:`.options` (the ``[compare]`` options), :mod:`.plan` (what a comparison
runs: the steps each table reads, the runs of both programs), :mod:`.run` (the two
configs, their runs and :func:`compare`), :mod:`.output` (:func:`write`: the tables,
verdict, summary and figures written), :mod:`.tables` (the tables and their columns),
:mod:`.sme` (the SME tables and :func:`weak_order`), :mod:`.verdict` (:func:`judge`),
:mod:`.summary` (``summary.md``), :mod:`.sweep` (the tables of a sweep joined).
"""

from .options import OPTIONS as OPTIONS
from .options import Options as Options
from .output import write as write
from .run import compare as compare
from .sme import weak_order as weak_order
from .summary import summary as summary
from .sweep import SWEEP_COLUMNS as SWEEP_COLUMNS
from .tables import COLUMNS as COLUMNS
from .tables import SETTING as SETTING
from .verdict import ORDER_TOL as ORDER_TOL
from .verdict import WEAK_TOL as WEAK_TOL
from .verdict import judge as judge

__all__ = [
    "COLUMNS",
    "OPTIONS",
    "ORDER_TOL",
    "SWEEP_COLUMNS",
    "WEAK_TOL",
    "compare",
    "judge",
    "weak_order",
    "write",
]
