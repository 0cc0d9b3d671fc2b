"""The checkpoints of a series and their steps: from a folder of revisions, a list file
of ``STEP PATH`` lines, a Hub repo id with revisions, or paths with ``--steps``; every
step checked (one per checkpoint, whole, strictly increasing) before anything is read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ._archive import ARCHIVES, archive_error, file_kind
from ._checkpoint import InspectError
from ._hub import is_repo_id, split_revision

__all__ = ["is_series", "names_and_steps", "series_sources"]

_WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")


def _step_of(name: str) -> int | None:
    """The step in a revision's name: ``step1000``, ``checkpoint-1000``,
    ``global_step1000``, ``iter_0001000``, ``1000`` (None: no step in it)."""
    m = re.fullmatch(r"(?:global_step|checkpoint|step|iter|revision|ckpt)?[-_]?(\d+)", name)
    return int(m[1]) if m else None


def series_sources(path: str | Path) -> tuple[list[str], list[int]]:
    """(checkpoints, steps) of a folder of revisions or a list file.

    A folder of revisions holds one sub-folder per checkpoint named by its step
    (``step1000``, ``checkpoint-1000``, ``global_step1000``, ``1000``); sub-folders
    without a step in the name are ignored. A list file (any other file) has one
    checkpoint per line, ``STEP PATH`` (whitespace or comma between; ``#`` comments;
    relative paths are relative to the list file; PATH may be a Hub repo id
    ``org/name@revision``).

    Examples:
        >>> import pathlib, tempfile
        >>> from rankflow.inspect import series_sources
        >>> with tempfile.TemporaryDirectory() as d:
        ...     for name in ("step1000", "checkpoint-500", "plots"):  # plots: no step
        ...         pathlib.Path(d, name).mkdir()
        ...     paths, steps = series_sources(d)
        >>> [pathlib.Path(p).name for p in paths], steps
        (['checkpoint-500', 'step1000'], [500, 1000])
    """
    p = Path(path)
    if p.is_dir():
        subs = [(_step_of(d.name), str(d)) for d in p.iterdir() if d.is_dir()]
        found = sorted((s, d) for s, d in subs if s is not None)
        if len(found) < 2:
            raise InspectError(
                f"{p}: a folder of revisions needs at least 2 sub-folders named by their "
                f"step (step1000, checkpoint-1000, …); found {len(found)}"
            )
        return [f for _, f in found], [s for s, _ in found]
    if not p.is_file():
        raise InspectError(f"{p}: no such file or directory")
    kind = file_kind(p)  # the parser below reads text only
    if kind in ARCHIVES:
        raise archive_error(p, kind, "a list file of `STEP PATH` lines")
    if kind != "text":
        raise InspectError(
            f"{p}: a {kind} file, not a list file of `STEP PATH` lines (a checkpoint is a "
            ".safetensors file, an index or a folder)"
        )
    paths, steps = [], []
    for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = re.split(r"[\s,]+", line, maxsplit=1)
        if len(parts) != 2 or not re.fullmatch(r"\d+", parts[0]):
            raise InspectError(f"{p}: line {n}: field 'step': expected `STEP PATH`, got {line!r}")
        target = parts[1].strip()
        here = p.parent / target
        paths.append(target if is_repo_id(target) and not here.exists() else str(here))
        steps.append(int(parts[0]))
    return paths, steps


def _check_steps(steps: Sequence[int], paths: Sequence[str], where: str) -> list[int]:
    """Steps as ints, one per checkpoint, strictly increasing, ≥ 0."""
    if len(steps) != len(paths):
        raise InspectError(
            f"{where}: {len(steps)} steps for {len(paths)} checkpoints; give one step each"
        )
    if len(paths) < 2:
        raise InspectError(f"{where}: a series needs at least 2 checkpoints, got {len(paths)}")
    out = []
    for s in steps:
        try:
            v = int(s)
        except (TypeError, ValueError):
            raise InspectError(f"{where}: step {s!r} is not a whole number") from None
        if v != float(s) or v < 0:
            raise InspectError(f"{where}: step {s!r} is not a whole number ≥ 0")
        out.append(v)
    for i in range(1, len(out)):
        if out[i] == out[i - 1]:
            raise InspectError(f"{where}: step {out[i]} appears twice ({paths[i - 1]}, {paths[i]})")
        if out[i] < out[i - 1]:
            raise InspectError(
                f"{where}: steps are not increasing: {out[i - 1]} ({paths[i - 1]}) before "
                f"{out[i]} ({paths[i]}); list the checkpoints in training order"
            )
    return out


def _expand(paths, revisions) -> list[str]:
    """One checkpoint name per revision: ``org/name@rev`` for a repo id (or a path's
    revision sub-folder is not a thing: revisions need a repo id)."""
    if not revisions:
        return [str(p) for p in paths]
    if len(paths) != 1 or not is_repo_id(str(paths[0])) or "@" in str(paths[0]):
        raise InspectError(
            "--revision: give one Hugging Face repo id (org/name) with the revisions, e.g. "
            "EleutherAI/pythia-70m --revision step1000 step2000"
        )
    return [f"{paths[0]}@{r}" for r in revisions]


def _is_source(path: str | Path) -> bool:
    """Whether ``path`` is a folder of revisions or a list file (not a checkpoint): a
    list file is text by its first bytes (:func:`~._archive.file_kind`), so that an
    archive or a binary file goes to the checkpoint reader, which reads or refuses it."""
    p = Path(path)
    if not p.exists():
        return False
    if p.is_dir():
        return not any(next(p.glob(g), None) for g in _WEIGHT_GLOBS)
    if p.name.endswith((".safetensors", ".bin", ".pt", ".pth", ".json")):
        return False
    try:
        return file_kind(p) == "text"
    except OSError:  # unreadable: the checkpoint reader says so in one line
        return False


def is_series(paths: Sequence[str | Path], steps=None, revisions=None) -> bool:
    """Whether these arguments name a series (several checkpoints, steps, several
    revisions, a folder of revisions or a list file) rather than one checkpoint.

    Examples:
        >>> from rankflow.inspect import is_series
        >>> is_series(["step0/model.safetensors", "step100/model.safetensors"])
        True
        >>> is_series(["org/model"], revisions=["step1000", "step2000"])
        True
        >>> is_series("model.safetensors")
        False
    """
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    return bool(
        len(paths) > 1 or steps or (revisions and len(revisions) > 1) or _is_source(paths[0])
    )


def names_and_steps(paths, steps, revisions) -> tuple[list[str], list[int]]:
    """The checkpoint names of a series and their checked steps."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    where = "--steps"
    if len(paths) == 1 and not revisions and _is_source(paths[0]):
        p = Path(paths[0])
        names, found = series_sources(p)
        return names, _check_steps(found if steps is None else steps, names, str(p))
    names = _expand(paths, revisions)
    if steps is None:
        found = [_step_of(split_revision(n)[1] or Path(n).name) for n in names]
        if None in found:
            bad = names[found.index(None)]
            raise InspectError(f"--steps: no step in the name of {bad}; give --steps S …")
        steps = found
    return names, _check_steps(steps, names, where)
