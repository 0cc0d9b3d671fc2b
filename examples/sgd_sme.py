"""SGD against its stochastic modified equation (docs/theory.md, T10; Li, Tai & E).

Minibatch SGD (batch 4 of 64 samples, drawn without replacement) on matrix sensing with
weight decay, against the SDE that has the same drift as gradient flow and the noise of
a minibatch gradient: ``stochastic_flow`` with ``noise = "minibatch"``, solved by
Euler–Maruyama at dt = 0.1 step. ``rankflow.compare.compare`` runs both sides over many
paths at η, η/2, η/4 (…) with the horizon fixed in ηt, and measures the weak error, the
difference of the means over paths, optimizer minus flow. The SME approximates SGD at
weak order 1: the error of E[tr(AᵀA − BᵀB)] should halve with η.

    python examples/sgd_sme.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rankflow.compare import compare, weak_order
from rankflow.plots import save_figure
from rankflow.plots.compare import compare_moments_figure, compare_weak_figure

CONFIG = {  # the config of sims/noise/compare_sme.toml
    "seed": 0,
    "x64": True,
    "problem": {"kind": "sensing", "m": 5, "n": 5, "rank": 2, "samples": 64, "noise": 0.1},
    "model": {"r": 3},
    "init": {"kind": "gaussian", "scale": 0.5},
    "dynamics": {"kind": "sgd", "eta": 0.04, "lam": 0.1, "batch": 4},
    "save": {"t1": 25, "num": 6},  # ηt = 1 at η = 0.04; doubled steps at each halving
}
FULL = {"compare.paths": 256, "compare.halvings": 3}  # η = 0.04, 0.02, 0.01, 0.005
QUICK = {"compare.paths": 64, "compare.halvings": 2}  # η = 0.04, 0.02, 0.01
OBSERVABLE = "balance_trace"  # tr(AᵀA − BᵀB)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 paths, 3 η (not 256, 4)")
    parser.add_argument("--out", type=Path, default=Path("out/examples"), help="figures")
    args = parser.parse_args(argv)
    options = QUICK if args.quick else FULL

    tables = compare(CONFIG, overrides=options)  # {"trajectory", "moments", "weak"}
    weak = tables["weak"]
    order, order_se = weak_order(weak, OBSERVABLE)

    means = ["optimizer.mean", "flow.mean"]
    columns = ["observable", "dynamics.eta", "steps", *means, "error", "error_se", "z"]
    print(f"SGD against its SME, {options['compare.paths']} paths per η, horizon ηt = 1")
    print(weak[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for name in weak["observable"].unique():
        p, se = weak_order(weak, name)
        print(f"weak order of {name}: {p:.3f} ± {se:.3f}")

    written = [
        save_figure(compare_weak_figure(weak), args.out / "sgd_sme_weak.png"),
        save_figure(compare_moments_figure(tables["moments"]), args.out / "sgd_sme_moments.png"),
    ]
    rows = weak[weak["observable"] == OBSERVABLE].sort_values("dynamics.eta")
    numbers = {
        "observable": OBSERVABLE,
        "order": order,
        "order_se": order_se,
        "eta": rows["dynamics.eta"].tolist(),
        "error": rows["error"].tolist(),
        "error_se": rows["error_se"].tolist(),
        "z": rows["z"].tolist(),
        "figures": [str(p) for p in written],
    }
    print("numbers:", json.dumps(numbers))
    return numbers


if __name__ == "__main__":
    main()
