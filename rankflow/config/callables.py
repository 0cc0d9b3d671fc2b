"""Python callables named in a config (``"package.module:function"``) and their identity:
what a custom loss contributes to a results folder's identity."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from .fields import ConfigError

__all__ = ["UNHASHABLE_CODE", "callable_identity", "load_callable"]


def load_callable(spec: str | Callable) -> Callable:
    """``"package.module:function"`` → the function (a callable passes through)."""
    if callable(spec):
        return spec
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"problem.loss: expected 'module:function', got {spec!r}")
    try:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:
            # As `python -m` would: modules beside the working directory are importable.
            sys.path.insert(0, os.getcwd())
            try:
                mod = importlib.import_module(module)
            finally:
                sys.path.remove(os.getcwd())
        obj = getattr(mod, name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"problem.loss: cannot load {spec!r}: {e}") from None
    except SyntaxError as e:  # the module's own code, not rankflow's: say where
        raise ConfigError(
            f"problem.loss: cannot load {spec!r}: {e.filename}, line {e.lineno}: "
            f"SyntaxError: {e.msg}"
        ) from None
    except Exception as e:  # noqa: BLE001 - whatever the module raises when imported
        raise ConfigError(
            f"problem.loss: cannot load {spec!r}: importing {_raised_at(e, module)} raised "
            f"{type(e).__name__}: {e}"
        ) from None
    if not callable(obj):
        raise ConfigError(f"problem.loss: {spec!r} is not callable")
    return obj


def _raised_at(error: BaseException, module: str) -> str:
    """``FILE, line N`` of the innermost frame of ``error``'s traceback in the module's
    own file (else the innermost frame's), or the module's name."""
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename[:1] != "<"]
    path = module.replace(".", os.sep)
    own = [f for f in frames if f.filename.endswith((f"{path}.py", f"{path}{os.sep}__init__.py"))]
    frame = (own or frames or [None])[-1]
    return f"{frame.filename}, line {frame.lineno}" if frame else repr(module)


# How :func:`callable_identity` marks a callable whose code it cannot hash: a sweep of
# it is not resumable (its identity would not tell two such callables apart).
UNHASHABLE_CODE = "#code=unhashable"


def callable_identity(fn: Callable) -> str:
    """``module:qualname#code=HASH`` of a custom loss: HASH covers its bytecode,
    constants, names, defaults and closure values, recursively through nested code and
    functions, so two different lambdas differ (the globals it reads are not: the
    results folder's record, :func:`rankflow.config.usercode.code_record`, covers them).
    Where that cannot be computed (a builtin, a closure over an object of unknown
    content): ``module:qualname`` + :data:`UNHASHABLE_CODE`."""
    import hashlib
    import inspect
    import types

    import numpy as np

    digest = hashlib.sha256()

    def feed(obj: Any, depth: int = 0) -> None:
        if depth > 64:
            raise TypeError("nested too deeply")
        if isinstance(obj, types.CodeType):
            digest.update(obj.co_code)
            feed((obj.co_names, obj.co_consts), depth + 1)
        elif isinstance(obj, types.FunctionType):
            cells = tuple(c.cell_contents for c in obj.__closure__ or ())
            feed((obj.__code__, obj.__defaults__, obj.__kwdefaults__, cells), depth + 1)
        elif isinstance(obj, tuple | list | frozenset | dict):
            items = sorted(obj.items(), key=repr) if isinstance(obj, dict) else obj
            items = sorted(items, key=repr) if isinstance(obj, frozenset) else items
            digest.update(f"{type(obj).__name__}:{len(items)}".encode())
            for x in items:
                feed(x, depth + 1)
        elif obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
            digest.update(repr((type(obj).__name__, obj)).encode())
        elif isinstance(obj, np.ndarray | np.generic) or type(obj).__module__.startswith("jax"):
            arr = np.asarray(obj)
            if arr.dtype == object:
                raise TypeError(f"cannot hash a {type(obj).__name__}")
            digest.update(f"{arr.dtype}{arr.shape}".encode() + arr.tobytes())
        else:
            raise TypeError(f"cannot hash a {type(obj).__name__}")

    base = inspect.unwrap(fn)
    kind = type(base)
    name = f"{getattr(base, '__module__', kind.__module__)}:"
    name += getattr(base, "__qualname__", kind.__qualname__)
    try:
        if not isinstance(base, types.FunctionType):
            raise TypeError(f"{type(base).__name__} has no Python code")
        feed(base)
    except (TypeError, ValueError, RuntimeError):
        return name + UNHASHABLE_CODE
    return f"{name}#code={digest.hexdigest()[:16]}"
