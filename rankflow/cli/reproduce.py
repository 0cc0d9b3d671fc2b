"""``rankflow reproduce``: the paper's claims as experiments, with a report."""

from __future__ import annotations

import argparse
import time

from ..config.fields import ConfigError
from ..engine import progress
from ..engine.writer import check_out
from .common import add_command


def add_parser(sub) -> None:
    """``reproduce --out DIR [--quick | --full] [--only NAME ...] [--checkpoint PATH]``."""
    reproduce = add_command(
        sub,
        "reproduce",
        cmd_reproduce,
        help="the paper's claims as experiments: runs them, writes figures, tables and "
        "DIR/report.md with a pass/fail verdict per claim",
        description="Run the experiments of sims/reproduce/ (toy, balancing, rank, discrete, "
        "optimizers, noise, attention, rebuttal, depth, reference; pretrained with "
        "--checkpoint) through rankflow's own machinery and write DIR/report.md (each "
        "claim: prediction, measurement, tolerance, verdict, figure), DIR/figures/*.png and "
        "DIR/tables/. Exit status 0 when every verdict passes, 1 when one fails, 2 when an "
        "experiment crashes (the others still run and are reported). "
        "Runs are kept in DIR/runs/, so a rerun into DIR resumes.",
    )
    reproduce.add_argument(
        "--quick", action="store_true", help="small sizes, minutes on a laptop (the default)"
    )
    reproduce.add_argument(
        "--full", action="store_true", help="larger sizes and more seeds (sims/reproduce/full.toml)"
    )
    reproduce.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only these experiments (default: all)"
    )
    reproduce.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="a safetensors checkpoint for the pretrained experiment",
    )
    reproduce.add_argument("--out", required=True, metavar="DIR", help="output directory")
    reproduce.add_argument("--quiet", action="store_true", help="no progress lines")


@progress.reported("reproduce")
def cmd_reproduce(args: argparse.Namespace) -> int:
    """Run the experiments and write the report; exit status 1 when a claim fails."""
    from ..reproduce import check_options, reproduce

    check_out(args.out, "reproduce")
    mode, _ = check_options(args.quick, args.full, args.only, args.checkpoint)  # before compiling
    t0 = time.perf_counter()
    res = reproduce(
        args.out, mode=mode, only=args.only, checkpoint=args.checkpoint, quiet=args.quiet
    )
    failed = [c.name for c in res.claims if c.verdict == "fail"]
    passed = sum(c.verdict == "pass" for c in res.claims)
    print(
        f"{passed} of {passed + len(failed)} claims pass"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + f" ({time.perf_counter() - t0:.0f} s) → {res.report}"
    )
    if res.crashed:
        name, error = next(iter(res.crashed.items()))
        more = f" (and {len(res.crashed) - 1} more)" if len(res.crashed) > 1 else ""
        raise ExperimentCrashed(
            f"reproduce: experiment {name} crashed{more}: {error}; the report of the others "
            f"is {res.report}"
        )
    return 0 if res.ok else 1


class ExperimentCrashed(ConfigError):
    """An experiment that raised (not a failed verdict): exit status 2, one line."""
