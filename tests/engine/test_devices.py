"""CPU devices (issue #18): ``rankflow.use_all_cores()`` (and the ``rankflow`` command)
ask JAX for one CPU device per physical core unless the user set the count (the
variable, XLA's flag, JAX's config), the command never crashes when JAX started first
(issue #27: importing rankflow asks for nothing), and rankflow gives the same tables
with 1 and 2 devices for every kind of batch (fixed step, SDE, adaptive, attention); no
batched decomposition is left to deadlock XLA:CPU's pool."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from rankflow.engine import devices

ROOT = Path(__file__).resolve().parents[2]
CPUS = len(devices.usable_cpus())


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh process (JAX fixes its device count when it starts), with the
    device settings of this process removed and ``env`` set."""
    base = {k: v for k, v in os.environ.items() if k not in (devices.ENV, "JAX_NUM_CPU_DEVICES")}
    flags = [f for f in base.get("XLA_FLAGS", "").split() if devices.XLA_FLAG not in f]
    base["XLA_FLAGS"] = " ".join(flags)
    base["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


COUNT = """
import rankflow, jax
from rankflow.engine import devices
rankflow.use_all_cores()
print(jax.device_count(), "|", devices.setting().source)
"""


def _count(**env: str) -> tuple[int, str]:
    res = _python(COUNT, **env)
    assert res.returncode == 0, res.stderr
    n, source = res.stdout.strip().split(" | ", 1)
    return int(n), source


def test_the_default_and_all_are_one_device_per_physical_core():
    n, source = _count()
    assert n == devices.default_count()[0] == devices.physical_cores()
    assert source.startswith("every core, one per physical core")
    n, source = _count(RANKFLOW_CPU_DEVICES="all")
    assert n == devices.default_count()[0] == devices.physical_cores()
    assert source.startswith("RANKFLOW_CPU_DEVICES=all: one per physical core")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks here")
def test_a_process_pinned_to_one_cpu_gets_one_device():
    res = _python(
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})" + COUNT,
        RANKFLOW_CPU_DEVICES="all",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(
        "1 | RANKFLOW_CPU_DEVICES=all: one per physical core (1 of the 1 CPUs"
    )


@pytest.mark.parametrize(
    "env, expected, source",
    [
        ({"RANKFLOW_CPU_DEVICES": str(CPUS)}, CPUS, f"RANKFLOW_CPU_DEVICES={CPUS}"),
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}, 1, "XLA_FLAGS"),
        ({"JAX_NUM_CPU_DEVICES": "3"}, 3, "jax_num_cpu_devices=3"),
        # rankflow's variable wins over XLA's flag.
        (
            {"RANKFLOW_CPU_DEVICES": "1", "XLA_FLAGS": "--xla_force_host_platform_device_count=3"},
            1,
            "RANKFLOW_CPU_DEVICES=1",
        ),
    ],
)
def test_a_count_the_user_set_is_kept(env, expected, source):
    n, why = _count(**env)
    assert n == expected and why.startswith(source)


def test_the_command_after_jax_started_leaves_it_and_info_says_how_to_get_more():
    res = _python(
        """
        import jax
        jax.devices()  # JAX's CPU backend starts with its one device
        import rankflow.cli
        print(jax.device_count())
        rankflow.cli.main(["info"])
        """
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "1"
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("CPU devices:"))
    assert line.startswith("CPU devices: 1, via the rankflow command: JAX had started before")
    assert "call rankflow.use_all_cores() before anything uses JAX" in line


def test_a_bad_count_is_one_line_and_the_default_is_used():
    res = _python(COUNT, RANKFLOW_CPU_DEVICES="two")
    assert res.returncode == 0
    assert res.stderr == (
        "rankflow: RANKFLOW_CPU_DEVICES='two' is not a positive integer or 'all'; ignored\n"
    )
    assert int(res.stdout.split(" | ")[0]) == devices.physical_cores()


def test_a_count_beyond_the_cpus_is_capped_in_one_line():
    """RANKFLOW_CPU_DEVICES=100000 took 4 GiB (issue #35): capped at the CPUs present;
    XLA's own flag stays the way to ask for more (tests of sharding on few cores)."""
    res = _python(COUNT, RANKFLOW_CPU_DEVICES="100000")
    assert res.returncode == 0, res.stderr
    assert res.stderr == (
        f"rankflow: RANKFLOW_CPU_DEVICES=100000 exceeds the {CPUS} CPUs this process may use; "
        f"using {CPUS} devices (XLA_FLAGS --xla_force_host_platform_device_count=N sets more, "
        "for testing)\n"
    )
    assert res.stdout.strip() == (
        f"{CPUS} | RANKFLOW_CPU_DEVICES=100000, capped at the {CPUS} CPUs this process may use"
    )
    assert devices.requested({"RANKFLOW_CPU_DEVICES": str(CPUS + 1)})[0] == CPUS


def test_requested_reads_rankflow_s_variable_then_xla_s_flag():
    flag = {
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false --xla_force_host_platform_device_count=4"
    }
    assert devices.requested({}) == (None, "", None)
    assert devices.requested(flag)[:2] == (4, "XLA_FLAGS --xla_force_host_platform_device_count=4")
    assert devices.requested({**flag, "RANKFLOW_CPU_DEVICES": "2"})[0] == 2
    assert devices.requested({"RANKFLOW_CPU_DEVICES": "0"})[2].endswith("ignored")


def _fake_sysfs(root: Path, cores: list[tuple[int, int]]) -> Path:
    """A sysfs CPU tree whose CPU i sits on (package, core) ``cores[i]``."""
    for i, (package, core) in enumerate(cores):
        top = root / f"cpu{i}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text(f"{package}\n")
        (top / "core_id").write_text(f"{core}\n")
    return root


def test_hyperthreads_count_once_and_the_affinity_mask_is_respected(tmp_path):
    # 8 logical CPUs: 2 packages × 2 cores × 2 threads; core ids repeat across packages.
    layout = [(p, c) for p in (0, 1) for c in (0, 1) for _ in (0, 1)]
    sysfs = _fake_sysfs(tmp_path, layout)
    assert devices.physical_cores(list(range(8)), sysfs) == 4
    # Mutants: counting logical CPUs, or core ids without their package, would say 8, 2.
    assert devices.physical_cores(list(range(8)), sysfs) not in (8, 2)
    assert devices.physical_cores([0, 1], sysfs) == 1  # two threads of one core
    assert devices.physical_cores([0, 2, 4], sysfs) == 3
    assert devices.physical_cores([0, 9], sysfs) == 2  # unreadable topology: its own core


def test_the_cgroup_quota_caps_the_count(tmp_path):
    assert devices.cgroup_cpus(tmp_path) is None
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert devices.cgroup_cpus(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert devices.cgroup_cpus(tmp_path) == 1.5
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert devices.cgroup_cpus(v1) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert devices.cgroup_cpus(v1) == 3.0


# One small sweep of each kind of batch, run with 1 and with 2 devices. The runs
# are chosen so that the batch does not divide into equal halves on its own (9 runs:
# padded to 10 with 2 devices).
SWEEPS = """
import pickle
import rankflow, rankflow.attention as ra
import jax
rankflow.use_all_cores()
base = {
    "problem": {"kind": "diagonal", "singular_values": [1.0, 0.6, 0.3, 0.1]},
    "model": {"r": 4},
    "init": {"kind": "gaussian", "scale": 0.3},
    "save": {"t1": 200, "num": 5},
    "sweep": {"dynamics.lam": [0.0, 0.02, 0.05], "seed": [0, 1, 2]},
}
def cfg(dynamics, solver=None):
    out = dict(base, dynamics=dynamics)
    if solver:
        out["solver"] = solver
    return out
tables = {
    "gd": rankflow.run(cfg({"kind": "gd", "eta": 0.1})),
    "sde": rankflow.run(cfg(
        {"kind": "stochastic_flow", "eta": 0.1, "sigma": 0.05},
        {"method": "euler", "adaptive": False, "dt": 1.0},
    )),
    "adaptive": rankflow.run(cfg(
        {"kind": "gradient_flow", "eta": 0.1},
        {"method": "tsit5", "adaptive": True, "rtol": 1e-5, "atol": 1e-7},
    )),
}
att = ra.run({
    "attention": {"D": 8, "H": 2, "layers": 1, "context": 8},
    "task": {"kind": "associative_recall", "pairs": 3, "keys": 4, "values": 4, "val_size": 8},
    "dynamics": {"kind": "sgd", "eta": 0.1, "batch": 4},
    "train": {"eval_every": 20},
    "save": {"t1": 40},
    "sweep": {"dynamics.lam": [0.0, 0.1, 0.2], "seed": [0, 1, 2]},
})
tables["attention heads"], tables["attention loss"] = att.heads, att.loss
with open(OUT, "wb") as f:
    pickle.dump({"devices": jax.device_count(), "tables": tables}, f)
"""


@pytest.mark.slow
def test_one_and_two_devices_give_the_same_tables_for_every_kind_of_batch(tmp_path):
    got = {}
    for n in (1, 2):
        out = tmp_path / f"dev{n}.pkl"
        res = _python(SWEEPS.replace("OUT", repr(str(out))), RANKFLOW_CPU_DEVICES=str(n))
        assert res.returncode == 0, res.stderr
        got[n] = pickle.loads(out.read_bytes())
        assert got[n]["devices"] == n
    for kind, one in got[1]["tables"].items():
        two = got[2]["tables"][kind]
        assert len(one) > 0 and (one.get("status", pd.Series(["ok"])) == "ok").all(), kind
        if kind.startswith("attention"):
            # Training differs from one to two devices by float32 rounding (measured:
            # 1.6e-7 relative in the losses, 2.5e-6 in frob_minus_nuc, a difference).
            pd.testing.assert_frame_equal(one, two, check_exact=False, rtol=1e-5, obj=kind)
        else:  # each run's arithmetic is the same: identical bits
            pd.testing.assert_frame_equal(one, two, check_exact=True, obj=kind)


@pytest.mark.parametrize("backend, loops", [("cpu", True), ("gpu", False), ("tpu", False)])
def test_the_one_at_a_time_rule_of_decompositions_is_cpu_only(monkeypatch, backend, loops):
    """On CPU a vmapped decomposition runs one matrix at a time (a loop in the program:
    batched LAPACK kernels deadlock there); on GPU and TPU it is one batched kernel."""
    import jax
    import jax.numpy as jnp

    from rankflow.core.observables import singular_values
    from rankflow.numerics.linalg import eigvalsh

    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    A = jnp.ones((3, 5, 2))
    M = jnp.ones((3, 4, 4))
    for text in (
        str(jax.make_jaxpr(jax.vmap(singular_values))(A, A)),
        str(jax.make_jaxpr(jax.vmap(eigvalsh))(M)),
    ):
        assert (" scan[" in text or " while[" in text) is loops, text


DECOMPOSITIONS = {"svd", "qr", "eigh", "geqrf", "householder_product", "cholesky", "lu"}


def _decomposition_operands(jaxpr) -> list[tuple[str, int]]:
    """``(primitive, rank of its operand)`` of every decomposition in ``jaxpr`` and the
    jaxprs nested in it (scan and map bodies, jit and custom_vmap calls)."""
    import jax

    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in DECOMPOSITIONS:
            found.append((eqn.primitive.name, len(eqn.invars[0].aval.shape)))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    found += _decomposition_operands(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    found += _decomposition_operands(sub)
    return found


@pytest.mark.parametrize(
    "problem, init, depth",
    [
        ("regression", "imbalanced", 2),  # eigh whitening, QR target, SVD balancing
        ("sensing", "spectral", 2),
        ("completion", "balanced", 2),
        ("regression", "imbalanced", 3),
        ("sensing", "spectral", 3),
    ],
)
def test_every_decomposition_of_a_vmapped_start_acts_on_one_matrix(problem, init, depth):
    """With one CPU device per core, a batched LAPACK kernel deadlocks XLA:CPU's pool
    (rankflow.numerics.linalg): the data and initialisation of a vmapped batch of runs must
    decompose one matrix at a time (every decomposition's operand 2-d, inside a loop).
    With ``jnp.linalg.svd`` in ``problems._balanced_from`` instead, the operand is 3-d."""
    import jax

    from rankflow.core import config as C
    from rankflow.core.program import params_of, program_for

    model = {"r": 4} if depth == 2 else {"depth": depth, "r": [5] * (depth - 1)}
    cfg = {
        "problem": {"kind": problem, "m": 6, "n": 5, "rank": 2, "samples": 30},
        "init": {"kind": init, "imbalance": 0.5},
        "model": model,
        "dynamics": {"kind": "gd"},
        "save": {"t1": 2.0, "num": 2},
    }
    point = C.expand(C.resolve(cfg))[0]
    program = program_for(point)
    one = program.typed(params_of(point, 0))
    batch = jax.tree.map(lambda x: jax.numpy.stack([x, x, x]), one)
    jaxpr = jax.make_jaxpr(jax.vmap(program.start))(batch).jaxpr
    found = _decomposition_operands(jaxpr)
    assert found, "no decomposition traced: the test no longer sees the init"
    assert all(rank == 2 for _, rank in found), found
