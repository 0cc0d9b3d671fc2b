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
