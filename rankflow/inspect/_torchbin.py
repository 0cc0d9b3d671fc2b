"""PyTorch ``.bin``/``.pt`` checkpoints (``torch.save`` of a state dict) read through
torch, when it is installed, as numpy arrays per tensor.

torch is optional (the extra ``rankflow[torch]``): without it a ``.bin`` checkpoint is a
one-line :class:`InspectError` naming the file and the extra. Files are loaded with
``weights_only=True`` (no arbitrary code from a pickle) and memory-mapped
(``mmap=True``, zip-format files, torch ≥ 2.1), so a header read or one layer's read
touches only the pages it needs, as for safetensors; the map is dropped after each call.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ._errors import InspectError

__all__ = ["TORCH_SUFFIXES", "read_torch_header", "read_torch_tensors"]

TORCH_SUFFIXES = (".bin", ".pt", ".pth")
# torch dtype name → the safetensors spelling the rest of the package uses.
_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _load(file: Path) -> dict:
    """The state dict of ``file``, memory-mapped where the format allows."""
    try:
        import torch
    except ImportError:
        raise InspectError(
            f"{file}: a PyTorch checkpoint; reading it needs torch, which is not installed "
            "(pip install 'rankflow[torch]', or convert the checkpoint to safetensors)"
        ) from None
    try:
        try:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) format: cannot be memory-mapped
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds on a corrupt or unsafe pickle
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InspectError(f"{file}: cannot read PyTorch checkpoint ({first})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise InspectError(f"{file}: not a state dict of tensors ({type(state).__name__})")
    return {k: v for k, v in state.items() if hasattr(v, "shape") and hasattr(v, "dtype")}


def read_torch_header(file: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """(name → shape, name → dtype in safetensors spelling, e.g. ``"BF16"``) of a
    PyTorch checkpoint; non-float dtypes keep torch's name (``"int64"``)."""
    state = _load(file)
    shapes = {k: tuple(int(d) for d in v.shape) for k, v in state.items()}
    names = {k: str(v.dtype).removeprefix("torch.") for k, v in state.items()}
    dtypes = {k: _DTYPES.get(n, n) for k, n in names.items()}
    return shapes, dtypes


def read_torch_tensors(file: Path, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The named tensors of a PyTorch checkpoint as numpy copies (bfloat16, which numpy
    lacks, as float32: exact)."""
    state = _load(file)
    out = {}
    for name in names:
        if name not in state:
            raise InspectError(f"{file}: no tensor {name!r}")
        t = state[name].detach()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        out[name] = t.numpy().copy()
    del state
    return out
