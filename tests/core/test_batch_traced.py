"""sgd's minibatch size is traced (issue #41, item 4): a sweep over batch sizes is one
compiled program whose runs draw ``dynamics.batch_pad`` points and use their first b
(``rankflow.core.problems.Minibatch``), with the same draws as an unpadded run of each
size, so its tables equal separate runs' to float64 rounding."""

from itertools import combinations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankflow
from rankflow.core import config as C
from rankflow.core import problems as problems_lib
from rankflow.core.observables import OBSERVABLES
from rankflow.core.problems import Minibatch, draw_minibatch, make_problem
from rankflow.core.program import TRACE_COUNTS, program_for
from rankflow.core.vocabulary import batch_pads
from rankflow.engine import programs

BATCHES = [3, 4, 6, 9, 12]  # within 8× of each other: one group, drawn at 12

BASE = {
    "x64": True,
    "problem": {"kind": "regression", "m": 4, "n": 3, "rank": 2, "samples": 24, "noise": 0.3},
    "model": {"r": 3},
    "dynamics": {"kind": "sgd", "eta": 0.1, "lam": 0.05},
    "save": {"t1": 23, "num": 24},  # a structure no other test uses
}


def _swept_against_separate_runs(cfg, sizes):
    """The sweep's rows of each of ``sizes`` against a run of that size alone (drawn at its
    own size, its own program), to float64 rounding; their final balance gaps."""
    swept = rankflow.run(cfg)
    cols = list(OBSERVABLES) + ["sv_1", "sv_2", "sv_3"]
    finals = []
    for b in sizes:
        alone = rankflow.run(BASE | {"dynamics": BASE["dynamics"] | {"batch": b}})
        mine = swept[swept["dynamics.batch"] == b]
        np.testing.assert_allclose(
            mine[cols].to_numpy(), alone[cols].to_numpy(), rtol=1e-12, atol=1e-13
        )
        finals.append(float(alone["balance_gap"].iloc[-1]))
    return swept, finals


def test_a_sweep_over_5_batch_sizes_is_one_program_and_equals_a_separate_run():
    """One trace for the five sizes; the smallest (drawn at 12, using 3) equals its run
    drawn at 3 (two compilations in all: the 5-run comparison is in the slow set)."""
    cfg = BASE | {"sweep": {"dynamics.batch": BATCHES}}
    points = C.expand(C.resolve(cfg))
    assert [p["dynamics"]["batch_pad"] for p in points] == [12] * 5
    keys = {program_for(p).key for p in points}
    assert len(keys) == 1 and TRACE_COUNTS[next(iter(keys))] == 0
    swept, _ = _swept_against_separate_runs(cfg, BATCHES[:1])
    assert TRACE_COUNTS[next(iter(keys))] == 1  # one trace, one compilation, 5 batch sizes
    assert sorted(swept["dynamics.batch"].unique()) == BATCHES
    # The sizes run differently (the sweep is not five copies of one run).
    finals = swept.groupby("dynamics.batch")["balance_gap"].last().to_numpy()
    assert min(abs(a - b) for a, b in combinations(finals, 2)) > 1e-6


@pytest.mark.slow  # five more compilations
def test_a_sweep_over_5_batch_sizes_equals_5_separate_runs():
    cfg = BASE | {"sweep": {"dynamics.batch": BATCHES}}
    _, finals = _swept_against_separate_runs(cfg, BATCHES)
    assert min(abs(a - b) for a, b in combinations(finals, 2)) > 1e-6


def test_a_padded_minibatch_is_the_unpadded_draw_and_loss():
    """The first b of the pad-point draw are ``choice(key, N, (b,))``'s points, and the
    loss on a ``Minibatch`` of size b is the loss on those b points, for every problem
    with samples; the wrong masks (the mean over all drawn points, the sum divided by the
    pad) are not."""
    key = jax.random.PRNGKey(7)
    for kind in ("sensing", "completion", "regression"):
        point = C.expand(
            C.resolve({"x64": True, "problem": {"kind": kind, "m": 4, "n": 3, "samples": 30}})
        )[0]
        problem = make_problem(point)
        loss = jax.value_and_grad(problem.batch_loss)

        @jax.jit
        def both(W, data, loss=loss):  # one compilation per problem
            out = []
            for b in (5, 16):
                drawn = draw_minibatch(key, 30, b, 16)
                plain = jax.random.choice(key, 30, (b,), replace=False)
                same = (drawn.idx[:b] == plain).all()
                out.append((same, loss(W, data, plain), loss(W, data, drawn), drawn.idx))
            return out

        with jax.enable_x64(True):
            data = problem.make_data(jax.random.PRNGKey(1), 0.1, jnp.float64)
            W = jax.random.normal(jax.random.PRNGKey(2), (4, 3), jnp.float64)
            for b, (same, (want, want_grad), (got, got_grad), idx) in zip((5, 16), both(W, data)):
                assert bool(same)
                assert abs(float(got - want)) <= 1e-14 * abs(float(want))
                np.testing.assert_allclose(got_grad, want_grad, rtol=1e-13)
                if b < 16:  # wrong masks give other losses
                    all_drawn = problem.batch_loss(W, data, idx)
                    assert abs(float(all_drawn - want)) > 1e-6 * abs(float(want))
                    over_pad = got * b / 16
                    assert abs(float(over_pad - want)) > 1e-6 * abs(float(want))


@pytest.mark.slow  # two programs of their own (compilations)
def test_the_mask_ignored_makes_the_sweep_differ_from_separate_runs(monkeypatch):
    """Mutant: the padded loss as the mean over every drawn point (b ignored) — the swept
    table then differs from the separate run of its smallest size. Its programs are
    dropped after, so no later test reads the mutant."""
    wrong = lambda terms, idx: jnp.mean(terms)  # noqa: E731
    monkeypatch.setattr(problems_lib, "_batch_mean", wrong)
    cfg = BASE | {"save": {"t1": 5, "num": 6}, "sweep": {"dynamics.batch": [3, 12]}}
    alone_cfg = cfg | {"sweep": {}, "dynamics": BASE["dynamics"] | {"batch": 3}}
    keys = [program_for(C.expand(C.resolve(c))[0]).key for c in (cfg, alone_cfg)]
    try:
        swept, alone = rankflow.run(cfg), rankflow.run(alone_cfg)
    finally:
        for key in keys:
            programs.PROGRAMS.pop(key, None)
    gap = swept[swept["dynamics.batch"] == 3]["balance_gap"].to_numpy()
    assert np.max(np.abs(gap - alone["balance_gap"].to_numpy())) > 1e-6


def test_batch_sizes_are_grouped_within_8x_and_each_group_is_one_program():
    assert batch_pads([4, 8, 16, 32]) == {4: 32, 8: 32, 16: 32, 32: 32}
    assert batch_pads([1, 4, 16, 64]) == {1: 4, 4: 4, 16: 64, 64: 64}
    assert batch_pads([2, 17]) == {2: 2, 17: 17}  # 17 > 8 · 2: two programs
    assert batch_pads([5]) == {5: 5}
    cfg = BASE | {"problem": BASE["problem"] | {"samples": 64}}
    points = C.expand(C.resolve(cfg | {"sweep": {"dynamics.batch": [1, 4, 16, 64]}}))
    assert [p["dynamics"]["batch_pad"] for p in points] == [4, 4, 64, 64]
    assert len({C.structure_key(p) for p in points}) == 2
    # Not swept: drawn at its own size, the program it always had.
    one = C.expand(C.resolve(cfg | {"dynamics": cfg["dynamics"] | {"batch": 5}}))[0]
    assert one["dynamics"]["batch_pad"] == 5
    # The minibatch SME's noise scale is a constant of its program: one per batch size.
    sme = {"kind": "stochastic_flow", "noise": "minibatch", "eta": 0.1}
    sme_cfg = cfg | {"dynamics": sme, "solver": {"dt": 0.5}, "save": {"t1": 4.0, "num": 3}}
    points = C.expand(C.resolve(sme_cfg | {"sweep": {"dynamics.batch": [4, 8]}}))
    assert len({C.structure_key(p) for p in points}) == 2
    assert all(p["dynamics"]["batch_pad"] is None for p in points)


@pytest.mark.parametrize(
    "dynamics, match",
    [
        (
            {"kind": "sgd", "batch": 25},
            r"^dynamics\.batch: must be ≤ problem\.samples = 24, got 25",
        ),
        ({"kind": "sgd", "batch": 0}, r"^dynamics\.batch: must be ≥ 1"),
        ({"kind": "sgd", "batch": 2.5}, r"^dynamics\.batch"),
        ({"kind": "sgd", "batch_pad": 0}, r"^dynamics\.batch_pad: must be ≥ 1"),
        ({"kind": "sgd", "batch_pad": "all"}, r"^dynamics\.batch_pad"),
    ],
)
def test_bad_batch_sizes_are_one_line_errors(dynamics, match):
    with pytest.raises(rankflow.ConfigError, match=match) as e:
        C.resolve(BASE | {"dynamics": BASE["dynamics"] | dynamics})
    assert "\n" not in str(e.value)


def test_batch_pad_is_at_least_the_batch_and_at_most_the_samples():
    """A resolved point (its batch_pad derived) resolved again with a larger batch, or
    with fewer samples, stays valid: the pad is at least b and at most N."""
    point = C.expand(C.resolve(BASE | {"dynamics": BASE["dynamics"] | {"batch": 8}}))[0]
    assert point["dynamics"]["batch_pad"] == 8
    bigger = C.expand(C.resolve(point, {"dynamics.batch": 24}))[0]
    assert bigger["dynamics"]["batch_pad"] == 24
    fewer = C.expand(C.resolve(point, {"problem.samples": 10, "dynamics.batch_pad": 16}))[0]
    assert fewer["dynamics"]["batch_pad"] == 10
    gd = C.expand(C.resolve(BASE | {"dynamics": {"kind": "gd", "batch_pad": 8}}))[0]
    assert gd["dynamics"]["batch_pad"] is None  # other dynamics ignore it


def test_a_given_batch_pad_serves_every_smaller_batch():
    cfg = BASE | {"dynamics": BASE["dynamics"] | {"batch_pad": 20}}
    points = C.expand(C.resolve(cfg | {"sweep": {"dynamics.batch": [2, 20]}}))
    assert [p["dynamics"]["batch_pad"] for p in points] == [20, 20]
    assert len({C.structure_key(p) for p in points}) == 1
    assert isinstance(Minibatch(jnp.arange(3), jnp.asarray(2)), tuple)
