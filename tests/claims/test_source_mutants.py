"""Source mutants, end to end (issue #33): a bug put into rankflow's *source* — an optimizer
chain, a vector field, a noise term, an observable, a sampler, a schedule, a decay group —
must make ``rankflow reproduce`` fail a named claim, and the same experiment without the
bug must pass it.

The mutant tests of ``test_mutants*.py`` run each claim's pure function on data made
under a wrong implementation; here the wrong implementation is monkeypatched into the
modules that ``reproduce`` runs and the whole experiment runs in-process at its
``--quick`` size (``rankflow.reproduce.reproduce(only=[experiment])``), so that the path
from the source to the verdict is what is tested. Compiled programs are dropped before and
after each run (``rankflow.engine.programs.release``), so that no program compiled from
the right source serves a mutant (JAX's persistent cache is keyed by the compiled program
itself, so a mutant never reads a right program from it).

``pytest -m "slow or not slow" -k source_mutant`` runs them all; the toy experiment's (a
few seconds each) are in the default run.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax
import pytest

from rankflow.engine import programs
from rankflow.reproduce import EXPERIMENTS, reproduce


def patch_everywhere(monkeypatch, module, name: str, new) -> None:
    """Replace ``module.name`` by ``new`` in ``module`` and in every loaded rankflow module
    that imported the same object by name (``from .dynamics.vector_fields import noise_term``)."""
    old = getattr(module, name)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("rankflow") and getattr(mod, name, None) is old:
            monkeypatch.setattr(mod, name, new)


# --- the mutations ------------------------------------------------------------------------


def gd_half_decay(monkeypatch) -> None:
    """GD's decay at ηλ/2: ``add_decayed_weights(λ/2)`` in the chain."""
    from rankflow.core import optimizers

    right = optimizers.gd
    patch_everywhere(monkeypatch, optimizers, "gd", lambda lr, lam: right(lr, lam / 2))


def flow_decay_without_eta(monkeypatch) -> None:
    """Gradient flow ``dθ/dt = −η∇L − λθ``: the decay without η."""
    from rankflow.core.dynamics import vector_fields as fields
    from rankflow.numerics.schedules import eta_at

    def gradient_flow_field(problem, schedule=None):
        grads = fields.factor_grads(problem)

        def field(t, theta, args):
            data, hyper = args
            eta = eta_at(t, hyper["eta"], schedule)
            return tuple(-eta * g - hyper["lam"] * x for g, x in zip(grads(theta, data), theta))

        return field

    patch_everywhere(monkeypatch, fields, "gradient_flow_field", gradient_flow_field)


def depth_inner_undecayed(monkeypatch) -> None:
    """Depth L ≥ 3 with decay on the outer factors only (W_1 and W_L), under gradient flow
    and under GD."""
    from rankflow.core import optimizers
    from rankflow.core.dynamics import vector_fields as fields
    from rankflow.numerics.schedules import eta_at

    def decays(theta) -> list[bool]:
        L = len(theta)
        return [L < 3 or j in (0, L - 1) for j in range(L)]

    def gradient_flow_field(problem, schedule=None):
        grads = fields.factor_grads(problem)

        def field(t, theta, args):
            data, hyper = args
            eta = eta_at(t, hyper["eta"], schedule)
            g = grads(theta, data)
            return tuple(
                -eta * (gj + hyper["lam"] * x) if d else -eta * gj
                for gj, x, d in zip(g, theta, decays(theta))
            )

        return field

    def gd(lr, lam):
        mask = lambda params: tuple(decays(params))  # noqa: E731
        return optax.chain(optax.add_decayed_weights(lam, mask), optax.scale_by_learning_rate(lr))

    patch_everywhere(monkeypatch, fields, "gradient_flow_field", gradient_flow_field)
    patch_everywhere(monkeypatch, optimizers, "gd", gd)


def sgd_noise_doubled(monkeypatch) -> None:
    """SGD with Gaussian noise of variance 2σ² (σ√2 in its optax chain)."""
    from rankflow.core import optimizers

    right = optimizers.sgd_gaussian
    noisier = lambda lr, lam, sigma, key: right(lr, lam, sigma * 2**0.5, key)  # noqa: E731
    patch_everywhere(monkeypatch, optimizers, "sgd_gaussian", noisier)


def momentum_ema_swapped(monkeypatch) -> None:
    """Momentum's EMA coefficient swapped: ``optax.ema(μ)`` for ``optax.ema(1 − μ)``, so
    ``M ← μM + (1 − μ)g``."""
    from rankflow.core import optimizers

    def momentum(lr, lam, mu):
        return optax.chain(
            optax.ema(mu, debias=False),
            optax.add_decayed_weights(lam),
            optax.scale_by_learning_rate(lr),
        )

    patch_everywhere(monkeypatch, optimizers, "momentum", momentum)


def schedule_one_step_off(monkeypatch) -> None:
    """The optimizers' learning rate one step ahead: step k uses η(k + 1)."""
    from rankflow.numerics import schedules

    right = schedules.learning_rate

    def learning_rate(eta, schedule=None):
        lr = right(eta, schedule)
        return (lambda k: lr(k + 1)) if callable(lr) else lr

    patch_everywhere(monkeypatch, schedules, "learning_rate", learning_rate)


def _spread_with(monkeypatch, change: Callable) -> None:
    from rankflow.core.dynamics import vector_fields as fields

    right = fields.minibatch_spread
    patch_everywhere(monkeypatch, fields, "minibatch_spread", lambda n, b: change(right, n, b))


def sme_spread_without_root(monkeypatch) -> None:
    """The SME's minibatch spread (N − b)/((N − 1)bN) without its square root."""
    _spread_with(monkeypatch, lambda right, n, b: right(n, b) ** 2)


def sme_spread_batch_off_by_one(monkeypatch) -> None:
    """The SME's minibatch spread computed for b + 1 points where SGD draws b."""
    _spread_with(monkeypatch, lambda right, n, b: right(n, b + 1))


def _noise_term_with(monkeypatch, change: Callable) -> None:
    from rankflow.core.dynamics import vector_fields as fields

    right = fields.noise_term

    @functools.wraps(right)
    def noise_term(kind, theta0, brownian_for, model="parameter", *args, **kw):
        return change(right, kind, theta0, brownian_for, model, *args, **kw)

    patch_everywhere(monkeypatch, fields, "noise_term", noise_term)


def parameter_noise_sigma(monkeypatch) -> None:
    """The stochastic flow's parameter noise ``σ dW`` instead of ``ησ dW``."""
    from rankflow.core.dynamics import vector_fields as fields

    def change(right, kind, theta0, brownian_for, model, *args, **kw):
        term = right(kind, theta0, brownian_for, model, *args, **kw)
        if model == "parameter" and kind == "stochastic_flow":
            sigma = lambda t, y, args: args[1]["sigma"]  # noqa: E731
            return fields.AdditiveNoise(sigma, term.control, term.embed)
        return term

    _noise_term_with(monkeypatch, change)


def gradient_noise_as_parameter(monkeypatch) -> None:
    """Gradient-space noise (SGD's kind, T9) replaced by parameter noise (T6's)."""

    def change(right, kind, theta0, brownian_for, model, *args, **kw):
        model = "parameter" if model == "gradient" else model
        return right(kind, theta0, brownian_for, model, *args, **kw)

    _noise_term_with(monkeypatch, change)


def _choice_with(monkeypatch, change: Callable) -> None:
    right = jax.random.choice

    def choice(key, a, shape=(), replace=True, *args, **kw):
        shape, replace = change(tuple(shape), replace)
        return right(key, a, shape, replace, *args, **kw)

    monkeypatch.setattr(jax.random, "choice", choice)


def minibatch_with_replacement(monkeypatch) -> None:
    """SGD's minibatches drawn with replacement (rankflow's ``sgd`` draws without)."""
    _choice_with(monkeypatch, lambda shape, replace: (shape, True))


def batch_off_by_one(monkeypatch) -> None:
    """SGD's minibatches of b − 1 points where the config says b."""
    _choice_with(monkeypatch, lambda shape, replace: ((shape[0] - 1, *shape[1:]), replace))


def balance_gap_spectral(monkeypatch) -> None:
    """The balance gap ‖AᵀA − BᵀB‖ in the spectral norm instead of Frobenius."""
    from rankflow.core import observables as obs

    right = obs.observables

    @functools.wraps(right)
    def observables(A, B, *args, **kw):
        out = right(A, B, *args, **kw)
        return out | {"balance_gap": jnp.linalg.norm(A.T @ A - B.T @ B, ord=2)}

    patch_everywhere(monkeypatch, obs, "observables", observables)


def nuclear_from_squares(monkeypatch) -> None:
    """The nuclear norm summed from the squared singular values (‖W‖_F²)."""
    from rankflow.core import observables as obs

    right = obs.observables

    @functools.wraps(right)
    def observables(A, B, loss, lam, *args, **kw):
        out = right(A, B, loss, lam, *args, **kw)
        nuclear = jnp.sum(obs.singular_values(A, B) ** 2)
        return out | {
            "nuclear_norm": nuclear,
            "star_loss": loss + lam * nuclear,
            "frob_minus_nuc": out["l2_penalty"] - nuclear,
        }

    patch_everywhere(monkeypatch, obs, "observables", observables)


def momentum_flow_eta_mu_swapped(monkeypatch) -> None:
    """The momentum flow with η and μ passed in each other's place."""
    from rankflow.core.dynamics import vector_fields as fields

    right = fields.momentum_flow_field

    @functools.wraps(right)
    def momentum_flow_field(problem, coupled=False, schedule=None):
        field = right(problem, coupled, schedule)

        def swapped(t, state, args):
            data, hyper = args
            return field(t, state, (data, hyper | {"eta": hyper["mu"], "mu": hyper["eta"]}))

        return swapped

    patch_everywhere(monkeypatch, fields, "momentum_flow_field", momentum_flow_field)


def attention_vo_undecayed(monkeypatch) -> None:
    """The attention optimizer's decay mask misses the value–output pair."""
    from rankflow.attention import optimizers

    right = optimizers.mask

    def mask(params, group):
        out = right(params, group)
        return jax.tree.map(lambda _: False, out) if group == "vo" else out

    patch_everywhere(monkeypatch, optimizers, "mask", mask)


def attention_head_zero_undecayed(monkeypatch) -> None:
    """The attention optimizer's decay skips head 0 of every layer's W_Q, W_K, W_V, W_O."""
    from test_mutants_attention import head_zero_undecayed

    head_zero_undecayed(monkeypatch)


@dataclass(frozen=True)
class Mutant:
    name: str
    experiment: str
    claim: str  # the claim that must fail
    apply: Callable
    slow: bool = True


MUTANTS = (
    Mutant("gd_half_decay", "toy", "toy.balancing_rate", gd_half_decay, slow=False),
    Mutant(
        "nuclear_from_squares", "toy", "toy.l2_meets_nuclear", nuclear_from_squares, slow=False
    ),  # fmt: skip
    Mutant(
        "flow_decay_without_eta", "balancing", "balancing.gradient_flow", flow_decay_without_eta
    ),  # fmt: skip
    Mutant(
        "momentum_flow_eta_mu_swapped",
        "balancing",
        "balancing.momentum_flow",
        momentum_flow_eta_mu_swapped,
    ),  # fmt: skip
    Mutant(
        "momentum_ema_swapped", "optimizers", "optimizers.momentum_order", momentum_ema_swapped
    ),  # fmt: skip
    Mutant(
        "schedule_one_step_off", "optimizers", "optimizers.scheduled_gd_step", schedule_one_step_off
    ),  # fmt: skip
    Mutant("parameter_noise_sigma", "discrete", "discrete.sgf_mean", parameter_noise_sigma),
    Mutant("balance_gap_spectral", "discrete", "discrete.sgf_floor", balance_gap_spectral),
    Mutant("sgd_noise_doubled", "discrete", "discrete.sgf_mean", sgd_noise_doubled),
    Mutant(
        "gradient_noise_as_parameter", "noise", "noise.no_floor", gradient_noise_as_parameter
    ),  # fmt: skip
    Mutant(
        "minibatch_with_replacement", "noise", "noise.sgd_step_mean", minibatch_with_replacement
    ),  # fmt: skip
    Mutant("batch_off_by_one", "noise", "noise.sgd_step_mean", batch_off_by_one),
    Mutant("sme_spread_without_root", "noise", "noise.sme_weak_order", sme_spread_without_root),
    Mutant(
        "sme_spread_batch_off_by_one", "noise", "noise.sme_step_noise", sme_spread_batch_off_by_one
    ),  # fmt: skip
    Mutant("depth_inner_undecayed", "depth", "depth.pairwise_decay", depth_inner_undecayed),
    Mutant("attention_vo_undecayed", "attention", "attention.rank", attention_vo_undecayed),
    Mutant(
        "attention_head_zero_undecayed",
        "attention",
        "attention.sgd_rate",
        attention_head_zero_undecayed,
    ),  # fmt: skip
)


# --- running -------------------------------------------------------------------------------


def run_claims(experiment: str, out) -> dict[str, str]:
    """The verdict of every claim of ``experiment`` run by ``reproduce --quick`` into
    ``out``, with no compiled program kept from before or for after."""
    programs.release()
    try:
        result = reproduce(out, mode="quick", only=[experiment], quiet=True)
    finally:
        programs.release()
    assert not result.crashed, f"{experiment} crashed: {result.crashed}"
    return {c.name: c.verdict for c in result.claims}


@pytest.fixture(scope="module")
def controls(tmp_path_factory) -> Callable[[str], dict[str, str]]:
    """The verdicts of each experiment without a mutation (run once per module)."""
    done: dict[str, dict[str, str]] = {}

    def get(experiment: str) -> dict[str, str]:
        if experiment not in done:
            done[experiment] = run_claims(experiment, tmp_path_factory.mktemp(experiment))
        return done[experiment]

    return get


def _params():
    for m in MUTANTS:
        yield pytest.param(m, id=m.name, marks=[pytest.mark.slow] if m.slow else [])


@pytest.mark.parametrize("mutant", _params())
def test_source_mutant_fails_its_claim(mutant: Mutant, monkeypatch, tmp_path):
    assert mutant.experiment in EXPERIMENTS
    mutant.apply(monkeypatch)
    verdicts = run_claims(mutant.experiment, tmp_path)
    assert verdicts[mutant.claim] == "fail", f"{mutant.name}: {mutant.claim} {verdicts}"


def _experiments():
    for exp in dict.fromkeys(m.experiment for m in MUTANTS):
        slow = all(m.slow for m in MUTANTS if m.experiment == exp)
        yield pytest.param(exp, id=exp, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("experiment", _experiments())
def test_source_mutant_control_passes(experiment: str, controls):
    """Without the mutations, every claim the mutants of ``experiment`` fail passes."""
    verdicts = controls(experiment)
    named = {m.claim for m in MUTANTS if m.experiment == experiment}
    assert all(verdicts[c] == "pass" for c in named), verdicts


def test_source_mutants_are_at_least_twelve():
    assert len({m.name for m in MUTANTS}) >= 12
    assert len(MUTANTS) == len({m.name for m in MUTANTS})
