"""The tables that the user-facing configs produce, captured before a refactor and
compared after it (``tests/claims/test_golden.py``).

Every config in ``sims/`` is captured twice: in float64 (``x64 = true`` over the config)
in ``tests/claims/golden/`` and as the config is written (float32 where it says so) in
``tests/claims/golden/f32/``. Float64 tables travel across machines: rounding stays near 1e-10
of a column's scale. Float32 tables depend on the CPU that computes them: XLA:CPU
vectorises for the machine's widest vector ISA, so a machine with AVX2 only rounds
differently from one with AVX-512, and dynamics amplify the difference where they are
unstable (measured: 16% of the column's scale in ``sv_4`` of ``sims/regression.toml``
between an AVX-512 and an AVX2-only machine). ``tests/claims/golden/f32/MACHINE.txt`` names the
machine that captured them; the float32 comparison runs only on a machine whose CPU and
vector ISA match it.

The ten top-level float64 tables were captured by the pre-#13 code (commit bba76bc); the
others (every config of ``sims/attention``, ``sims/noise`` and ``sims/reproduce``, and
all float32 tables) by the pre-#27 code (commit 8af73a0), before the package moved into
``config/``, ``engine/``, ``numerics/`` and ``core/``; ``compare_sweep`` (a config added
with issue #28), ``reproduce/reference_adamw``, ``reproduce/reference_sgd`` (issue #30)
and ``reproduce/optimizers_momentum``, ``reproduce/optimizers_schedule`` (issue #33) by
the code that added them. The float64 tables of the completion configs (``completion``,
``reproduce/rank_completion``, ``reproduce/depth_rank_completion``, and the latter two's
second capture, x64 as written) were recaptured with issue #42, whose contract suite found
that x64 changed completion's observed entries (int64 draws).

``python tests/claims/golden_tables.py [--only SUBSTRING] [--f32]`` rewrites the tables from the
current code: run it only when a change of the tables is intended, and say so in the
commit.
"""

from __future__ import annotations

import platform
import sys
import tomllib
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
SIMS = ROOT / "sims"
GOLDEN = Path(__file__).resolve().parent / "golden"
GOLDEN_F32 = GOLDEN / "f32"
X64 = {"x64": True}

# The attention family's columns renamed since capture (issue #27: one name per quantity
# across the families; rankflow.attention.config.RENAMED, the keys that are columns): the
# comparison renames the captured tables' columns through this, values untouched.
RENAMED_COLUMNS = {
    "attention.init_scale": "init.scale",
    "train.eta": "dynamics.eta",
    "train.mu": "dynamics.mu",
    "train.lam": "dynamics.lam",
    "train.kind": "dynamics.kind",
    "train.rank_tol": "save.rank_tol",
    "train.schedule": "dynamics.schedule",
    "train.warmup": "dynamics.warmup",
    "train.final_fraction": "dynamics.final_fraction",
}

# Configs whose tables take more than ~20 s on 2 cores: compared in the slow set only.
SLOW = {
    "attention/ablation",
    "attention/dh",
    "attention/lambda_table",
    "attention/lr_control",
    "attention/rank",
    "attention/vit",
    "attention/vit_ablation",
    "noise/compare_sme",
    "reproduce/attention_ablation",
    "reproduce/attention_rank",
    "reproduce/attention_sgd",
    "reproduce/rebuttal_dh",
    "reproduce/rebuttal_lambda",
    "reproduce/rebuttal_lr",
    "reproduce/rebuttal_vit",
    "reproduce/reference_adamw",
    "reproduce/reference_sgd",
    "reproduce/noise_sme",
    "reproduce/discrete_sgd",
    # 10-50 s each on a loaded 2-core host (a fresh process compiling its programs); the
    # schedule's claims run in the default set (tests/claims/test_mutants_optimizers.py).
    "reproduce/optimizers_momentum",
    "reproduce/optimizers_schedule",
    "reproduce/noise_models",
    "reproduce/depth_rank_completion",
    "reproduce/depth_rank_sensing",
    "reproduce/rank_completion",
    "reproduce/rank_sensing",
    "compare_sgd",
    "compare_gd",
    "compare_sweep",
    "attention/balance_sgd",
    "attention/balance_flow",
    "attention/balance_adamw",
    # Float64 tables that differ between two hosts at the capture's own commit (measured
    # 2026-12-02 on a second 2-core AVX-512 EPYC, which MACHINE.txt cannot tell apart):
    # regression's spectral start is built from singular vectors of a nearly degenerate
    # matrix, so its loss moves by 2.4e-4 of the scale from t = 0 (sv_4 by 7%); AdamW
    # amplifies last-bit differences (balancing_adamw's loss, 1e-3 of the scale). In the
    # default run they would test the host, not the code.
    "regression",
    "reproduce/balancing_adamw",
}


def kind_of(name: str) -> str:
    """``run``, ``compare`` or ``attention``: the entry point a config is written for."""
    cfg = tomllib.loads((SIMS / f"{name}.toml").read_text())
    if "attention" in cfg:
        return "attention"
    if "compare" in cfg or Path(name).name.startswith("compare_"):
        return "compare"
    return "run"


CONFIGS = sorted(
    str(p.relative_to(SIMS).with_suffix(""))
    for p in SIMS.rglob("*.toml")
    if p.name != "full.toml"  # a table of overrides for the other configs, not a config
)


def produce(name: str, tmp: Path, x64: bool = True) -> dict[str, pd.DataFrame]:
    """The tables of one config (float64 over it unless ``x64`` is false), by the public
    entry points."""
    over = X64 if x64 else {}
    kind = kind_of(name)
    if kind == "run":
        import rankflow

        df = rankflow.run(SIMS / f"{name}.toml", overrides=over)
        df.attrs = {}  # save.states' factors (df.attrs["states"]): the capture is the table
        return {"": df}
    if kind == "compare":
        from rankflow.compare import compare

        out = tmp / name.replace("/", "__")
        return dict(compare(SIMS / f"{name}.toml", out=out, overrides=over))
    from rankflow import attention

    cfg = attention.resolve(SIMS / f"{name}.toml", overrides=over)
    # a config that exports checkpoints writes them into its results directory
    folder = tmp / f"{name.replace('/', '__')}-{'f64' if x64 else 'f32'}"
    out = folder if cfg["train"]["export_every"] else None
    res = attention.run(cfg, out=out)
    return {"heads": res.heads, "loss": res.loss}


def path(name: str, table: str, x64: bool = True) -> Path:
    """The golden file of one table. The ten top-level float64 ones keep the names they
    were captured under (``run_<name>``, ``compare_<name>``, ``attention_balance_sgd``)."""
    kind = kind_of(name)
    if x64 and "/" not in name:
        stem = f"run_{name}" if kind == "run" else f"compare_{name[len('compare_') :]}"
    elif x64 and name == "attention/balance_sgd":
        stem = "attention_balance_sgd"
    else:
        stem = name.replace("/", "__")
    return (GOLDEN if x64 else GOLDEN_F32) / (stem + (f"__{table}" if table else "") + ".parquet")


def machine() -> str:
    """The CPU model and its widest vector ISA: what float32 tables depend on."""
    model, flags = platform.processor() or "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return f"{model} {platform.machine()} {isa}"


def produce_as_captured(name: str, tmp: Path, x64: bool) -> dict[str, pd.DataFrame]:
    """The tables of one config made as the capture made them: in a fresh process with
    every core (``rankflow.use_all_cores()``, the settings ``import rankflow`` applied
    before issue #27), so that a float32 table can be compared bit for bit."""
    import subprocess

    out = tmp / ("f64" if x64 else "f32")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--produce", name, "--out", str(out)]
    subprocess.run(cmd + ([] if x64 else ["--f32"]), check=True, cwd=ROOT)
    return {(p.stem if p.stem != "_" else ""): pd.read_parquet(p) for p in out.glob("*.parquet")}


if __name__ == "__main__" and "--produce" in sys.argv:
    import tempfile

    import rankflow

    rankflow.use_all_cores()
    name, out = (
        sys.argv[sys.argv.index("--produce") + 1],
        Path(sys.argv[sys.argv.index("--out") + 1]),
    )
    with tempfile.TemporaryDirectory() as tmp:
        for table, df in produce(name, Path(tmp), "--f32" not in sys.argv).items():
            df.reset_index(drop=True).to_parquet(out / f"{table or '_'}.parquet", index=False)
elif __name__ == "__main__":
    import tempfile

    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    precisions = (
        [False] if "--f32" in sys.argv else [True] if "--f64" in sys.argv else [True, False]
    )
    GOLDEN_F32.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for x64 in precisions:
            if not x64:
                (GOLDEN_F32 / "MACHINE.txt").write_text(machine() + "\n")
            for name in CONFIGS:
                if only not in name:
                    continue
                stem = path(name, "").stem
                if x64 and (any(GOLDEN.glob(stem + ".parquet")) or any(GOLDEN.glob(stem + "__*"))):
                    if "--all" not in sys.argv:
                        continue  # the pre-#13 captures stay as they are
                for table, df in produce(name, Path(tmp), x64).items():
                    df.reset_index(drop=True).to_parquet(path(name, table, x64), index=False)
                    print(
                        name, "f64" if x64 else "f32", table, df.shape, file=sys.stderr, flush=True
                    )
