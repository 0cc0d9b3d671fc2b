"""The figure review: every figure that rankflow writes (demo, reproduce, compare, plot,
inspect, attention), captured from ``Figure.savefig`` while its writer runs, passes
``figure_checks.check_figure`` (no offset tick labels, two labelled ticks on every log
axis, colour names the series its theory belongs to, legend colours drawn, titles naming
the dynamics plotted); the checks themselves fail on planted defects, the demo's old
colour-order bug among them (the mutant).

Inputs are the real tables of ``tests/claims/golden`` (captured from the configs of
``sims/``) where a writer reads a run's table, and small synthetic tables where it reads
tables derived by an expensive experiment; no test runs a simulation."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from figure_checks import capture_figures, check_figure, figure_problems
from helpers import build
from matplotlib.figure import Figure

import rankflow.api
from rankflow import cli, plots
from rankflow.plots import core as core_plots

GOLDEN = Path(__file__).resolve().parents[1] / "claims" / "golden"
DEMO_SV = (0.2, 0.4, 0.6, 0.8, 1.0)  # sims/demo.toml lists the target's ascending


def _golden_module():
    spec = importlib.util.spec_from_file_location(
        "golden_tables", GOLDEN.parent / "golden_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENAMED = _golden_module().RENAMED_COLUMNS


def golden(name: str) -> pd.DataFrame:
    """A captured table, its columns under today's names."""
    return pd.read_parquet(GOLDEN / f"{name}.parquet").rename(columns=RENAMED)


def written(monkeypatch, writer, *args, **kwargs) -> list[Figure]:
    """The figures that ``writer(*args, **kwargs)`` saves, in order."""
    with capture_figures(monkeypatch) as figs:
        writer(*args, **kwargs)
    assert figs, f"{getattr(writer, '__name__', writer)} saved no figure"
    return figs


# --- the demo, and its mutant ------------------------------------------------------------


def demo_figure(monkeypatch, tmp_path) -> Figure:
    """``rankflow demo``'s figure, drawn by the command from the demo's captured table
    (``rankflow.api.run`` returns it instead of running)."""
    from rankflow.cli import demo

    monkeypatch.setattr(rankflow.api, "run", lambda cfg, out=None, resume=False: golden("run_demo"))
    (fig,) = written(monkeypatch, demo.cmd_demo, argparse.Namespace(out=str(tmp_path / "demo")))
    return fig


def test_demo_figure(monkeypatch, tmp_path):
    fig = demo_figure(monkeypatch, tmp_path)
    check_figure(fig, {"gd"}, "demo", t_end=golden("run_demo")["t"].max())
    ax_c = fig.axes[2]
    markers = {m.get_color(): m for m in ax_c.lines if m.get_linestyle() == "None"}
    for line in (ln for ln in ax_c.lines if ln.get_linestyle() == "--"):
        # Each dashed max(s_i − λ, 0) runs through its own σ_i's markers (GD's limit).
        mark = markers[line.get_color()]
        at = np.interp(mark.get_xdata(), line.get_xdata(), line.get_ydata())
        np.testing.assert_allclose(at, mark.get_ydata(), atol=1e-3)
    assert "GD" in fig.axes[1].get_title() and "T5" in fig.axes[1].get_title()


def test_mutant_demo_theory_in_config_order_fails_the_review(monkeypatch, tmp_path):
    """The old bug: theory lines coloured in the config's (ascending) order of
    ``singular_values`` while the markers are σ_i descending."""
    monkeypatch.setattr(core_plots, "descending", lambda v: np.asarray(v, dtype=float))
    fig = demo_figure(monkeypatch, tmp_path)
    with pytest.raises(AssertionError, match="colour names the wrong series"):
        check_figure(fig, {"gd"}, "demo (mutant)")


def test_balance_figure_titles_the_dynamics_it_plots():
    """GD's table: T5's (1 − ηλ)^{2t}, titled GD; a gradient-flow table keeps T4."""
    gd = golden("run_demo")
    ax_b = core_plots.balance_figure(gd, target_sv=DEMO_SV).axes[1]
    assert ax_b.get_title().startswith("(b) GD") and "T5" in ax_b.get_title()
    check_figure(ax_b.get_figure(), {"gd"})
    flow = gd.assign(**{"dynamics.kind": "gradient_flow"})
    fig = core_plots.balance_figure(flow, target_sv=DEMO_SV)
    assert "gradient flow" in fig.axes[1].get_title() and "T4" in fig.axes[1].get_title()
    check_figure(fig, {"gradient_flow"})
    with pytest.raises(AssertionError, match="not plotted"):
        check_figure(fig, {"gd"})  # a GD table under gradient flow's title fails


# --- reproduce -----------------------------------------------------------------------------


def reproduce_figures(monkeypatch, tmp_path, module) -> list[Figure]:
    """The figures of ``rankflow reproduce``'s experiment ``module``, its sweeps replaced
    by their captured tables."""
    from rankflow.reproduce import _common

    def sweep(ctx, name):
        return _common.sweep_config(name, ctx.mode), golden(f"reproduce__{name}")

    monkeypatch.setattr(_common, "run_sweep", sweep)
    monkeypatch.setattr(module, "run_sweep", sweep)
    monkeypatch.setattr(_common.Context, "table", lambda self, name, df: None)  # no CSVs
    ctx = _common.Context(out=tmp_path / "reproduce", mode="quick")
    return written(monkeypatch, module.run_experiment, ctx)


def test_reproduce_toy_figures(monkeypatch, tmp_path):
    from rankflow.reproduce import toy

    balance, spectrum = reproduce_figures(monkeypatch, tmp_path, toy)
    t_end = golden("reproduce__toy")["t"].max()
    check_figure(balance, {"gd"}, "toy_balance", t_end=t_end)
    check_figure(spectrum, {"gd"}, "toy_spectrum", t_end=t_end)


def test_reproduce_balancing_figure(monkeypatch, tmp_path):
    from rankflow.reproduce import balancing

    (fig,) = reproduce_figures(monkeypatch, tmp_path, balancing)
    kinds = {"gradient_flow", "gd", "momentum_flow", "stochastic_flow", "adamw"}
    end = {k: golden(f"reproduce__{n}")["t"].max() for k, n in balancing.CONFIGS.items()}
    # (c) gradient flow, (d) every dynamics over the shortest run, (e) AdamW, (f) SGF.
    t_end = {2: end["gradient_flow"], 3: min(end.values()), 4: end["adamw"]}
    check_figure(fig, kinds, "balancing", t_end=t_end | {5: end["stochastic_flow"]})
    assert fig.axes[3].get_xlim()[1] == min(end.values()) == end["stochastic_flow"] == 2500
    # (c): the tested T4 envelope, on the T2 bound under gradient flow, is drawn wide.
    assert any(line.get_linewidth() >= 5 for line in fig.axes[2].lines)


def test_rank_and_depth_figures(monkeypatch, tmp_path):
    """From small tables of the shape the experiments derive (their runs are slow)."""
    rows = []
    for problem in ("sensing", "completion"):
        for lam in (0.01, 0.1, 1.0):
            for seed in (0, 1):
                for name, rank in (
                    ("factorised, weight decay", 3),
                    ("nuclear-norm minimiser", 3),
                    ("unfactorised, plain L2", 6),
                ):
                    sv = np.geomspace(1.0, 1e-6 if rank < 6 else 1e-2, 6) / (1 + lam)
                    sv[rank:] = sv[rank:] * (rank < 6) * 1e-4
                    rows.append(
                        {
                            "problem": problem,
                            "solution": name,
                            "dynamics.lam": lam,
                            "seed": seed,
                            "rank": rank - (lam > 0.5),
                            "model.r": 6,
                            "min_mn": 6,
                            **{f"sv_{i + 1}": v for i, v in enumerate(sv)},
                        }
                    )
    (fig,) = written(monkeypatch, plots.rank_figure, pd.DataFrame(rows), tmp_path / "rank.png")
    check_figure(fig, name="rank")

    t = np.linspace(0, 100, 21)
    diag = pd.concat(
        [
            pd.DataFrame(
                {
                    "run_id": i,
                    "t": t,
                    "dynamics.eta": 0.1,
                    "dynamics.lam": lam,
                    "model.depth": depth,
                    **{f"balance_gap_{j}": np.exp(-0.2 * lam * t) for j in range(1, depth)},
                }
            )
            for i, (depth, lam) in enumerate([(3, 0.5), (4, 1.0)])
        ]
    )
    ranks = pd.DataFrame(
        [
            {
                "problem": p,
                "model.depth": d,
                "dynamics.lam": lam,
                "rank": max(4 - d * lam, 0),
                "nuclear_rank": 3,
                "seed": 0,
            }
            for p in ("sensing", "completion")
            for d in (2, 3, 4)
            for lam in (0.01, 0.1, 0.3)
        ]
    )
    stationary = pd.DataFrame(
        [
            {"model.depth": d, "s": s, "w": max(s - 0.1, 0), "global_minimiser": max(s - 0.1, 0)}
            for d in (3, 4)
            for s in (1.0, 0.7, 0.45, 0.25)
        ]
    )
    (fig,) = written(monkeypatch, plots.depth_figure, diag, ranks, stationary, tmp_path / "d")
    check_figure(fig, {"gradient_flow", "gd"}, "depth")


def test_floor_figure(monkeypatch, tmp_path):
    from rankflow.reproduce import discrete
    from rankflow.reproduce._common import sweep_config

    frames = []
    for name in discrete.FLOOR_CONFIGS:
        df = golden(f"reproduce__{name}").assign(config=name)
        cfg = sweep_config(name, "quick")
        for key in ("m", "n"):
            if f"problem.{key}" not in df:
                df[f"problem.{key}"] = cfg["problem"][key]
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    floor = discrete.floor_table(df)
    exponents, _ = discrete.scaling(floor[discrete._square(floor)])
    (fig,) = written(monkeypatch, plots.floor_figure, df, floor, exponents, tmp_path / "f.png")
    check_figure(fig, {"stochastic_flow"}, "discrete_floor")


def test_noise_models_figure(monkeypatch, tmp_path):
    t = np.linspace(0, 100, 21)
    decay = np.exp(-0.05 * t)
    bands = pd.concat(
        [
            pd.DataFrame(
                {
                    "model": m,
                    "t": t,
                    "mean": decay + f,
                    "q10": 0.8 * (decay + f),
                    "q90": 1.2 * (decay + f),
                }
            )
            for m, f in (
                ("parameter", 1e-2),
                ("gradient", 1e-5),
                ("minibatch", 1e-4),
                ("sgd", 2e-4),
            )
        ]
    )
    lines = pd.concat(
        [
            pd.DataFrame({"sigma": 0.1, "line": n, "t": t, "value": v})
            for n, v in (
                ("T6 floor", np.full(t.size, 1e-2)),
                ("T9", np.exp(-0.06 * t)),
                ("no noise", decay),
            )
        ]
    )
    floor = pd.DataFrame(
        [
            {
                "dynamics.sigma": 0.2,
                "dynamics.noise": n,
                "solver.dt": dt,
                "floor_rms": 1e-2,
                "late_rms": 1e-2 if n == "parameter" else 1e-3 * dt**0.5,
            }
            for n in ("parameter", "gradient")
            for dt in (0.05, 0.1, 0.2)
        ]
    )
    step = pd.DataFrame(
        [
            {
                "problem.kind": k,
                "entry": e,
                "z": 0.5,
                "z_b2": 30.0,
                "z_no_b": -40.0,
                "z_replace": 8.0,
            }
            for k in ("sensing", "regression")
            for e in ("00", "01", "11")
        ]
    )
    (fig,) = written(
        monkeypatch, plots.noise_models_figure, bands, lines, floor, step, 0.1, 0.2, tmp_path / "n"
    )
    check_figure(fig, {"stochastic_flow", "sgd"}, "noise_models", t_end=t.max())


# --- compare -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "compare_gd",
        "reproduce__discrete_gd",
        "compare_sgd",
        "compare_momentum",
        "noise__compare_sme",
    ],
)
def test_compare_figures(monkeypatch, tmp_path, prefix):
    tables = {f.stem.split("__")[-1]: golden(f.stem) for f in sorted(GOLDEN.glob(f"{prefix}__*"))}
    figs = written(monkeypatch, plots.write_compare_figures, tables, tmp_path)
    assert len(figs) == len(tables)
    for (name, df), fig in zip(tables.items(), figs, strict=True):
        s = df.iloc[0]
        # The contraction figure is GD's alone; the others set the optimizer beside its flow.
        kinds = {s["dynamics.kind"]} | ({s["flow.kind"]} if name != "contraction" else set())
        t_end = df["t"].max() if "t" in df else None  # the order table has no time
        check_figure(fig, kinds, f"{prefix} {name}", t_end=t_end)


def test_compare_sweep_figure(monkeypatch, tmp_path):
    from rankflow.plots.compare_sweep import write_compare_sweep_figures

    sweep = golden("compare_sweep__sweep")
    (fig,) = written(monkeypatch, write_compare_sweep_figures, {"sweep": sweep}, tmp_path)
    s = sweep.iloc[0]
    check_figure(fig, {s["dynamics.kind"], s["flow.kind"]}, "compare sweep")


def test_contraction_figure_draws_the_late_factor(monkeypatch, tmp_path):
    df = golden("reproduce__discrete_gd__contraction")
    fig = plots.compare_contraction_figure(df)
    late = 1 - 2 * df["dynamics.eta"].iloc[0] * df["dynamics.lam"].iloc[0]
    levels = [line.get_ydata()[0] for line in fig.axes[0].lines if len(line.get_ydata()) == 2]
    assert any(np.isclose(v, late, rtol=0, atol=1e-15) for v in levels)
    assert "vs" not in fig.get_suptitle()


# --- quick_plot ----------------------------------------------------------------------------


def sweep_table(lams=(0.01, 0.1), etas=(0.05, 0.2), seeds=(0, 1, 2)) -> pd.DataFrame:
    """A λ × η × seed sweep whose balance gap is e^{−2ηλt}·(1 + seed/10)."""
    t = np.linspace(0.0, 50.0, 11)
    rows = []
    for run_id, (lam, eta, seed) in enumerate(
        (lam, eta, seed) for lam in lams for eta in etas for seed in seeds
    ):
        rows.append(
            pd.DataFrame(
                {
                    "run_id": run_id,
                    "path": 0,
                    "t": t,
                    "status": "ok",
                    "seed": seed,
                    "problem.seed": seed,
                    "dynamics.lam": lam,
                    "dynamics.eta": eta,
                    "dynamics.sigma": 0.0,
                    "dynamics.kind": "gd",
                    "balance_gap": np.exp(-2 * eta * lam * t) * (1 + seed / 10),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("hue", ["dynamics.lam", None])
def test_quick_plot_groups_every_swept_column(monkeypatch, tmp_path, hue):
    df = sweep_table()
    (fig,) = written(monkeypatch, plots.quick_plot, df, hue=hue, logy=True, out_path=tmp_path / "q")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        rf"$\lambda$ = {lam:g}, $\eta$ = {eta:g}" for lam in (0.01, 0.1) for eta in (0.05, 0.2)
    ]
    for line, label in zip(ax.lines, labels, strict=True):
        lam, eta = (float(p.split("= ")[1]) for p in label.split(", "))
        x = np.asarray(line.get_xdata(), float)
        # The median over the line's own three seeds only (seed 1: factor 1.1).
        np.testing.assert_allclose(line.get_ydata(), 1.1 * np.exp(-2 * eta * lam * x), rtol=1e-12)
    if hue:  # colour: λ; line style: η
        assert len({ln.get_color() for ln in ax.lines}) == 2
        assert len({ln.get_linestyle() for ln in ax.lines}) == 2
    assert "pooled" not in ax.get_title().lower()
    check_figure(fig, {"gd"}, "quick_plot λ × η", t_end=df["t"].max())


def test_quick_plot_says_what_it_pooled(monkeypatch):
    """Past MAX_LINES the columns other than ``hue`` are pooled, and the title names them."""
    monkeypatch.setattr(core_plots, "MAX_LINES", 3)
    ax = plots.quick_plot(sweep_table(), hue="dynamics.lam", logy=True).axes[0]
    assert len(ax.lines) == 2
    assert r"POOLED across $\eta$ ∈ {0.05, 0.2}" in ax.get_title()
    assert "over each line's runs" not in ax.get_title()


@pytest.mark.parametrize("name", ["run_demo", "run_sensing", "run_diagonal_flow"])
def test_quick_plot_of_captured_runs(monkeypatch, tmp_path, name):
    df = golden(name)
    (fig,) = written(monkeypatch, plots.quick_plot, df, logy=True, out_path=tmp_path / "q")
    kinds = set(df["dynamics.kind"].unique())
    check_figure(fig, kinds, f"quick_plot {name}", t_end=df["t"].max())


# --- attention -----------------------------------------------------------------------------


def test_attention_figures(monkeypatch, tmp_path):
    from rankflow.attention.tables import by_variant

    heads = golden("reproduce__attention_rank__heads")
    figs = written(monkeypatch, plots.attention_rank_figure, heads, tmp_path / "r.png")
    figs += written(monkeypatch, plots.attention_nuclear_gap_figure, heads, tmp_path / "g.png")
    for fig in figs:
        check_figure(fig, {"adamw"})
    tables = [
        golden(f"{n}__heads")
        for n in ("attention_balance_sgd", "attention__balance_adamw", "attention__balance_flow")
    ]
    (fig,) = written(monkeypatch, plots.attention_balance_figure, tables, tmp_path / "b.png")
    # Axes row-major: one column per table, a row per pair.
    ends = {i * len(tables) + j: t["t"].max() for j, t in enumerate(tables) for i in (0, 1)}
    check_figure(fig, {"sgd", "adamw", "gradient_flow"}, "attention balance", t_end=ends)
    loss = by_variant(golden("reproduce__attention_ablation__loss"))
    (fig,) = written(monkeypatch, plots.attention_ablation_figure, loss, tmp_path / "a.png")
    check_figure(fig, name="attention ablation")


@pytest.mark.parametrize("kind", ["lambda", "dh"])
def test_rebuttal_figures(monkeypatch, tmp_path, kind):
    from rankflow.plots.rebuttal import REBUTTAL_FIGURES, experiment_figure

    spec = REBUTTAL_FIGURES[kind]
    rows = [
        {
            spec.x: x,
            "seed": s,
            "decay": d,
            "val_loss": 2 + 0.1 * i + 0.01 * s,
            "rank_qk": 4 - i,
            "rank_vo": 5 - i,
        }
        for i, x in enumerate((0.0, 0.1, 1.0) if kind == "lambda" else (4, 8))
        for s in (0, 1, 2)
        for d in ("on attention", "off attention")
    ]
    (fig,) = written(monkeypatch, experiment_figure, kind, pd.DataFrame(rows), tmp_path / "r")
    check_figure(fig, name=f"rebuttal {kind}")


# --- inspect -------------------------------------------------------------------------------


def test_inspect_figures(monkeypatch, tmp_path):
    path, _, _ = build(
        tmp_path, arch="llama", heads=4, kv_heads=2, d_model=32, layers=2, plant=((1, 1, "qk"),)
    )
    argv = ["inspect", str(path), "--out", str(tmp_path / "o"), "--scatter", "0:1", "--quiet"]
    figs = written(monkeypatch, cli.main, argv)
    figs += written(
        monkeypatch,
        cli.main,
        ["inspect", str(path), "--out", str(tmp_path / "s"), "--spectra", "--quiet"],
    )
    assert len(figs) >= 4  # scatter, layers, findings, spectra
    for fig in figs:
        check_figure(fig)


def test_reference_figure(monkeypatch, tmp_path):
    """The training reference's figure, from the table shipped with the package."""
    from rankflow.inspect import reference_table
    from rankflow.plots.findings import reference_figure

    table = reference_table()
    figs = written(monkeypatch, reference_figure, table, tmp_path / "r.png")
    for fig in figs:
        check_figure(fig, t_end=table["step"].max())


def test_series_figures(monkeypatch, tmp_path):
    heads, rates = [], []
    for layer in range(3):
        for pair in ("qk", "vo"):
            for h in range(4):
                rate = 0.01 * (1 + layer)
                heads += [
                    {
                        "layer": layer,
                        "pair": pair,
                        "head": h,
                        "step": step,
                        "theory": True,
                        "balance_gap_rel": np.exp(-rate * step) * (1 + 0.1 * h),
                        "null_balance_gap_rel": 0.5,
                    }
                    for step in (0, 100, 200, 300)
                ]
                rates.append(
                    {
                        "layer": layer,
                        "pair": pair,
                        "head": h,
                        "theory": True,
                        "rate": rate,
                        "rate_se": 1e-5,
                        "null_rate": 1e-4,
                        "predicted_rate": 0.0201,
                        "predicted_rate_gf": 0.02,
                    }
                )
    figs = written(
        monkeypatch, plots.series_gap_figure, pd.DataFrame(heads), out_path=tmp_path / "g"
    )
    figs += written(monkeypatch, plots.series_rate_figure, pd.DataFrame(rates), tmp_path / "r")
    for fig in figs:
        check_figure(fig, t_end=300)


# --- the checks fail on planted defects ----------------------------------------------------


def test_checks_find_offsets_single_log_labels_and_stray_legend_colours():
    fig = Figure()
    ax_a, ax_b = fig.subplots(1, 2)
    ax_a.plot([0, 1, 2], [0.99001, 0.99002, 0.99003])  # offset tick labels
    ax_b.plot([0, 1], [0.5, 0.9])
    ax_b.set_yscale("log")
    ax_b.yaxis.set_minor_formatter(plots.common.mticker.NullFormatter())
    ax_b.plot([], [], color="C3", label="never drawn")
    ax_b.legend()
    problems = "\n".join(figure_problems(fig))
    assert "offset" in problems
    assert "labelled tick" in problems
    assert "matches no plotted artist" in problems
    plots.save_figure  # noqa: B018  (the writers label short log axes: the review passes)
    fixed = Figure()
    ax = fixed.add_subplot()
    ax.plot([0, 1], [0.5, 0.9])
    ax.set_yscale("log")
    ax.yaxis.set_minor_formatter(plots.common.mticker.NullFormatter())
    plots.common.label_log_axes(fixed)
    check_figure(fixed)


def test_checks_find_titles_naming_dynamics_not_plotted():
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [1, 2], label="GD")
    ax.legend()
    fig.suptitle("GD vs gradient flow")
    with pytest.raises(AssertionError, match="sets the plot against"):
        check_figure(fig, {"gd"})
    fig.suptitle("GD alone")
    ax.set_title("balancing at rate 2ηλ (T4)")
    with pytest.raises(AssertionError, match="not plotted"):
        check_figure(fig, {"gd"})
    ax.set_title("GD: balancing by (1 − ηλ)² per step (T5)")
    check_figure(fig, {"gd"})
    with pytest.raises(AssertionError, match="names the plotted dynamics 'adamw'"):
        check_figure(fig, {"gd", "adamw"})


# --- titles that speak for the data, legends that cover nothing, panels to the end ---------

OLD_RANK_HEADLINE = "Weight decay lowers the rank of every head's products (final step)"


def test_attention_rank_title_shows_the_measured_change(monkeypatch, tmp_path):
    """The title says what is plotted and the means at the smallest and largest λ, each
    equal to the table's; the old fixed-text headline (the mutant) fails the review."""
    heads = golden("reproduce__attention_rank__heads")
    (fig,) = written(monkeypatch, plots.attention_rank_figure, heads, tmp_path / "r.png")
    check_figure(fig, {"adamw"}, "attention rank")
    title = fig.get_suptitle()
    last = heads[heads["t"] == heads.groupby("run_id")["t"].transform("max")]
    for pair, name in (("qk", "key–query"), ("vo", "value–output")):
        d = last[last["pair"] == pair]
        mean = d.groupby(f"train.lam_{pair}")[["rank", "effective_rank"]].mean().sort_index()
        lo, hi = mean.iloc[0], mean.iloc[-1]
        assert (
            f"{name}: numerical rank {lo['rank']:.3g} → {hi['rank']:.3g}, effective rank "
            f"{lo['effective_rank']:.3g} → {hi['effective_rank']:.3g} from λ = "
            f"{mean.index[0]:g} to {mean.index[-1]:g}"
        ) in title
    assert "lowers" not in title
    setting = title.split("\n")[-1]
    fig.suptitle(OLD_RANK_HEADLINE + "\n" + setting)
    with pytest.raises(AssertionError, match="asserts an effect .'lowers'. with no number"):
        check_figure(fig, {"adamw"}, "attention rank (mutant: the old headline)")
    fig.suptitle("Weight decay lowers the mean numerical rank by 42 (final step)\n" + setting)
    with pytest.raises(AssertionError, match=r"\['42'\] drawn nowhere"):
        check_figure(fig, {"adamw"}, "attention rank (mutant: a number not drawn)")
    ranks = fig.axes[0].lines[-1].get_ydata()  # (a)'s mean line: the claim's own numbers
    claim = f"Weight decay lowers the mean numerical rank {ranks[0]:.3g} → {ranks[-1]:.3g}"
    fig.suptitle(claim + "\n" + setting)
    check_figure(fig, {"adamw"}, "attention rank (a claim with its numbers)")


def test_checks_find_claims_without_their_numbers():
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0.0, 1.0, 2.0], [7.9, 6.3, 5.1])
    ax.set_title("(a) effective rank against λ")  # says what is plotted: no number needed
    check_figure(fig)
    for claim in (
        "weight decay reduces the rank",
        "balancing implies low rank",
        "the balance gap settles at T6's floor",  # the old floor figure's title
        "parameter noise stops at a floor",  # the old noise figure's title
    ):
        ax.set_title(claim)
        with pytest.raises(AssertionError, match="asserts an effect"):
            check_figure(fig)
    ax.set_title("effective rank decays 7.9 → 5.1")
    check_figure(fig)
    ax.set_title("effective rank decays 7.9 → 4.1")  # 4.1: no plotted value rounds to it
    with pytest.raises(AssertionError, match=r"\['4.1'\] drawn nowhere"):
        check_figure(fig)
    ax.set_title("effective rank decays (T4)")  # a theorem's label is not a number
    with pytest.raises(AssertionError, match="with no number"):
        check_figure(fig)


def test_checks_find_a_legend_covering_a_line():
    fig = Figure(figsize=(5, 4))
    ax = fig.add_subplot()
    t = np.linspace(0, 1, 50)
    ax.plot(t, 1 - t, color="C0", label="gap")
    ax.plot(t, np.full(50, 0.95), color="C1", label="level")  # runs under an upper legend
    ax.set_title("(a) two lines")
    ax.legend(loc="upper right")
    with pytest.raises(AssertionError, match=r"axes 0 '\(a\) two lines'.*covers.*'level'"):
        check_figure(fig)
    ax.legend(loc="lower left")  # below 0.95, left of the gap's descent: covers nothing
    check_figure(fig)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))  # outside the axes
    check_figure(fig)
    fig.legend(loc="center")  # a figure legend over the axes counts as well
    with pytest.raises(AssertionError, match="figure legend: the legend covers"):
        check_figure(fig)


def test_mutant_demo_legend_inside_its_panel_fails_the_review(monkeypatch, tmp_path):
    """The demo's old legend of panel (c), inside the axes, covered σ₃'s theory line."""
    fig = demo_figure(monkeypatch, tmp_path)
    ax_c = fig.axes[2]
    old = ax_c.get_legend()
    ax_c.legend(old.legend_handles, [t.get_text() for t in old.get_texts()], fontsize="small")
    with pytest.raises(AssertionError, match=r"axes 2 '\(c\).*the legend covers"):
        check_figure(fig, name="demo (mutant: legend inside (c))")


def test_checks_find_a_noise_parameter_of_noiseless_dynamics():
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [1, 0.5], label="GD")
    ax.legend()
    for title in ("GD, η = 0.1, σ = 0", r"GD, $\eta$=0.1, $\sigma$=0.1", "GD, sigma=0"):
        fig.suptitle(title)
        with pytest.raises(AssertionError, match="sets a noise parameter"):
            check_figure(fig, {"gd"})
    fig.suptitle("GD, η = 0.1; singular values σ_i of W")  # σ_i is not a setting
    check_figure(fig, {"gd"})
    fig.suptitle("stochastic GF, η = 0.1, σ = 0.1")
    ax.get_legend().remove()
    check_figure(fig, {"stochastic_flow"})


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("GD, 1 runs", True),
        ("over 1 seeds", True),
        ("2 run", True),
        ("median of 3 head", True),
        ("GD, 1 run", False),
        ("12 runs, 21 seeds", False),
        ("3 run(s) not ok", False),
        ("layer 2 head 3", False),
        ("λ = 0.1 runs", False),
    ],
)
def test_checks_find_plurals_that_disagree(text, bad):
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1])
    ax.set_title(text)
    problems = [p for p in figure_problems(fig) if "disagree in number" in p]
    assert bool(problems) is bad, problems


def test_setting_title_counts_one_run():
    from rankflow.plots.common import setting_title

    df = sweep_table(lams=(0.1,), etas=(0.1,), seeds=(0,))
    assert setting_title(df).endswith("1 run")
    assert setting_title(sweep_table()).endswith("12 runs")


def test_checks_find_a_panel_short_of_the_run_end():
    """The old panel (d) of the balancing figure: the stochastic flow's line stopped at
    2,500 of the 5,000 steps the other runs drew."""
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot(np.linspace(0, 5000, 201), np.exp(-np.linspace(0, 5, 201)), label="GF")
    ax.plot(np.linspace(0, 2500, 201), np.full(201, 0.3), label="stochastic GF")
    ax.set_xlabel(plots.LABELS["t"])
    ax.set_yscale("log")
    ax.legend(loc="lower left")
    with pytest.raises(AssertionError, match="'stochastic GF' ends at t = 2500.*t = 5000"):
        check_figure(fig, t_end=5000)
    check_figure(fig)  # no run end given: not checked
    with pytest.raises(AssertionError, match="'stochastic GF' ends"):
        check_figure(fig, t_end={0: 5000})  # per panel
    ax.lines[1].set_data(np.linspace(0, 4990, 201), np.full(201, 0.3))
    check_figure(fig, t_end=5000)  # within one save interval (24.95)
    ax.set_xlim(0, 2500)
    with pytest.raises(AssertionError, match="x view ends at 2500"):
        check_figure(fig, t_end=5000)


def test_mutant_demo_subtitle_with_sigma_fails_the_review(monkeypatch, tmp_path):
    """The demo's old subtitle set σ=0 for GD (``setting_title``)."""
    fig = demo_figure(monkeypatch, tmp_path)
    assert "sigma" not in fig.get_suptitle()
    fig.suptitle(fig.get_suptitle().replace(", init.scale", r", $\sigma$=0, init.scale"))
    with pytest.raises(AssertionError, match="sets a noise parameter"):
        check_figure(fig, {"gd"}, "demo (mutant: σ=0 in the subtitle)")


def test_attention_rank_title_names_the_runs_it_leaves_out():
    """Runs not ok at their last step are not drawn: the title says how many, and where."""
    heads = golden("reproduce__attention_rank__heads")
    top = heads["train.lam_qk"].max()
    last = heads["t"] == heads.groupby("run_id")["t"].transform("max")
    hit = last & (heads["train.lam_qk"] == top)
    fig = plots.attention_rank_figure(heads.assign(status=np.where(hit, "diverged", "ok")))
    runs = heads.loc[hit, "run_id"].nunique()
    lam = f"{top:g}"
    assert f"{runs} runs diverged before the last step (λ_qk = {lam}" in fig.get_suptitle()
    assert f"to {lam} (means" not in fig.get_suptitle()  # the largest λ drawn is smaller
    check_figure(fig, {"adamw"}, "attention rank, runs left out")
    assert "left out" not in plots.attention_rank_figure(heads).get_suptitle()
