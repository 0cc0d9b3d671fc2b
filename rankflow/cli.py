"""The ``rankflow`` command. Parses arguments and calls the library; nothing else."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import config as config_lib

DEMO_CONFIG = {
    "name": "demo: the paper's Fig. 1 toy",
    "x64": True,
    "problem": {"kind": "diagonal", "singular_values": [0.2, 0.4, 0.6, 0.8, 1.0]},
    "model": {"r": 5},
    "init": {"kind": "gaussian", "scale": 0.3},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 2000, "num": 201},
    "sweep": {"dynamics.lam": [0.0, 0.01, 0.03, 0.1], "seed": [0, 1, 2]},
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rankflow",
        description="Weight decay on factorised weights W = ABᵀ: flows and optimizers, "
        "checked against exact theory.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run one config (and its [sweep]) and write a results directory",
        description="Run CONFIG.toml: every point of its [sweep] (numeric axes share one "
        "compiled program). Writes DIR/results.parquet and DIR/config.json.",
        epilog=_keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("config", help="TOML config file (see sims/ for examples)")
    run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set dynamics.lam=0.1 (repeatable; "
        "values are TOML literals, e.g. --set sweep.seed=[0,1,2])",
    )
    run.add_argument("--out", required=True, metavar="DIR", help="results directory")

    demo = sub.add_parser(
        "demo",
        help="a short built-in demo: GD on the paper's 5×5 toy "
        "for four λ, writing a results table and a figure",
    )
    demo.add_argument(
        "--out",
        default="rankflow-demo",
        metavar="DIR",
        help="results directory (default: %(default)s)",
    )
    return ap


def _keys_help() -> str:
    lines = [
        "config keys (TOML section.key = default: meaning); numeric keys marked * "
        "can be swept without recompiling:"
    ]
    for sec, fields in config_lib.SCHEMA.items():
        for name, f in fields.items():
            key = f"{sec}.{name}" if sec else name
            star = "*" if key in config_lib.NUMERIC_KEYS else " "
            lines.append(f"  {star}{key} = {f.default!r}: {f.doc}")
    lines.append('  [sweep] "section.key" = [values, ...]: runs the product of the lists')
    return "\n".join(lines)


def _summary(df, out: Path, seconds: float) -> str:
    last = df.sort_values("t").groupby(["run_id", "path"]).tail(1)
    runs = len(last)
    diverged = int((last["status"] != "ok").sum())
    return f"{runs} runs ({diverged} not ok), {len(df)} rows in {seconds:.1f} s → {out}"


def cmd_run(args) -> int:
    from .api import run

    overrides = config_lib.parse_set(args.sets)
    cfg = config_lib.resolve(args.config, overrides)  # errors here, before compiling
    t0 = time.perf_counter()
    df = run(cfg, out=args.out)
    print(_summary(df, Path(args.out), time.perf_counter() - t0))
    return 0


def cmd_demo(args) -> int:
    from . import plots
    from .api import run

    out = Path(args.out)
    t0 = time.perf_counter()
    df = run(DEMO_CONFIG, out=out)
    fig_path = out / "balance.png"
    plots.balance_figure(df, fig_path, target_sv=DEMO_CONFIG["problem"]["singular_values"])
    print(_summary(df, out, time.perf_counter() - t0))
    print(f"figure → {fig_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "demo": cmd_demo}[args.command](args)
    except config_lib.ConfigError as e:
        print(f"rankflow: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
