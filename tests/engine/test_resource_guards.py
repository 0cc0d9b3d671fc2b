"""Resource guards (issue #32, item 3): sizes that would fill the machine are refused
before anything compiles, in one line naming the keys that set them, by every family.

What a hostile-input battery found killed at 4 GiB or 60 s instead of refused is run
here through the command line in a fresh process under an address-space limit of 4 GB
(``ulimit -v``, which the guard reads as memory the process cannot have) and a timeout:
each case must end with exit status 2 and one line on stderr, within 5 s of the
command starting (measured inside the process, after the interpreter has imported
rankflow: that import, 2–4 s on a busy 2-core machine, is the same for every command)
and with the process's peak RSS under 1 GiB.

The flow case ``save.t1 = 1e9, save.num = 1e6`` (a tsit5 solve that reaches t1 in a
few adaptive steps once the flow has converged, but evaluates every observable at a
million interpolated saves, 1,000 time units apart, and writes a million rows per run:
measured before the guard, 45 s and then a MemoryError building the table) is refused
by the cap on saves per run, ``RANKFLOW_MAX_SAVES`` (default 10⁵), which the message
names; raised, the memory estimate decides.

The estimates are checked against real runs (``slow``): the peak RSS of a fresh process
at three sizes per family, less that of the same command at a tiny size (the
interpreter, JAX and the compiled program: a baseline the estimate does not model), is
compared with the estimate's increase over the same tiny size; the two must agree
within a factor of 2.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import rankflow
from rankflow.config.fields import ConfigError
from rankflow.config.points import MAX_STRUCTURES
from rankflow.core import config as core_config
from rankflow.core.family import CORE, memory_parts
from rankflow.engine import resources

ROOT = Path(__file__).resolve().parents[2]
SIMS = ROOT / "sims"
GIB = 2**30
ADDRESS_SPACE = 4_000_000_000  # ulimit -v of the guarded processes, as the battery's
ATT = "[save]\nt1 = 10\n[train]\neval_every = 5\n"
IMAGES = '[task]\nkind = "images"\ntrain_size = 64\nval_size = 32\n' + ATT


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), RANKFLOW_CACHE_DIR="off")


# Appended to every child: its peak RSS as the kernel counts it for its own address
# space (VmHWM). Not ``ru_maxrss``: a child started by vfork inherits the starting
# process's peak there (pytest's, with JAX loaded: up to 1 GiB and more).
PEAK = """
import atexit
def _peak():
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print("PEAK", hwm * 1024, flush=True)
atexit.register(_peak)
"""


def _child(
    code: str, *args: str, timeout: float = 120, space: int = ADDRESS_SPACE
) -> tuple[str, int, float]:
    """Run ``code`` in a fresh interpreter under the address-space limit ``space``; its
    output, peak RSS (bytes) and wall time."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", f'ulimit -v {space // 1024} && exec "$0" "$@"']
            + [sys.executable, "-c", PEAK + code, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"timed out after {timeout} s") from None
        out.seek(0)
        text = out.read()
    assert proc.returncode == 0, text[-2000:]
    peak = int(text.rsplit("PEAK ", 1)[1].split()[0])
    return text, peak, time.perf_counter() - t0


# Each case: (label, rankflow arguments, what the one line must contain). "{tmp}" is a
# folder the cases' files are written into.
CASES = [
    ("gd save.num 1e9", ["run", f"{SIMS}/diagonal_gd.toml", "--set", "save.num=1000000000"],
     "save.num: discrete dynamics save at whole steps"),
    ("gd save.num 1e12", ["run", f"{SIMS}/diagonal_gd.toml", "--set", "save.num=1000000000000"],
     "save.num: discrete dynamics save at whole steps"),
    ("gd save.num 1e9, whole steps",
     ["run", f"{SIMS}/diagonal_gd.toml", "--set", "save.num=1000000000",
      "--set", "save.t1=999999999"], "save.num: 1,000,000,000 saves per run"),
    ("depth, problem.m 1e5",
     ["run", f"{SIMS}/sensing.toml", "--set", "model.depth=3", "--set", "problem.m=100000"],
     "problem.m = 100000"),
    ("2·10⁵ structures", ["run", "{tmp}/structures.toml"], "sweep: 200,000 structures"),
    ("flow t1 1e9, num 1e6",
     ["run", f"{SIMS}/diagonal_flow.toml", "--set", "save.t1=1000000000",
      "--set", "save.num=1000000"], "save.num: 1,000,000 saves per run"),
    ("attention.D 65536", ["attention", "train", "{tmp}/att.toml", "--set", "attention.D=65536"],
     "attention.D, attention.layers: one run needs about"),
    ("dynamics.batch 1e8",
     ["attention", "train", "{tmp}/att.toml", "--set", "dynamics.batch=100000000"],
     "dynamics.batch"),
    ("task.val_size 1e9",
     ["attention", "train", "{tmp}/att.toml", "--set", 'task.kind="associative_recall"',
      "--set", "task.val_size=1000000000"], "task.val_size"),
    ("images task.train_size 1e9",
     ["attention", "train", "{tmp}/img.toml", "--set", "task.train_size=1000000000"],
     "task.train_size, task.image: one run needs about"),
    ("save.t1 1e8, eval_every 1",
     ["attention", "train", "{tmp}/att.toml", "--set", "save.t1=100000000",
      "--set", "train.eval_every=1"], "save.t1: 100,000,001 saves per run"),
    ("attention.layers 1e6",
     ["attention", "train", "{tmp}/att.toml", "--set", "attention.layers=1000000"],
     "attention.layers = 1000000"),
    ("task.image 1e5, patch 1",
     ["attention", "train", "{tmp}/img.toml", "--set", "task.image=100000",
      "--set", "task.patch=1"], "attention.context: must be ≥ 10000000001"),
    ("task.image 1e5, patch 1, context 1e10 + 1",
     ["attention", "train", "{tmp}/img.toml", "--set", "task.image=100000",
      "--set", "task.patch=1", "--set", "attention.context=10000000001"], "task.image = 100000"),
    ("compare.window 1e9",
     ["compare", f"{SIMS}/compare_gd.toml", "--set", "compare.window=1000000000"],
     "compare.window: 1,000,000,"),
    ("compare, problem.samples 1e7",
     ["compare", f"{SIMS}/compare_gd.toml", "--set", "problem.samples=10000000"],
     "problem.samples = 10000000"),
    ("inspect, d_model 9,216", ["inspect", "{tmp}/huge", "--heads", "16"],
     "reading one layer needs about"),
]  # fmt: skip

# Runs the cases one after another in one process (rankflow imported once), each timed
# from the command's start; prints one JSON line per case.
DRIVER = textwrap.dedent(
    """
    import contextlib, io, json, sys, time
    from rankflow.cli import main
    for label, args in json.loads(sys.argv[1]):
        err = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(err):
            status = main(args)
        seconds = time.perf_counter() - t0
        print("CASE", json.dumps([label, status, err.getvalue(), seconds]), flush=True)
    """
)


def _write_inputs(tmp: Path) -> None:
    """The cases' files: small attention configs, a sweep of 2·10⁵ structures, and a
    safetensors GPT-2 layer whose data the file only claims (sparse)."""
    (tmp / "att.toml").write_text(ATT)
    (tmp / "img.toml").write_text(IMAGES)
    nums = ", ".join(str(i) for i in range(2, 200_002))
    base = (SIMS / "diagonal_gd.toml").read_text().split("[sweep]")[0]
    (tmp / "structures.toml").write_text(f'{base}[sweep]\n"save.num" = [{nums}]\n')
    (tmp / "huge").mkdir()
    # d_model 9,216: a 1.4 GB file (mapped whole while its header is read, so larger ones
    # cannot be opened under the address-space limit) of 3.8 GiB to inspect.
    D, header, offset = 9_216, {}, 0
    for name, shape in (("h.0.attn.c_attn.weight", [D, 3 * D]), ("h.0.attn.c_proj.weight", [D, D])):
        size = shape[0] * shape[1] * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(tmp / "huge" / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


def _cases(tmp: Path) -> list:
    out = tmp / "out"
    cases = []
    for label, args, _ in CASES:
        args = [a.replace("{tmp}", str(tmp)) for a in args]
        args += ["--out", str(out / label.replace(" ", "_"))]
        if args[0] in ("run", "attention"):
            args += ["--quiet"]
        cases.append((label, args))
    return cases


def test_every_hostile_input_is_refused_in_one_line(tmp_path):
    """The battery's cases through the ``rankflow`` command: exit status 2, one line on
    stderr naming the key (or the file), each within 5 s of its command starting, no
    results folder left; the process's peak RSS over all of them under 1 GiB."""
    _write_inputs(tmp_path)
    text, peak, wall = _child(DRIVER, json.dumps(_cases(tmp_path)), timeout=240)
    results = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("CASE ")]
    assert [r[0] for r in results] == [c[0] for c in CASES], text[-2000:]
    for (label, status, err, seconds), (_, _, expected) in zip(results, CASES):
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1, (label, status, err)
        assert lines[0].startswith("rankflow: error: ") and expected in lines[0], (label, err)
        assert seconds < 5, (label, seconds)
    assert peak < GIB, peak
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_each_hostile_input_alone(tmp_path, case):
    """One case per fresh process: its own peak RSS under 1 GiB, and its wall time
    printed (``-s``) beside the time from the command's start (under 5 s)."""
    _write_inputs(tmp_path)
    text, peak, wall = _child(DRIVER, json.dumps([_cases(tmp_path)[case]]), timeout=120)
    label, status, err, seconds = json.loads(text.split("CASE ", 1)[1].splitlines()[0])
    print(f"\n{label}: {err.strip()} | {seconds:.2f} s from the command, {wall:.1f} s wall, "
          f"peak RSS {peak / 2**20:.0f} MiB")  # fmt: skip
    assert status == 2 and seconds < 5 and peak < GIB


# --- the same guards through the Python API ------------------------------------------------


def test_api_refuses_what_the_cli_refuses(tmp_path):
    """``rankflow.run``, the attention family's ``execute`` and ``compare`` raise the
    one-line ConfigError, nothing compiled or written; so does a sweep whose results
    table would not fit in memory when read back."""
    from rankflow.attention import config as att_config
    from rankflow.attention.sweep import execute
    from rankflow.compare import compare

    calls = [
        (lambda: rankflow.run({"save": {"t1": 999999999, "num": 10**9}, "dynamics": {"kind": "gd"}},
                              out=tmp_path / "a"), "save.num: 1,000,000,000 saves"),
        (lambda: execute(att_config.resolve({"attention": {"D": 65536}}), tmp_path / "b"),
         "attention.D, attention.layers: one run needs about"),
        (lambda: compare(SIMS / "compare_gd.toml", overrides={"compare.window": 10**9}),
         "compare.window: "),
        (lambda: rankflow.run({"sweep": {"model.r": list(range(1, MAX_STRUCTURES + 2))}}),
         f"sweep: {MAX_STRUCTURES + 1:,} structures"),
        # 10⁵ runs of 10,001 saves: a results table of about 600 GiB when read back.
        (lambda: rankflow.run({"dynamics": {"kind": "gd"}, "save": {"t1": 10000, "num": 10001},
                               "sweep": {"seed": list(range(10**5))}}),
         "sweep: its results table needs about"),
    ]  # fmt: skip
    for call, expected in calls:
        t0 = time.perf_counter()
        with pytest.raises(ConfigError) as e:
            call()
        assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert time.perf_counter() - t0 < 5
    assert not any(tmp_path.iterdir())


def test_the_caps_can_be_raised(monkeypatch):
    """RANKFLOW_MAX_SAVES and RANKFLOW_MAX_STRUCTURES, as their messages say, let a
    larger run through to the next check."""
    cfg = {"sweep": {"model.r": list(range(1, MAX_STRUCTURES + 2))}}
    with pytest.raises(ConfigError, match="RANKFLOW_MAX_STRUCTURES=1025"):
        core_config.expand(core_config.resolve(cfg))
    monkeypatch.setenv("RANKFLOW_MAX_STRUCTURES", "2000")
    assert len(core_config.expand(core_config.resolve(cfg))) == MAX_STRUCTURES + 1
    point = core_config.expand(core_config.resolve({"save": {"t1": 1e9, "num": 10**6}}))[0]
    with pytest.raises(ConfigError, match="RANKFLOW_MAX_SAVES=1000000$"):
        resources.check_saves(*CORE.saves(point))
    monkeypatch.setenv("RANKFLOW_MAX_SAVES", str(10**6))
    resources.check_saves(*CORE.saves(point))


def test_estimates_are_O1_in_the_sizes():
    """A depth of 10⁹ factors, 10⁹ saves, 10⁶ layers: each estimate is a formula of the
    sizes (milliseconds, no list or array made), and the huge ones are huge."""
    from rankflow.attention import config as att_config
    from rankflow.attention.sweep import ATTENTION

    point = core_config.expand(core_config.resolve({"model": {"depth": 3}}))[0]
    point["model"]["depth"], point["save"]["num"] = 10**9, 10**9
    t0 = time.perf_counter()
    parts = memory_parts(point)
    assert parts[("save.num",)] > 10**11
    assert max(n for keys, n in parts.items() if "model.depth" in keys) > 10**11
    att = att_config.expand(att_config.resolve({}))[0]
    att["attention"]["layers"], att["save"]["t1"], att["train"]["eval_every"] = 10**6, 10**9, 1
    assert ATTENTION.run_bytes(att) > 1000 * GIB
    assert time.perf_counter() - t0 < 0.5


def test_the_line_names_the_largest_parts_and_the_free_memory():
    parts = {("a.x",): 80, ("b.y", "a.x"): 15, ("c.z",): 5}
    assert resources.dominant_keys(parts) == ["a.x"]
    assert resources.dominant_keys(parts, share=0.9) == ["a.x", "b.y"]
    with pytest.raises(ConfigError) as e:
        resources.check_fits(
            412 * GIB, ["attention.D"], "attention.D = 65536", free=(int(21.3 * GIB), "host")
        )
    assert str(e.value) == (
        "attention.D: one run needs about 412 GiB (attention.D = 65536), more than 90% of "
        "the 21.3 GiB free on the host; make them smaller"
    )
    assert resources.gib(3 * 2**40) == "3 TiB"


def test_the_host_limit_counts():
    """Under ``ulimit -v`` the memory free is what the address space leaves."""
    code = "from rankflow.engine.resources import host_memory; print('FREE', *host_memory())"
    text, _, _ = _child(code, timeout=60)
    free, where = text.split("FREE ", 1)[1].split(" ", 1)
    assert int(free) < ADDRESS_SPACE and "ulimit -v" in where


# --- the estimates against real runs ------------------------------------------------------

CORE_CHILD = """
import json, sys
import rankflow
from rankflow.core import config as C
from rankflow.core.family import CORE
cfg = json.loads(sys.argv[1])
print("EST", CORE.run_bytes(C.expand(C.resolve(cfg))[0]))
rankflow.run(cfg, quiet=True)
"""
ATTENTION_CHILD = """
import json, sys
from rankflow.attention import config as A
from rankflow.attention.sweep import ATTENTION, execute
cfg = A.resolve(json.loads(sys.argv[1]))
point = A.expand(cfg)[0]
print("EST", ATTENTION.shared_bytes(point) + ATTENTION.run_bytes(point))
execute(cfg)
"""
SPY = """
import json, sys
import rankflow.engine.resources as R
seen = []
check = R.check_fits
def spy(need, *args, **kw):
    seen.append(need)
    return check(need, *args, **kw)
"""
COMPARE_CHILD = (
    SPY
    + """
import rankflow.compare.run as C
C.check_fits = spy
C.compare(json.loads(sys.argv[1]))
print("EST", seen[0])
"""
)
INSPECT_CHILD = (
    SPY
    + """
import rankflow.inspect._run as I
I.check_fits = spy
I.inspect_checkpoint(sys.argv[1], heads=16, findings=False)
print("EST", seen[0])
"""
)


def _measured(child: str, args: list[str]) -> list[tuple[float, float]]:
    """``(estimate, peak RSS)`` of each argument's run in its own process (with room
    for the run: the guard's estimate under 4 GB of address space would refuse it)."""
    out = []
    for arg in args:
        text, peak, _ = _child(child, arg, timeout=600, space=3 * ADDRESS_SPACE)
        est = [float(line.split()[1]) for line in text.splitlines() if line.startswith("EST ")]
        out.append((est[0], peak))
    return out


def _agree(runs: list[tuple[float, float]], what: str) -> None:
    """The estimates' increases over the first (tiny) run against the measured ones."""
    (est0, peak0), table = runs[0], []
    for est, peak in runs[1:]:
        assert peak > peak0, f"{what}: no increase over the baseline measured"
        ratio = (est - est0) / (peak - peak0)
        table.append(f"{(est - est0) / 2**20:.0f} MiB est / {(peak - peak0) / 2**20:.0f} MiB "
                     f"measured = {ratio:.2f}")  # fmt: skip
    print(f"\n{what} (baseline {peak0 / 2**20:.0f} MiB): " + "; ".join(table))
    for line in table:
        assert 0.5 <= float(line.rsplit("= ", 1)[1]) <= 2, (what, table)


def _sensing(samples: int) -> dict:
    return {
        "problem": {"kind": "sensing", "m": 100, "n": 100, "samples": samples},
        "dynamics": {"kind": "gd", "eta": 0.1, "lam": 0.05},
        "model": {"r": 5},
        "save": {"t1": 4, "num": 3},
    }


@pytest.mark.slow
def test_core_estimate_within_2x_of_measured():
    """GD on matrix sensing, 100×100, 1,000 / 2,000 / 4,000 measurements (the data:
    0.2–0.9 GiB while it is drawn)."""
    args = [json.dumps(_sensing(n)) for n in (10, 1000, 2000, 4000)]
    _agree(_measured(CORE_CHILD, args), "core")


@pytest.mark.slow
def test_attention_estimate_within_2x_of_measured():
    """char_lm, D = 64, 2 layers, 64 characters, AdamW; batches of 512 / 1024 / 1536
    (the training step's activations: 0.7–2 GiB; below about 0.5 GiB they hide under
    the peak of compiling, which the baseline holds)."""

    def cfg(batch: int) -> str:
        return json.dumps(
            {
                "attention": {"D": 64, "H": 4, "layers": 2, "context": 64},
                "task": {"seq_len": 64},
                "dynamics": {"batch": batch},
                "save": {"t1": 4},
                "train": {"eval_every": 2},
            }
        )

    _agree(_measured(ATTENTION_CHILD, [cfg(b) for b in (2, 512, 1024, 1536)]), "attention")


@pytest.mark.slow
def test_image_render_estimate_within_2x_of_measured():
    """The image task's training set as drawn on the host (the part of the estimate
    that the training program's own peak hides): 20,000 and 40,000 images of 32²."""
    from rankflow.attention.sweep import RENDER_BYTES

    code = "import sys\nfrom rankflow.attention.images import render\n" + (
        "render(0, int(sys.argv[1]), size=32, classes=10, noise=0.15)\nprint('EST', 0)"
    )
    runs = _measured(code, ["10", "20000", "40000"])
    runs = [(n * 32 * 32 * RENDER_BYTES, peak) for n, (_, peak) in zip((10, 20000, 40000), runs)]
    _agree(runs, "images.render")


@pytest.mark.slow
def test_compare_estimate_within_2x_of_measured():
    """GD against gradient flow on sensing, 100×100, 500 / 1,000 / 2,000 measurements,
    4 runs per side (the order's halvings)."""
    args = [json.dumps(_sensing(n) | {"save": {"t1": 20, "num": 3}}) for n in (10, 500, 1000, 2000)]
    _agree(_measured(COMPARE_CHILD, args), "compare")


@pytest.mark.slow
def test_inspect_estimate_within_2x_of_measured(tmp_path):
    """A GPT-2 layer of d_model 3072 / 4096 / 6144 (float32, 16 heads: 0.15–0.6 GB
    read; the estimate counts a float64 copy, the reading a float32 one: about 1.6×)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    paths = []
    for D in (64, 3072, 4096, 6144):
        folder = tmp_path / f"d{D}"
        folder.mkdir()
        tensors = {
            "h.0.attn.c_attn.weight": rng.standard_normal((D, 3 * D), np.float32),
            "h.0.attn.c_proj.weight": rng.standard_normal((D, D), np.float32),
        }
        save_file(tensors, str(folder / "model.safetensors"))
        paths.append(str(folder))
    _agree(_measured(INSPECT_CHILD, paths), "inspect")
