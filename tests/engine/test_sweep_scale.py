"""Sweeps at scale (issue #35): a sweep's points by index (mixed radix over the swept
axes), never as a list — the plan, each chunk's runs and traced values cost O(chunk)
whatever the sweep's size, and equal what expanding every point gives; ragged swept
lists run as structures of their own; the command's summary is counted chunk by chunk.
The timings the issue asks for are ``benchmarks/sweep_scale.py``'s (BENCHMARKS.md)."""

from __future__ import annotations

import itertools
import os
import random
import time

import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow.config.fields import sweep_points
from rankflow.config.points import Members
from rankflow.core import config as C
from rankflow.core.family import CORE
from rankflow.core.program import PARAM_KEYS, batch_of, params_of
from rankflow.engine import execute, plan
from rankflow.engine.plan import chunk_plan

TINY = {
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
    "model": {"r": 2},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 4.0, "num": 3},
}


def test_members_by_index_are_the_brute_force_ones():
    """Every k-th member, slice and count of a group (one or several structural
    combinations, structural axes anywhere) against listing the indices."""
    rng = random.Random(0)
    for _ in range(200):
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 4)))
        struct = sorted(rng.sample(range(len(shape)), rng.randint(0, len(shape))))
        every = list(itertools.product(*(range(shape[a]) for a in struct)))
        combos = sorted(rng.sample(every, rng.randint(1, len(every))))
        members = Members(shape, struct, combos)
        coords = np.unravel_index(np.arange(int(np.prod(shape))), shape)
        keys = set(combos)
        brute = [
            i
            for i in range(int(np.prod(shape)))
            if tuple(int(coords[a][i]) for a in struct) in keys
        ]
        assert list(members) == brute
        for _ in range(4):
            start = rng.randint(0, len(brute))
            stop = rng.randint(start, len(brute))
            assert members.take(start, stop).tolist() == brute[start:stop]
        x = rng.randint(0, len(coords[0]))
        assert members.count_below(x) == sum(b < x for b in brute)


def test_a_million_point_sweep_plans_fast_and_its_chunks_are_index_arithmetic():
    """10⁶ points (250 λ × model.r ∈ {2, 3} × 2,000 seeds): planned in under 2 s; at
    random chunks, the runs are the k-th points of their structure and their traced
    values the swept lists' entries, by direct index arithmetic; at random runs, equal
    to the point made in full."""
    lams = [i / 1000 for i in range(250)]
    seeds = list(range(2000))
    cfg = C.resolve(TINY | {"sweep": {"dynamics.lam": lams, "model.r": [2, 3], "seed": seeds}})
    t0 = time.perf_counter()
    points, chunks = plan(CORE, cfg)
    assert time.perf_counter() - t0 < 2
    assert len(points) == 10**6 and sum(c.rows for c in chunks) == 10**6
    rng = np.random.default_rng(0)
    group_r = {}
    for index in rng.choice(len(chunks), 12, replace=False):
        c = chunks[int(index)]
        ids, paths = c.runs.arrays()
        first = points[int(ids[0])]
        r_coord = group_r.setdefault(c.group, first["model"]["r"] - 2)
        # The k-th point of the structure model.r = 2 + r_coord: 2,000 seeds per λ.
        k = (c.index - chunks.offsets[c.group]) * 1024 + np.arange(len(ids))
        expected = (k // 2000) * 4000 + r_coord * 2000 + k % 2000
        np.testing.assert_array_equal(ids, expected)
        values = batch_of(points, ids, paths, first)
        np.testing.assert_array_equal(values["dynamics.lam"], np.array(lams)[ids // 4000])
        np.testing.assert_array_equal(values["seed"], np.array(seeds)[ids % 2000])
        assert values["seed"].dtype == np.int64 and values["dynamics.lam"].dtype == np.float64
        for j in rng.choice(len(ids), 3, replace=False):
            made = params_of(points[int(ids[j])], int(paths[j]))
            assert {key: values[key][j].item() for key in PARAM_KEYS} == made


@pytest.mark.parametrize("chunk", [None, 1, 3, 5])
def test_chunks_are_those_of_the_full_expansion(chunk):
    """On a sweep small enough to expand (structures merged by key: model.r = 2 and [2];
    Monte Carlo paths; structural axes between numeric ones), the plan made by index
    equals the plan of the list of every point, and each chunk's traced values those
    read point by point."""
    sweep = {"seed": [0, 1], "model.r": [2, [2], 3], "dynamics.lam": [0.0, 0.1, 0.2]}
    sde = {"dynamics": {"kind": "stochastic_flow", "sigma": 0.01, "paths": 2}}
    for base in (TINY, TINY | sde):
        cfg = C.resolve(base | {"sweep": sweep})
        eager = [C.derive(p) for p in sweep_points(cfg, C.SCHEMA)]
        lazy = C.expand(cfg)
        size = {"size": lambda p: chunk or CORE.chunk_size(p), "paths": CORE.paths}
        by_index = chunk_plan(lazy, C.structure_key, **size)
        listed = chunk_plan(eager, C.structure_key, **size)
        assert by_index == listed and len(by_index.groups) == 2
        for c in by_index:
            ids, paths = c.runs.arrays()
            got = batch_of(lazy, ids, paths, lazy[int(ids[0])])
            want = batch_of(eager, ids, paths, eager[int(ids[0])])
            for k in PARAM_KEYS:
                np.testing.assert_array_equal(got[k], want[k])
                assert got[k].dtype == want[k].dtype, k


def test_ragged_swept_lists_run_as_structures_of_their_own():
    """Singular values and save times of unequal lengths (a pandas traceback after the
    first chunk before): each length its own structure, the list written as text, the
    columns of a longer one NaN in the shorter's rows."""
    cfg = TINY | {"model": {"r": 3}}
    ragged = {"problem.singular_values": [[1.0, 0.5], [1.0, 0.5, 0.2]], "seed": [0, 1]}
    df = rankflow.run(cfg | {"sweep": ragged})
    assert len(df) == 4 * 3
    assert df.groupby("run_id")["problem.singular_values"].first().tolist() == (
        ["[1.0, 0.5]"] * 2 + ["[1.0, 0.5, 0.2]"] * 2
    )
    assert df.loc[df["run_id"] < 2, "sv_3"].isna().all()
    assert df.loc[df["run_id"] >= 2, "sv_3"].notna().all()


@pytest.mark.slow  # two more compilations (3 s); the column is written as above
def test_ragged_save_times_run_as_structures_of_their_own(tmp_path):
    cfg = TINY | {"model": {"r": 3}}
    times = {"save.ts": [[0.0, 2.0, 4.0], [0.0, 4.0]]}
    rankflow.run(cfg | {"sweep": times}, out=tmp_path / "ts")
    table = rankflow.load(tmp_path / "ts")
    assert table.groupby("run_id")["t"].apply(list).tolist() == [[0.0, 2.0, 4.0], [0.0, 4.0]]
    assert table["save.ts"].unique().tolist() == ["[0.0, 2.0, 4.0]", "[0.0, 4.0]"]


def test_the_command_s_summary_counted_chunk_by_chunk_is_the_table_s(tmp_path):
    """execute(result=False), the command's way, reads three columns of a chunk at a time
    and counts what the whole table counts (diverged runs included)."""
    cfg = C.resolve(TINY | {"sweep": {"dynamics.lam": [0.0, 1e9], "seed": [0, 1, 2]}})
    whole = execute(CORE, cfg, tmp_path / "a", chunk=2)[1]
    counted = execute(CORE, cfg, tmp_path / "b", chunk=2, result=False)
    assert counted[0] is None
    assert (counted[1].runs, counted[1].diverged, counted[1].max_steps) == (6, 3, 0)
    assert (whole.runs, whole.diverged, whole.max_steps) == (6, 3, 0)
    again = execute(CORE, cfg, tmp_path / "b", chunk=2, resume=True, result=False)[1]
    assert (again.runs, again.diverged, again.chunks_skipped) == (6, 3, 3)
    assert isinstance(rankflow.load(tmp_path / "b"), pd.DataFrame)


@pytest.mark.slow
def test_thirty_thousand_structures_reach_their_first_chunk_within_5_s(tmp_path, monkeypatch):
    """In this process (imports done): resolve, plan, every guard, the results folder, to
    the first chunk's start. benchmarks/sweep_scale.py times it from a fresh command."""
    monkeypatch.setenv("RANKFLOW_MAX_STRUCTURES", "30000")

    class Started(Exception):
        pass

    def started(self, *args, **kwargs):
        raise Started

    monkeypatch.setattr(type(CORE), "run_chunk", started)
    cfg = TINY | {"save": {"num": 2}, "sweep": {"save.t1": [10.0 + i for i in range(30000)]}}
    t0 = time.perf_counter()
    with pytest.raises(Started):
        rankflow.run(cfg, out=tmp_path / "out")
    assert time.perf_counter() - t0 < 5, os.getloadavg()
