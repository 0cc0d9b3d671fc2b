"""Learning-rate schedules (issue #16): η(t) = η·s(t) matches optax's schedules step for
step (the wsd schedules, issue #43: optax's ``join_schedules`` of warmup, constant and
decay, built here), ∫η has the closed forms of :mod:`rankflow.numerics.schedules`, T4
under a schedule
(‖D(t)‖ = e^{−2λ∫η}‖D(0)‖) holds for the core flow and per head of the attention flow
to 1e-9, T5 with η_k = η(k) holds at every GD step to 1e-10, and the plausible wrong
versions (the peak η throughout, 2ηλt, the schedule shifted by one step) miss by far
more."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from scipy.integrate import quad

import rankflow.attention as ra
from rankflow import theory
from rankflow.core import config as C
from rankflow.core.dynamics.vector_fields import noise_term
from rankflow.core.optimizers import make_optimizer
from rankflow.core.program import params_of, program_for
from rankflow.engine.status import Status
from rankflow.numerics.schedules import (
    Schedule,
    eta_at,
    eta_integral,
    kinks,
    schedule_factor,
    unit_clock,
)

ETA, LAM, W, F, T1 = 0.5, 0.1, 8, 0.1, 40


def _optax(kind: str, eta: float, w: int, f: float, t1: int):
    if kind == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(0.0, eta, w, t1, f * eta)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, eta, w), optax.linear_schedule(eta, f * eta, t1 - w)], [w]
    )


@pytest.mark.parametrize("kind", ["warmup_cosine", "linear"])
@pytest.mark.parametrize("w", [0, 7, 30])
def test_schedule_matches_optax_at_every_step(kind, w):
    ks = np.arange(0, 60)
    ours = np.asarray(eta_at(ks.astype(np.float64), 0.3, Schedule(kind, w, 0.2, 50.0)))
    ref = np.asarray([_optax(kind, 0.3, w, 0.2, 50)(k) for k in ks])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-15)
    # The step from 0 to 1 uses η(0): 0 under a warmup, the peak η without one.
    assert ours[0] == (0.0 if w else 0.3)
    assert ours[50] == pytest.approx(0.2 * 0.3, abs=1e-15)


def _optax_wsd(kind: str, eta: float, w: float, f: float, t1: float, d: float):
    """WSD as optax joins it: linear warmup over w steps, η until t1 − d, then the tail."""
    if kind == "wsd":
        tail = optax.linear_schedule(eta, f * eta, d)
    else:
        tail = optax.cosine_decay_schedule(eta, d, alpha=f)
    parts = [optax.linear_schedule(0.0, eta, w)] if w > 0 else []
    bounds = [w] if w > 0 else []
    return optax.join_schedules(parts + [optax.constant_schedule(eta), tail], bounds + [t1 - d])


def _wsd_clock(kind: str, w: float, f: float, t1: float, d: float, t: float) -> float:
    """∫₀ᵗ s of a wsd schedule, written out piece by piece (python floats)."""
    if t <= w:  # w > 0 here, or t = w = 0
        return t * t / (2 * w) if w else 0.0
    s0 = t1 - d
    if t <= s0:
        return w / 2 + (t - w)
    u = min(t - s0, d) / d
    if kind == "wsd":
        tail = d * (u - (1 - f) * u * u / 2)
    else:
        tail = d * (f * u + (1 - f) * (u + math.sin(math.pi * u) / math.pi) / 2)
    return w / 2 + (s0 - w) + tail + max(t - t1, 0.0) * f


@pytest.mark.parametrize("kind", ["wsd", "wsd_cosine"])
@pytest.mark.parametrize(("w", "d"), [(0, 10), (7, 10), (7, 43), (12, 1)])
def test_wsd_matches_optax_join_schedules(kind, w, d):
    sch = Schedule(kind, float(w), 0.2, 50.0, float(d))
    ks = np.arange(0, 60, dtype=np.float64)
    ours = np.asarray(eta_at(ks, 0.3, sch))
    with jax.enable_x64(True):
        ref = np.asarray(_optax_wsd(kind, 0.3, w, 0.2, 50, d)(jnp.asarray(ks)))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    # Warmup, then exactly the peak until the decay starts, then down to fη at t1.
    assert ours[0] == (0.0 if w else 0.3)
    assert (ours[w : 50 - d + 1] == 0.3).all()
    assert ours[50] == pytest.approx(0.2 * 0.3, abs=1e-15)
    # Wrong: the decay over the whole run after warmup (linear, warmup_cosine).
    other = {"wsd": "linear", "wsd_cosine": "warmup_cosine"}[kind]
    if w + d < 50:
        whole = np.asarray(eta_at(ks, 0.3, Schedule(other, w, 0.2, 50.0)))
        assert np.max(np.abs(whole - ref)) > 1e-2


@pytest.mark.parametrize("kind", ["wsd", "wsd_cosine"])
@pytest.mark.parametrize(("w", "d"), [(0.0, 20.0), (10.0, 20.0), (10.0, 90.0), (30.0, 0.5)])
def test_wsd_clock_is_the_closed_form(kind, w, d):
    """∫₀ᵗ η of a wsd schedule against its closed form (1e-10) and quadrature; the clock
    of the flows (``unit_clock``, discrete=False) is the same; the wrong clock t·η misses."""
    sch = Schedule(kind, w, 0.1, 100.0, d)
    ts = np.array([0.0, 3.0, 10.0, 47.5, 79.5, 85.0, 99.0, 100.0, 130.0])
    ours = np.asarray(eta_integral(ts, 0.5, sch))
    ref = np.array([0.5 * _wsd_clock(kind, w, 0.1, 100.0, d, t) for t in ts])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(0.5 * unit_clock(ts, sch, discrete=False), ref, atol=1e-10)
    for t in ts:
        pts = [x for x in (w, 100.0 - d, 100.0) if 0 < x < t]
        q = quad(lambda s: float(schedule_factor(s, sch)), 0, t, points=pts or None, epsabs=1e-13)
        assert abs(float(eta_integral(t, 1.0, sch)) - q[0]) <= 1e-11 * max(1.0, q[0])
    assert np.max(np.abs(0.5 * ts - ref)) > 1.0  # the schedule ignored: t·η
    # The adaptive solver steps onto both kinks: the end of warmup and the start of decay.
    assert kinks(sch) == sorted({x for x in (w, 100.0 - d) if 0 < x < 100.0})


@pytest.mark.parametrize("kind", ["warmup_cosine", "linear"])
@pytest.mark.parametrize("w", [0.0, 10.0, 100.0])
def test_closed_form_integral_matches_quadrature(kind, w):
    sch = Schedule(kind, w, 0.1, 100.0)
    for t in (0.0, 3.0, 10.0, 47.5, 99.0, 100.0, 130.0):
        kinks = [x for x in (w, 100.0) if 0 < x < t]
        ref = quad(
            lambda s: float(schedule_factor(s, sch)), 0, t, points=kinks or None, epsabs=1e-13
        )[0]
        assert abs(float(eta_integral(t, 1.0, sch)) - ref) <= 1e-11 * max(1.0, ref)
    assert float(eta_integral(7.0, 0.5, Schedule())) == 3.5


def _core_point(kind: str, schedule: str, **save):
    cfg = {
        "x64": True,
        "problem": {"kind": "sensing", "m": 6, "n": 5, "rank": 2, "samples": 40},
        "model": {"r": 3},
        "init": {"kind": "imbalanced"},
        "dynamics": {
            "kind": kind,
            "eta": ETA,
            "lam": LAM,
            "schedule": schedule,
            "warmup": W,
            "final_fraction": F,
        },
        "save": {"t1": T1, **save},
    }
    if kind == "gradient_flow":
        cfg["solver"] = {"rtol": 1e-12, "atol": 1e-14}
    return C.expand(C.resolve(cfg))[0]


def _states(point):
    """The factors at the saves of one run, and its program."""
    prog = program_for(point, save="states")
    out = prog.run({k: np.asarray([v]) for k, v in params_of(point, 0).items()})
    assert (out["status"] == Status.ok).all()
    A, B = (np.asarray(x[0]) for x in out["theta"])
    return A, B, prog


def _gap(A, B):
    D = np.einsum("tmi,tmj->tij", A, A) - np.einsum("tmi,tmj->tij", B, B)
    return np.linalg.norm(D, axis=(1, 2))


# The wsd schedules' tail where dynamics.decay_steps is left out: 20% of T1.
DECAY = {"wsd": 0.2 * T1, "wsd_cosine": 0.2 * T1}


# One schedule of each shape in the default run (~10 s each on 2 cores); others under slow.
@pytest.mark.parametrize(
    "schedule",
    [
        "warmup_cosine",
        pytest.param("linear", marks=pytest.mark.slow),
        "wsd",
        pytest.param("wsd_cosine", marks=pytest.mark.slow),
    ],
)
def test_T4_T11_scheduled_gradient_flow_core(schedule):
    A, B, prog = _states(_core_point("gradient_flow", schedule, num=11))
    ts, gap = prog.ts, _gap(A, B)
    sch = prog.schedule
    assert sch == Schedule(schedule, W, F, T1, DECAY.get(schedule, 0.0))
    pred = np.asarray(theory.gf_balance_scheduled(gap[0], ETA, LAM, ts, sch))
    assert np.max(np.abs(gap / pred - 1)) <= 1e-9
    assert gap[-1] < 0.35 * gap[0]  # the balance does decay
    # The wrong clocks: the peak η throughout (2ηλt), and the schedule one step late.
    peak = gap[0] * np.exp(-2 * ETA * LAM * ts)
    late = gap[0] * np.exp(-2 * LAM * np.asarray(eta_integral(np.maximum(ts - 1, 0), ETA, sch)))
    assert np.max(np.abs(gap / peak - 1)) > 0.1
    assert np.max(np.abs(gap / late - 1)) > 1e-3


def _gd_residuals(A, B, prog, point, eta_k):
    """The largest relative miss of T5 with step sizes ``eta_k`` over every step."""
    data = prog.data(params_of(point, 0))

    @jax.jit
    def miss(A0, B0, A1, B1, eta):
        G = jax.grad(prog.problem.loss)(A0 @ B0.T, data)
        D1 = theory.balance(A1, B1)
        pred = theory.gd_balance_step(A0, B0, G, eta, LAM)
        return jnp.linalg.norm(pred - D1) / jnp.linalg.norm(D1)

    return float(jnp.max(jax.vmap(miss)(A[:-1], B[:-1], A[1:], B[1:], jnp.asarray(eta_k))))


@pytest.mark.parametrize(
    "schedule",
    [
        pytest.param("warmup_cosine", marks=pytest.mark.slow),
        "linear",
        pytest.param("wsd", marks=pytest.mark.slow),
        "wsd_cosine",
    ],
)
def test_T5_T11_scheduled_gd_every_step(schedule):
    point = _core_point("gd", schedule, num=T1 + 1)
    A, B, prog = _states(point)
    ks = np.arange(T1, dtype=np.float64)
    eta_k = np.asarray(eta_at(ks, ETA, prog.schedule))
    assert _gd_residuals(A, B, prog, point, eta_k) <= 1e-10
    # The first step of a warmup has η(0) = 0: nothing moves.
    assert np.array_equal(A[1], A[0]) and np.array_equal(B[1], B[0])
    # Wrong: the peak η at every step; η(k + 1) (the schedule shifted by one step).
    assert _gd_residuals(A, B, prog, point, np.full(T1, ETA)) > 1e-2
    assert _gd_residuals(A, B, prog, point, np.asarray(eta_at(ks + 1, ETA, prog.schedule))) > 1e-3
    # The leading factor over k steps, Π(1 − η_jλ)², against GF's e^{−2λ∫η}: both shrink.
    # (theory.gd_scheduled_etas builds η_k from optax for the older kinds only; for the
    # wsd ones the product is taken over η(k) itself.)
    if prog.schedule.wsd:
        lead = [1.0, float(np.prod((1 - eta_k * LAM) ** 2))]
    else:
        lead = theory.gd_scheduled_contraction(ETA, LAM, [0, T1], prog.schedule)
    assert lead[0] == 1.0 and 0 < lead[1] < 1


@pytest.mark.parametrize("kind", ["momentum", "adamw", "sgd_gaussian", "adam_l2"])
def test_every_optimizer_takes_the_scheduled_step(kind):
    """One update at step count k is the constant-η update with η replaced by η(k)."""
    sch = Schedule("warmup_cosine", 4.0, 0.1, 20.0)
    hyper = {"eta": 0.3, "lam": 0.1, "sigma": 0.0, "mu": 0.5}
    key = jax.random.PRNGKey(0)
    params = (jnp.ones((3, 2)), jnp.full((4, 2), 0.5))
    grads = (jnp.full((3, 2), 0.2), jnp.full((4, 2), -0.1))
    opt = make_optimizer(kind, hyper, key, sch)
    state = opt.init(params)
    for k in range(7):
        upd, state = opt.update(grads, state, params)
        eta_k = float(eta_at(float(k), 0.3, sch))
        ref_opt = make_optimizer(kind, {**hyper, "eta": eta_k}, key)
        ref_state = ref_opt.init(params)
        for _ in range(k + 1):
            ref, ref_state = ref_opt.update(grads, ref_state, params)
        assert all(np.allclose(u, r, rtol=1e-13, atol=1e-15) for u, r in zip(upd, ref))


# --- attention ------------------------------------------------------------------------------

TINY = {
    "x64": True,
    "attention": {"D": 8, "H": 2, "layers": 2, "context": 8},
    "task": {"kind": "char_lm", "seq_len": 8, "val_size": 4, "max_chars": 4000},
}
FLOW = {
    "dynamics": {"kind": "gradient_flow", "eta": 0.1, "batch": 4},
    "train": {"eval_every": 4, "decay": ["qk", "vo", "mlp", "norm"], "lam_qk": 0.5, "lam_vo": 1.0},
    "save": {"t1": 20},
}
TIGHT = {"rtol": 1e-10, "atol": 1e-12}


def _head_errors(heads, clock):
    """Per head and pair: the largest relative miss of ``‖D(t)‖ = e^{−2λ·clock(t)}‖D(0)‖``."""
    worst = {}
    for (layer, head, pair), g in heads.groupby(["layer", "head", "pair"]):
        g = g.sort_values("t")
        lam = g[f"train.lam_{pair}"].iloc[0]
        gap = g["balance_gap"].to_numpy()
        pred = gap[0] * np.exp(-2 * lam * clock(g["t"].to_numpy()))
        worst[(layer, head, pair)] = np.max(np.abs(gap / pred - 1))
    return worst


@pytest.mark.slow
def test_T4_T11_scheduled_gradient_flow_per_head():
    sch_cfg = {"schedule": "warmup_cosine", "warmup": 4, "final_fraction": 0.2}
    dynamics = {**FLOW["dynamics"], **sch_cfg}
    res = ra.run({**TINY, **FLOW, "dynamics": dynamics, "solver": TIGHT})
    assert (res.heads["status"] == "ok").all()
    sch = Schedule("warmup_cosine", 4.0, 0.2, 20.0)
    right = _head_errors(res.heads, lambda t: np.asarray(eta_integral(t, 0.1, sch)))
    assert len(right) == 8 and max(right.values()) <= 1e-9, right
    wrong = _head_errors(res.heads, lambda t: 0.1 * t)  # 2ηλt: the peak η throughout
    assert min(wrong.values()) > 1e-2


# --- figures ------------------------------------------------------------------------------


def test_balance_figures_draw_the_scheduled_rate():
    """A table whose gap follows T4 under a schedule (its ``lr_clock`` column, as the
    programs write it): the core figure's dashed T4 line lies on it, where the
    unscheduled e^{−2ηλt} would not; so do the attention figure's lines."""
    from rankflow.plots import attention_balance_figure, balance_figure

    sch = Schedule("warmup_cosine", 10.0, 0.1, 50.0)
    t = np.arange(0.0, 51.0, 5.0)
    clock = ETA * unit_clock(t, sch, discrete=False)
    np.testing.assert_allclose(clock, np.asarray(eta_integral(t, ETA, sch)), rtol=1e-15)
    rows = []
    for rid, lam in enumerate((0.05, 0.2)):
        gap = np.exp(-2 * lam * clock)
        rows.append(
            pd.DataFrame(
                {
                    "run_id": rid,
                    "path": 0,
                    "t": t,
                    "status": "ok",
                    "dynamics.lam": lam,
                    "dynamics.eta": ETA,
                    "lr_clock": clock,
                    "nuclear_norm": 1.0,
                    "l2_penalty": 1.0,
                    "balance_gap": gap,
                    "frob_minus_nuc": gap / 2,
                    "sv_1": 1.0,
                }
            )
        )
    ax_b = balance_figure(pd.concat(rows, ignore_index=True)).axes[1]
    theory = [ln for ln in ax_b.lines if ln.get_linestyle() == "--"]
    measured = [ln for ln in ax_b.lines if ln.get_linestyle() == "-"]
    for th, me in zip(theory, measured, strict=True):
        np.testing.assert_allclose(th.get_ydata(), me.get_ydata(), rtol=1e-12)
    wrong = np.exp(-2 * 0.2 * ETA * t)
    assert np.max(np.abs(measured[1].get_ydata() / wrong - 1)) > 0.1

    heads = pd.DataFrame(
        {
            "run_id": 0,
            "t": np.tile(t, 2),
            "status": "ok",
            "layer": 0,
            "head": 0,
            "pair": np.repeat(["qk", "vo"], len(t)),
            "dynamics.kind": "gradient_flow",
            "dynamics.eta": ETA,
            "train.lam_qk": 0.3,
            "train.lam_vo": 0.3,
            "dynamics.schedule": sch.kind,
            "dynamics.warmup": 10.0,
            "dynamics.final_fraction": 0.1,
            "lr_clock": np.tile(clock, 2),
            "balance_gap": np.tile(np.exp(-2 * 0.3 * clock), 2),
        }
    )
    fig = attention_balance_figure([heads])
    for ax in fig.axes[:2]:
        me, th = ax.lines[0], ax.lines[1]
        np.testing.assert_allclose(th.get_ydata(), me.get_ydata(), rtol=1e-12)


def test_discrete_clock_sums_the_step_sizes():
    sch = Schedule("linear", 3.0, 0.2, 12.0)
    ks = np.arange(13.0)
    sums = np.concatenate([[0.0], np.cumsum(np.asarray(schedule_factor(ks[:-1], sch)))])
    np.testing.assert_allclose(unit_clock(ks, sch, discrete=True), sums, rtol=0, atol=1e-15)
    assert unit_clock(ks, sch, discrete=True)[1] == 0.0  # the first step has η(0) = 0


@pytest.mark.parametrize("model", ["parameter", "gradient"])
def test_sde_noise_on_theta_follows_the_schedule(model):
    """The noise on θ of the stochastic flow is η(t)σ (its drift's η(t)); the wrong
    version, the peak η, differs during warmup and decay."""
    sch = Schedule("warmup_cosine", 4.0, 0.1, 20.0)
    theta = (jnp.ones((3, 2)), jnp.ones((4, 2)))
    brownian = lambda shape: None  # noqa: E731  (vf never reads the control)
    term = noise_term("stochastic_flow", theta, brownian, model=model, schedule=sch)
    hyper = {"eta": jnp.asarray(0.5), "sigma": jnp.asarray(0.2), "mu": jnp.asarray(0.1)}
    for t in (0.0, 2.0, 4.0, 11.0, 20.0):
        vf = term.vf(t, theta, (None, hyper))
        c = vf if model == "parameter" else -vf["c"]
        assert float(c) == pytest.approx(float(eta_at(t, 0.5, sch)) * 0.2, rel=1e-15)
    assert float(eta_at(2.0, 0.5, sch)) * 0.2 != pytest.approx(0.5 * 0.2)
