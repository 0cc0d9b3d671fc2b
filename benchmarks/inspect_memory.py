"""Peak memory of `rankflow inspect` on a checkpoint of about 1 GB.

    python -m benchmarks.inspect_memory                 # ~1 GiB float32, BERT-shaped
    python -m benchmarks.inspect_memory --gib 4 --dtype float16
    python -m benchmarks.inspect_memory --quick         # ~100 MiB, a smoke run
    python -m benchmarks.inspect_memory --series 4      # 1 GiB in 4 checkpoints, a series

Writes a synthetic BERT-shaped checkpoint (random attention weights only, so that the
inspection reads every byte of it; width D, 64-dimensional heads) with the real
safetensors writer into a temporary folder under /tmp, then runs `rankflow inspect` on
it in a fresh process (figures included), which reports its own peak resident set
size (VmHWM). With ``--series N`` the same size is split into N checkpoints
(different seeds) inspected as one series (``rankflow inspect CK... --steps ...``). The
same command on a 2-layer checkpoint (series: of N 2-layer checkpoints) of the same
width gives the baseline: the interpreter and rankflow's imports (jax among them).
Prints file size, peak RSS, their ratio, and the growth over the baseline. The folder
is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_checkpoint(folder: Path, layers: int, d_model: int, dtype: str, seed: int = 0) -> int:
    """BERT-shaped attention weights (q, k, v, output), config.json; returns bytes."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    tensors = {}
    for i in range(layers):
        p = f"bert.encoder.layer.{i}.attention."
        for stem in ("self.query", "self.key", "self.value", "output.dense"):
            w = rng.standard_normal((d_model, d_model), dtype=np.float32)
            tensors[f"{p}{stem}.weight"] = w.astype(dtype, copy=False)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = {
        "model_type": "bert",
        "hidden_size": d_model,
        "num_attention_heads": d_model // 64,
        "num_hidden_layers": layers,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    return (folder / "model.safetensors").stat().st_size


# `rankflow inspect ARGS`, then the process's own high-water mark (VmHWM). The parent's
# wait4 ru_maxrss would not do: Linux carries the parent's peak into the child at fork.
_RUN = """
import sys
from rankflow.cli import main
rc = main(sys.argv[1:])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print("VmHWM", int(hwm) * 1024, file=sys.stderr)
sys.exit(rc)
"""


def peak_rss(checkpoints: list[Path], out: Path) -> tuple[int, float]:
    """Peak RSS in bytes and wall time of `rankflow inspect CHECKPOINT... --out OUT`
    (several: a series, steps 0, 1, …)."""
    args = ["inspect", *map(str, checkpoints), "--out", str(out), "--quiet"]
    if len(checkpoints) > 1:
        args += ["--steps", *map(str, range(len(checkpoints)))]
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", _RUN, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if res.returncode != 0:
        raise SystemExit(f"rankflow {' '.join(args)} failed:\n{res.stderr.decode()}")
    line = [ln for ln in res.stderr.decode().splitlines() if ln.startswith("VmHWM")][-1]
    return int(line.split()[1]), time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="total size (default 1)")
    ap.add_argument("--d-model", type=int, default=1024, help="width D (default 1024)")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    ap.add_argument("--series", type=int, default=1, metavar="N", help="N checkpoints")
    ap.add_argument("--quick", action="store_true", help="~100 MiB instead")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint folder")
    args = ap.parse_args(argv)
    gib = 0.1 if args.quick else args.gib
    D, n = args.d_model, args.series
    per_layer = 4 * D * D * np.dtype(args.dtype).itemsize
    layers = max(2, round(gib * 2**30 / per_layer / n))

    root = Path(tempfile.mkdtemp(prefix="rankflow-inspect-memory-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        big = [root / f"big{i}" for i in range(n)]
        small = [root / f"small{i}" for i in range(n)]
        size = sum(write_checkpoint(f, layers, D, args.dtype, i) for i, f in enumerate(big))
        small_size = sum(write_checkpoint(f, 2, D, args.dtype, i) for i, f in enumerate(small))
        print(f"wrote {n} × {layers} layers, D = {D}, {args.dtype}: {size / 2**20:.0f} MiB "
              f"in {time.perf_counter() - t0:.1f} s → {root}")  # fmt: skip
        base, _ = peak_rss(small, root / "out-small")
        peak, wall = peak_rss(big, root / "out-big")
        print(f"baseline ({n} × 2 layers, {small_size / 2**20:.0f} MiB): peak RSS "
              f"{base / 2**20:.0f} MiB")  # fmt: skip
        print(f"{n} checkpoint(s), {size / 2**20:.0f} MiB: peak RSS {peak / 2**20:.0f} MiB "
              f"= {peak / size:.2f} × the files, {(peak - base) / 2**20:.0f} MiB above the "
              f"baseline; {wall:.1f} s")  # fmt: skip
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
