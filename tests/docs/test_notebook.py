"""The notebook examples/own_sweep.ipynb (issue #41, item 8): committed without outputs,
executed here with nbclient (kernel ``python3``) in the default run, its results read
back from the kernel and checked against the theory: ``rankflow.fit``'s table (T5's
bracket over each run's early window, the slower phase named where it is), the figure
with each run's prediction (``quick_plot(..., theory=fits)``, pickled back), and
``compare``'s order in η (T8) and T5's exact step. Each check is shown to fail on a
plausible wrong version (the rate over ηλ, no slower phase named, a theory line in
another run's colour or none, a zeroth- or second-order scheme, GD's leading factor
(1 − ηλ)² taken for T5's exact step, a cell that raises; a notebook that computes nothing
fails reading its tables back).

The checks are pure functions of what the notebook computed, so the wrong versions cost
no second execution. The whole notebook runs in one kernel from a temporary folder (it
writes nothing); measured 2026-12-04 on the shared 2-core AMD EPYC: see the docstring of
:func:`executed`."""

from __future__ import annotations

import base64
import copy
import json
import pickle
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers import ROOT
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from rankflow import fitting, theory
from rankflow.compare import ORDER_TOL
from rankflow.reproduce.discrete import T5_TOL

NOTEBOOK = ROOT / "examples" / "own_sweep.ipynb"
PNG = b"\x89PNG\r\n\x1a\n"
# What the test reads back from the kernel after the notebook's own cells: the tables it
# made, as JSON (columns → lists).
REPORT_CELL = """
import base64, json, pickle
print("figure:", base64.b64encode(pickle.dumps(fig)).decode())
print("numbers:", json.dumps({
    "fits": fits.drop(columns="bracket").to_dict("list"),
    "sweep": sweep.to_dict("list"),
    "order": tables["order"].to_dict("list"),
    "verdict": judged["verdict"].to_dict("list"),
}))
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
sys.path.insert(0, str(ROOT / "tests" / "plots"))
from figure_checks import figure_problems, theory_colour_problems  # noqa: E402


def failure(nb, path: Path | str) -> str:
    """The first failed cell of an executed ``nb``: its index, source and error."""
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                trace = ANSI.sub("", "\n".join(out.get("traceback", [])))[-3000:]
                return (
                    f"{path}: cell {index} failed:\n{cell.source}\n"
                    f"{out['ename']}: {out['evalue']}\n{trace}"
                )
    return f"{path}: a cell failed"


def execute(nb, cwd: Path, path: Path | str = NOTEBOOK, timeout: int = 600):
    """``nb`` executed in a fresh ``python3`` kernel started in ``cwd``; a cell error
    fails the test with that cell's index, source and error."""
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except CellExecutionError:
        pytest.fail(failure(nb, path), pytrace=False)
    return nb


def printed(nb, name: str) -> str:
    """What the last cell printed on its line ``NAME: …``."""
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o["output_type"] == "stream")
    (line,) = [x for x in text.splitlines() if x.startswith(f"{name}: ")]
    return line[len(name) + 2 :]


def printed_numbers(nb) -> dict:
    """The tables the notebook made, as JSON (columns → lists)."""
    return json.loads(printed(nb, "numbers"))


def printed_figure(nb):
    """The balance-gap figure the notebook drew (a matplotlib Figure, pickled)."""
    return pickle.loads(base64.b64decode(printed(nb, "figure")))


def images(nb) -> list[bytes]:
    """Every PNG the notebook displayed."""
    return [
        base64.b64decode(o["data"]["image/png"])
        for c in nb.cells
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The committed notebook and the report cell, executed once for the module.
    Measured 2026-12-04 on the shared 2-core machine at load 2: 44 s with a cold
    compilation cache (50 s for the file; of the CPU: imports 2.8 s, the sweep's one
    program 11.4 s, the fit and figure 1.0 s, ``compare``'s two programs 20.8 s), 20 s
    with rankflow's persistent cache warm (25 s for the file); 83 s cold at load 6-8."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_CELL.strip()))
    return execute(nb, tmp_path_factory.mktemp("notebook"))


# --- the committed file ------------------------------------------------------------------


def output_errors(nb) -> list[str]:
    """The code cells of ``nb`` that carry outputs or an execution count."""
    return [
        f"cell {i}: outputs or execution count committed"
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]


def test_the_committed_notebook_is_valid_and_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert output_errors(nb) == []
    assert sum(c.cell_type == "code" for c in nb.cells) >= 4
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 4
    with_output = copy.deepcopy(nb)
    cell = next(c for c in with_output.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", text="1.0001\n")]
    cell.execution_count = 1
    assert output_errors(with_output) == ["cell 1: outputs or execution count committed"]


# --- the checks ----------------------------------------------------------------------------


def order_errors(order: dict, verdict: dict, tol: float = ORDER_TOL) -> list[str]:
    """T8: at each point, the distances at η/2^j (fixed horizon ηt) fit order 1 to
    ``tol`` (fitted here), the table's fitted order is that of its distances, and
    ``judge``'s verdict passes."""
    errors = [f"point {i}: {v}" for i, v in enumerate(verdict["verdict"]) if v != "pass"]
    eta, dist = np.asarray(order["dynamics.eta"]), np.asarray(order["distance"])
    points = np.asarray(order["point"])
    for point in np.unique(points):
        at = points == point
        p, _ = theory.convergence_order(eta[at], dist[at])
        if not np.isclose(p, np.asarray(order["order"])[at][0], rtol=1e-12):
            errors.append(f"point {point}: the table's order is not that of its distances")
        if abs(p - 1) > tol:
            errors.append(f"point {point}: order {p:.3f}, not 1 ± {tol}")
    return errors


def fit_errors(fits: dict) -> list[str]:
    """T5 over each GD run's early window (the one ``rankflow.fit`` found): the verdict
    passes, and rate/(2ηλ) lies in ``theory.gd_rate_bracket(η, λ)`` widened by
    ``fitting.Z`` standard errors (computed here, not read from the table); the runs at
    λ = 0.1 end their window at a slower phase and those at λ = 0.03 do not (the
    notebook's text says which)."""
    errors = []
    rows = zip(fits["dynamics.eta"], fits["dynamics.lam"], fits["ratio"], fits["ratio_se"])
    for i, (eta, lam, ratio, se) in enumerate(rows):
        lo, hi = theory.gd_rate_bracket(eta, lam)
        if fits["dynamics.kind"][i] != "gd" or fits["verdict"][i] != "pass":
            errors.append(f"run {i}: {fits['dynamics.kind'][i]} {fits['verdict'][i]}")
        if not lo - fitting.Z * se <= ratio <= hi + fitting.Z * se:
            errors.append(f"run {i}: rate/(2ηλ) {ratio:.6f} outside [{lo:.6f}, {hi:.6f}]")
        slower = fits["end"][i] == "slower phase"
        if slower != (lam == 0.1) or slower != np.isfinite(fits["slow_rate"][i]):
            errors.append(f"run {i} (λ = {lam}): window ends at {fits['end'][i]!r}")
    return errors


def t5_errors(sweep: dict) -> list[str]:
    """T5: GD's measured per-step contraction of ‖D‖ is the exact one-step identity's to
    ``T5_TOL`` at every step of the window, at every point."""
    return [
        f"point {i}: T5 deviation {d:.2e} > {T5_TOL:g}"
        for i, d in enumerate(sweep["t5_deviation_max"])
        if not d <= T5_TOL
    ]


def test_the_notebook_runs_and_its_comparison_agrees_with_the_theory(executed):
    numbers = printed_numbers(executed)
    fits, sweep, order = numbers["fits"], numbers["sweep"], numbers["order"]
    assert len(fits["verdict"]) == 4
    assert fit_errors(fits) == []
    assert len(sweep["point"]) == 2 and len(order["point"]) == 8
    assert order_errors(order, numbers["verdict"]) == []
    assert t5_errors(sweep) == []
    # Wrong versions fail: the rate over ηλ (a missing factor 2), a verdict that failed,
    # no slower phase named;
    assert len(fit_errors(dict(fits, ratio=[2 * r for r in fits["ratio"]]))) == 4
    assert fit_errors(dict(fits, verdict=["fail"] * 4)) != []
    assert fit_errors(dict(fits, end=["end of run"] * 4)) != []
    # a zeroth-order scheme (the same distance at every η), a second-order one, and GD's
    # leading factor (1 − ηλ)² taken for T5's exact step.
    zeroth = dict(order, distance=[1e-2] * len(order["distance"]))
    assert order_errors(zeroth, numbers["verdict"]) != []
    second = dict(order, distance=list(np.asarray(order["distance"]) * order["dynamics.eta"]))
    assert any("not 1" in e for e in order_errors(second, numbers["verdict"]))
    assert order_errors(order, dict(verdict=["pass", "inconclusive"])) == ["point 1: inconclusive"]
    leading = np.abs(np.asarray(sweep["ratio_max"]) - np.asarray(sweep["gd_contraction"]))
    assert t5_errors(dict(sweep, t5_deviation_max=list(leading))) != []


def test_the_notebook_draws_the_gap_with_each_runs_prediction(executed):
    """The figure it shows passes the figure review (tests/plots/figure_checks.py) and
    has each run's theory line in the run's colour, anchored on it; the same figure with
    a theory line recoloured, or with none, fails."""
    pngs = images(executed)
    assert len(pngs) == 1 and pngs[0][:8] == PNG and len(pngs[0]) > 20_000
    fig = printed_figure(executed)
    # Every measured line to the run's end; theory lines end at the fit's window (exempt).
    assert figure_problems(fig, ["gd"], t_end=2000.0) == []  # the notebook's save.t1
    (ax,) = fig.axes
    assert theory_colour_problems(fig) == []
    theory = [ln for ln in ax.get_lines() if ln.get_gid() == "theory"]
    assert len(theory) == 4
    theory[0].set_color(theory[-1].get_color())
    assert len(theory_colour_problems(fig)) == 1
    for line in theory:
        line.remove()
    assert theory_colour_problems(fig) == ["no theory line (gid 'theory') in the figure"]


def test_a_failing_cell_is_reported_with_its_source_and_error(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("y = x / 0")]
    )
    with pytest.raises(pytest.fail.Exception) as info:
        execute(nb, tmp_path, path="mutant.ipynb", timeout=60)
    message = str(info.value)
    assert "mutant.ipynb: cell 1 failed:\ny = x / 0\nZeroDivisionError" in message


# --- the docs page -------------------------------------------------------------------------


def test_the_docs_page_shows_every_cell_and_publishes_the_notebook(tmp_path):
    """docs/hooks.py renders the notebook's cells on docs/examples/own_sweep.md (code
    cells as Python blocks) and publishes the notebook beside it; a code cell holding a
    fence of its own gets a longer one."""
    from test_site import hooks

    nb = nbformat.read(NOTEBOOK, as_version=4)
    markdown = hooks.notebook_markdown(NOTEBOOK)
    for cell in nb.cells:
        shown = f"```python\n{cell.source}\n```" if cell.cell_type == "code" else cell.source
        assert shown in markdown, cell.source[:80]
    page = (ROOT / "docs/examples/own_sweep.md").read_text()
    assert hooks.NOTEBOOK_MARKER.findall(page) == ["examples/own_sweep.ipynb"]
    assert hooks.page_notebooks(ROOT / "docs") == {"examples/own_sweep.ipynb": NOTEBOOK}
    assert "](own_sweep.ipynb)" in page
    assert "(own_sweep.md)" in (ROOT / "docs/examples/index.md").read_text()
    assert "(examples/own_sweep.ipynb)" in (ROOT / "README.md").read_text()
    fenced = copy.deepcopy(nb)
    fenced.cells = [nbformat.v4.new_code_cell('print("""\n```\n""")')]
    path = tmp_path / "fenced.ipynb"
    nbformat.write(fenced, path)
    assert hooks.notebook_markdown(path).startswith('````python\nprint("""\n```\n""")\n````')
