"""The tables that the user-facing configs produce, captured before the one-engine
refactor (issue #13) and compared after it (``tests/test_golden.py``).

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


def produce(kind: str, name: str, tmp: Path) -> dict[str, pd.DataFrame]:
    """The tables of one config, by the public entry points."""
    if kind == "run":
        import rankflow

        return {"": rankflow.run(ROOT / "sims" / f"{name}.toml")}
    if kind == "compare":
        from rankflow.compare import compare

        return dict(compare(ROOT / "sims" / f"{name}.toml", out=tmp / name))
    from rankflow import attention

    res = attention.run(attention.resolve(ROOT / "sims" / "attention" / f"{name}.toml"))
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
