"""``save.states``: the factors at the saves as an artefact of a results directory
(``DIR/states.parquet/``, :func:`rankflow.load_states`) and of the Python call
(``df.attrs["states"]``) — exact round trip, the factors of a direct simulation, theory
functions at them equal to the table's columns, resume, the guards, the default writing
none. Every check is paired with the plausible wrong version it must tell apart."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import rankflow
from rankflow import cli, theory
from rankflow.core import config as C
from rankflow.core import family as F
from rankflow.core.program import TRACE_COUNTS, params_of, program_for
from rankflow.engine import store

# x64 GD on a sensing problem: two λ × two seeds, four runs, 5 saves each.
GD = {
    "x64": True,
    "problem": {"kind": "sensing", "m": 5, "n": 4, "rank": 2, "samples": 30},
    "model": {"r": 3},
    "init": {"scale": 0.5},
    "dynamics": {"kind": "gd", "eta": 0.1},
    "save": {"t1": 20, "num": 5, "states": True},
    "sweep": {"dynamics.lam": [0.0, 0.05], "seed": [0, 1]},
}


@pytest.fixture(scope="module")
def gd_sweep(tmp_path_factory):
    """GD's sweep in memory and through a results directory (chunks of 3 runs: two
    chunks, the second padded), and the directory's states read back."""
    out = tmp_path_factory.mktemp("states")
    memory = rankflow.run(GD)
    written = rankflow.run(GD, out=out, chunk=3)
    return memory, written, rankflow.load_states(out), out


def _direct_gd(point, path=0):
    """A hand-written GD loop θ ← θ − η(∇L + λθ) from the run's own start (the
    program's data and θ(0)): the factors at every step up to save.t1 + 1."""
    program = program_for(point)
    with jax.enable_x64(True):
        data, (A, B), hyper, _ = program.start(program.typed(params_of(point, path)))
        eta, lam = point["dynamics"]["eta"], point["dynamics"]["lam"]
        grad = jax.jit(jax.grad(lambda A, B: program.problem.loss(A @ B.T, data), (0, 1)))
        steps = [(np.asarray(A), np.asarray(B))]
        for _ in range(int(point["save"]["t1"]) + 1):
            gA, gB = grad(A, B)
            A, B = A - eta * (gA + lam * A), B - eta * (gB + lam * B)
            steps.append((np.asarray(A), np.asarray(B)))
    return steps


def test_states_round_trip_bit_for_bit_through_the_directory(gd_sweep):
    memory, written, states, out = gd_sweep
    in_memory = memory.attrs["states"]
    assert sorted(states) == sorted(in_memory) == [(i, 0) for i in range(4)]
    assert sorted(p.name for p in (out / store.STATES).iterdir()) == [
        "chunk-00000.parquet",
        "chunk-00001.parquet",
    ]
    for key in states:
        got, ref = states[key], in_memory[key]
        assert got.A.dtype == np.float64 and got.A.shape == (5, 5, 3) and got.B.shape == (5, 4, 3)
        for a, b in zip(got.W, ref.W):
            assert a.tobytes() == b.tobytes()  # bit for bit
        assert got.t.tolist() == [0.0, 5.0, 10.0, 15.0, 20.0] and (got.status == "ok").all()
    # The directory's table has them too (read back by the Python call).
    assert written.attrs["states"][0].A.tobytes() == states[0].A.tobytes()
    # The wrong version: another run's states differ (the round trip could not pass by
    # giving every run the same arrays).
    assert states[0].A.tobytes() != states[1].A.tobytes()


def test_states_are_the_factors_of_the_program_and_of_a_direct_gd_loop(gd_sweep):
    _, _, states, _ = gd_sweep
    points = C.expand(C.resolve(GD))
    saves = [0, 5, 10, 15, 20]
    for i, point in enumerate(points):
        # rankflow's own trajectory program (save = "states"), one run alone: bit for bit.
        program = program_for(point, save="states")
        one = {k: np.asarray([v]) for k, v in params_of(point, 0).items()}
        A, B = program.run(one)["theta"]
        assert A[0].tobytes() == states[i].A.tobytes() and B[0].tobytes() == states[i].B.tobytes()
        # An independent GD loop in JAX on the same start: to rounding.
        steps = _direct_gd(point)
        direct_A = np.stack([steps[k][0] for k in saves])
        direct_B = np.stack([steps[k][1] for k in saves])
        np.testing.assert_allclose(states[i].A, direct_A, rtol=0, atol=1e-12)
        np.testing.assert_allclose(states[i].B, direct_B, rtol=0, atol=1e-12)
        # Wrong versions it tells apart: a save one step late, A and B exchanged.
        late = np.stack([steps[k + 1][0] for k in saves])
        assert np.max(np.abs(states[i].A - late)) > 1e-4
        assert np.max(np.abs(states[i].A[:, :4] - direct_B)) > 1e-3
    # And a wrong rate in the loop (λ/2) is seen where λ > 0 (run 1: λ = 0.05, seed 1).
    half = dict(points[3], dynamics={**points[3]["dynamics"], "lam": 0.025})
    assert points[3]["dynamics"]["lam"] == 0.05
    assert np.max(np.abs(states[3].A[-1] - _direct_gd(half)[-1][0])) > 1e-4


def test_theory_functions_at_the_states_equal_the_table_columns(gd_sweep):
    memory, _, states, _ = gd_sweep
    for (run_id, path), run in states.items():
        rows = memory[(memory["run_id"] == run_id) & (memory["path"] == path)]
        assert rows["t"].tolist() == run.t.tolist()
        with jax.enable_x64(True):
            D = np.stack([theory.balance(A, B) for A, B in zip(run.A, run.B)])
            t1 = np.array([theory.t1_gap(A, B) for A, B in zip(run.A, run.B)])
        gap, trace = np.linalg.norm(D, axis=(1, 2)), np.trace(D, axis1=1, axis2=2)
        np.testing.assert_allclose(gap, rows["balance_gap"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(trace, rows["balance_trace"], rtol=0, atol=1e-12)
        np.testing.assert_allclose(t1, rows["frob_minus_nuc"], rtol=0, atol=1e-12)
        # Wrong versions: D's sign flipped (B, A), T1 one save late, ‖D‖ without the root.
        assert np.max(np.abs(-trace - rows["balance_trace"])) > 1e-3
        assert np.max(np.abs(t1[1:] - rows["frob_minus_nuc"].to_numpy()[:-1])) > 1e-6
        assert np.max(np.abs(gap**2 - rows["balance_gap"])) > 1e-3


def _killed_then_resumed(out, monkeypatch):
    """GD's sweep into ``out`` killed between chunk 1's states and its results, then
    worse (chunk 1's states replaced by a copy of chunk 0's, chunk 0's lost), then
    resumed: the resumed table and the write calls before the kill."""
    write = store.write_chunk
    calls = []

    def killed_between_a_chunks_two_files(path, index, df, table, ident=None):
        calls.append((index, table))
        if len(calls) == 4:  # chunk 1's states are written, its results not
            raise KeyboardInterrupt
        return write(path, index, df, table, ident)

    monkeypatch.setattr(store, "write_chunk", killed_between_a_chunks_two_files)
    with pytest.raises(KeyboardInterrupt):
        rankflow.run(GD, out=out, chunk=3)  # the fixture's chunks: compiled already
    monkeypatch.setattr(store, "write_chunk", write)
    states_dir = out / store.STATES
    assert (states_dir / "chunk-00001.parquet").exists()
    assert not (out / store.RESULTS / "chunk-00001.parquet").exists()
    (states_dir / "chunk-00000.parquet").rename(states_dir / "chunk-00001.parquet")
    return rankflow.run(GD, out=out, chunk=3, resume=True), calls


def test_a_resumed_sweep_has_the_states_of_an_uninterrupted_one(
    gd_sweep, tmp_path, monkeypatch, capsys
):
    _, _, whole, _ = gd_sweep
    out = tmp_path / "resumed"
    resumed, calls = _killed_then_resumed(out, monkeypatch)
    assert calls == [(0, store.STATES), (0, store.RESULTS), (1, store.STATES), (1, store.RESULTS)]
    err = capsys.readouterr().err
    assert "states.parquet/chunk-00001.parquet is a copy of chunk 0 (a duplicate)" in err
    states = rankflow.load_states(out, strict=True)
    assert sorted(states) == sorted(whole)
    for key in whole:
        for a, b in zip(states[key].W, whole[key].W):
            assert a.tobytes() == b.tobytes()
    assert resumed["run_id"].tolist() == np.repeat(np.arange(4), 5).tolist()
    states_dir = out / store.STATES
    assert len(list(states_dir.glob("chunk-*.parquet"))) == 2 and not list(states_dir.glob(".*"))


def test_a_resume_that_checked_only_the_results_would_lose_states(tmp_path, monkeypatch):
    """The wrong version: a chunk counted finished by its results file alone is not
    run again when its states are lost (chunk 0), and its runs have none."""
    check = store.finished_chunks

    def results_only(out, chunks, rows, table=store.RESULTS, ident=None):
        if table == store.STATES:
            return {c.index for c in chunks}, []
        return check(out, chunks, rows, table, ident)

    monkeypatch.setattr(store, "finished_chunks", results_only)
    _killed_then_resumed(tmp_path / "lax", monkeypatch)
    with pytest.raises(
        rankflow.ConfigError, match=r"1 of 2 chunks missing \(chunk-00000\): 3 of 4"
    ):
        rankflow.load_states(tmp_path / "lax", strict=True)


def test_the_command_writes_the_states_too(gd_sweep, tmp_path, capsys):
    _, _, whole, _ = gd_sweep
    lines = ["x64 = true"]
    for section, body in GD.items():
        if isinstance(body, dict):
            lines += [f"[{section}]"] + [f'"{k}" = {json.dumps(v)}' for k, v in body.items()]
    path = tmp_path / "gd.toml"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out), "--chunk", "3"]) == 0
    assert capsys.readouterr().out.startswith("4 runs (0 diverged, 0 max_steps) in")
    states = rankflow.load_states(out)
    assert sorted(states) == sorted(whole)
    for key in whole:
        assert states[key].A.tobytes() == whole[key].A.tobytes()
        assert states[key].B.tobytes() == whole[key].B.tobytes()


def test_stochastic_states_per_path():
    cfg = {
        "x64": True,
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5, 0.25]},
        "model": {"r": 3},
        "dynamics": {"kind": "sgd_gaussian", "eta": 0.05, "lam": 0.1, "sigma": 0.1, "paths": 2},
        "save": {"t1": 6, "num": 4, "states": True},
    }
    df = rankflow.run(cfg)
    states = df.attrs["states"]
    assert sorted(states) == [(0, 0), (0, 1)]
    # Paths share their start and differ in their noise.
    first, second = states[0, 0], states[0, 1]
    assert first.A[0].tobytes() == second.A[0].tobytes()
    assert np.max(np.abs(first.A[-1] - second.A[-1])) > 1e-3
    with pytest.raises(KeyError, match=r"^states: run_id 0 has 2 paths; index states\[0, p\]"):
        states[0]
    for (_, path), run in states.items():
        rows = df[df["path"] == path]
        with jax.enable_x64(True):
            gap = [float(jnp.linalg.norm(theory.balance(A, B))) for A, B in zip(run.A, run.B)]
        np.testing.assert_allclose(gap, rows["balance_gap"], rtol=0, atol=1e-12)
        # The wrong version: the other path's rows.
        other = df[df["path"] == 1 - path]["balance_gap"].to_numpy()
        assert np.max(np.abs(np.asarray(gap) - other)) > 1e-6


def test_depth_L_states_are_every_factor_in_order():
    """Depth 3 with widths (3, 4) on a 3×3 target: W_1 (3×3), W_2 (4×3), W_3 (3×4), W =
    W_3 W_2 W_1; the product's singular values are the table's."""
    deep = rankflow.run(
        {
            "x64": True,
            "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5, 0.25]},
            "model": {"r": [3, 4], "depth": 3},
            "dynamics": {"kind": "gd", "eta": 0.05},
            "save": {"t1": 6, "num": 4, "states": True},
        }
    )
    run = deep.attrs["states"][0]
    assert list(run.factors) == ["W_1", "W_2", "W_3"]
    assert [w.shape for w in run.W] == [(4, 3, 3), (4, 4, 3), (4, 3, 4)]
    table = deep[["sv_1", "sv_2", "sv_3"]].to_numpy()
    sv = np.linalg.svd(run.W[2] @ run.W[1] @ run.W[0], compute_uv=False)
    np.testing.assert_allclose(sv, table, rtol=0, atol=1e-12)
    # The wrong version: the product in the other order (W_1 W_2ᵀ-shaped chains fail to
    # multiply; W_1 W_3 W_2 does, and its spectrum is another).
    wrong = np.linalg.svd(run.W[0] @ run.W[2] @ run.W[1], compute_uv=False)
    assert np.max(np.abs(wrong - table)) > 1e-6
    with pytest.raises(AttributeError, match="a depth-3 run has factors W_1, W_2, W_3"):
        _ = run.A


def test_states_too_large_are_refused_in_one_line_before_compiling(tmp_path, monkeypatch):
    big = {
        "problem": {"kind": "sensing", "m": 300, "n": 300, "rank": 2, "samples": 10},
        "model": {"r": 100},
        "dynamics": {"kind": "gd", "eta": 0.01},
        "save": {"t1": 1000, "num": 1001, "states": True},
        "sweep": {"seed": list(range(100))},
    }
    # 100 runs × 1001 saves × 60,000 entries × 4 bytes: 22.4 GiB, over 16 GiB.
    point = C.expand(C.resolve(big))[0]
    assert F.state_bytes(point) == 1001 * (4 * 60_000 + 16)
    traced = dict(TRACE_COUNTS)
    out = tmp_path / "big"
    with pytest.raises(rankflow.ConfigError) as e:
        rankflow.run(big, out=out)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("save.states: the states of 100 runs need about 22.")
    assert "limit of 16 GiB" in msg and "RANKFLOW_MAX_STATES_GIB=23" in msg
    assert not out.exists() and dict(TRACE_COUNTS) == traced
    # Under the limit, the disk: one line naming it, the size and the space free.
    monkeypatch.setenv("RANKFLOW_MAX_STATES_GIB", "100")
    monkeypatch.setattr(F, "nearest_disk", lambda out: (2**30, "disk of /somewhere"))
    with pytest.raises(
        rankflow.ConfigError, match=r"^save\.states: writing the states needs about 22"
    ):
        rankflow.run(big, out=out)
    with pytest.raises(rankflow.ConfigError, match=r"90% of the 1 GiB free on the disk of "):
        rankflow.run(big, out=out)
    # The Python call without out reads them back: the host's memory.
    monkeypatch.setattr(F, "host_memory", lambda: (2**30, "host"))
    with pytest.raises(rankflow.ConfigError, match=r"^save\.states: reading the states back needs"):
        rankflow.run(big)
    assert not out.exists() and dict(TRACE_COUNTS) == traced
    # The wrong version: without save.states, the same sweep passes these guards.
    small = big | {"save": {"t1": 1000, "num": 1001}}
    assert F.state_bytes(C.expand(C.resolve(small))[0]) == 0


def test_states_count_in_the_chunk_memory_model():
    cfg = {
        "problem": {"kind": "sensing", "m": 200, "n": 200, "rank": 2, "samples": 10},
        "model": {"r": 50},
        "save": {"t1": 200, "num": 201},
    }
    plain = C.expand(C.resolve(cfg))[0]
    kept = C.expand(C.resolve(cfg | {"save": {"t1": 200, "num": 201, "states": True}}))[0]
    extra = F._per_run_bytes(kept) - F._per_run_bytes(plain)
    # Three copies of 201 saves × 20,000 float32 entries, and the row objects.
    assert extra == 201 * (3 * 4 * 20_000 + 2 * 112 * 2)
    assert F.default_chunk_size(kept) < F.default_chunk_size(plain)
    # Read back (the Python call): check_states's, not the results table's.
    assert F.result_bytes(kept) == F.result_bytes(plain)
    assert F.read_back_bytes(kept) == 2 * F.state_bytes(kept) + 112 * 2 * 201
    assert F.read_back_bytes(plain) == F.state_bytes(plain) == 0


def test_the_default_writes_no_states_and_says_how_to_get_them(tmp_path):
    # tests/engine/test_results_dir.py's TINY sweep (compiled there in a full run).
    plain = {
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
        "model": {"r": 2},
        "dynamics": {"kind": "gd", "eta": 0.1},
        "save": {"t1": 4, "num": 3},
        "sweep": {"seed": [0, 1, 2, 3]},
    }
    df = rankflow.run(plain, out=tmp_path)
    assert "states" not in df.attrs
    assert not (tmp_path / store.STATES).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".rankflow.lock",
        "config.json",
        "manifest.json",
        "results.parquet",
    ]
    with pytest.raises(rankflow.ConfigError) as e:
        rankflow.load_states(tmp_path)
    assert str(e.value) == (
        f"{tmp_path}: holds no states (its sweep ran with save.states = false); run it "
        "with save.states = true (--set save.states=true) into a new --out"
    )
    with pytest.raises(rankflow.ConfigError, match=r"no such results directory"):
        rankflow.load_states(tmp_path / "absent")
    # The manifest records the setting: a sweep with states does not resume this one.
    assert json.loads((tmp_path / "manifest.json").read_text())["config"]["save"]["states"] is False
    with_states = plain | {"save": {"t1": 4, "num": 3, "states": True}}
    with pytest.raises(rankflow.ConfigError, match=r"save\.states = True here, False there"):
        rankflow.run(with_states, out=tmp_path, resume=True)  # refused before compiling


def test_one_line_errors_for_a_run_not_there_a_sweep_and_the_attention_family(gd_sweep):
    _, _, states, _ = gd_sweep
    with pytest.raises(KeyError) as e:
        states[7]
    assert str(e.value) == "states: no run_id 7 (these states hold 4 runs: run_ids 0…3)"
    assert isinstance(e.value, rankflow.ConfigError)
    with pytest.raises(KeyError, match=r"^states: no run_id 0 path 1 "):
        states[0, 1]
    assert 0 in states and np.int64(0) in states and (0, 0) in states and 7 not in states
    assert states[np.int64(2)] is states[2, 0]
    with pytest.raises(rankflow.ConfigError, match=r"^sweep\.save\.states: not sweepable"):
        rankflow.resolve(GD | {"sweep": {"save.states": [True, False]}})
    with pytest.raises(rankflow.ConfigError, match=r"^save\.states: unknown key"):
        rankflow.attention.resolve({"save": {"states": True}})
    # attrs survive pandas' operations (each deep-copies them) as the one object.
    df = gd_sweep[0]
    assert df[df["t"] > 0].attrs["states"] is df.attrs["states"]
    assert pd.concat([df, df]).attrs["states"] is df.attrs["states"]


STATES_CHILD = """
import json, sys, tempfile
from rankflow.core import config as C
from rankflow.core.family import CORE_STATES, execute
cfg = C.resolve(json.loads(sys.argv[1]))
print("EST", CORE_STATES.run_bytes(C.expand(cfg)[0]))
with tempfile.TemporaryDirectory() as out:
    execute(cfg, out, result=False, quiet=True)
"""


@pytest.mark.slow
def test_the_chunk_estimate_with_states_within_2x_of_measured():
    """One GD run with states written to a results directory (as the command runs it),
    a 400×400 diagonal target, r = 20: 1,001 / 2,001 / 3,001 saves of 16,000 float32
    entries (61–183 MiB of states; measured 2026-12-04, estimate/peak increase: 0.73,
    0.84, 0.95 and 0.78, 0.91, 0.98 in two runs; in memory, without out, 1.14, 1.28,
    1.36)."""
    from tests.engine.test_resource_guards import _agree, _measured

    def cfg(saves: int) -> str:
        return json.dumps(
            {
                "problem": {"kind": "diagonal", "singular_values": [1.0] * 400},
                "model": {"r": 20},
                "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
                "save": {"t1": saves - 1, "num": saves, "states": True},
            }
        )

    _agree(_measured(STATES_CHILD, [cfg(s) for s in (2, 1001, 2001, 3001)]), "core states")
