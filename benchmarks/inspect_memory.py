"""Peak memory of `rankflow inspect` on a checkpoint of about 1 GB.

    python -m benchmarks.inspect_memory                 # ~1 GiB float32, BERT-shaped
    python -m benchmarks.inspect_memory --gib 4 --dtype float16
    python -m benchmarks.inspect_memory --quick         # ~100 MiB, a smoke run

Writes a synthetic BERT-shaped checkpoint (random attention weights only, so that the
inspection reads every byte of it; width D, 64-dimensional heads) with the real
safetensors writer into a temporary folder under /tmp, then runs `rankflow inspect` on
it in a fresh process (figures included), which reports its own peak resident set
size (VmHWM). The same command on a 2-layer checkpoint of the same
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


def write_checkpoint(folder: Path, layers: int, d_model: int, dtype: str) -> int:
    """BERT-shaped attention weights (q, k, v, output), config.json; returns bytes."""
    rng = np.random.default_rng(0)
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


def peak_rss(checkpoint: Path, out: Path) -> tuple[int, float]:
    """Peak RSS in bytes and wall time of `rankflow inspect CHECKPOINT --out OUT`."""
    args = ["inspect", str(checkpoint), "--out", str(out), "--quiet"]
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
    ap.add_argument("--gib", type=float, default=1.0, help="checkpoint size (default 1)")
    ap.add_argument("--d-model", type=int, default=1024, help="width D (default 1024)")
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    ap.add_argument("--quick", action="store_true", help="~100 MiB instead")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint folder")
    args = ap.parse_args(argv)
    gib = 0.1 if args.quick else args.gib
    D = args.d_model
    per_layer = 4 * D * D * np.dtype(args.dtype).itemsize
    layers = max(2, round(gib * 2**30 / per_layer))

    root = Path(tempfile.mkdtemp(prefix="rankflow-inspect-memory-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        size = write_checkpoint(root / "big", layers, D, args.dtype)
        small = write_checkpoint(root / "small", 2, D, args.dtype)
        print(f"wrote {layers} layers, D = {D}, {args.dtype}: {size / 2**20:.0f} MiB "
              f"in {time.perf_counter() - t0:.1f} s → {root}")  # fmt: skip
        base, _ = peak_rss(root / "small", root / "out-small")
        peak, wall = peak_rss(root / "big", root / "out-big")
        print(f"baseline (2 layers, {small / 2**20:.0f} MiB): peak RSS {base / 2**20:.0f} MiB")
        print(f"checkpoint {size / 2**20:.0f} MiB: peak RSS {peak / 2**20:.0f} MiB "
              f"= {peak / size:.2f} × the file, {(peak - base) / 2**20:.0f} MiB above the "
              f"baseline; {wall:.1f} s")  # fmt: skip
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
