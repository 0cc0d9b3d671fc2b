"""``rankflow fit``: a results directory's decay rates against the theory (``fit.csv``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..config.fields import ConfigError
from .common import add_command, warnings_as_lines

FIT_CSV = "fit.csv"


HELP = "decay rate of the balance gap in every run against the theory: window, regime, verdict"


def add_parser(sub) -> None:
    """``fit DIR [--t-min T] [--t-max T] [--column C] [--out FILE]``."""
    fit = add_command(sub, "fit", cmd_fit, help=HELP)
    fit.add_argument("results", metavar="DIR", help="results directory")
    fit.add_argument("--t-min", type=float, help="start of the window (default: found)")
    fit.add_argument("--t-max", type=float, help="end of the window (default: found)")
    fit.add_argument("--column", default="balance_gap", help="column (default: %(default)s)")
    fit.add_argument("--out", metavar="FILE", help=f"table to write (default: DIR/{FIT_CSV})")


def _num(x: float, digits: int = 5) -> str:
    return "—" if not math.isfinite(x) else f"{x:.{digits}f}"


def table_text(df) -> str:
    """The fit table as a compact text: one line per series."""
    head = f"{'run':>4} {'series':<14} {'kind':<13} {'rate/2ηλ ± SE':>18} {'bracket':>19} "
    lines = [head + f"{'verdict':<7} {'window':>15}  end (slower phase rate/2ηλ)"]
    for r in df.to_dict("records"):
        base = 2 * r["dynamics.eta"] * r["dynamics.lam"] or math.nan  # λ = 0: no 2ηλ scale
        lo, hi = r["predicted_low"] / base, r["predicted_high"] / base
        bracket = f"[{_num(lo)}, {_num(hi)}]" if math.isfinite(lo) else r["source"]
        end = r["end"] + (f" ({_num(r['slow_ratio'], 3)})" if r["end"] == "slower phase" else "")
        window = f"{r['t_min']:g}-{r['t_max']:g}"
        ratio = f"{_num(r['ratio'])} ± {_num(r['ratio_se'])}"
        if not math.isfinite(base):  # λ = 0: the rate per step itself (T4/T5: D conserved)
            ratio = f"{r['rate']:.1e}/step"
        lines.append(
            f"{r.get('run_id', 0):>4} {r['series']:<14} {r['dynamics.kind']:<13} "
            f"{ratio:>18} {bracket:>19} {r['verdict']:<7} {window:>15}  {end}"
        )
    return "\n".join(lines)


def cmd_fit(args: argparse.Namespace) -> int:
    """:func:`rankflow.fitting.fit` of the directory, written as CSV and printed."""
    from ..fitting import fit

    if args.t_min is not None and args.t_max is not None and not args.t_min < args.t_max:
        raise ConfigError(f"--t-min: must be < --t-max, got {args.t_min:g} ≥ {args.t_max:g}")
    results = Path(args.results)
    with warnings_as_lines():
        try:
            df = fit(results, t_min=args.t_min, t_max=args.t_max, column=args.column)
        except ConfigError as e:
            raise ConfigError(str(e).replace("column: ", "--column: ", 1)) from None
    out = Path(args.out) if args.out else results / FIT_CSV
    df.to_csv(out, index=False)
    print(table_text(df))
    print(f"fit → {out}")
    return 0
