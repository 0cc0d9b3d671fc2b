"""Docstring examples: every public function and class of rankflow's public modules shows,
in an ``Examples:`` section of its docstring (which mkdocstrings renders), a doctest with
its expected output (which ``pytest --doctest-modules`` runs).

Each module's check is its own test; a mutant shows that a name without an example, or
with one outside an ``Examples:`` section or without an expected output, is reported, and
another that an example checks what the function computes: it fails when the function
computes a wrong formula.
"""

from __future__ import annotations

import doctest
import inspect
import re

import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
import rankflow.compare
import rankflow.inspect
import rankflow.track
from rankflow import theory

# An ``Example:`` / ``Examples:`` heading of a google-style docstring, on its own line.
SECTION = re.compile(r"^(\s*)Examples?:\s*$", re.M)


def has_example(doc: str) -> bool:
    """Whether ``doc`` has an ``Examples:`` section holding a doctest with expected output."""
    for heading in SECTION.finditer(doc):
        indent = len(heading.group(1))
        body = []
        for line in doc[heading.end() :].splitlines()[1:]:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break  # the next section, or text back at the heading's indentation
            body.append(line)
        examples = doctest.DocTestParser().get_examples("\n".join(body))
        if any(example.want.strip() for example in examples):
            return True
    return False


def without_example(module) -> list[str]:
    """The functions and classes of ``module.__all__`` whose docstring lacks an example."""
    return [
        name
        for name in module.__all__
        if (inspect.isfunction(obj := getattr(module, name)) or inspect.isclass(obj))
        and not has_example(inspect.getdoc(obj) or "")
    ]


# --- rankflow.theory ---------------------------------------------------------------------


def test_every_public_function_of_theory_has_an_example():
    public = [n for n in theory.__all__ if callable(getattr(theory, n))]
    assert len(public) == len(theory.__all__) > 50
    assert without_example(theory) == []


def test_theory_mutant_without_an_example_is_reported(monkeypatch):
    def bare(eta, lam):
        """``(1 − ηλ)²``, with no example."""

    def outside(eta, lam):
        """``(1 − ηλ)²``.

        >>> outside(0.1, 0.5)
        """

    def silent(eta, lam):
        """``(1 − ηλ)²``.

        Examples:
          >>> silent(0.1, 0.5)

        Returns:
          0.9025
        """

    monkeypatch.setattr(theory, "gd_contraction", bare)
    monkeypatch.setattr(theory, "gf_contraction", outside)
    monkeypatch.setattr(theory, "gd_balance_rate", silent)
    assert sorted(without_example(theory)) == [
        "gd_balance_rate",
        "gd_contraction",
        "gf_contraction",
    ]


class ExampleRunner(doctest.DocTestRunner):
    """Counts examples whose output differs (``wrong``) apart from those that raise."""

    def __init__(self):
        super().__init__(verbose=False)
        self.attempted = self.wrong = self.raised = 0

    def report_start(self, out, test, example):
        self.attempted += 1

    def report_failure(self, out, test, example, got):
        self.wrong += 1

    def report_unexpected_exception(self, out, test, example, exc_info):
        self.raised += 1


def run_examples(obj) -> ExampleRunner:
    """Run the doctests of ``obj``'s docstring in its module's namespace, quietly."""
    runner = ExampleRunner()
    for test in doctest.DocTestFinder(recurse=False).find(obj, module=inspect.getmodule(obj)):
        runner.run(test, out=lambda _: None)
    return runner


def test_theory_examples_fail_on_a_wrong_formula(monkeypatch):
    """The examples of T5's per-step contraction ``(1 − ηλ)²`` and T4's ``e^{−2ηλt}`` pass
    as written, and print other numbers when the function computes T5's late factor
    ``1 − 2ηλ`` instead, or T4 at half the rate."""
    gf_balance = theory.gf_balance
    wrong = {
        "gd_contraction": lambda eta, lam: 1.0 - 2.0 * jnp.asarray(eta) * jnp.asarray(lam),
        "gf_balance": lambda D0, eta, lam, t: gf_balance(D0, eta / 2, lam, t),
    }
    for name, mutant in wrong.items():
        original = getattr(theory, name)
        right = run_examples(original)
        assert right.attempted > 2 and right.wrong == right.raised == 0, name
        with monkeypatch.context() as patch:
            patch.setattr(theory, name, mutant)
            result = run_examples(original)
        assert result.wrong > 0 and result.raised == 0, name


# --- rankflow, rankflow.compare, rankflow.inspect ----------------------------------------

# Functions and classes in each module's __all__ (its constants, e.g. COLUMNS, have none).
PUBLIC_CALLABLES = {
    "rankflow": 7,
    "rankflow.compare": 4,
    "rankflow.fitting": 10,
    "rankflow.inspect": 60,
    "rankflow.track": 14,
}


NAME = lambda module: module.__name__


def public_callables(module) -> list[str]:
    return [
        n
        for n in module.__all__
        if inspect.isfunction(getattr(module, n)) or inspect.isclass(getattr(module, n))
    ]


@pytest.mark.parametrize(
    "module",
    [rankflow, rankflow.compare, rankflow.fitting, rankflow.inspect, rankflow.track],
    ids=NAME,
)
def test_every_public_function_and_class_has_an_example(module):
    assert len(public_callables(module)) == PUBLIC_CALLABLES[module.__name__]
    assert without_example(module) == []


def test_public_mutant_without_an_example_is_reported(monkeypatch):
    def weak_order(table, observable):
        """The weak order of ``observable``, with no example."""

    class Factor:
        """``gram = XᵀX`` and its square root.

        >>> Factor  # outside an Examples: section
        """

    monkeypatch.setattr(rankflow.compare, "weak_order", weak_order)
    monkeypatch.setattr(rankflow.inspect, "Factor", Factor)
    assert without_example(rankflow.compare) == ["weak_order"]
    assert without_example(rankflow.inspect) == ["Factor"]


def test_public_examples_fail_on_a_wrong_formula(monkeypatch):
    """The examples of ``pairwise_gap_rel`` (relative to the mean of the two norms) and
    ``weak_order`` (a fit weighted by the inverse variance of each log-error) pass as
    written, and print other numbers relative to the larger norm, or fitted unweighted."""
    pairwise, weak_order = rankflow.inspect.pairwise_gap_rel, rankflow.compare.weak_order

    def by_larger_norm(xa, xb):
        na, nb = np.linalg.norm(xa, axis=1)[:, None], np.linalg.norm(xb, axis=1)[None, :]
        gap = np.linalg.norm(xa[:, None, :] - xb[None, :, :], axis=2)
        scale = np.maximum(na, nb)
        return np.divide(gap, scale, out=np.zeros_like(gap), where=scale > 0)

    def unweighted(table, observable):
        rows = table[table["observable"] == observable]
        if len(rows) < 2:
            return float("nan"), float("nan")
        x, y = np.log(rows["dynamics.eta"]), np.log(np.abs(rows["error"]))
        return float(np.polyfit(x, y, 1)[0]), float("nan")

    cases = [
        (rankflow.inspect, "pairwise_gap_rel", pairwise, by_larger_norm),
        (rankflow.compare, "weak_order", weak_order, unweighted),
    ]
    for module, name, original, mutant in cases:
        right = run_examples(original)
        assert right.attempted >= 4 and right.wrong == right.raised == 0, name
        with monkeypatch.context() as patch:
            patch.setattr(module, name, mutant)
            result = run_examples(original)
        assert result.wrong > 0 and result.raised == 0, name
