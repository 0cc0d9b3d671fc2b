"""Models by name: a Hugging Face repo id (``org/name``, optionally ``org/name@revision``)
resolved to its snapshot folder in the local Hugging Face cache.

Resolution goes through ``huggingface_hub`` (imported only here, only when a name is
given). Offline (``HF_HUB_OFFLINE=1``) only the cache is read, and a model or revision
that is not there is a one-line :class:`InspectError` naming the cache folder; online,
``snapshot_download`` fetches the weights (safetensors, else PyTorch ``.bin``) and
``config.json`` into the cache first. The cache folder and the offline switch are read
from the environment at every call (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``), not when ``huggingface_hub`` was imported, so that a
process can point them elsewhere after importing it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ._errors import InspectError

__all__ = ["hub_cache", "hub_offline", "is_repo_id", "locate", "resolve_repo", "split_revision"]

# org/name as the Hub spells them, with an optional @revision (a branch, tag or commit).
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")
_WEIGHTS = ["config.json", "*.safetensors", "*.safetensors.index.json"]
_TORCH_WEIGHTS = ["config.json", "pytorch_model*.bin", "pytorch_model.bin.index.json"]


def is_repo_id(name: str) -> bool:
    """Whether ``name`` reads as ``org/name`` or ``org/name@revision`` (not whether it
    exists)."""
    return bool(_REPO_ID.fullmatch(str(name)))


def split_revision(name: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` → ``("org/name", "rev")``; without ``@``, revision ``None``."""
    repo, _, rev = str(name).partition("@")
    return repo, rev or None


def hub_cache() -> Path:
    """The Hugging Face hub cache folder this process would use now.

    Examples:
        >>> import os
        >>> from unittest import mock
        >>> from rankflow.inspect import hub_cache
        >>> with mock.patch.dict(os.environ, {"HF_HUB_CACHE": "/data/hf-cache"}):
        ...     print(hub_cache().as_posix())
        /data/hf-cache
        >>> with mock.patch.dict(os.environ, {"HF_HUB_CACHE": "", "HF_HOME": "/data/hf"}):
        ...     print(hub_cache().as_posix())
        /data/hf/hub
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for the cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def locate(path: str | Path) -> Path:
    """What ``path`` names on disk: itself when it exists (or does not read as a repo
    id), else the cache snapshot of the Hub model ``org/name[@revision]`` it names."""
    if Path(path).exists() or not is_repo_id(str(path)):
        return Path(path)
    return resolve_repo(str(path))


def resolve_repo(name: str, revision: str | None = None) -> Path:
    """The local snapshot folder of the Hub model ``name`` (``org/name``, or
    ``org/name@revision``; ``revision`` overrides the one in the name; default ``main``).

    Raises :class:`InspectError` in one line: ``huggingface_hub`` missing, the model or
    revision not in the cache (offline, or the network unreachable), or unknown to the
    Hub.

    Examples:
        Offline, from a cache holding ``org/tiny`` (a ref naming a commit, and that
        commit's snapshot folder):

        >>> import os, pathlib, tempfile
        >>> from unittest import mock
        >>> from rankflow.inspect import resolve_repo
        >>> with tempfile.TemporaryDirectory() as cache:
        ...     repo = pathlib.Path(cache, "models--org--tiny")
        ...     (repo / "snapshots" / "c0ffee").mkdir(parents=True)
        ...     (repo / "refs").mkdir()
        ...     _ = (repo / "refs" / "main").write_text("c0ffee")
        ...     with mock.patch.dict(os.environ, {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}):
        ...         print(resolve_repo("org/tiny").relative_to(cache).as_posix())
        models--org--tiny/snapshots/c0ffee
        >>> with mock.patch.dict(os.environ, {"HF_HUB_CACHE": "/no/cache", "HF_HUB_OFFLINE": "1"}):
        ...     resolve_repo("org/tiny@v2")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        rankflow.inspect._errors.InspectError: org/tiny@v2: not in the Hugging Face cache ...
    """
    repo, rev = split_revision(name)
    rev = revision or rev or "main"
    where = f"{repo}@{rev}"
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise InspectError(
            f"{where}: no such file or directory; reading a Hugging Face model by name "
            "needs huggingface_hub (pip install huggingface_hub)"
        ) from None
    cache, offline = hub_cache(), hub_offline()
    try:
        folder = Path(_download(snapshot_download, repo, rev, cache, offline))
    except LocalEntryNotFoundError:
        how = "HF_HUB_OFFLINE is set" if offline else "and the Hub cannot be reached"
        raise InspectError(
            f"{where}: not in the Hugging Face cache {cache} ({how}); download it on a "
            "machine with a network (e.g. `hf download " + repo + f" --revision {rev}`) "
            "or point HF_HUB_CACHE at a cache that holds it"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InspectError(f"{where}: cannot get it from the Hugging Face Hub ({first})") from None
    return folder


def _download(snapshot_download, repo: str, rev: str, cache: Path, offline: bool) -> str:
    """The snapshot folder with safetensors weights if the repo has them, else its
    PyTorch ``.bin`` weights (online: only those files are fetched)."""
    kw = dict(revision=rev, cache_dir=cache, local_files_only=offline)
    folder = snapshot_download(repo, allow_patterns=_WEIGHTS, **kw)
    if not any(Path(folder).glob("*.safetensors")) and not offline:
        folder = snapshot_download(repo, allow_patterns=_TORCH_WEIGHTS, **kw)
    return folder
