"""Mutants of the ``geometry`` experiment's claims (docs/theory.md, T14; see
tests/claims/test_mutants.py): each claim, fed a wrong theory or the table of a wrong
implementation, fails; on the right runs (``sims/reproduce/geometry.toml`` as written,
its ``--quick`` size) it passes.

Wrong theory: the radius 1/(2λ) for ρ/λ (ρ = 1/2 given to the sign claim), and ρ = 1 for
Muon (the spectral norm then ends 13% above it, beyond the bound). Wrong implementation:
the decay not multiplied by η, ``θ ← θ − ηU − λθ`` (the kinds ``sign_gd``, ``lion`` and
``muon`` monkeypatched to chain ``add_decayed_weights(−λ)`` after the learning rate), whose
factors settle at radius ≈ η/λ, not 1/λ."""

from __future__ import annotations

import optax
import pytest

import rankflow
from rankflow.core import config as config_lib
from rankflow.core.dynamics import discrete as kinds
from rankflow.engine import programs
from rankflow.reproduce import geometry
from rankflow.reproduce._common import config_path

MUTANT_CLAIMS = geometry.CLAIMS


def _undecayed_by_eta(direction):
    """A kind's optimizer whose decay per step is λ, not ηλ: ``−η·u − λθ``."""

    def optimizer(self, learning_rate, hyper, key):
        return optax.chain(
            direction(self, hyper),
            optax.scale_by_learning_rate(learning_rate),
            optax.add_decayed_weights(-hyper["lam"]),
        )

    return optimizer


MUTANT_KINDS = {
    kinds.SignGD: lambda self, hyper: optax.scale_by_sign(),
    kinds.Lion: lambda self, hyper: optax.scale_by_lion(),
    kinds.Muon: lambda self, hyper: optax.contrib.muon(learning_rate=-1.0),
}


def _norms(overrides=None):
    cfg = config_lib.resolve(config_path(geometry.CONFIG), overrides or {})
    df = rankflow.run(cfg)
    return geometry.norms_table(df, df.attrs["states"])


@pytest.fixture(scope="module")
def right():
    return _norms()


@pytest.fixture(scope="module")
def undecayed():
    with pytest.MonkeyPatch.context() as mp:
        for kind, direction in MUTANT_KINDS.items():
            mp.setattr(kind, "optimizer", _undecayed_by_eta(direction))
        # Compiled programs hold the right chains: build them again.
        mp.setattr(programs, "PROGRAMS", {})
        norms = _norms({"sweep.dynamics.kind": ["sign_gd", "lion", "muon"]})
    programs.release()
    return norms


def _check(claim, name, expect):
    assert claim.name == name
    assert claim.verdict == expect, f"{name}: expected {expect}; {claim.measurement}"


def test_mutant_geometry_sign_bound_reached(right, undecayed):
    name = "geometry.sign_bound_reached"
    _check(geometry.sign_bound_claim(right), name, "pass")
    _check(geometry.sign_bound_claim(right, rho=0.5), name, "fail")  # radius 1/(2λ)
    _check(geometry.sign_bound_claim(undecayed), name, "fail")


def test_mutant_geometry_muon_bound(right, undecayed):
    name = "geometry.muon_bound"
    _check(geometry.muon_bound_claim(right), name, "pass")
    _check(geometry.muon_bound_claim(right, rho=1.0), name, "fail")
    _check(geometry.muon_bound_claim(undecayed), name, "fail")


def test_the_undecayed_mutant_runs_the_mutant_chain(undecayed):
    """The mutant really changed the runs: with decay λ per step the factors end near
    η/λ·(norm of one update), far inside 1/λ."""
    last = undecayed.sort_values("t").groupby(["run_id", "factor"]).tail(1)
    assert (last["max_norm"] * last["dynamics.lam"] < 0.5).all()
