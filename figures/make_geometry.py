"""The figures of docs/guides/geometry.md, from real ``rankflow.run`` runs in float64.

    python docs/figures/make_geometry.py            # writes docs/figures/geometry_*.png (~15 s)
    python docs/figures/make_geometry.py --out DIR  # elsewhere

One run per kind (gd, sign_gd, lion, muon) on the same problem and start: the diagonal
problem ``L = ½‖ABᵀ − diag(8, 6, 4, 2)‖²``, r = 4 (A, B are 4 × 4), Gaussian start of
scale 0.1, seed 0, λ = 0.5, η = 0.05, 400 steps, the factors saved at every step
(``save.states``). The balanced minimiser (√8 ≈ 2.83 in both norms) lies outside the
ball ρ/λ of sign descent, Lion and Muon (ρ/λ ≈ 2 and 2.27), so decay holds them back
(T14).

Each figure: left, the balance gap ‖AᵀA − BᵀB‖_F (the ``balance_gap`` column); right,
each factor's norm in the geometry of its optimizer's update (max norm for sign descent
and Lion, spectral norm for Muon and GD) against T14's bound
``ρ/λ + (1 − ηλ)^k (‖X_0‖ − ρ/λ)``. The updates are recovered from consecutive states,
``U_k = ((1 − ηλ)X_k − X_{k+1})/η``, and the script asserts what each title says (the
updates' norms are ≤ ρ, the bound holds at every step, the limits named), so a title
that stops being true fails here instead of being drawn.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import matplotlib

jax.config.update("jax_enable_x64", True)  # t14_bound and newton_schulz_sup in float64
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import rankflow  # noqa: E402
from rankflow.theory import newton_schulz_sup, t14_bound  # noqa: E402

SV = [8.0, 6.0, 4.0, 2.0]
LAM, ETA, STEPS = 0.5, 0.05, 400
HERE = Path(__file__).resolve().parent


def run(kind: str):
    cfg = {
        "seed": 0,
        "x64": True,
        "problem": {"kind": "diagonal", "singular_values": SV},
        "model": {"r": len(SV)},
        "init": {"kind": "gaussian", "scale": 0.1},
        "dynamics": {"kind": kind, "lam": LAM, "eta": ETA},
        "save": {"t1": float(STEPS), "num": STEPS + 1, "states": True},
    }
    df = rankflow.run(cfg)
    states = df.attrs["states"][0]
    return df, {k: np.asarray(states.factors[k]) for k in ("A", "B")}


def norm(X: np.ndarray, which: str) -> np.ndarray:
    """Per save: max |X_ij| or the largest singular value."""
    if which == "max":
        return np.abs(X).max(axis=(1, 2))
    return np.linalg.norm(X, ord=2, axis=(1, 2))


def updates(X: np.ndarray) -> np.ndarray:
    return ((1 - ETA * LAM) * X[:-1] - X[1:]) / ETA


def figure(kind, df, factors, which, rho, title, out):
    k = df["t"].to_numpy()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    ax1.semilogy(k, df["balance_gap"], color="C0")
    ax1.set_xlabel("step k")
    ax1.set_ylabel("balance gap ‖AᵀA − BᵀB‖_F")
    label = "max |X_ij|" if which == "max" else "‖X‖₂ (spectral)"
    for name, colour in (("A", "C1"), ("B", "C2")):
        n = norm(factors[name], which)
        ax2.plot(k, n, color=colour, label=f"{label}, X = {name}")
        if rho is not None:
            bound = np.asarray(t14_bound(n[0], rho, ETA, LAM, k))
            ax2.plot(k, bound, color=colour, ls=":", lw=1, label=f"T14 bound, X = {name}")
    if rho is not None:
        ax2.axhline(rho / LAM, color="k", ls="--", lw=0.8, label=f"ρ/λ = {rho / LAM:.3f}")
    ax2.axhline(1 / LAM, color="grey", ls="-.", lw=0.8, label="1/λ")
    ax2.set_xlabel("step k")
    ax2.set_ylabel(label)
    ax2.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"geometry_{kind}.png", dpi=100)
    plt.close(fig)


def check_t14(factors, which, rho):
    """Every update within ρ and every factor within its T14 bound (float64 slack)."""
    k = np.arange(STEPS + 1)
    for X in factors.values():
        assert norm(updates(X), which).max() <= rho * (1 + 1e-9), "an update above ρ"
        n = norm(X, which)
        assert np.all(n <= np.asarray(t14_bound(n[0], rho, ETA, LAM, k)) + 1e-9), "bound broken"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {kind: run(kind) for kind in ("gd", "sign_gd", "lion", "muon")}
    gap = {kind: df["balance_gap"].to_numpy() for kind, (df, _) in runs.items()}
    maxes = {kind: max(norm(f[x], "max")[-1] for x in f) for kind, (_, f) in runs.items()}

    # GD: T5's balance decay; its limit is the balanced soft-threshold, ‖A‖₂ = √(s₁ − λ).
    df, f = runs["gd"]
    s1 = np.sqrt(SV[0] - LAM)
    assert gap["gd"][-1] < 1e-6 * gap["gd"][0]
    assert all(abs(norm(f[x], "spectral")[-1] - s1) < 1e-6 for x in f)
    figure(
        "gd",
        df,
        f,
        "spectral",
        None,
        f"GD (reference): balance gap decays geometrically ({gap['gd'][-1]:.0e} at step "
        f"{STEPS}, T5); ‖A‖₂, ‖B‖₂ → √(s₁ − λ) = {s1:.3f} > 1/λ: no T14 ball",
        args.out,
    )

    # Sign descent: the max norm of both factors reaches 1/λ (ρ = 1); the gap grows.
    df, f = runs["sign_gd"]
    check_t14(f, "max", 1.0)
    assert abs(maxes["sign_gd"] - 1 / LAM) < 1e-2 and gap["sign_gd"][-1] > 10 * gap["sign_gd"][0]
    figure(
        "sign_gd",
        df,
        f,
        "max",
        1.0,
        "sign descent: max|A|, max|B| reach 1/λ within T14's bound (ρ = 1); "
        "balance gap does not vanish",
        args.out,
    )

    # Lion: within the bound at every step, but its momentum overshoots and oscillates.
    df, f = runs["lion"]
    check_t14(f, "max", 1.0)
    peak = max(norm(f[x], "max").max() for x in f)
    end = max(norm(f[x], "max")[-1] for x in f)
    assert 0.99 / LAM < peak <= 1 / LAM and end < 0.95 * peak
    assert gap["lion"][-1] > 10 * gap["lion"][0]
    figure(
        "lion",
        df,
        f,
        "max",
        1.0,
        f"Lion: max norms reach {peak:.3f} ≈ 1/λ within T14's bound (ρ = 1), then fall "
        f"back (to {end:.3f}); balance gap does not vanish",
        args.out,
    )

    # Muon: spectral norm, ρ = 1.134357, the quintic's supremum over [0.016, 1], which
    # theory.muon_rho measures on random inputs; check_t14 asserts that this run's
    # updates stay within it (1.2024, the supremum over [0, 1], holds for any input).
    # The run ends between 1/λ and ρ/λ.
    df, f = runs["muon"]
    rho = newton_schulz_sup(low=0.016)
    check_t14(f, "spectral", rho)
    ends = [norm(f[x], "spectral")[-1] for x in f]
    assert all(1 / LAM < e < rho / LAM for e in ends)
    g = gap["muon"]
    assert g.max() > 5 * g[0] and g[-1] < g[0] / 10
    figure(
        "muon",
        df,
        f,
        "spectral",
        rho,
        f"Muon: ‖A‖₂, ‖B‖₂ end at {min(ends):.3f}–{max(ends):.3f}, between 1/λ and "
        f"ρ/λ = {rho / LAM:.3f} (ρ = {rho:.4f}); balance gap rises, then decays",
        args.out,
    )
    for kind in runs:
        print(f"{kind}: balance gap {gap[kind][0]:.4g} → {gap[kind][-1]:.4g}")


if __name__ == "__main__":
    main()
