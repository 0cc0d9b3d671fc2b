"""Figures from synthetic results tables: structure, exact medians, T4/T3 theory lines."""

import ast
import importlib
import inspect
import pkgutil

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from rankflow import plots
from rankflow.plots import balance_figure, quick_plot, save_figure

ETA = 0.5
LAMS = (0.0, 0.05, 0.2)
TARGET_SV = (1.0, 0.5, 0.1)
TIMES = np.linspace(0.0, 40.0, 21)
OBSERVABLES = (
    "loss",
    "l2_loss",
    "star_loss",
    "l2_penalty",
    "nuclear_norm",
    "frob_minus_nuc",
    "balance_gap",
    "balance_trace",
    "balance_nuclear",
    "effective_rank",
    "stable_rank",
    "rank",
)


def gap0(seed):
    return 1.0 + seed**2  # seeds 0, 1, 3 give 1, 2, 10: median ≠ mean


def make_table(seeds=(0, 1), lams=LAMS, diverge=(0.2, 1, 20.0)):
    """A results table with every column of ``rankflow.run``; ``balance_gap`` is the
    exact T4 curve ``gap0·e^{−2ηλt}``, the final spectrum the exact T3 one. The run
    ``(λ, seed)`` in ``diverge`` is NaN (status "diverged") after time ``diverge[2]``."""
    rows = []
    run_id = 0
    for lam in lams:
        for seed in seeds:
            for t in TIMES:
                gap = gap0(seed) * np.exp(-2 * ETA * lam * t)
                sv = [max(s - lam, 0.0) + 0.3 * s * np.exp(-t / 8) for s in TARGET_SV]
                nuc = sum(sv)
                obs = dict.fromkeys(OBSERVABLES, 0.5)
                obs.update(
                    nuclear_norm=nuc,
                    frob_minus_nuc=0.25 * gap,
                    l2_penalty=nuc + 0.25 * gap,
                    balance_gap=gap,
                    balance_nuclear=1.2 * gap,
                    rank=float(sum(s > 1e-3 for s in sv)),
                )
                obs.update({f"sv_{i + 1}": s for i, s in enumerate(sv)})
                status = "ok"
                if diverge is not None and (lam, seed) == diverge[:2] and t > diverge[2]:
                    status = "diverged"
                    obs = {k: np.nan for k in obs}
                rows.append(
                    {
                        "run_id": run_id,
                        "t": float(t),
                        "status": status,
                        "path": 0,
                        "seed": seed,
                        "problem.seed": 0,
                        "problem.noise": 0.0,
                        "init.scale": 1.0,
                        "init.imbalance": 1.0,
                        "dynamics.lam": lam,
                        "dynamics.eta": ETA,
                        "dynamics.sigma": 0.0,
                        "dynamics.mu": 1.0,
                        "problem.kind": "diagonal",
                        "dynamics.kind": "gradient_flow",
                        "init.kind": "imbalanced",
                        "solver.method": "tsit5",
                        **obs,
                    }
                )
            run_id += 1
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def table():
    return make_table()


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def assert_png(path):
    assert path.exists() and path.stat().st_size > 20_000
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300
    assert len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) > 20  # not one colour


# --- quick_plot ------------------------------------------------------------------------


def test_quick_plot_structure(table):
    fig = quick_plot(table, hue="dynamics.lam", logy=True)
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert len(ax.lines) == len(LAMS)
    assert ax.get_yscale() == "log"
    assert legend_texts(ax) == [rf"$\lambda$ = {lam:g}" for lam in LAMS]
    assert ax.get_legend().get_title().get_text() == plots.LABELS["dynamics.lam"]
    assert "optimizer steps" in ax.get_xlabel()
    assert "1 not ok" in ax.get_title()  # the diverged run is reported


def test_quick_plot_median_matches_hand_computation():
    df = make_table(seeds=(0, 1, 3), lams=(0.05,), diverge=None)
    (line,) = quick_plot(df, hue="dynamics.lam").axes[0].lines
    x, y = line.get_xdata(), line.get_ydata()
    np.testing.assert_array_equal(x, TIMES)
    hand = np.median([[gap0(s) * np.exp(-2 * ETA * 0.05 * t) for s in (0, 1, 3)] for t in TIMES], 1)
    np.testing.assert_allclose(y, hand, rtol=1e-12)
    assert not np.allclose(y, np.mean([gap0(s) for s in (0, 1, 3)]) * hand / gap0(1))


def test_quick_plot_band_only_with_several_runs():
    one = quick_plot(make_table(seeds=(0,), diverge=None), hue="dynamics.lam")
    two = quick_plot(make_table(seeds=(0, 1), diverge=None), hue="dynamics.lam")
    assert len(one.axes[0].collections) == 0
    assert len(two.axes[0].collections) == len(LAMS)


def test_quick_plot_nan_safe_with_diverged_run(table):
    ax = quick_plot(table, hue="dynamics.lam").axes[0]
    line = ax.lines[LAMS.index(0.2)]
    x, y = line.get_xdata(), line.get_ydata()
    assert np.isfinite(y).all() and len(x) == len(TIMES)
    exact = lambda s: gap0(s) * np.exp(-2 * ETA * 0.2 * x)
    early, late = x <= 20.0, x > 20.0
    np.testing.assert_allclose(y[early], 0.5 * (exact(0) + exact(1))[early], rtol=1e-12)
    np.testing.assert_allclose(y[late], exact(0)[late], rtol=1e-12)  # only seed 0 left


def test_quick_plot_masks_nonpositive_on_log_axis(table):
    df = table.copy()
    df.loc[df["t"] == 0.0, "balance_gap"] = 0.0
    df.loc[df["t"] == 2.0, "balance_gap"] = -1.0
    ax = quick_plot(df, hue="dynamics.lam", logy=True).axes[0]
    for line in ax.lines:
        y = line.get_ydata()
        assert np.isnan(y[:2]).all() and (y[2:] > 0).all()


def test_quick_plot_into_given_axes_without_hue(table):
    """Without ``hue`` the swept λ still gets a line of its own (never pooled silently)."""
    fig = Figure()
    ax = fig.add_subplot()
    assert quick_plot(table, y="nuclear_norm", ax=ax, title="mine") is fig
    assert len(ax.lines) == len(LAMS) and ax.get_title() == "mine"
    assert legend_texts(ax) == [rf"$\lambda$ = {lam:g}" for lam in LAMS]
    assert ax.get_yscale() == "linear"
    one = make_table(lams=(0.05,))
    ax = quick_plot(one, y="nuclear_norm").axes[0]
    assert len(ax.lines) == 1 and ax.get_legend() is None


def test_quick_plot_unknown_column(table):
    with pytest.raises(KeyError, match="nope"):
        quick_plot(table, y="nope")


# --- balance_figure (T1, T3, T4) --------------------------------------------------------


@pytest.fixture(scope="module")
def balance(table, tmp_path_factory):
    path = tmp_path_factory.mktemp("figs") / "sub" / "balance.png"
    return balance_figure(table, out_path=path, target_sv=TARGET_SV), path


def test_balance_figure_structure(balance):
    fig, path = balance
    assert isinstance(fig, Figure)
    ax_a, ax_b, ax_c = fig.axes
    n = len(LAMS)
    assert len(ax_a.lines) == 2 * n  # nuclear norm, l2 penalty
    assert len(ax_b.lines) == 3 * n  # balance gap, frob − nuc, T4
    assert len(ax_c.lines) == 2 * len(TARGET_SV)  # measured markers, T3
    assert len(legend_texts(ax_a)) == n + 2
    assert len(legend_texts(ax_b)) == n + 3
    assert len(legend_texts(ax_c)) == len(TARGET_SV) + 1
    assert ax_b.get_yscale() == "log"
    assert ax_a.get_yscale() == ax_c.get_yscale() == "linear"
    assert all("optimizer steps" in ax.get_xlabel() for ax in (ax_a, ax_b))
    assert "1 run(s)" in ax_c.get_title()  # the diverged run is left out of (c)
    assert_png(path)


def test_balance_figure_t4_line_matches_exact_decay(balance, table):
    ax_b = balance[0].axes[1]
    theory = [line for line in ax_b.lines if line.get_linestyle() == "--"]
    measured = [line for line in ax_b.lines if line.get_linestyle() == "-"]
    assert len(theory) == len(measured) == len(LAMS)
    for lam, th, me in zip(LAMS, theory, measured, strict=True):
        np.testing.assert_allclose(th.get_ydata(), me.get_ydata(), rtol=1e-12)
        if lam == 0.0:  # no decay: flat
            np.testing.assert_allclose(th.get_ydata(), th.get_ydata()[0], rtol=1e-12)


def test_balance_figure_t3_markers_and_lines(balance):
    ax_c = balance[0].axes[2]
    markers = [line for line in ax_c.lines if line.get_linestyle() == "None"]
    dashed = [line for line in ax_c.lines if line.get_linestyle() == "--"]
    for i, (mk, th) in enumerate(zip(markers, dashed, strict=True)):
        assert len(mk.get_xdata()) == 2 * len(LAMS) - 1  # one run diverged
        lam, sv = mk.get_xdata(), mk.get_ydata()
        expect = np.maximum(TARGET_SV[i] - lam, 0) + 0.3 * TARGET_SV[i] * np.exp(-TIMES[-1] / 8)
        np.testing.assert_allclose(sv, expect, rtol=1e-12)
        np.testing.assert_allclose(th.get_ydata(), np.maximum(TARGET_SV[i] - th.get_xdata(), 0))


def test_balance_figure_without_target_draws_no_theory(table):
    ax_c = balance_figure(table).axes[2]
    assert len(ax_c.lines) == len(TARGET_SV)
    assert all(line.get_linestyle() == "None" for line in ax_c.lines)
    assert len(legend_texts(ax_c)) == len(TARGET_SV)


def test_balance_figure_balanced_start_on_log_axis():
    df = make_table(diverge=None)
    df["balance_gap"] = 0.0  # T4: balanced start stays balanced; nothing positive to draw
    df["frob_minus_nuc"] = 0.0
    ax_b = balance_figure(df).axes[1]
    assert ax_b.get_yscale() == "log" and len(ax_b.lines) == 0


# --- save_figure and module hygiene -----------------------------------------------------


def test_save_figure_creates_parents_and_png(tmp_path, table):
    out = save_figure(quick_plot(table, hue="dynamics.lam", logy=True), tmp_path / "a" / "b" / "q")
    assert out == tmp_path / "a" / "b" / "q.png"
    assert_png(out)


@pytest.mark.parametrize(
    "module", ["__init__"] + [m.name for m in pkgutil.iter_modules(plots.__path__)]
)
def test_plots_read_tables_only(module):
    name = "rankflow.plots" + ("" if module == "__init__" else f".{module}")
    source = inspect.getsource(importlib.import_module(name))
    tree = ast.parse(source)
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    # Relative imports stay inside the package (``from . import core`` included): no
    # import of the simulation code.
    assert all(n.level <= 1 for n in froms)
    names |= {n.module for n in froms if n.level == 0}
    assert not {m for m in names if m.split(".")[0] in ("jax", "rankflow")}
    assert "matplotlib.pyplot" not in names
