"""How rank falls with depth: W = W_L ⋯ W_1 with weight decay on every factor.

At a balanced point the penalty ½Σ‖W_j‖² equals (L/2)Σσ_i^{2/L} (docs/theory.md, T13):
weight decay on L factors penalises a Schatten quasi-norm of W. On the diagonal loss
½‖W − diag(s)‖² each singular value then solves min ½(w − s)² + (λL/2)w^{2/L}. At L = 2
that is soft-thresholding, max(s − λ, 0) (T3); for L ≥ 3 the global minimiser jumps
from 0 to the larger root of w − s + λw^{2/L−1} = 0 at a threshold s*, and 0 stays a
local minimum, so the same λ removes more singular values.

One ``rankflow.run`` sweeps model.depth (structural: one program per depth), λ and the
seed; GD runs to convergence in float64. Printed per run: the final rank, the rank of
the global minimiser, the largest residual |w − s + λw^{2/L−1}| over the nonzero final
singular values (0 at a stationary point), and the penalty's gap to the Schatten term.

    python examples/depth_rank.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import numpy as np
from matplotlib.figure import Figure

import rankflow
from rankflow import theory
from rankflow.plots import save_figure

S = [1.0, 0.8, 0.6, 0.45, 0.32, 0.22, 0.13, 0.06]  # the target's singular values
CONFIG = {
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": S},
    "model": {"r": len(S)},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 10000, "num": 11},
}
FULL = {
    "model.depth": [2, 3, 4],
    "dynamics.lam": [0.01, 0.02, 0.035, 0.05, 0.07, 0.1, 0.15, 0.2, 0.25],
    "seed": [0, 1, 2],
}
QUICK = {"model.depth": [2, 3, 4], "dynamics.lam": [0.02, 0.1, 0.25], "seed": [0]}
ZERO = 1e-6  # a final singular value below this counts as 0
SHOW_LAM = 0.1  # the λ of panel (b)


def final_values(df) -> list[dict]:
    """One row per run, from its last save (float64 theory: call under jax.enable_x64)."""
    rows = []
    for rec in df[df["t"] == df["t"].max()].to_dict("records"):
        L, lam = int(rec["model.depth"]), float(rec["dynamics.lam"])
        w = np.array([rec[f"sv_{i + 1}"] for i in range(len(S))])
        nonzero = w[w > ZERO]
        # each nonzero w against the target value s it is stationary for
        residual = max(
            (min(abs(float(theory.schatten_scalar_stationarity(v, s, lam, L))) for s in S)
             for v in nonzero),
            default=0.0,
        )  # fmt: skip
        best = np.asarray(theory.schatten_scalar_minimiser(np.array(S), lam, L))
        gap = rec["schatten_gap"] if L > 2 else rec["frob_minus_nuc"]  # ½Σ‖W_j‖² − its floor
        rows.append(
            {
                "depth": L,
                "lam": lam,
                "seed": int(rec["seed"]),
                "status": str(rec["status"]),
                "sv": w.tolist(),
                "rank": int(nonzero.size),
                "rank_global": int(np.sum(best > 0)),
                "residual": residual,
                "schatten_gap": float(gap),
            }
        )
    return rows


def figure(rows) -> Figure:
    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    depths = sorted({r["depth"] for r in rows})
    lam_all = [r["lam"] for r in rows]
    lams = np.geomspace(min(lam_all) * 0.8, max(lam_all) * 1.2, 300)
    for i, L in enumerate(depths):
        s_star = np.asarray(theory.schatten_threshold(lams, L).s)  # 0 below, nonzero above
        best = np.sum(np.array(S)[None, :] > s_star[:, None], axis=1)
        ax_a.step(lams, best, where="mid", color=f"C{i}", label=f"L = {L}: global minimiser")
        mine = [r for r in rows if r["depth"] == L]
        x = [r["lam"] * (1 + 0.04 * (i - 1)) for r in mine]  # side by side
        ax_a.plot(x, [r["rank"] for r in mine], "o", color=f"C{i}", mfc="none",
                  label=f"L = {L}: GD, each seed")  # fmt: skip
    ax_a.set_xscale("log")
    ax_a.set_xlabel("weight decay λ")
    ax_a.set_ylabel("rank of W at the end")
    ax_a.set_title("(a) final rank against λ")
    ax_a.legend(fontsize="x-small")

    s = np.linspace(0.0, 1.05, 400)
    for i, L in enumerate(depths):
        ax_b.plot(s, np.asarray(theory.schatten_scalar_minimiser(s, SHOW_LAM, L)),
                  color=f"C{i}", label=f"L = {L}: global minimiser")  # fmt: skip
        # the stationary branch: s = w + λw^{2/L−1} (stationarity at s = 0, moved by s),
        # from its turning point on, where it is a local minimum
        w = np.linspace(1e-4, 1.05, 2000)
        s_of_w = np.asarray(theory.schatten_scalar_stationarity(w, 0.0, SHOW_LAM, L))
        turn = np.argmin(s_of_w)
        ax_b.plot(s_of_w[turn:], w[turn:], ":", color=f"C{i}", lw=1)
        for r in rows:
            if r["depth"] == L and np.isclose(r["lam"], SHOW_LAM):
                ax_b.plot(S, sorted(r["sv"], reverse=True), "o", color=f"C{i}", mfc="none")
    ax_b.plot([], [], "k:", lw=1, label=r"local minima $w - s + \lambda w^{2/L-1} = 0$")
    ax_b.plot([], [], "ko", mfc="none", label=r"GD: final $\sigma_i$ against $s_i$")
    ax_b.set_xlim(0, 1.05)
    ax_b.set_ylim(-0.03, 1.0)
    ax_b.set_xlabel("target singular value s")
    ax_b.set_ylabel("final singular value w")
    ax_b.set_title(f"(b) λ = {SHOW_LAM}: soft threshold (L = 2), jumps (L ≥ 3)")
    ax_b.legend(fontsize="x-small", loc="upper left")
    fig.suptitle("Weight decay on L factors of W = W_L ⋯ W_1: diagonal target, GD, float64")
    return fig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 λ, 1 seed instead of 9 and 3")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="figures")
    args = parser.parse_args(argv)
    df = rankflow.run({**CONFIG, "sweep": QUICK if args.quick else FULL})
    with jax.enable_x64(True):  # the theory functions compute in their inputs' dtype
        rows = final_values(df)
        path = save_figure(figure(rows), args.out / "depth_rank.png")

    eta, t1 = CONFIG["dynamics"]["eta"], CONFIG["save"]["t1"]
    print(f"target s = {S}; GD, η = {eta}, {t1} steps")
    print(" L      λ seed  rank  global  max residual  penalty gap")
    for r in rows:
        print(
            f"{r['depth']:2d} {r['lam']:6g} {r['seed']:4d}  {r['rank']:4d}  "
            f"{r['rank_global']:6d}  {r['residual']:12.2e}  {r['schatten_gap']:11.2e}"
        )
    for L in sorted({r["depth"] for r in rows}):
        ranks = [r["rank"] for r in rows if r["depth"] == L]
        print(f"L = {L}: mean final rank over the grid {np.mean(ranks):.2f}")
    numbers = {"runs": rows, "S": S, "figures": [str(path)]}
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
