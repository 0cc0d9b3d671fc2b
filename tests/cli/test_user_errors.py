"""Every user mistake is one line (issue #14): a table of bad inputs, each with the
fragment its one-line error must hold and its exit status, run through
``rankflow.cli.main`` (or a Python call); none may print a traceback or leave a results
directory behind. Then the guards before work: a sweep counted, not materialised, and a
problem too large for the device refused before compiling."""

from __future__ import annotations

import importlib
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import rankflow
from rankflow import cli
from rankflow.attention import config as AC
from rankflow.config.fields import sweep_points
from rankflow.core import config as C
from rankflow.core.family import CORE
from rankflow.engine import TRACE_COUNTS, plan

# The module (the package's `plan` attribute is the function of that name).
plan_module = importlib.import_module("rankflow.engine.plan")
ROOT = Path(__file__).resolve().parents[2]

BASE = """
seed = 0
[problem]
kind = "diagonal"
singular_values = [1.0, 0.5]
[save]
t1 = 4.0
num = 3
"""

CUSTOM = """
[problem]
kind = "custom"
m = 4
n = 4
loss = "user_losses:{name}"
[save]
t1 = 2.0
num = 3
"""

LOSSES = """
import jax.numpy as jnp

def good(W):
    return 0.5 * jnp.sum((W - 1.0) ** 2)

def raises(W):
    raise ValueError("boom")

def vector(W):
    return jnp.sum(W, axis=0)

def integer(W):
    return 3

def not_jittable(W):
    return 1.0 if float(jnp.sum(W)) > 0 else 0.0

def two_args(W, data):
    return jnp.sum(W**2)
"""

ATTENTION = """
x64 = true
[attention]
D = 8
H = 2
layers = 1
context = 8
[task]
kind = "char_lm"
seq_len = 8
val_size = 4
max_chars = 4000
[dynamics]
batch = 4
[train]
eval_every = 2
[save]
t1 = 4
"""

# Seven numeric axes of ten values: 10⁷ points from 70 numbers.
BIG_SWEEP = {
    "sweep": {
        k: [0.1 * (i + 1) for i in range(10)]
        for k in ("problem.noise", "init.scale", "init.imbalance", "dynamics.lam", "dynamics.eta")
    }
    | {"seed": list(range(10)), "problem.seed": list(range(10))}
}
BIG_TOML = "[sweep]\n" + "\n".join(f'"{k}" = {v}' for k, v in BIG_SWEEP["sweep"].items())

HUGE = 2**70


def _files(tmp: Path) -> dict[str, Path]:
    """The inputs the cases name, written into ``tmp``."""
    (tmp / "base.toml").write_text(BASE)
    (tmp / "plain.toml").write_text("[save]\nt1 = 4.0\nnum = 3\n")
    (tmp / "big.toml").write_text(BASE + BIG_TOML)
    (tmp / "binary.toml").write_bytes(bytes(range(256)) * 4)
    (tmp / "user_losses.py").write_text(LOSSES)
    for name in ("raises", "vector", "integer", "not_jittable", "two_args", "good"):
        (tmp / f"custom_{name}.toml").write_text(CUSTOM.format(name=name))
    (tmp / "custom_missing.toml").write_text(CUSTOM.format(name="x").replace("user_losses", "nope"))
    (tmp / "attention.toml").write_text(ATTENTION)
    _nan_checkpoint(tmp / "nan_ckpt")
    (tmp / "lr_bad.csv").write_text("step,rate\n0,0.1\n")
    return {}


def _nan_checkpoint(folder: Path) -> None:
    """A one-layer BERT-shaped checkpoint with one NaN in the query weight and two infs
    in the key weight."""
    from safetensors.numpy import save_file

    folder.mkdir()
    rng = np.random.default_rng(0)
    t = {
        f"bert.encoder.layer.0.attention.{s}.weight": rng.standard_normal((64, 64)).astype(
            np.float32
        )
        for s in ("self.query", "self.key", "self.value", "output.dense")
    }
    t["bert.encoder.layer.0.attention.self.query.weight"][3, 5] = np.nan
    t["bert.encoder.layer.0.attention.self.key.weight"][0, :2] = np.inf
    save_file(t, folder / "model.safetensors")
    cfg = {"model_type": "bert", "hidden_size": 64, "num_attention_heads": 1}
    (folder / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=1)))


def _run(*extra):
    return ["run", "base.toml", "--out", "out", *extra]


def _sets(*assignments):
    return [a for s in assignments for a in ("--set", s)]


# (case, argv, fragment of the one-line error, exit status)
CASES = [
    ("seed too large", _run(*_sets(f"seed={HUGE}")), "seed: must be in [0, 4294967295]", 2),
    ("data seed too large", _run(*_sets(f"problem.seed={HUGE}")), "problem.seed: must be in", 2),
    ("int beyond int64", _run(*_sets(f"problem.samples={HUGE}")), "(int64)", 2),
    (
        "gd t1 beyond int32 steps",
        _run(*_sets("dynamics.kind='gd'", "save.t1=1e12")),
        "save.t1: discrete dynamics take at most 2147483647 steps",
        2,
    ),
    ("binary config", ["run", "binary.toml", "--out", "out"], "is not a text file", 2),
    (
        "10⁷-point sweep",
        ["run", "big.toml", "--out", "out"],
        "sweep: 10,000,000 runs (10 × 10 × 10 × 10 × 10 × 10 × 10 points) exceed the limit "
        "of 1,000,000",
        2,
    ),
    (
        "m = n = 100000",
        ["run", "plain.toml", "--out", "out"]
        + _sets("problem.kind='completion'", "problem.m=100000", "problem.n=100000"),
        "one run needs about",
        2,
    ),
    (
        "sensing data of 240 GB",
        ["run", "plain.toml", "--out", "out"]
        + _sets("problem.kind='sensing'", "problem.m=5000", "problem.n=5000"),
        "problem.samples = 400",
        2,
    ),
    ("custom loss raises", ["run", "custom_raises.toml", "--out", "out"], "ValueError: boom", 2),
    (
        "custom loss returns a vector",
        ["run", "custom_vector.toml", "--out", "out"],
        "must return a scalar, got an array of shape (4,)",
        2,
    ),
    (
        "custom loss returns an int",
        ["run", "custom_integer.toml", "--out", "out"],
        "must return a real floating-point scalar",
        2,
    ),
    (
        "custom loss not jittable",
        ["run", "custom_not_jittable.toml", "--out", "out"],
        "cannot be traced by JAX",
        2,
    ),
    (
        "custom loss takes two arguments",
        ["run", "custom_two_args.toml", "--out", "out"],
        "must take one argument, W (4×4)",
        2,
    ),
    (
        "custom loss does not import",
        ["run", "custom_missing.toml", "--out", "out"],
        "problem.loss: cannot load 'nope:x'",
        2,
    ),
    (
        "negative SLURM time",
        _run("--executor", "submitit", "--time", "-5"),
        "--time: must be ≥ 1, got -5",
        2,
    ),
    ("zero SLURM jobs", _run("--executor", "submitit", "--jobs", "0"), "--jobs: must be ≥ 1", 2),
    (
        "NaN weights in a checkpoint",
        ["inspect", "nan_ckpt", "--out", "out", "--no-figures", "--quiet"],
        "non-finite (NaN or inf) weights: 'bert.encoder.layer.0.attention.self.key.weight' has "
        "2 of 4096; 'bert.encoder.layer.0.attention.self.query.weight' has 1 of 4096",
        2,
    ),
    (
        "inspect series: steps not matching the checkpoints",
        ["inspect", "nan_ckpt", "nan_ckpt", "--steps", "0", "--out", "out", "--quiet"],
        "--steps: 1 steps for 2 checkpoints; give one step each",
        2,
    ),
    (
        "inspect series: unsorted steps",
        ["inspect", "nan_ckpt", "nan_ckpt", "--steps", "5", "3", "--out", "out", "--quiet"],
        "--steps: steps are not increasing: 5 (nan_ckpt) before 3 (nan_ckpt)",
        2,
    ),
    (
        "inspect series: schedule file without an lr column",
        ["inspect", "nan_ckpt", "nan_ckpt", "--steps", "0", "1", "--lam", "0.1"]
        + ["--lr-schedule", "lr_bad.csv", "--out", "out", "--quiet"],
        "lr_bad.csv: field 'lr': no such column (columns: step, rate)",
        2,
    ),
    (
        "inspect series: a revision not in the offline cache",
        ["inspect", "org/none", "--revision", "step1", "step2", "--out", "out", "--quiet"],
        "org/none@step1: not in the Hugging Face cache",
        2,
    ),
    (
        "attention momentum μ > 1",
        ["attention", "train", "attention.toml", "--out", "out"]
        + _sets("dynamics.kind='momentum'", "dynamics.mu=2.0"),
        "dynamics.mu: discrete momentum (EMA weight of the new gradient) must be in (0, 1]",
        2,
    ),
    (
        "attention seed too large",
        ["attention", "train", "attention.toml", "--out", "out"] + _sets(f"seed={HUGE}"),
        "seed: must be in [0, 4294967295]",
        2,
    ),
    (
        "attention steps beyond int32",
        ["attention", "train", "attention.toml", "--out", "out"]
        + _sets("save.t1=4294967296", "train.eval_every=2"),
        "save.t1: at most 2147483647",
        2,
    ),
    (
        "warmup longer than the run",
        _run(*_sets("dynamics.schedule='warmup_cosine'", "dynamics.warmup=10")),
        "dynamics.warmup: must be in [0, save.t1 = 4] steps (warmup cannot exceed the run)",
        2,
    ),
    (
        "negative warmup",
        _run(*_sets("dynamics.schedule='linear'", "dynamics.warmup=-1")),
        "dynamics.warmup: must be in [0, save.t1 = 4] steps",
        2,
    ),
    (
        "final fraction above 1",
        _run(*_sets("dynamics.schedule='linear'", "dynamics.final_fraction=1.5")),
        "dynamics.final_fraction: must be in [0, 1]",
        2,
    ),
    (
        "warmup with a constant schedule",
        _run(*_sets("dynamics.warmup=2")),
        "dynamics.warmup: a constant schedule has no warmup",
        2,
    ),
    (
        "decay tail longer than the run after warmup",
        _run(*_sets("dynamics.schedule='wsd'", "dynamics.warmup=2", "dynamics.decay_steps=3")),
        "dynamics.decay_steps: must be in (0, save.t1 − dynamics.warmup = 2] steps",
        2,
    ),
    (
        "unknown schedule",
        _run(*_sets("dynamics.schedule='cosine'")),
        "dynamics.schedule: must be one of constant, warmup_cosine, linear, wsd, wsd_cosine "
        "(did you mean",
        2,
    ),
    (
        "attention warmup longer than the run",
        ["attention", "train", "attention.toml", "--out", "out"]
        + _sets("dynamics.schedule='warmup_cosine'", "dynamics.warmup=8"),
        "dynamics.warmup: must be in [0, save.t1 = 4] steps",
        2,
    ),
    (
        "negative learning-rate multiplier",
        ["attention", "train", "attention.toml", "--out", "out"] + _sets("train.lr_v=-0.1"),
        "train.lr_v: must be a finite number ≥ 0, got -0.1",
        2,
    ),
    (
        "non-finite learning-rate multiplier",
        ["attention", "train", "attention.toml", "--out", "out"] + _sets("train.lr_vo=inf"),
        "train.lr_vo: must be finite",
        2,
    ),
    (
        "multiplier of an unknown group",
        ["attention", "train", "attention.toml", "--out", "out"] + _sets("train.lr_x=0.1"),
        "train.lr_x: unknown key (did you mean 'train.lr_v'?)",
        2,
    ),
    (
        "attention: a former name (issue #27)",
        ["attention", "train", "attention.toml", "--out", "out"] + _sets("train.steps=8"),
        "train.steps: renamed save.t1 (one name across rankflow's families); write save.t1",
        2,
    ),
]


def _snapshot(folder: Path) -> dict[Path, bytes]:
    """Every file under ``folder`` and its bytes (caches Python writes left out)."""
    return {
        p: p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and "hf_cache" not in p.parts
    }


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RANKFLOW_MAX_RUNS", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))  # empty, offline
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield tmp_path
    sys.modules.pop("user_losses", None)


@pytest.mark.parametrize(
    "argv, fragment, status", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_mistake_is_one_line(inputs, capsys, argv, fragment, status):
    before = dict(TRACE_COUNTS)
    files = _snapshot(inputs)
    assert cli.main(argv) == status
    assert _snapshot(inputs) == files  # the user's files byte-for-byte, nothing new
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("rankflow: error: "), err
    assert fragment in err, err
    assert "Traceback" not in out + err
    assert not (inputs / "out").exists()
    assert dict(TRACE_COUNTS) == before  # refused before anything compiled


# Python calls: (case, call, fragment of the ConfigError)
PY_CASES = [
    (
        "callable loss returning a vector",
        lambda: rankflow.run(_custom(lambda W: W[0])),
        "shape (4,)",
    ),
    (
        "callable loss of two arguments",
        lambda: rankflow.run(_custom(lambda W, d: 0.0)),
        "one argument",
    ),
    (
        "attention μ > 1",
        lambda: AC.resolve({"dynamics": {"kind": "momentum", "mu": 1.5}}),
        "dynamics.mu",
    ),
    ("sweep over the limit", lambda: C.resolve(BIG_SWEEP), "RANKFLOW_MAX_RUNS=10000000"),
    (
        "image patch not dividing the image",
        lambda: AC.resolve({"task": {"kind": "images", "image": 16, "patch": 5}}),
        "task.patch: must divide task.image = 16, one of 1, 2, 4, 8, 16; got 5",
    ),
    (
        "image task with a causal mask",
        lambda: AC.resolve({"task": {"kind": "images"}, "attention": {"causal": True}}),
        "attention.causal: the images task uses the bidirectional",
    ),
    (
        "char_lm without its causal mask",
        lambda: AC.resolve({"attention": {"causal": False}}),
        "attention.causal: char_lm predicts the next character",
    ),
    (
        "one image class",
        lambda: AC.resolve({"task": {"kind": "images", "classes": 1}}),
        "task.classes: must be in 2 … 10",
    ),
    (
        "image patches beyond the position table",
        lambda: AC.resolve({"task": {"kind": "images", "image": 32}}),
        "attention.context: must be ≥ 65",
    ),
    (
        "unknown pooling",
        lambda: AC.resolve({"task": {"kind": "images"}, "attention": {"pooling": "max"}}),
        "attention.pooling",
    ),
    (
        "image training set smaller than the classes",
        lambda: AC.resolve({"task": {"kind": "images", "train_size": 5}}),
        "task.train_size: must be ≥ task.classes = 10",
    ),
]


def _custom(loss):
    return {
        "problem": {"kind": "custom", "m": 4, "n": 4, "loss": loss},
        "save": {"t1": 2.0, "num": 3},
    }


@pytest.mark.parametrize("call, fragment", [c[1:] for c in PY_CASES], ids=[c[0] for c in PY_CASES])
def test_python_calls_raise_one_line(inputs, call, fragment):
    with pytest.raises(rankflow.ConfigError) as e:
        call()
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_the_corrected_rerun_works_and_custom_ignores_rank(inputs, capsys):
    """After a refused custom loss nothing is left, so the fixed config runs into the same
    directory; a custom problem of m = n = 2 is not refused for problem.rank = 3."""
    assert cli.main(["run", "custom_raises.toml", "--out", "out", "--quiet"]) == 2
    assert cli.main(["run", "custom_good.toml", "--out", "out", "--quiet"]) == 0
    assert (inputs / "out" / "results.parquet").is_dir()
    small = _custom("user_losses:good")
    small["problem"].update(m=2, n=2)
    assert len(rankflow.run(small)) == 3


# --- guards before work ------------------------------------------------------------------


def _peak(call) -> int:
    tracemalloc.start()
    try:
        call()
    except rankflow.ConfigError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_a_huge_sweep_is_refused_at_once_without_materialising(monkeypatch):
    monkeypatch.delenv("RANKFLOW_MAX_RUNS", raising=False)
    small = {"sweep": {"seed": list(range(10))}}
    small_peak = _peak(lambda: C.resolve(small))
    t0 = time.perf_counter()
    big_peak = _peak(lambda: C.resolve(BIG_SWEEP))
    assert time.perf_counter() - t0 < 5
    # Materialised, 10⁷ points would take gigabytes; counted, the same as 10 (the 70
    # sweep values themselves are the margin).
    assert big_peak < small_peak + 64 * 1024, (small_peak, big_peak)


def test_a_large_sweep_is_counted_and_planned_lazily(monkeypatch):
    """10⁶ points under the limit: resolved from representatives, planned by structure,
    every point made on demand and equal to the eagerly made one."""
    sweep = {"dynamics.lam": [i / 1000 for i in range(1000)], "seed": list(range(1000))}
    t0 = time.perf_counter()
    cfg = C.resolve({"sweep": sweep})
    points, chunks = plan(CORE, cfg)
    assert time.perf_counter() - t0 < 20
    assert len(points) == 10**6 and sum(c.rows for c in chunks) == 10**6
    assert [r for c in chunks[:2] for r in c.runs][:3] == [(0, 0), (1, 0), (2, 0)]
    small = C.resolve({"sweep": {"dynamics.lam": [0.0, 0.1], "seed": [0, 1]}})
    eager = sweep_points(small, C.SCHEMA)
    assert C.expand(small) == [C.derive(p) for p in eager]


def test_structures_group_as_before():
    """Grouped per structure from the structural axes, the chunks are those of grouping
    point by point (which the golden tables pin)."""
    cfg = C.resolve(
        {
            "sweep": {
                "dynamics.lam": [0.0, 0.1],
                "solver.method": ["tsit5", "dopri5"],
                "seed": [0, 1],
            }
        }
    )
    lazy = plan_module.chunk_plan(
        C.expand(cfg), C.structure_key, paths=CORE.paths, size=CORE.chunk_size
    )
    eager = plan_module.chunk_plan(
        list(C.expand(cfg)), C.structure_key, paths=CORE.paths, size=CORE.chunk_size
    )
    assert lazy == eager and len({c.group for c in lazy}) == 2


def test_a_large_sweep_still_validates_cross_field_rules(monkeypatch):
    """Beyond the exact check, the extremes of a numeric axis stand for it: σ > 0 for
    deterministic dynamics is caught whichever value of σ is bad."""
    sweep = {"dynamics.sigma": [0.0] * 4999 + [0.1], "seed": [0, 1]}
    with pytest.raises(rankflow.ConfigError, match="^dynamics.sigma: must be 0"):
        C.resolve({"sweep": sweep})


def test_too_large_a_problem_is_refused_before_compiling(tmp_path):
    before = dict(TRACE_COUNTS)
    cfg = {"problem": {"kind": "sensing", "m": 100000, "n": 100000}}
    with pytest.raises(rankflow.ConfigError, match="one run needs about") as e:
        rankflow.run(cfg, out=tmp_path / "out")
    assert "problem.m = 100000" in str(e.value) and dict(TRACE_COUNTS) == before
    assert not (tmp_path / "out").exists()


def test_a_chunk_too_large_for_the_device_is_shrunk(monkeypatch, capsys):
    cfg = C.resolve({"sweep": {"seed": list(range(8))}, "save": {"t1": 2.0, "num": 3}})
    one = CORE.run_bytes(C.expand(cfg)[0])
    monkeypatch.setattr(plan_module, "device_memory", lambda: (int(3.5 * one / 0.9), "host"))
    chunk, _, chunks = plan_module.checked_plan(CORE, cfg, 8)
    assert chunk == 3 and [c.rows for c in chunks] == [3, 3, 2]
    assert "running chunks of 3 runs" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """SIGINT during a chunk that would take minutes (issue #34): one line saying how to
    resume, exit 130 within seconds (the chunk is abandoned, not waited for); only the
    finished chunk is left, no partial file. tests/cli/test_interrupt.py resumes it."""
    from tests.cli.test_interrupt import LONG_SWEEP, interrupt_after_first_chunk

    cfg = tmp_path / "slow.toml"
    # Chunk 0 saves to t = 4 steps; chunk 1 runs 1.2·10⁸ GD steps (241 s here).
    cfg.write_text(LONG_SWEEP.format(t1=1.2e8))
    out = tmp_path / "out"
    rc, stdout, stderr, seconds = interrupt_after_first_chunk(cfg, out)
    assert rc == 130, stderr
    assert seconds < 10, seconds
    assert stderr == (
        f"rankflow: interrupted; the finished chunks are kept in {out}: run the same "
        "command with --resume to continue\n"
    )
    assert "Traceback" not in stdout + stderr
    names = sorted(p.name for p in (out / "results.parquet").iterdir())
    assert names == ["chunk-00000.parquet"], names


# --- the results-directory cases (tests/engine/test_results_dir.py tests them in depth) ----------


def _model(tmp: Path) -> None:
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text("{}")
    (tmp / "model" / "model.safetensors").write_bytes(b"x")


def _damaged(tmp: Path, how: str) -> None:
    """A finished one-run sweep in ``tmp/good`` copied to ``tmp/bad`` and damaged."""
    import shutil

    assert cli.main(["run", "base.toml", "--out", "good", "--quiet"]) == 0
    shutil.copytree(tmp / "good", tmp / "bad")
    if how == "manifest":
        (tmp / "bad" / "manifest.json").write_text("{not json")
    else:
        shutil.rmtree(tmp / "bad" / "results.parquet")
        (tmp / "bad" / "results.parquet").write_text("x")


SIMS_ATTENTION = str(ROOT / "sims" / "attention" / "balance_sgd.toml")
SIMS_COMPARE = str(ROOT / "sims" / "compare_gd.toml")
NOT_OURS = "(not made by rankflow); choose a new or empty directory"
# (case, setup, argv, fragment, exit status); every writing subcommand refuses a user's folder
DIR_CASES = [
    ("run --out a model folder", _model, _run()[:3] + ["model"], NOT_OURS, 2),
    (
        "attention train --out a model folder",
        _model,
        ["attention", "train", SIMS_ATTENTION, "--out", "model"],
        NOT_OURS,
        2,
    ),
    (
        "inspect --out a model folder",
        _model,
        ["inspect", "nan_ckpt", "--out", "model"],
        NOT_OURS,
        2,
    ),  # fmt: skip
    (
        "reproduce --out a model folder",
        _model,
        ["reproduce", "--only", "toy", "--out", "model"],
        NOT_OURS,
        2,
    ),  # fmt: skip
    ("demo --out a model folder", _model, ["demo", "--out", "model"], NOT_OURS, 2),
    (
        "resume with a corrupt manifest",
        lambda t: _damaged(t, "manifest"),
        _run("--resume")[:3] + ["bad", "--resume"],
        "bad/manifest.json: corrupt manifest",
        2,
    ),
    (
        "resume where results.parquet is a file",
        lambda t: _damaged(t, "parquet"),
        _run("--resume")[:3] + ["bad", "--resume"],
        "results.parquet: is a file, not a directory of chunks",
        2,
    ),
    (
        "plot a corrupt directory",
        lambda t: _damaged(t, "manifest"),
        ["plot", "bad", "--out", "f.png"],
        "corrupt manifest",
        2,
    ),
    ("plot a missing directory", None, ["plot", "nothere", "--out", "f.png"], "no such", 2),
    (
        "plot an empty directory",
        lambda t: (t / "empty").mkdir(),
        ["plot", "empty", "--out", "f.png"],
        "not a rankflow results directory",
        2,
    ),
    (
        "attention plot a missing directory",
        None,
        ["attention", "plot", "rank", "nothere", "--out", "f.png"],
        "no such results directory",
        2,
    ),
]


# A file, or a path under a file, as --out of every subcommand that writes a directory.
WRITERS = {
    "run": ["run", "base.toml"],
    "compare": ["compare", SIMS_COMPARE],
    "attention train": ["attention", "train", SIMS_ATTENTION],
    "inspect": ["inspect", "nan_ckpt"],
    "reproduce": ["reproduce", "--only", "toy"],
    "demo": ["demo"],
}
DIR_CASES += [
    (f"{name} --out {what}", None, [*argv, "--out", out], fragment, 2)
    for name, argv in WRITERS.items()
    for what, out, fragment in (
        ("a file", "afile", "--out: afile is a file"),
        ("under a file", "afile/sub", "--out: afile/sub is under a file"),
    )
]
DIR_CASES += [
    (
        "attention plot an empty directory",
        lambda t: (t / "empty").mkdir(),
        ["attention", "plot", "rank", "empty", "--out", "f.png"],
        "not a rankflow results directory",
        2,
    ),
]


@pytest.mark.parametrize(
    "setup, argv, fragment, status", [c[1:] for c in DIR_CASES], ids=[c[0] for c in DIR_CASES]
)
def test_each_directory_mistake_is_one_line(inputs, capsys, setup, argv, fragment, status):
    """A user's folder, a file or a damaged results directory as --out, or a plot of a
    missing, empty or corrupt directory: one line, and nothing the user owns touched."""
    (inputs / "afile").write_text("mine")
    if setup is not None:
        setup(inputs)
    capsys.readouterr()
    before = {p: p.read_bytes() for p in inputs.rglob("*") if p.is_file()}
    assert cli.main(argv) == status
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("rankflow: error: "), err
    assert fragment in err, err
    assert "Traceback" not in out + err
    assert {p: p.read_bytes() for p in inputs.rglob("*") if p.is_file()} == before


def test_a_callable_object_is_a_custom_loss(inputs):
    """An instance with ``__call__`` (no ``__qualname__``) is keyed and run like a
    function; before, building its structure key raised AttributeError."""
    import jax.numpy as jnp

    class Loss:
        def __call__(self, W):
            return 0.5 * jnp.sum((W - 1.0) ** 2)

    df = rankflow.run(_custom(Loss()))
    assert len(df) == 3 and (df["status"] == "ok").all()


# --- noise models (issue #15): refused with one line before anything compiles -------------

_SDE = ("dynamics.kind='stochastic_flow'",)
_SENSING = ("problem.kind='sensing'", "problem.samples=20")
_BATCH = "dynamics.batch=4"


def _plain(*assignments):
    return ["run", "plain.toml", "--out", "out", *_sets(*assignments)]


NOISE_CASES = [
    (
        "minibatch noise on diagonal",
        _run(*_sets(*_SDE, "dynamics.noise='minibatch'", "dynamics.sigma=0.0")),
        "dynamics.noise: 'minibatch' noise is the covariance of minibatches of data; "
        "problem.kind = 'diagonal' has none (use sensing, completion, regression or codiagonal",
        2,
    ),
    (
        "minibatch noise on custom",
        ["run", "custom_good.toml", "--out", "out"]
        + _sets(*_SDE, "dynamics.noise='minibatch'", "dynamics.sigma=0.0"),
        "problem.kind = 'custom' has none (use sensing, completion, regression or codiagonal",
        2,
    ),
    (
        "batch larger than samples",
        _plain(*_SENSING, *_SDE, "dynamics.noise='minibatch'", "dynamics.batch=30"),
        "dynamics.batch: must be ≤ problem.samples = 20, got 30",
        2,
    ),
    (
        "batch zero",
        _plain(*_SENSING, *_SDE, "dynamics.noise='minibatch'", "dynamics.batch=0"),
        "dynamics.batch: must be ≥ 1, got 0",
        2,
    ),
    (
        "batch negative on sgd",
        _plain(*_SENSING, "dynamics.kind='sgd'", "dynamics.batch=-3"),
        "dynamics.batch: must be ≥ 1, got -3",
        2,
    ),
    (
        "sigma with minibatch noise",
        _plain(*_SENSING, *_SDE, "dynamics.noise='minibatch'", "dynamics.sigma=0.1"),
        "dynamics.sigma: must be 0 with noise = 'minibatch' (the noise's covariance is the "
        "data's, set by dynamics.batch), got 0.1",
        2,
    ),
    (
        "adaptive steps with gradient noise",
        _plain(*_SDE, "dynamics.noise='gradient'", "dynamics.sigma=0.1", "solver.adaptive=true"),
        "solver.adaptive: must be false with noise = 'gradient'",
        2,
    ),
    (
        "noise model on gd",
        _run(*_sets("dynamics.kind='gd'", "dynamics.noise='gradient'")),
        "dynamics.noise: gd is deterministic and has no noise model; noise models need one of "
        "stochastic_flow, stochastic_momentum_flow, sgd_gaussian, sgd",
        2,
    ),
    (
        "minibatch noise on sgd_gaussian",
        _plain(*_SENSING, "dynamics.kind='sgd_gaussian'", "dynamics.noise='minibatch'"),
        "dynamics.noise: sgd_gaussian takes parameter, gradient, got 'minibatch'",
        2,
    ),
    (
        "gradient noise on sgd",
        _plain(*_SENSING, "dynamics.kind='sgd'", "dynamics.noise='gradient'"),
        "dynamics.noise: sgd takes minibatch, got 'gradient'",
        2,
    ),
]
# Every solver that does not converge to the Itô solution, with each multiplicative noise.
NOISE_CASES += [
    (
        f"{method} with {noise} noise",
        _plain(
            *_SENSING,
            *_SDE,
            f"dynamics.noise='{noise}'",
            f"dynamics.sigma={0.1 if noise == 'gradient' else 0.0}",
            f"solver.method='{method}'",
            "solver.adaptive=false",
            _BATCH,
        ),
        f"solver.method: noise = '{noise}' is multiplicative and '{method}' does not converge "
        "to its Itô solution",
        2,
    )
    for method in ("heun", "midpoint", "shark", "sea", "sra1")
    for noise in ("gradient", "minibatch")
]


@pytest.mark.parametrize(
    "argv, fragment, status", [c[1:] for c in NOISE_CASES], ids=[c[0] for c in NOISE_CASES]
)
def test_each_noise_model_mistake_is_one_line(inputs, capsys, argv, fragment, status):
    """Issue #15's bad inputs: each names the field and the allowed values (a solver that
    misses the Itô solution names the Itô ones), in one line, before anything compiles."""
    before = dict(TRACE_COUNTS)
    files = _snapshot(inputs)
    assert cli.main(argv) == status
    assert _snapshot(inputs) == files
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("rankflow: error: "), err
    assert fragment in err, err
    if fragment.startswith("solver.method"):
        assert err.endswith("; use one of euler\n"), err
    assert "Traceback" not in out + err
    assert not (inputs / "out").exists()
    assert dict(TRACE_COUNTS) == before
