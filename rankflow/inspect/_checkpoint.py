"""Safetensors checkpoints on disk: which files, which tensors, read one layer at a time.

A checkpoint is a ``.safetensors`` file, a sharded index (``*.safetensors.index.json``)
or a folder holding either (or the same of PyTorch ``.bin`` files, read through torch by
:mod:`._torchbin`), with an optional ``config.json`` beside it. Opening one
reads the headers only (names, shapes, dtypes); tensor data is read by
:meth:`Checkpoint.read`, which opens the shard files anew on every call.
:meth:`Checkpoint.from_arrays` makes one of tensors already in memory (a PyTorch
``state_dict``, for ``rankflow.track``) and a config dict, read the same way.

Why reopen: ``safe_open`` memory-maps the whole file, and every page a read touches
stays resident (and counts in the process's RSS) until the map is closed. Reading all
layers through one open map would end with the whole file resident; reopening per layer
keeps the peak at about one layer's tensors, so checkpoints larger than memory work.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._archive import ARCHIVES, archive_error, file_kind
from ._errors import InspectError
from ._torchbin import TORCH_SUFFIXES, read_torch_header, read_torch_tensors

__all__ = ["Checkpoint", "InspectError", "open_checkpoint"]

# Dtypes read as weights; everything else (integer: quantized, F8: scaled) is refused.
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
INDEX_SUFFIX = ".safetensors.index.json"
TORCH_INDEX = "pytorch_model.bin.index.json"
# numpy's (and torch's, after "torch.") dtype names → the safetensors spelling.
_DTYPE_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


@dataclass(frozen=True)
class Checkpoint:
    """The headers of a safetensors checkpoint.

    ``path``: what the user named; ``files``: the safetensors files; ``where``: tensor
    name → its file; ``shapes``/``dtypes``: from the headers (dtype as safetensors
    spells it, e.g. ``"BF16"``); ``config``: the parsed ``config.json`` or ``None``.

    Examples:
        A one-layer GPT-2 checkpoint (``Conv1D`` weights stored ``(in, out)``), its
        headers, then one tensor read:

        >>> import tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import open_checkpoint
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({"h.0.attn.c_attn.weight": np.ones((8, 24), np.float32),
        ...                "h.0.attn.c_proj.weight": np.eye(8)}, d + "/model.safetensors")
        ...     ckpt = open_checkpoint(d)
        ...     W_O = ckpt.read(["h.0.attn.c_proj.weight"])["h.0.attn.c_proj.weight"]
        >>> ckpt.names
        ['h.0.attn.c_attn.weight', 'h.0.attn.c_proj.weight']
        >>> ckpt.shapes["h.0.attn.c_attn.weight"], ckpt.dtypes["h.0.attn.c_attn.weight"]
        ((8, 24), 'F32')
        >>> ckpt.config is None, W_O.dtype, float(W_O.trace())
        (True, dtype('float64'), 8.0)
    """

    path: Path
    files: tuple[Path, ...]
    where: dict[str, Path]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    config: dict | None
    config_path: Path | None

    @classmethod
    def from_arrays(
        cls,
        tensors: Mapping[str, object],
        config: dict | None = None,
        *,
        name: str = "state_dict",
        convert: Callable[[object], np.ndarray] = np.asarray,
    ) -> Checkpoint:
        """A checkpoint of tensors in memory: ``tensors`` maps name → array (anything
        with ``shape`` and ``dtype``; other values, e.g. ``_extra_state``, are left out),
        ``config`` is what ``config.json`` would hold. :meth:`read` returns
        ``convert(tensor)`` as a numpy copy; errors name ``name`` (the file's place) and
        ``config``.

        Examples:
            The GPT-2 layer of the class example, from a dict: the same headers.

            >>> import numpy as np
            >>> from rankflow.inspect import Checkpoint
            >>> tensors = {"h.0.attn.c_attn.weight": np.ones((8, 24), np.float32),
            ...            "h.0.attn.c_proj.weight": np.eye(8)}
            >>> ckpt = Checkpoint.from_arrays(tensors)
            >>> ckpt.names, ckpt.dtypes["h.0.attn.c_attn.weight"], ckpt.files
            (['h.0.attn.c_attn.weight', 'h.0.attn.c_proj.weight'], 'F32', ())
            >>> float(ckpt.read(["h.0.attn.c_proj.weight"])["h.0.attn.c_proj.weight"].trace())
            8.0
        """
        arrays = {k: v for k, v in tensors.items() if hasattr(v, "shape") and hasattr(v, "dtype")}
        dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in arrays.items()}
        return _InMemory(
            path=Path(name),
            files=(),
            where=dict.fromkeys(arrays, Path(name)),
            shapes={k: tuple(int(d) for d in v.shape) for k, v in arrays.items()},
            dtypes={k: _DTYPE_NAMES.get(d, d) for k, d in dtypes.items()},
            config=None if config is None else dict(config),
            config_path=None if config is None else Path("config"),
            arrays=arrays,
            convert=convert,
        )

    @property
    def names(self) -> list[str]:
        return sorted(self.where)

    @property
    def nbytes(self) -> int:
        """Total size of the safetensors files on disk."""
        return sum(f.stat().st_size for f in self.files)

    def describe(self, name: str) -> str:
        """``'NAME' in FILE`` for error messages."""
        return f"tensor {name!r} in {self.where.get(name, self.path)}"

    def _check_dtypes(self, names: Iterable[str]) -> None:
        for name in names:
            if self.dtypes[name] not in FLOAT_DTYPES:
                raise InspectError(
                    f"{self.describe(name)} has dtype {self.dtypes[name]}: only "
                    f"{', '.join(FLOAT_DTYPES)} weights can be inspected "
                    "(quantized or FP8 checkpoints are not supported)"
                )

    def read(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The named tensors as numpy arrays in their stored dtype (copies), opening
        each file they live in once, and closing it before returning."""
        from safetensors import SafetensorError, safe_open

        by_file: dict[Path, list[str]] = {}
        for name in names:
            if name not in self.where:
                raise InspectError(f"{self.path}: no tensor {name!r}")
            by_file.setdefault(self.where[name], []).append(name)
        out = {}
        for file, group in by_file.items():
            if file.suffix in TORCH_SUFFIXES:
                self._check_dtypes(group)
                out.update(read_torch_tensors(file, group))
                continue
            try:
                with safe_open(str(file), framework="numpy") as f:
                    for name in group:
                        dtype = self.dtypes[name]
                        if dtype not in FLOAT_DTYPES:
                            raise InspectError(
                                f"{self.describe(name)} has dtype {dtype}: only "
                                f"{', '.join(FLOAT_DTYPES)} weights can be inspected "
                                "(quantized or FP8 checkpoints are not supported)"
                            )
                        try:
                            out[name] = f.get_tensor(name)
                        except (SafetensorError, OSError, ValueError, TypeError) as e:
                            raise InspectError(
                                f"{self.describe(name)}: cannot read it ({e})"
                            ) from e
            except (SafetensorError, OSError) as e:
                raise InspectError(f"{file}: cannot read safetensors file ({e})") from e
        return self._finite(out)

    def _finite(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``out``, after refusing non-finite weights (a damaged or diverged model)."""
        bad = [
            f"{name!r} has {n} of {out[name].size}"
            for name in sorted(out)
            if (n := _non_finite(out[name]))
        ]
        if bad:
            raise InspectError(
                f"{self.path}: non-finite (NaN or inf) weights: {'; '.join(bad)}; "
                "a damaged or diverged checkpoint cannot be inspected"
            )
        return out


@dataclass(frozen=True)
class _InMemory(Checkpoint):
    """:meth:`Checkpoint.from_arrays`: the tensors themselves instead of files."""

    arrays: Mapping[str, object] = field(default_factory=dict, repr=False, compare=False)
    convert: Callable[[object], np.ndarray] = field(default=np.asarray, repr=False, compare=False)

    @property
    def nbytes(self) -> int:
        """Total size of the tensors in memory."""
        return sum(int(getattr(v, "nbytes", 0)) for v in self.arrays.values())

    def read(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The named tensors as numpy copies (``convert``, then copied), checked as
        :meth:`Checkpoint.read` checks those of a file."""
        names = list(names)
        for name in names:
            if name not in self.arrays:
                raise InspectError(f"{self.path}: no tensor {name!r}")
        self._check_dtypes(names)
        return self._finite({n: np.array(self.convert(self.arrays[n])) for n in names})


def _non_finite(x: np.ndarray) -> int:
    """How many entries of a weight tensor are NaN or ±inf."""
    try:
        return int(x.size - np.count_nonzero(np.isfinite(x)))
    except TypeError:  # a dtype numpy cannot test (bfloat16 without ml_dtypes)
        return int(x.size - np.count_nonzero(np.isfinite(x.astype(np.float32))))


def _read_header(file: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    if not file.exists():
        raise InspectError(f"{file}: no such file")
    if not file.is_file():
        raise InspectError(f"{file}: not a file")
    if file.suffix in TORCH_SUFFIXES:
        return read_torch_header(file)
    try:
        with safe_open(str(file), framework="numpy") as f:
            shapes, dtypes = {}, {}
            for name in f.keys():
                s = f.get_slice(name)
                shapes[name] = tuple(int(d) for d in s.get_shape())
                dtypes[name] = str(s.get_dtype())
    except SafetensorError as e:
        kind = file_kind(file)
        if kind in ARCHIVES:  # e.g. a zip renamed .safetensors
            raise archive_error(file, kind, "a safetensors file") from e
        raise InspectError(
            f"{file}: not a readable safetensors file ({e}); truncated or corrupt?"
        ) from e
    except OSError as e:
        raise InspectError(f"{file}: cannot open it ({e})") from e
    return shapes, dtypes


def _read_json(file: Path, what: str) -> dict:
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InspectError(f"{file}: cannot read {what} ({e})") from e
    if not isinstance(data, dict):
        raise InspectError(f"{file}: {what} is not a JSON object")
    return data


def _resolve(path: Path) -> tuple[Path | None, Path | None, Path | None]:
    """(single file, index file, config.json) for what the user named."""
    if not path.exists():
        raise InspectError(f"{path}: no such file or directory")
    if path.is_dir():
        indexes = sorted(path.glob("*" + INDEX_SUFFIX))
        singles = sorted(path.glob("*.safetensors"))
        config = path / "config.json"
        config = config if config.is_file() else None
        if len(indexes) == 1:
            return None, indexes[0], config
        if len(indexes) > 1:
            names = ", ".join(p.name for p in indexes)
            raise InspectError(f"{path}: several sharded indexes ({names}); name one of them")
        if (path / "model.safetensors").is_file():
            return path / "model.safetensors", None, config
        if len(singles) == 1:
            return singles[0], None, config
        if len(singles) > 1:
            names = ", ".join(p.name for p in singles[:6])
            raise InspectError(
                f"{path}: several .safetensors files ({names}) and no "
                f"model{INDEX_SUFFIX}; name the file to inspect"
            )
        # PyTorch weights only where there are no safetensors (HF ships both alike).
        if (path / TORCH_INDEX).is_file():
            return None, path / TORCH_INDEX, config
        if (path / "pytorch_model.bin").is_file():
            return path / "pytorch_model.bin", None, config
        raise InspectError(
            f"{path}: no .safetensors file, model{INDEX_SUFFIX}, pytorch_model.bin or "
            f"{TORCH_INDEX} in this folder"
        )
    config = path.parent / "config.json"
    config = config if config.is_file() else None
    if path.name.endswith(INDEX_SUFFIX) or path.name.endswith(".bin.index.json"):
        return None, path, config
    if path.suffix == ".safetensors" or path.suffix in TORCH_SUFFIXES:
        return path, None, config
    kind = file_kind(path)
    if kind == "safetensors":  # by its header, whatever its name
        return path, None, config
    if kind in ARCHIVES:
        raise archive_error(path, kind)
    raise InspectError(
        f"{path}: not a checkpoint (expected a .safetensors or PyTorch .bin/.pt file, a "
        f"*{INDEX_SUFFIX} or *.bin.index.json index, or a folder holding one)"
    )


def open_checkpoint(path: str | Path) -> Checkpoint:
    """Read the headers (and ``config.json``) of the checkpoint at ``path``.

    Raises :class:`InspectError` for a missing path, a truncated or corrupt file, an
    index naming missing shards or tensors, or an unreadable ``config.json``.

    Examples:
        A folder with ``model.safetensors`` and the ``config.json`` of GPT-2's naming:

        >>> import json, pathlib, tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from rankflow.inspect import open_checkpoint
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_file({"h.0.attn.c_attn.weight": np.zeros((8, 24)),
        ...                "h.0.attn.c_proj.weight": np.zeros((8, 8))}, d + "/model.safetensors")
        ...     cfg = {"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1}
        ...     _ = pathlib.Path(d, "config.json").write_text(json.dumps(cfg))
        ...     ckpt = open_checkpoint(d)
        >>> [f.name for f in ckpt.files], ckpt.config["n_head"], len(ckpt.names)
        (['model.safetensors'], 2, 2)
        >>> open_checkpoint("no/such/model.safetensors")
        Traceback (most recent call last):
        rankflow.inspect._errors.InspectError: no/such/model.safetensors: no such file or directory
    """
    path = Path(path)
    single, index, config_path = _resolve(path)
    where: dict[str, Path] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    if single is not None:
        files = (single,)
        shapes, dtypes = _read_header(single)
        where = dict.fromkeys(shapes, single)
    else:
        data = _read_json(index, "the sharded-checkpoint index")
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InspectError(f"{index}: no 'weight_map' of tensor name → shard file")
        files = tuple(sorted({index.parent / str(f) for f in weight_map.values()}))
        headers = {}
        for file in files:
            if not file.is_file():
                held = next(n for n, f in weight_map.items() if index.parent / str(f) == file)
                raise InspectError(
                    f"{index}: shard {file.name} (holding e.g. {held!r}) does not exist"
                )
            headers[file] = _read_header(file)
        for name, f in weight_map.items():
            file = index.parent / str(f)
            s, d = headers[file]
            if name not in s:
                raise InspectError(f"{index}: tensor {name!r} is not in its shard {file}")
            where[name], shapes[name], dtypes[name] = file, s[name], d[name]
    config = _read_json(config_path, "config.json") if config_path is not None else None
    return Checkpoint(path, files, where, shapes, dtypes, config, config_path)
