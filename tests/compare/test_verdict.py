"""``rankflow compare`` judges its orders in η (issue #41, item 3): the order between
consecutive halvings, the fitted order ± SE against p = 1 within the tolerance
``rankflow reproduce`` uses (the same object), ``inconclusive`` when the SE cannot
resolve it, the "not yet asymptotic" reading, per point of a sweep, and the exit status.
The wrong versions (a zeroth- and a second-order scheme's distances, an SE above the
tolerance) are fed to the same verdict and shown to fail it."""

import contextlib
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rankflow.compare
from rankflow import cli, plots, theory
from rankflow.compare import COLUMNS, ORDER_TOL, WEAK_TOL, judge, summary
from rankflow.compare.run import flow_config
from rankflow.compare.summary import verdict_lines
from rankflow.compare.verdict import halving_orders, order_verdict, reading
from rankflow.core import config as config_lib
from rankflow.reproduce import discrete, noise_sme, optimizers

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "claims" / "golden"

# The smallest GD comparison with first order in η (measured 1.017 ± 0.004 at η = 0.1,
# halvings 1.031, 1.014, 1.007): sensing 5×4, r = 3, ηt = 2. At η = 0.6 the first halving
# is 1.49, the fit 1.169 ± 0.081 fails while the last halving is 1.011: not yet asymptotic.
TOML = """x64 = true
[problem]
kind = "sensing"
m = 5
n = 4
rank = 2
samples = 40
noise = 0.1
[model]
r = 3
[init]
kind = "gaussian"
scale = 0.5
[dynamics]
kind = "gd"
eta = 0.1
lam = 0.1
[save]
t1 = 20
num = 3
[compare]
window = 3
"""


def _cli(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(argv)
    return code, buf.getvalue()


@pytest.fixture(scope="module")
def two_points(tmp_path_factory):
    """``rankflow compare`` over a 2-point sweep of η (0.1: first order; 0.6: not yet)."""
    tmp = tmp_path_factory.mktemp("verdict")
    (tmp / "gd.toml").write_text(TOML)
    out = tmp / "out"
    argv = ["compare", str(tmp / "gd.toml"), "--out", str(out)]
    # Figures are drawn by the command's other tests (test_compare.py); not here, to save time.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "write_compare_figures", lambda tables, out: [])
        code, printed = _cli(argv + ["--set", "sweep.dynamics.eta=[0.1, 0.6]"])
    names = ("order", "halvings", "verdict")
    return code, printed, out, {n: pd.read_parquet(out / f"{n}.parquet") for n in names}


def test_the_sweep_prints_halvings_and_a_verdict_per_point_and_exits_1(two_points):
    code, printed, out, tables = two_points
    lines = [line for line in printed.splitlines() if line.startswith("point ")]
    assert len(lines) == 2, printed
    assert lines[0].startswith("point 0 (dynamics.eta=0.1): order of the distance in η 1.017")
    assert "per halving 1.031, 1.014, 1.007: pass" in lines[0]
    assert lines[1].startswith("point 1 (dynamics.eta=0.6): order of the distance in η 1.169")
    assert "per halving 1.490, 1.046, 1.011: fail; not yet asymptotic" in lines[1]
    assert "verdict: 1 of 2 fitted orders pass, 1 fail" in printed
    assert code == 1  # one verdict fails: the exit status says so, the files are written
    v = tables["verdict"]
    assert list(v.columns) == ["point", "sweep.dynamics.eta", *COLUMNS["verdict"]]
    assert list(v["verdict"]) == ["pass", "fail"]
    assert (v["tolerance"] == ORDER_TOL).all() and (v["expected_order"] == 1.0).all()
    summary = (out / "summary.md").read_text()
    assert "2 fitted orders in η: 1 pass, 1 fail." in summary
    assert "| 1 | distance | 1.490, 1.046, 1.011 | 1.169 ± 0.081 | fail |" in summary
    assert "| distance at the last save | relative |" in summary  # relative beside absolute


def test_halving_orders_are_log2_of_the_measured_distance_ratios(two_points):
    """The halvings table against the order table it is judged from, point by point."""
    _, _, _, tables = two_points
    o, h = tables["order"], tables["halvings"]
    assert list(h.columns) == ["point", "sweep.dynamics.eta", *COLUMNS["halvings"]]
    for point in (0, 1):
        d = o.loc[o["point"] == point, "distance"].to_numpy()
        hp = h[h["point"] == point]
        np.testing.assert_allclose(hp["halving_order"], np.log2(d[:-1] / d[1:]), rtol=1e-14)
        np.testing.assert_allclose(hp["eta_next"] * 2, hp["dynamics.eta"], rtol=1e-15)
        assert hp["halving_order_stderr"].isna().all()  # deterministic distances
    # The wrong version, log(d_j/d_{j+1}) without the base-2 step, is off by ln 2.
    d = o.loc[o["point"] == 0, "distance"].to_numpy()
    assert not np.allclose(h.loc[h["point"] == 0, "halving_order"], np.log(d[:-1] / d[1:]))


@pytest.mark.parametrize("p", [1.0, 2.0, 0.5])
def test_the_halving_order_of_power_law_distances_is_their_power(p):
    """d_j = C h_jᵖ: exactly p at each halving (and at a ratio of 3, not only of 2)."""
    for ratio in (2.0, 3.0):
        h = 0.1 / ratio ** np.arange(5)
        orders, stderrs = halving_orders(h, 7.3 * h**p)
        np.testing.assert_allclose(orders, p, rtol=0, atol=1e-13)
        assert np.isnan(stderrs).all()
    # A signed weak error counts by its size; a zero error gives NaN, not ±inf.
    orders, _ = halving_orders(0.1 / 2.0 ** np.arange(5), [-1.0, -0.5, 0.0, 0.125, 0.0625])
    assert np.isnan(orders[1:3]).all() and orders[0] == 1.0 and orders[3] == 1.0


def _refit(order: pd.DataFrame, distance: np.ndarray) -> pd.DataFrame:
    """``order`` with other distances and the fit ``theory.convergence_order`` gives them."""
    p, se = theory.convergence_order(order["dynamics.eta"], distance)
    return order.assign(distance=distance, order=p, order_stderr=se)


def test_a_zeroth_or_second_order_schemes_distances_fail_the_verdict(two_points):
    """The mutants: point 0's measured distances (pass) replaced by a non-convergent
    scheme's (constant, with a 1% wiggle so the fit has an SE) and by a second-order
    scheme's (d_0 (η/η_0)²); each is refitted and judged by the same verdict."""
    _, _, _, tables = two_points
    o = tables["order"]
    o = o[o["point"] == 0].drop(columns=["point", "sweep.dynamics.eta"])
    eta = o["dynamics.eta"].to_numpy()
    d0 = float(o["distance"].iloc[0])
    assert judge({"order": o})["verdict"]["verdict"].tolist() == ["pass"]
    zeroth = d0 * (1 + 0.01 * np.array([1, -1, 1, -1]))
    second = d0 * (eta / eta[0]) ** 2
    for name, distance, p in (("zeroth", zeroth, 0.0), ("second", second, 2.0)):
        v = judge({"order": _refit(o, distance)})["verdict"].iloc[0]
        assert abs(v["order"] - p) < 0.02, name
        assert v["verdict"] == "fail", (name, v["order"], v["order_stderr"])
        assert v["reading"] == ""  # the last halving is as far off as the fit


def test_an_se_above_the_tolerance_reads_inconclusive(two_points):
    """The same first-order fit with an SE of 0.16 > 0.15 is inconclusive, not pass; two
    learning rates (no SE) too; the wrong version, judging the order alone, passes both."""
    _, _, _, tables = two_points
    o = tables["order"]
    o = o[o["point"] == 0].drop(columns=["point", "sweep.dynamics.eta"])
    wide = judge({"order": o.assign(order_stderr=ORDER_TOL + 0.01)})["verdict"].iloc[0]
    assert wide["verdict"] == "inconclusive"
    assert wide["reading"].startswith("SE 0.160 > tolerance 0.15")
    two = _refit(o.iloc[:2], o["distance"].to_numpy()[:2])
    v = judge({"order": two})["verdict"].iloc[0]
    assert v["verdict"] == "inconclusive" and v["rates"] == 2 and np.isnan(v["order_stderr"])
    assert "raise compare.halvings" in v["reading"]
    assert abs(wide["order"] - 1) <= ORDER_TOL and abs(v["order"] - 1) <= ORDER_TOL
    # The rule's edges: SE equal to the tolerance still judges; just above does not.
    assert order_verdict(1.15, ORDER_TOL, 1.0, ORDER_TOL) == "pass"
    assert order_verdict(1.1501, 0.01, 1.0, ORDER_TOL) == "fail"
    assert order_verdict(1.0, np.nextafter(ORDER_TOL, 1), 1.0, ORDER_TOL) == "inconclusive"
    assert order_verdict(float("nan"), 0.01, 1.0, ORDER_TOL) == "inconclusive"


def test_the_not_yet_asymptotic_reading_is_computed(two_points):
    _, _, _, tables = two_points
    v = tables["verdict"].set_index("point")
    assert v.loc[1, "reading"] == (
        "not yet asymptotic: the last halving's order 1.011 is within 0.15 of 1, the fit "
        "over all η is not"
    )
    assert v.loc[0, "reading"] == ""
    assert v.loc[1, "last_halving_order"] == pytest.approx(1.0111, abs=1e-4)


def test_reproduce_judges_by_the_same_tolerance_objects():
    assert discrete.ORDER_TOL is rankflow.compare.ORDER_TOL
    assert optimizers.ORDER_TOL is rankflow.compare.ORDER_TOL
    assert noise_sme.WEAK_TOL is rankflow.compare.WEAK_TOL
    assert (ORDER_TOL, WEAK_TOL) == (0.15, 0.2)  # reproduce's verdicts unchanged


def test_reproduce_and_compare_agree_on_the_pass_rule_at_the_edges():
    """discrete.gd_order (reproduce) and compare's verdict on the same order tables:
    pass at |order − 1| = 0.149, fail at 0.151, either side of 1."""
    base = pd.DataFrame(
        {"dynamics.eta": [0.1, 0.05, 0.025], "horizon": 2.0, "distance": [0.4, 0.2, 0.1]}
    )
    for p in (0.849, 0.851, 1.149, 1.151):
        table = base.assign(order=p, order_stderr=0.01)
        ok = discrete.gd_order_claim(table).verdict == "pass"
        assert ok == (order_verdict(p, 0.01, 1.0, ORDER_TOL) == "pass") == (abs(p - 1) < 0.15)


def test_weak_orders_are_judged_per_observable_with_their_monte_carlo_se():
    """A real weak table (sims/noise/compare_sme.toml, float64 capture): E[tr D] and
    ‖D‖ first order within 0.2; the loss's errors are within 2 SE of 0 at every η, its
    fit 0.97 ± 0.51: inconclusive, not pass. Halving SEs by the delta method."""
    w = pd.read_parquet(GOLDEN / "noise__compare_sme__weak.parquet")
    judged = judge({"weak": w})
    v = judged["verdict"].set_index("observable")
    assert v.loc["balance_trace", "verdict"] == "pass"
    assert v.loc["balance_gap", "verdict"] == "pass"
    assert v.loc["loss", "verdict"] == "inconclusive" and v.loc["loss", "order_stderr"] > WEAK_TOL
    assert (v["tolerance"] == WEAK_TOL).all()
    h = judged["halvings"]
    rows = w[w["observable"] == "balance_trace"]
    e, s = rows["error"].abs().to_numpy(), rows["error_se"].to_numpy()
    ht = h[h["observable"] == "balance_trace"]
    np.testing.assert_allclose(ht["halving_order"], np.log2(e[:-1] / e[1:]), rtol=1e-14)
    se = np.hypot(s[:-1] / e[:-1], s[1:] / e[1:]) / np.log(2)
    np.testing.assert_allclose(ht["halving_order_stderr"], se, rtol=1e-14)
    lines = verdict_lines(judged)
    assert len(lines) == 3 and lines[0].startswith("loss: order of the |weak error| in η")
    assert lines[0].endswith(
        "inconclusive; SE 0.509 > tolerance 0.2: the fit cannot resolve the order"
    )


def test_no_order_no_verdict():
    """sgd_gaussian with parameter noise (T6): no order table, nothing judged."""
    assert judge({"trajectory": pd.DataFrame(), "sde": pd.DataFrame()}) == {}


def test_help_states_the_verdicts_and_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 when every verdict passes (or there is none), 1 when one fails" in text
    assert f"tolerance {ORDER_TOL:g}" in text and f"tolerance {WEAK_TOL:g}" in text
    assert "inconclusive when its standard error is NaN" in text


def test_the_reading_of_each_case():
    """Inconclusive says why; a fail with the last halving near p is not yet asymptotic
    (the wrong reading, for a last halving as far off as the fit, says nothing); a pass
    whose last halving is off says so; a last halving with an SE above tol is not read."""
    assert "fewer than 3 usable rates" in reading("inconclusive", math.nan, 1.0, math.nan, 1, 0.15)
    assert reading("inconclusive", 0.3, 1.0, math.nan, 1, 0.15).startswith("SE 0.300 > tolerance")
    assert reading("fail", 0.05, 1.05, math.nan, 1, 0.15).startswith("not yet asymptotic")
    assert reading("fail", 0.05, 1.30, math.nan, 1, 0.15) == ""
    assert reading("fail", 0.05, 1.05, 0.5, 1, 0.15) == ""  # a weak halving drowned in noise
    assert reading("pass", 0.05, 0.80, math.nan, 1, 0.15) == (
        "the last halving's order 0.800 is not within 0.15 of 1"
    )
    assert reading("pass", 0.05, 1.0, math.nan, 1, 0.15) == ""


def test_the_summary_of_a_weak_table_gives_each_observables_halvings_and_verdict():
    """summary.md of the SME pair (golden tables of sims/noise/compare_sme.toml): the
    halving order ± SE beside each weak error, and one verdict line per observable."""
    names = ("trajectory", "moments", "weak")
    tables = {n: pd.read_parquet(GOLDEN / f"noise__compare_sme__{n}.parquet") for n in names}
    raw = config_lib.load_config(ROOT / "sims" / "noise" / "compare_sme.toml")
    raw.pop("compare")
    cfg = config_lib.resolve(raw, {"x64": True})
    meta = {"optimizer": cfg, "flow": flow_config(cfg, set()), "compare": {"halvings": 3}}
    text = summary(tables, meta, figures=False)
    assert "3 fitted orders in η: 2 pass, 1 inconclusive." in text
    assert (
        "| balance_trace | 0.005 | 200 | 256 | 0.00168 ± 5.989e-05 | +28.1 | 1.026 ± 0.087 |"
        in text
    )
    verdicts = [line for line in text.splitlines() if "(T10: 1 ± 0.2); per halving" in line]
    assert [line.split(":")[0] for line in verdicts] == [
        "- loss",
        "- balance_trace",
        "- balance_gap",
    ]
    assert verdicts[1].endswith("1.206 ± 0.173, 0.981 ± 0.126, 1.026 ± 0.087: pass")
    assert "- `verdict.parquet`, `verdict.csv`: judged from the orders" in text


def test_the_issues_halvings_read_not_yet_asymptotic():
    """Issue #41's user: halvings 1.6, 1.18, 1.07 (computed by hand from order.csv). The
    fit over all η, 1.273 ± 0.087 (the issue's 1.27 ± 0.09), fails; the last halving is
    within 0.15 of 1: not yet asymptotic."""
    eta = 0.1 / 2.0 ** np.arange(4)
    distance = 0.2 / 2.0 ** np.cumsum([0.0, 1.6, 1.18, 1.07])
    setting = {k: [0.0] * 4 for k in rankflow.compare.SETTING}
    order = pd.DataFrame(setting | {"dynamics.eta": eta, "horizon": 10.0})
    order = _refit(order, distance)
    judged = judge({"order": order})
    np.testing.assert_allclose(judged["halvings"]["halving_order"], [1.6, 1.18, 1.07], rtol=1e-13)
    v = judged["verdict"].iloc[0]
    assert v["order"] == pytest.approx(1.273, abs=1e-3) and v["order_stderr"] < ORDER_TOL
    assert v["verdict"] == "fail" and v["reading"].startswith("not yet asymptotic")
