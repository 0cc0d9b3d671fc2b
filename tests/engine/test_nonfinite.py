"""Non-finite is never ok: a run whose state, loss or any observable stops being finite is
``diverged`` from that save on (every value NaN there), whatever the family or depth, and
no row of a table has status ok beside a non-finite number.

The cases with ``solver.diverge_norm = 1e30`` leave only the finiteness check to catch
the blow-up: the float32 factors stay finite and within that norm while the loss of their
product overflows (at depth 3 this is checked: the first diverged save is one whose
factors are finite); before the check those rows were ``ok`` with an infinite loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers import states

import rankflow
import rankflow.attention as ra
from rankflow.attention import program as attention_program
from rankflow.core import config as C
from rankflow.core.factors import depth_observables, product
from rankflow.core.program import params_of
from rankflow.engine import programs

HUGE = 1e30  # a diverge_norm that float32 factors never pass before overflowing
ETAS = [0.05, 40.0, 0.1]  # the middle one diverges (GD on a 3×3 problem at init 1)


def _core(depth: int, norm: float | None, kind: str = "gd") -> dict:
    cfg = {
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5, 0.2]},
        "model": {"r": 3, "depth": depth},
        "init": {"kind": "gaussian", "scale": 1.0},
        "dynamics": {"kind": kind, "eta": 0.1, "lam": 0.1},
        "save": {"t1": 30, "num": 31},
        "sweep": {"dynamics.eta": ETAS},
    }
    if norm is not None:
        cfg["solver"] = {"diverge_norm": norm}
    return cfg


def assert_no_ok_nonfinite(df: pd.DataFrame) -> None:
    """No row with status ok holds a non-finite number, in any numeric column."""
    num = df.select_dtypes("number")
    assert len(num.columns) > 10
    ok = (df["status"].astype(str) == "ok").to_numpy()
    bad = ok & ~np.isfinite(num.to_numpy(np.float64)).all(axis=1)
    cols = num.columns[~np.isfinite(num[bad].to_numpy(np.float64)).all(axis=0)].tolist()
    assert not bad.any(), f"{bad.sum()} ok rows with non-finite values in {cols}"


def _observables(df: pd.DataFrame) -> list[str]:
    """The measured columns: numeric, and neither a config key (dotted, or ``seed``) nor
    an index (run, path, time, layer, head)."""
    index = ("run_id", "path", "t", "seed", "layer", "head")
    return [c for c in df.select_dtypes("number").columns if "." not in c and c not in index]


def _check_sweep(df: pd.DataFrame, key: str, diverging: float) -> float:
    """The diverging point is ok at t = 0, then diverged from one save on with every
    observable NaN; its neighbours are ok everywhere with finite values. Returns the
    first diverged time."""
    assert_no_ok_nonfinite(df)
    obs = _observables(df)
    for value, part in df.groupby(key, observed=True):
        status = part["status"].astype(str).to_numpy()
        if value != diverging:
            assert (status == "ok").all(), value
            assert np.isfinite(part[obs].to_numpy()).all(), value
            continue
        bad = status != "ok"
        assert status[0] == "ok" and bad.any()
        first = int(np.argmax(bad))
        assert bad[first:].all() and set(status[first:]) == {"diverged"}  # sticky
        assert np.isnan(part[obs].to_numpy()[first:]).all()
        assert np.isfinite(part[obs].to_numpy()[:first]).all()
        return float(part["t"].iloc[first])
    raise AssertionError("no diverging point")


def _first_bad_save(cfg: dict, eta: float, norm: float) -> tuple[float, str]:
    """The first save time of the point η where, recomputed from its saved factors
    (``save = "states"``), a factor entry is beyond ``norm`` or not finite ("state"), or
    the loss or an observable of :func:`depth_observables` is not ("observables")."""
    one = {k: v for k, v in cfg.items() if k != "sweep"}
    one["dynamics"] = dict(one["dynamics"], eta=eta)
    point, program, out = states(one)
    factors = tuple(np.asarray(W[0]) for W in out["theta"])
    with jax.enable_x64(point["x64"]):
        data = program.data(params_of(point, 0))
        lam = jnp.asarray(point["dynamics"]["lam"], program.dtype)
        for i, t in enumerate(program.ts):
            big = max(float(np.max(np.abs(W[i]))) for W in factors)
            if not big <= norm:
                return float(t), "state"
            theta = tuple(jnp.asarray(W[i]) for W in factors)
            loss = program.problem.loss(product(theta), data)
            obs = depth_observables(theta, loss, lam, point["save"]["rank_tol"])
            if not all(bool(jnp.all(jnp.isfinite(v))) for v in obs.values()):
                return float(t), "observables"
    raise AssertionError("the point never blows up")


@pytest.mark.parametrize("norm", [None, HUGE], ids=["default_norm", "norm_1e30"])
def test_depth3_sweep_marks_the_diverging_point_from_its_first_bad_save(norm):
    """Depth 3, GD: diverged from the first save where the factors pass the norm (the
    default 1e6) or, with the norm out of reach, where the loss of their product
    overflows while every factor is finite."""
    cfg = _core(3, norm)
    df = rankflow.run(cfg)
    assert (df["model.depth"] == 3).all()
    t_first = _check_sweep(df, "dynamics.eta", ETAS[1])
    limit = norm or C.DEFAULTS["solver"]["diverge_norm"]
    assert (t_first, "observables" if norm else "state") == _first_bad_save(cfg, ETAS[1], limit)


@pytest.mark.parametrize("norm", [None, HUGE], ids=["default_norm", "norm_1e30"])
def test_depth2_sweep_marks_the_diverging_point(norm):
    df = rankflow.run(_core(2, norm))
    t_first = _check_sweep(df, "dynamics.eta", ETAS[1])
    assert t_first > 0


def test_a_fixed_step_flow_that_blows_up_is_diverged():
    """Flows take the same path: explicit Euler with a step far beyond stability."""
    cfg = _core(3, HUGE, kind="gradient_flow")
    cfg["solver"] = {"diverge_norm": HUGE, "method": "euler", "adaptive": False, "dt": 1.0}
    _check_sweep(rankflow.run(cfg), "dynamics.eta", ETAS[1])


# --- attention ---------------------------------------------------------------------------

ATTENTION = {
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
    "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4, "val_size": 8},
    "dynamics": {"kind": "adamw", "eta": 0.01, "lam": 0.1, "batch": 4},
    "train": {"eval_every": 5},
    "save": {"t1": 15},
    "sweep": {"dynamics.eta": [0.01, 1e8, 0.02]},
}


def _check_attention(res, diverging: float, first_t: float) -> None:
    for df in (res.heads, res.loss):
        assert_no_ok_nonfinite(df)
        obs = _observables(df)
        for eta, part in df.groupby("dynamics.eta", observed=True):
            ok = part["status"].astype(str) == "ok"
            if eta != diverging:
                assert ok.all() and np.isfinite(part[obs].to_numpy()).all()
                continue
            assert (ok == (part["t"] < first_t)).all(), part[["t", "status"]]
            assert set(part.loc[~ok, "status"].astype(str)) == {"diverged"}
            assert np.isnan(part.loc[~ok, obs].to_numpy()).all()


def test_attention_sweep_marks_the_huge_eta_diverged():
    """AdamW at η = 1e8 (tests/attention/test_cross_gaps.py) diverges within the first
    five steps: ok at step 0 only."""
    _check_attention(ra.run(ATTENTION), 1e8, 5)


def test_attention_head_observable_nan_with_finite_loss_is_diverged(monkeypatch):
    """A head observable that is NaN while the losses are finite (planted at step 10 of
    the second run) makes that run diverged from there on, in both tables."""
    real = attention_program.head_observables

    def planted(factors, rank_tol):
        out = real(factors, rank_tol)
        gap = out["balance_gap"]  # (runs, saves, layers, H, 2)
        hit = (jnp.arange(gap.shape[0]) == 1)[:, None] & (jnp.arange(gap.shape[1]) == 2)[None]
        out["balance_gap"] = jnp.where(hit[:, :, None, None, None], jnp.nan, gap)
        return out

    monkeypatch.setattr(attention_program, "head_observables", planted)
    monkeypatch.setattr(programs, "PROGRAMS", {})  # a fresh program traces the plant
    cfg = dict(ATTENTION, sweep={"dynamics.eta": [0.01, 0.02, 0.03]})
    _check_attention(ra.run(cfg), 0.02, 10)
