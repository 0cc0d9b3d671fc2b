"""``benchmarks.peers``' bookkeeping (no timing): thread counts from the command line,
the fastest of a peer's thread counts, and a rerun of some sections that keeps the other
sections' tables and target rows in BENCHMARKS.md's generated block."""

from __future__ import annotations

import os

import pytest

from benchmarks import peers_markdown, peers_threads

OLD = """Machine: old machine.
Run of 2026-01-01 10:00 UTC. Load average (1 min) 0.50 at the start, 1.50 at the end.
The `sweep` section below is from an earlier run (2025-12-31 09:00 UTC, load average 0.10 → 0.20).

### Fixed step: old fixed

| method | run s |
|---|---:|
| old fixed row | 1.0 |

### Adaptive: old adaptive

| method | run s |
|---|---:|
| old adaptive row | 2.0 |

### Sweep: old sweep

| old sweep row |

### Targets

| target | measured | required | result |
|---|---:|---:|---|
| fixed step: speed-up over torchdiffeq | 1.64 | ≥ 1× | PASS |
| adaptive: speed-up over solve_ivp | 3.37 | ≥ 2× | PASS |
| sweep: rankflow.run configs/s over the best peer | 0.93 | ≥ 1× | FAIL |
"""

NEW = """Machine: new machine.
Run of 2026-02-02 12:00 UTC. Load average (1 min) 3.00 at the start, 4.00 at the end.

### Adaptive: new adaptive

| method | run s |
|---|---:|
| new adaptive row (fastest) | 1.5 |

### Targets

| target | measured | required | result | note |
|---|---:|---:|---|---|
| adaptive float64: speed-up over solve_ivp RK45 | 2.10 | ≥ 2× | PASS | error 1e-6 vs 1e-6 |
"""


def test_a_partial_rerun_replaces_its_section_and_keeps_the_others():
    order = ("fixed", "sde", "adaptive", "sweep", "roofline")
    text = peers_markdown.merge(OLD, NEW, ["adaptive"], order)
    assert "new adaptive row" in text and "old adaptive row" not in text
    assert "old fixed row" in text and "old sweep row" in text
    assert text.index("old fixed row") < text.index("new adaptive row") < text.index("sweep row")
    assert text.startswith("Machine: new machine.")
    # each kept section says which run it is from: the old run, or the run it was kept from
    assert "The `fixed` section below is from an earlier run (2026-01-01 10:00 UTC, " in text
    assert "load average 0.50 → 1.50)." in text
    assert "The `sweep` section below is from an earlier run (2025-12-31 09:00 UTC" in text
    assert "`adaptive` section below" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "≥" in line]
    assert [r.split(":")[0] for r in rows] == ["| fixed step", "| adaptive float64", "| sweep"]
    assert all(r.count("|") == 6 for r in rows)  # the old rows gain the note column
    assert "speed-up over solve_ivp | 3.37" not in text


def test_thread_counts_and_the_fastest_of_them():
    assert peers_threads.counts("each") == tuple(dict.fromkeys((1, os.cpu_count() or 1)))
    assert peers_threads.counts("1,2,2") == (1, 2)
    with pytest.raises(ValueError):
        peers_threads.counts("0")
    rows = [
        {"method": "rankflow", "run_s": 1.0, "peer": None},
        {"method": "p, 1 thread", "run_s": 3.0, "peer": "p"},
        {"method": "p, 2 threads", "run_s": 2.0, "peer": "p"},
        {"method": "q, 1 thread", "run_s": 5.0, "peer": "q"},
    ]
    peers_threads.mark_best(rows)
    assert [r.get("best") for r in rows] == [None, False, True, False]
