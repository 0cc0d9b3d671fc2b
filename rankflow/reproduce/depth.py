"""Experiment ``depth``: products of L factors, ``W = W_L ⋯ W_1``, with weight decay on
every factor (docs/theory.md, T12, T13).

- ``sims/reproduce/depth_diagonal.toml``: gradient flow at L = 3, 4 on the diagonal loss
  from a start with every pair imbalanced. Claims: each pair's ``‖D_j‖_F`` decays at
  2ηλ (T12); at the end ``½Σ‖W_j‖²`` meets ``(L/2)Σσ_i^{2/L}`` (T13); every final
  singular value is 0 or a root of ``w − s + λw^{2/L−1}`` (T13's scalar problem).
- ``depth_rank_sensing.toml``, ``depth_rank_completion.toml``: GD at L = 2, 3, 4 from a
  small Gaussian start, beside the nuclear-norm minimiser on the same data. An
  observation with a figure: rank against λ, and (diagonal) where gradient flow stops at
  0 although the scalar problem's global minimiser is not 0.

Every claim is a pure function of a results table, so that its mutant (tests) can feed it
the table of a wrong implementation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from .. import plots, theory
from ..core import config as config_lib
from ..core.program import params_of, program_for
from ._common import Claim, Context, final_rows, fmt, per_problem, run_sweep, sweep_config, verdict

NAME = "depth"
DIAGONAL = "depth_diagonal"
RANK_CONFIGS = {"sensing": "depth_rank_sensing", "completion": "depth_rank_completion"}
# The claims whose verdict can be pass; tests/claims/test_mutants_depth.py holds a mutant for each.
CLAIMS = ("depth.pairwise_decay", "depth.penalty_meets_schatten", "depth.scalar_stationarity")
# Decay is measured while e^{−2ηλt} ≥ this (later, D_j is at rounding level).
DECAY_FLOOR = 1e-4
DECAY_TOL = 1e-5
PENALTY_TOL = 1e-8
STATIONARY_TOL = 1e-6


def validate(mode: str) -> None:
    for name in (DIAGONAL, *RANK_CONFIGS.values()):
        sweep_config(name, mode)


def _gap_columns(df: pd.DataFrame) -> list[str]:
    return sorted(
        (c for c in df.columns if c.startswith("balance_gap_") and c[12:].isdigit()),
        key=lambda c: int(c[12:]),
    )


def pairwise_decay_claim(df: pd.DataFrame) -> Claim:
    """T12: the rate ``−log(‖D_j(t)‖/‖D_j(0)‖)/t`` of every pair, run and save with
    ``e^{−2ηλt} ≥ DECAY_FLOOR``, against 2ηλ (relative error ≤ ``DECAY_TOL``)."""
    worst, pairs, depths = 0.0, 0, set()
    for _, g in df.groupby("run_id"):
        g = g.sort_values("t")
        rate = 2 * g["dynamics.eta"].iloc[0] * g["dynamics.lam"].iloc[0]
        t = g["t"].to_numpy(float)
        use = (t > 0) & (np.exp(-rate * t) >= DECAY_FLOOR)
        depths.add(int(g["model.depth"].iloc[0]))
        for col in _gap_columns(g):
            gap = g[col].to_numpy(float)
            if not np.isfinite(gap[0]) or gap[0] <= 0:
                continue
            pairs += 1
            measured = -np.log(gap[use] / gap[0]) / t[use]
            worst = max(worst, float(np.max(np.abs(measured / rate - 1))))
    return Claim(
        experiment=NAME,
        name="depth.pairwise_decay",
        source="T12",
        statement="Under gradient flow with weight decay on every factor of W = W_L ⋯ W_1, "
        "every adjacent pair's balance D_j = W_{j+1}ᵀW_{j+1} − W_jW_jᵀ decays like "
        "e^{−2ηλt}, whatever the depth and the loss.",
        prediction="−log(‖D_j(t)‖_F/‖D_j(0)‖_F)/t = 2ηλ for every pair j",
        measurement=f"max |rate/(2ηλ) − 1| = {fmt(worst)} over {pairs} (run, pair) curves, "
        f"depths {', '.join(map(str, sorted(depths)))}",
        tolerance=f"≤ {DECAY_TOL:g} (adaptive float64 solves at rtol 1e-10), at saves with "
        f"e^{{−2ηλt}} ≥ {DECAY_FLOOR:g}",
        verdict=verdict(pairs > 0 and worst <= DECAY_TOL),
        figure="depth.png",
    )


def penalty_claim(df: pd.DataFrame) -> Claim:
    """T13: at the last save ``½Σ‖W_j‖² − (L/2)Σσ_i^{2/L} ≤ PENALTY_TOL·½Σ‖W_j‖²``, from a
    start where the gap is large."""
    first = df.sort_values("t").groupby("run_id").head(1)
    last = final_rows(df)
    rel_end = (last["schatten_gap"] / last["l2_penalty"]).abs()
    rel_start = first["schatten_gap"] / first["l2_penalty"]
    worst = float(rel_end.max())
    return Claim(
        experiment=NAME,
        name="depth.penalty_meets_schatten",
        source="T13",
        statement="Weight decay on L factors is Schatten-2/L regularisation of W: once the "
        "pairs balance, the penalty ½Σ_j‖W_j‖² equals (L/2)Σ_i σ_i(W)^{2/L}.",
        prediction="(½Σ‖W_j‖² − (L/2)Σσ_i^{2/L}) / ½Σ‖W_j‖² → 0",
        measurement=f"at the end: max {fmt(worst)} over {len(last)} runs (at t = 0: "
        f"{fmt(float(rel_start.min()))}–{fmt(float(rel_start.max()))})",
        tolerance=f"≤ {PENALTY_TOL:g} at the end",
        verdict=verdict(len(last) > 0 and worst <= PENALTY_TOL),
        figure="depth.png",
    )


def stationarity_table(df: pd.DataFrame, s: list[float]) -> pd.DataFrame:
    """One row per (run, singular value): the final ``w`` beside the target's ``s``
    (both descending), the scalar residual ``w − s + λw^{2/L−1}``, the global minimiser
    of the scalar problem (:func:`rankflow.theory.schatten_scalar_minimiser`)."""
    rows = []
    s = np.sort(np.asarray(s, float))[::-1]
    for _, r in final_rows(df).iterrows():
        L, lam = int(r["model.depth"]), float(r["dynamics.lam"])
        w = np.asarray([r[f"sv_{i + 1}"] for i in range(len(s))], float)
        with jax.enable_x64(True):
            res = theory.schatten_scalar_stationarity(
                jnp.asarray(np.maximum(w, 1e-300)), jnp.asarray(s), lam, L
            )
            best = theory.schatten_scalar_minimiser(jnp.asarray(s), lam, L)
        for i in range(len(s)):
            rows.append(
                {
                    "run_id": r["run_id"],
                    "model.depth": L,
                    "dynamics.lam": lam,
                    "i": i + 1,
                    "s": s[i],
                    "w": w[i],
                    "residual": float(res[i]),
                    "global_minimiser": float(best[i]),
                }  # fmt: skip
            )
    return pd.DataFrame(rows)


def stationarity_claim(table: pd.DataFrame) -> Claim:
    """T13: every final singular value is 0 (below ``STATIONARY_TOL``) or a root of the
    scalar stationarity ``w − s + λw^{2/L−1}`` (to ``STATIONARY_TOL``)."""
    zero = table["w"] <= STATIONARY_TOL
    nonzero = table[~zero]
    worst = float(nonzero["residual"].abs().max()) if len(nonzero) else float("nan")
    stuck = table[zero & (table["global_minimiser"] > 0)]
    return Claim(
        experiment=NAME,
        name="depth.scalar_stationarity",
        source="T13",
        statement="At convergence, each singular value of W is a stationary point of the "
        "scalar problem min_w ½(w − s)² + (λL/2)w^{2/L}: 0, or a root of w − s + λw^{2/L−1}.",
        prediction="w = 0 or w − s + λw^{2/L−1} = 0",
        measurement=f"{len(nonzero)} nonzero values: max |residual| = {fmt(worst)}; "
        f"{int(zero.sum())} at 0, of which {len(stuck)} where the global minimiser is not 0",
        tolerance=f"|residual| ≤ {STATIONARY_TOL:g}; 0 means w ≤ {STATIONARY_TOL:g}",
        verdict=verdict(len(nonzero) > 0 and worst <= STATIONARY_TOL),
        figure="depth.png",
    )


def rank_table(cfg, df: pd.DataFrame, problem_name: str) -> pd.DataFrame:
    """One row per run: the final numerical rank of the factorised run and of the
    nuclear-norm minimiser on the same data and λ (one proximal solve per (seed, λ))."""
    points = config_lib.expand(cfg)
    final = final_rows(df).set_index("run_id")
    tol = cfg["save"]["rank_tol"]
    rows, cache = [], {}
    with jax.enable_x64(True):
        problem = program_for(points[0]).problem
        prox = jax.jit(
            lambda data, lam: theory.nuclear_minimiser(problem, data, lam, max_iters=20_000)
        )
        for i, point in enumerate(points):
            p = params_of(point, 0)
            lam = point["dynamics"]["lam"]
            key = (p["problem.seed"], p["problem.noise"], lam)
            if key not in cache:
                data = program_for(point).data(p)
                s = np.linalg.svd(np.asarray(prox(data, jnp.float64(lam)).W), compute_uv=False)
                cache[key] = int(np.sum(s > tol * s[0])) if s[0] > 0 else 0
            rows.append(
                {
                    "problem": problem_name,
                    "run_id": i,
                    "seed": point["seed"],
                    "model.depth": point["model"]["depth"],
                    "dynamics.lam": lam,
                    "rank": int(final.loc[i, "rank"]),
                    "nuclear_rank": cache[key],
                }  # fmt: skip
            )
    return pd.DataFrame(rows)


def rank_observation(ranks: pd.DataFrame, stationary: pd.DataFrame) -> Claim:
    stuck = stationary[(stationary["w"] <= STATIONARY_TOL) & (stationary["global_minimiser"] > 0)]
    by_depth = ranks.groupby("model.depth")["rank"].mean()
    return Claim(
        experiment=NAME,
        name="depth.rank_against_lambda",
        source="observation (T13)",
        statement="Deeper products sparsify the rank more at the same λ (Schatten-2/L); "
        "from a small start, gradient flow can stop at a singular value 0 where the global "
        "minimiser of the scalar problem is not 0 (0 is a local minimum for L ≥ 3).",
        prediction="rank falls faster with λ as L grows; GF from small init may stop at 0",
        measurement="mean final rank over λ and problems: "
        + ", ".join(f"L = {d}: {v:.2f}" for d, v in by_depth.items())
        + f"; nuclear-norm minimiser: {ranks['nuclear_rank'].mean():.2f}; diagonal: "
        f"{len(stuck)} singular values at 0 with a nonzero global minimiser",
        tolerance="—",
        verdict="observation",
        figure="depth.png",
    )


def run_experiment(ctx: Context) -> None:
    cfg, diag = run_sweep(ctx, DIAGONAL)
    ctx.table("depth_diagonal_runs", diag)
    stationary = stationarity_table(diag, cfg["problem"]["singular_values"])
    ctx.table("depth_stationarity", stationary)
    ranks = per_problem(ctx, RANK_CONFIGS, "depth_rank", rank_table)
    ctx.table("depth_ranks", ranks)
    plots.depth_figure(diag, ranks, stationary, ctx.figures / "depth.png")
    ctx.claims += [
        pairwise_decay_claim(diag),
        penalty_claim(diag),
        stationarity_claim(stationary),
        rank_observation(ranks, stationary),
    ]
