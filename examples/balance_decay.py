"""Balance gap decay across λ and η: the fitted rate against 2ηλ.

Under gradient flow the balance D = AᵀA − BᵀB obeys dD/dt = −2ηλD exactly, whatever the
loss (docs/theory.md, T4): ‖D(t)‖ = e^{−2ηλt}‖D(0)‖, so the fitted rate over 2ηλ is 1.
GD contracts D by (1 − ηλ)² per step plus an η² term (T5); near a minimum its late rate
lies in the bracket [−log(1 − ηλ)², −log(1 − 2ηλ)]/(2ηλ), above 1 by O(ηλ).

One ``rankflow.run`` per dynamics runs the whole λ × η grid as one compiled program
(λ and η are numeric keys), on the paper's 5×5 toy problem in float64; ``rankflow.fit``
fits the rate to each run's balance gap over the window where it follows the law (found
automatically: it ends where the adaptive solve's error floor or rounding begins, named
in its ``end``) and states the verdict against the run's own prediction.

    python examples/balance_decay.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

import rankflow
from rankflow import theory
from rankflow.plots import save_figure

CONFIG = {
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": [0.2, 0.4, 0.6, 0.8, 1.0]},
    "model": {"r": 5},
    "init": {"kind": "gaussian", "scale": 0.3},
    "save": {"t1": 3000, "num": 301},
}
FULL = {"dynamics.lam": [0.01, 0.02, 0.05, 0.1], "dynamics.eta": [0.05, 0.1, 0.2]}
QUICK = {"dynamics.lam": [0.02, 0.1], "dynamics.eta": [0.1, 0.2]}


def fitted_rates(df):
    """One row per run: λ, η, the rate fitted by ``rankflow.fit`` over its window (its end
    ``t_max`` and what ends it), over 2ηλ with its standard error, and the verdict."""
    fit = rankflow.fit(df).sort_values(["dynamics.lam", "dynamics.eta"])
    return [
        {
            "lam": r["dynamics.lam"],
            "eta": r["dynamics.eta"],
            "rate": r["rate"],
            "ratio": r["ratio"],
            "ratio_se": r["ratio_se"],
            "t_max": r["t_max"],
            "end": r["end"],
            "verdict": r["verdict"],
        }
        for r in fit.to_dict("records")
    ]


def figure(df_gf, gf, gd) -> Figure:
    fig = Figure(figsize=(12.8, 4.2), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    runs = df_gf.groupby(["dynamics.lam", "dynamics.eta"])
    rates = [2 * eta * lam for lam, eta in runs.groups]
    cmap = colormaps["viridis"]
    norm = LogNorm(min(rates), max(rates))
    ends = {(r["lam"], r["eta"]): r["t_max"] for r in gf}
    for (lam, eta), run in runs:
        gap = run["balance_gap"].to_numpy()
        c = cmap(norm(2 * eta * lam) * 0.9)
        ax_a.semilogy(run["t"], gap / gap[0], color=c)
        ax_a.semilogy(run["t"], np.exp(-2 * eta * lam * run["t"]), "--", color="k", lw=0.6)
        end = ends[(lam, eta)]
        ax_a.plot(end, float(np.exp(-2 * eta * lam * end)), "|", color="C3", ms=10, mew=1.5)
    ax_a.plot([], [], "|", color="C3", ms=10, mew=1.5, label="end of the fitted window")
    ax_a.legend(fontsize="small", loc="upper right")
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax_a, label="2ηλ")
    ax_a.set_ylim(1e-12, 2)
    ax_a.set_xlabel("t (steps)")
    ax_a.set_ylabel(r"$\|D(t)\|_F \,/\, \|D(0)\|_F$")
    ax_a.set_title(r"(a) gradient flow; dashed: $e^{-2\eta\lambda t}$")

    for rows, marker, name in ((gf, "o", "gradient flow"), (gd, "^", "GD")):
        x = [2 * r["eta"] * r["lam"] for r in rows]
        ax_b.loglog(x, [r["rate"] for r in rows], marker, label=name, mfc="none")
    grid = np.geomspace(5e-4, 0.1, 10)
    ax_b.loglog(grid, grid, "k-", lw=0.7, label="rate = 2ηλ")
    ax_b.set_xlabel("2ηλ")
    ax_b.set_ylabel("fitted rate per step")
    ax_b.set_title("(b) fitted rate against 2ηλ")
    ax_b.legend(fontsize="small")

    x = np.array([r["eta"] * r["lam"] for r in gd])
    xs = np.linspace(x.min() * 0.8, x.max() * 1.1, 100)
    low, high = theory.gd_rate_bracket(xs, 1.0)
    ax_c.fill_between(xs, low, high, color="C2", alpha=0.3, label="GD's bracket (T5)")
    ax_c.plot(x, [r["ratio"] for r in gd], "^", color="C1", label="GD, fitted")
    x_gf, ratio_gf = [r["eta"] * r["lam"] for r in gf], [r["ratio"] for r in gf]
    ax_c.plot(x_gf, ratio_gf, "o", color="C0", mfc="none", label="gradient flow, fitted")
    ax_c.axhline(1.0, color="0.4", ls=":", lw=0.8)
    ax_c.set_xlabel("ηλ")
    ax_c.set_ylabel("fitted rate / (2ηλ)")
    ax_c.set_title("(c) rate over 2ηλ")
    ax_c.legend(fontsize="small")
    fig.suptitle("Balance gap decay on the 5×5 toy (float64), one program per dynamics")
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2 × 2 grid instead of 4 × 3")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="figures")
    args = parser.parse_args(argv)
    sweep = QUICK if args.quick else FULL

    tables = {}
    for kind in ("gradient_flow", "gd"):
        config = {**CONFIG, "dynamics": {"kind": kind}, "sweep": sweep}
        tables[kind] = rankflow.run(config)  # one row per run and save
    gf = fitted_rates(tables["gradient_flow"])
    gd = fitted_rates(tables["gd"])
    for r in gd:
        r["bracket"] = [float(b) for b in theory.gd_rate_bracket(r["eta"], r["lam"])]

    print("     λ      η      2ηλ   GF rate/(2ηλ)   GD rate/(2ηλ)  GD bracket          GF/GD end")
    for f, d in zip(gf, gd, strict=True):
        lo, hi = d["bracket"]
        two_eta_lam = 2 * f["eta"] * f["lam"]
        print(
            f"{f['lam']:6g} {f['eta']:6g} {two_eta_lam:8.4f}  {f['ratio']:14.9f}"
            f"  {d['ratio']:14.6f}  [{lo:.6f}, {hi:.6f}]  {f['end']} / {d['end']}"
        )
    path = save_figure(figure(tables["gradient_flow"], gf, gd), args.out / "balance_decay.png")
    numbers = {"gradient_flow": gf, "gd": gd, "figures": [str(path)]}
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
