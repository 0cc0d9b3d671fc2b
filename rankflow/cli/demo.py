"""``rankflow demo``: GD on the paper's 5×5 toy (``sims/demo.toml``) and its figure."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..config.resources import sims_path
from ..core import config as config_lib
from ..engine import progress
from ..engine.writer import check_out
from .common import add_command

# The demo's experiment, inside the installed package or the checkout.
DEMO_CONFIG = sims_path("demo.toml")


def add_parser(sub) -> None:
    """``demo [--out DIR]``."""
    demo = add_command(
        sub,
        "demo",
        cmd_demo,
        help="a short built-in demo: GD on the paper's 5×5 toy "
        "for four λ, writing a results table and a figure",
    )
    demo.add_argument(
        "--out",
        default="rankflow-demo",
        metavar="DIR",
        help="results directory (default: %(default)s)",
    )


@progress.reported("demo")
def cmd_demo(args: argparse.Namespace) -> int:
    """Run ``sims/demo.toml`` into ``--out`` (resuming) and draw ``balance.png``."""
    from .. import plots
    from ..api import run

    out = Path(args.out)
    check_out(out, "sweep")
    t0 = time.perf_counter()
    config = config_lib.load_config(DEMO_CONFIG)
    df = run(config, out=out, resume=True)
    fig_path = out / "balance.png"
    plots.balance_figure(df, fig_path, target_sv=config["problem"]["singular_values"])
    print(f"{df['run_id'].nunique()} runs in {time.perf_counter() - t0:.1f} s → {out}")
    print(f"figure → {fig_path}")
    return 0
