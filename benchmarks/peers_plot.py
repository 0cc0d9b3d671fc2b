"""The figure of ``python -m benchmarks.peers``: run times side by side, and the roofline."""

from __future__ import annotations

import os
from typing import Any

COLOR_RF, COLOR_PEER = "#1f77b4", "#999999"


def _bars(ax, rows, title, value="run_s", xlabel="run time, s (median)"):
    names = [r["method"] for r in rows][::-1]
    vals = [r[value] for r in rows][::-1]
    colors = [COLOR_RF if n.startswith("rankflow") else COLOR_PEER for n in names]
    ax.barh(range(len(names)), vals, color=colors)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlim(0, 1.18 * max(vals))
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.3g}", va="center", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)


def plot(results: dict[str, Any], info: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(13.5, 11))
    axes = axes.ravel()
    panels = [
        ("fixed", "fixed step: gradient flow, Euler dt = 1"),
        ("sde", "SDE: Euler–Maruyama dt = 1"),
        ("adaptive", "adaptive: rtol 1e-6 (error vs float64 in the labels)"),
    ]
    for ax, (key, title) in zip(axes, panels):
        res = results.get(key) or {}
        rows = res.get("rows") or []
        if not rows:
            ax.axis("off")
            continue
        if key == "adaptive":
            rows = [dict(r, method=f"{r['method']}  [{r['error']:.0e}]") for r in rows]
        _bars(ax, rows, title)
    sw = (results.get("sweep") or {}).get("rows") or []
    if sw:
        _bars(
            axes[3],
            sw,
            "sweep: λ × η × seed grid",
            "configs_per_s",
            "configurations per second (higher is better)",
        )
    else:
        axes[3].axis("off")
    rf = results.get("roofline") or {}
    ax = axes[4]
    if rf.get("rows"):
        for batch_kind, marker in (("one configuration", "o"), ("batch", "s")):
            rows = [
                r for r in rf["rows"] if (r["batch"] == 1) == (batch_kind == "one configuration")
            ]
            ds = [r["dim"] for r in rows]
            ax.plot(
                ds,
                [r["rankflow_gflops"] for r in rows],
                marker=marker,
                color=COLOR_RF,
                label=f"rankflow, {batch_kind}",
            )
            ax.plot(
                ds,
                [r["scan_gflops"] for r in rows],
                marker=marker,
                color=COLOR_PEER,
                linestyle="--",
                label=f"hand-written scan, {batch_kind}",
            )
        pk = rf["peak_gflops"]
        ax.axhline(pk, color="k", linewidth=1, label=f"matmul peak {pk:.0f} GFLOP/s")
        ax.axhline(pk / 2, color="k", linewidth=1, linestyle=":", label="half the peak")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d = r", fontsize=8)
        ax.set_ylabel("GFLOP/s of the GF update", fontsize=8)
        ax.set_title("roofline, float32", fontsize=9)
        ax.legend(fontsize=7, loc="center right")
        ax.tick_params(labelsize=7)
    else:
        ax.axis("off")
    axes[5].axis("off")
    axes[5].text(
        0.0,
        0.9,
        f"{info['cpu_count']} CPUs, jax {info['jax']}, diffrax {info['diffrax']},\n"
        f"torch {info['torch']}, torchdiffeq {info['torchdiffeq']}, torchsde {info['torchsde']},\n"
        f"scipy {info['scipy']}, numpy {info['numpy']}\n"
        f"load average {info['loadavg_start'][0]:.1f} → {info['loadavg_end'][0]:.1f}\n"
        "blue: rankflow; grey: peers\npython -m benchmarks.peers",
        va="top",
        fontsize=8,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
