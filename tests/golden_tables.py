"""The tables that the user-facing configs produce, captured before the one-engine
refactor (issue #13) and compared after it (``tests/test_golden.py``).

They are produced in float64 (``x64 = true`` over each config): float32 tables depend on
the CPU that computes them. XLA:CPU vectorises for the machine's widest vector ISA, so a
machine with AVX2 only rounds differently from one with AVX-512, and dynamics amplify the
difference where they are unstable (measured: code whose float32 tables matched the
captured ones on the capturing machine differs from them on an AVX2-only AMD EPYC by 16%
of the column's scale in ``sv_4`` of ``sims/regression.toml``, and by more than their
own scale in columns that are zero up to rounding). In float64 the same rounding
stays near 1e-10 of the scale. The tables in ``tests/golden/`` were produced by the
pre-refactor code (commit bba76bc, the capture of the float32 tables that preceded
them) with ``x64 = true``.

``python tests/golden_tables.py`` rewrites ``tests/golden/*.parquet`` from the current
code: run it only when a change of the tables is intended, and say so in the commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
RUN_CONFIGS = sorted(
    p.stem for p in (ROOT / "sims").glob("*.toml") if not p.stem.startswith("compare_")
)
COMPARE_CONFIGS = sorted(p.stem for p in (ROOT / "sims").glob("compare_*.toml"))
ATTENTION_CONFIGS = ("balance_sgd",)
X64 = {"x64": True}


def produce(kind: str, name: str, tmp: Path) -> dict[str, pd.DataFrame]:
    """The tables of one config in float64, by the public entry points."""
    if kind == "run":
        import rankflow

        return {"": rankflow.run(ROOT / "sims" / f"{name}.toml", overrides=X64)}
    if kind == "compare":
        from rankflow.compare import compare

        return dict(compare(ROOT / "sims" / f"{name}.toml", out=tmp / name, overrides=X64))
    from rankflow import attention

    cfg = attention.resolve(ROOT / "sims" / "attention" / f"{name}.toml", overrides=X64)
    res = attention.run(cfg)
    return {"heads": res.heads, "loss": res.loss}


def path(kind: str, name: str, table: str) -> Path:
    stem = name if kind != "compare" else name[len("compare_") :]
    return GOLDEN / (f"{kind}_{stem}" + (f"__{table}" if table else "") + ".parquet")


def jobs():
    yield from (("run", n) for n in RUN_CONFIGS)
    yield from (("compare", n) for n in COMPARE_CONFIGS)
    yield from (("attention", n) for n in ATTENTION_CONFIGS)


if __name__ == "__main__":
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for kind, name in jobs():
            for table, df in produce(kind, name, Path(tmp)).items():
                df.reset_index(drop=True).to_parquet(path(kind, name, table), index=False)
                print(kind, name, table, df.shape, file=sys.stderr)
