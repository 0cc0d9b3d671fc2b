"""``DIR/report.md``: every claim with its prediction, measurement, tolerance, verdict
and figure, and ``DIR/tables/claims.csv`` (the same, one row per claim)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._common import Claim, claims_frame

TITLES = {
    "toy": "1. The toy of the paper's Fig. 1",
    "balancing": "2. Balancing rates across dynamics",
    "rank": "3. Rank against λ: matrix sensing and completion",
    "discrete": "4. Discrete against continuous",
    "optimizers": "5. Momentum optimizers and learning-rate schedules",
    "geometry": "6. Bounded updates with decoupled decay: sign descent, Lion, Muon",
    "noise": "7. The noise of real SGD",
    "attention": "8. Attention",
    "rebuttal": "9. The rebuttal's experiments",
    "depth": "10. Depth L",
    "reference": "11. A training reference for checkpoints",
    "pretrained": "12. A pretrained checkpoint",
}
MARK = {"pass": "✅ pass", "fail": "❌ FAIL", "observation": "observation"}


# The text under the summary line: how to read a claim and its sides.
READING = (
    "How to read this: each row is one statement of docs/theory.md (labels T1–T14) or of the "
    "paper, turned into a test. *Prediction* is what the theory says, *measurement* what "
    "the experiment found, *tolerance* the test that decides the *verdict* and where it "
    "comes from (float64 rounding for exact identities, a fit's own error for rates, "
    "Monte Carlo standard errors for expectations, the O(ηλ) bracket of GD, a stated "
    "margin for empirical claims). Every claim that can pass has a *mutant* in rankflow's "
    "tests: the same check on data of a plausible wrong theory or implementation (a wrong "
    "rate, a missing factor, a flipped sign, a wrong noise model, no momentum, pure "
    "shrinkage, random heads) gives `fail`. *Observation* marks what the theory does not "
    "predict (AdamW's rate, the attention ablation) or what cannot fail (a closed-form "
    "contrast): it is measured and shown, never counted as a pass. Tables are in "
    "`tables/`, figures in `figures/`, the raw runs in `runs/`.",
    "",
    "A *one-sided* test (a bound, a drop, an ordering) cannot see an error in the "
    "direction it allows (a decay faster than the theory's passes \"decays at least "
    'this fast"): each is marked, with the two-sided check that covers that direction '
    "where the theory gives one.",
    "",
)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def counts(claims: Sequence[Claim]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in claims) for v in ("pass", "fail", "observation")}


def render(
    claims: Sequence[Claim],
    *,
    mode: str,
    seconds: Mapping[str, float],
    notes: Mapping[str, Sequence[str]],
    provenance: Mapping[str, object],
    command: str,
) -> str:
    n = counts(claims)
    tested = n["pass"] + n["fail"]
    status = "ALL PASS" if n["fail"] == 0 and tested else f"{n['fail']} FAILED"
    total = sum(seconds.values())
    lines = [
        "# rankflow reproduce: the theory's claims, checked",
        "",
        f"**{status}**: {n['pass']} of {tested} claims pass"
        + (f", {n['observation']} observations (measured, not tested)" if n["observation"] else "")
        + f". Size `--{mode}`, {total:.0f} s in all.",
        "",
        f"Command: `{command}`. Created {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
        + ", ".join(f"{k} {v}" for k, v in provenance.items())
        + ".",
        "",
        *READING,
        "| # | claim | source | test | verdict |",
        "|---|---|---|---|---|",
    ]
    for i, c in enumerate(claims, 1):
        lines.append(
            f"| {i} | [{c.name}](#{_anchor(c.name)}) | {c.source} | {_sides(c)} | "
            f"{MARK[c.verdict]} |"
        )
    lines.append("")
    by_exp: dict[str, list[Claim]] = {}
    for c in claims:
        by_exp.setdefault(c.experiment, []).append(c)
    for exp in list(TITLES) + [e for e in by_exp if e not in TITLES]:
        if exp not in by_exp and exp not in notes:
            continue
        lines += [f"## {TITLES.get(exp, exp)}", ""]
        if exp in seconds:
            lines += [f"Run time {seconds[exp]:.0f} s.", ""]
        lines += [f"{note}" for note in notes.get(exp, [])]
        if notes.get(exp):
            lines.append("")
        shown: set[str] = set()
        for c in by_exp.get(exp, []):
            lines += [
                f"### {c.name}",
                "",
                f"{c.statement} ({c.source})",
                "",
                "| | |",
                "|---|---|",
                f"| prediction | {_cell(c.prediction)} |",
                f"| measurement | {_cell(c.measurement)} |",
                f"| tolerance | {_cell(c.tolerance)} |",
                *([f"| one-sided | {_cell(c.one_sided)} |"] if c.one_sided else []),
                f"| verdict | **{MARK[c.verdict]}** |",
                "",
            ]
            if c.figure and c.figure not in shown:
                shown.add(c.figure)
                lines += [f"![{c.figure}](figures/{c.figure})", ""]
    return "\n".join(lines)


def _sides(c: Claim) -> str:
    if c.verdict == "observation":
        return "—"
    return "one-sided" if c.one_sided else "two-sided"


def _anchor(name: str) -> str:
    return name.lower().replace(".", "")


def write(out: Path, claims: Sequence[Claim], **kw) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    df = claims_frame(list(claims))
    if len(df):
        df.to_csv(out / "tables" / "claims.csv", index=False)
    path = out / "report.md"
    tmp = out / ".report.md.tmp"
    tmp.write_text(render(claims, **kw))
    tmp.replace(path)
    return path
