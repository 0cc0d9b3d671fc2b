"""Rerunning some of ``benchmarks.peers``' sections: their tables and target rows replace
those in BENCHMARKS.md's generated block, and the other sections' stay, each marked as
from the earlier run it came from (date and load average)."""

from __future__ import annotations

import re

# The heading that opens each section's table, and the prefix of its target rows.
HEADINGS = {
    "### Fixed step": "fixed",
    "### SDE": "sde",
    "### Adaptive": "adaptive",
    "### Sweep": "sweep",
    "### Roofline": "roofline",
}
TARGET_PREFIXES = {
    "fixed step": "fixed",
    "SDE": "sde",
    "adaptive": "adaptive",
    "sweep": "sweep",
    "roofline": "roofline",
}
EARLIER = re.compile(r"^The `(\w+)` section below is from an earlier run \((.*)\)\.$")
RUN_OF = re.compile(r"^Run of (.*?)\. Load average \(1 min\) ([\d.]+) at the start, ([\d.]+) at")


def split(text: str) -> dict:
    """The parts of a generated block: ``head`` (lines before the first table),
    ``sections`` (name → lines), ``targets`` (the target table's rows, by section),
    ``targets_head`` and ``tail`` (lines after the targets)."""
    out: dict = {"head": [], "sections": {}, "targets_head": [], "targets": {}, "tail": []}
    where = "head"
    for line in text.splitlines():
        name = next((s for h, s in HEADINGS.items() if line.startswith(h)), None)
        if name:
            where = name
            out["sections"][name] = [line]
            continue
        elif line.startswith("### Targets"):
            where = "targets"
        elif where == "targets" and line.startswith("| ") and not line.startswith("| target"):
            label = line[2:].split(":", 1)[0]
            sec = next((s for p, s in TARGET_PREFIXES.items() if label.startswith(p)), "?")
            out["targets"].setdefault(sec, []).append(line)
            continue
        elif where == "targets" and out["targets"] and not line.startswith("|"):
            where = "tail"
        if where == "head":
            out["head"].append(line)
        elif where == "targets":
            out["targets_head"].append(line)
        elif where == "tail":
            out["tail"].append(line)
        else:
            out["sections"][where].append(line)
    return out


def _when(head: list[str]) -> tuple[str, dict[str, str]]:
    """The date and load of the run a head describes, and of the sections it kept."""
    run, kept = "an earlier run", {}
    for line in head:
        m = RUN_OF.match(line)
        if m:
            run = f"{m.group(1)}, load average {m.group(2)} → {m.group(3)}"
        m = EARLIER.match(line)
        if m:
            kept[m.group(1)] = m.group(2)
    return run, kept


def merge(old: str, new: str, ran: list[str], order: tuple[str, ...]) -> str:
    """The generated block with the sections of ``ran`` from ``new`` and the others from
    ``old`` (marked as from their earlier run)."""
    o, n = split(old), split(new)
    run, kept = _when(o["head"])
    sections = {s: o["sections"][s] for s in o["sections"] if s not in ran}
    sections |= {s: n["sections"][s] for s in n["sections"] if s in ran}
    head = [line for line in n["head"] if not EARLIER.match(line)]
    while head and not head[-1]:
        head.pop()
    for s in order:
        if s in sections and s not in ran:
            head.append(f"The `{s}` section below is from an earlier run ({kept.get(s, run)}).")
    lines = head + [""]
    for s in order:
        lines += sections.get(s, [])
    targets = {s: o["targets"][s] for s in o["targets"] if s not in ran}
    targets |= {s: n["targets"][s] for s in n["targets"] if s in ran}
    if targets:
        width = n["targets_head"] or o["targets_head"]
        columns = next((line.count("|") for line in width if line.startswith("| target")), 0)
        lines += width
        for s in order:
            for row in targets.get(s, []):
                lines.append(row + " |" * max(0, columns - row.count("|")))
        lines.append("")
    tail = list(n["tail"])
    while tail and not tail[0]:
        tail.pop(0)
    return "\n".join(lines + tail).rstrip("\n")
