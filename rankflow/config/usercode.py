"""What a user's own code contributes to a results folder's identity.

A custom loss (``problem.loss``) is identified by the code that runs, not by its name:
:func:`code_record` hashes the function's compiled code (bytecode, constants, names,
nested code such as comprehensions and inner functions), its defaults and closure
values, and follows every name that code reads from its module's globals: each helper
function, class, module-level constant and user module (through the attributes the code
names on it, ``helpers.scale``) of the user's own files that it reaches, transitively (a
helper's globals are followed in the helper's module). Each object reached is one
*part*, named ``module.name``, with its file and hash, so a change is named: the part
that differs and its file (:func:`code_changes`). What is hashed is the code in memory,
the code that runs: an edit to a comment or to a function the loss never reaches is not
a change.

Library code — the standard library, site-packages, rankflow itself — is identified by
its qualified name only (the manifest records the packages' versions); values reached
through it (``jax.grad(helper)``'s closure, ``functools.partial`` arguments) are still
hashed. Not covered: names read dynamically (``getattr(mod, name)``, ``globals()[…]``,
``eval``), files the code reads (data loaded inside the loss, not at import), options of
library wrappers that live in C objects (``jax.jit``'s ``static_argnums``), environment
variables, and a user's package installed into site-packages (it counts as library
code). A value rankflow cannot hash (an object of a library class) makes the record
``unhashable``: the sweep runs, but cannot be resumed.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .callables import load_callable
from .fields import get_dotted, keys_of

__all__ = ["code_changes", "code_hash", "code_of", "code_record"]

# Guards against pathological code: more parts or deeper values than this are refused
# (the record says unhashable) rather than walked for ever.
MAX_PARTS = 2000
MAX_DEPTH = 48
# Names of a class's dict that are bookkeeping, not behaviour.
_CLASS_META = {
    "__dict__",
    "__weakref__",
    "__module__",
    "__doc__",
    "__qualname__",
    "__annotations__",
    "__dataclass_fields__",
    "__dataclass_params__",
    "__match_args__",
    "__slots__",
    "__orig_bases__",
    "__parameters__",
    "__firstlineno__",
    "__static_attributes__",
}


class Unhashable(TypeError):
    """A value whose content cannot be hashed; the message names it."""


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    roots.add(str(Path(__file__).resolve().parents[1]))  # rankflow itself
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


@functools.cache
def _is_library_file(path: str) -> bool:
    if path.startswith("<"):
        return path.startswith("<frozen")
    return (os.path.realpath(path) + os.sep).startswith(_library_roots())


def _module_file(name: str | None) -> str | None:
    module = sys.modules.get(name or "")
    return getattr(module, "__file__", None) if module is not None else None


def _file_of(obj: Any) -> str | None:
    """The file an object's code lives in: a function's code file (its module's where
    that is a pseudo-file such as ``<string>``), a module's or a class's module file."""
    if isinstance(obj, types.ModuleType):
        return getattr(obj, "__file__", None)
    if isinstance(obj, types.FunctionType):
        file = obj.__code__.co_filename
        if file.startswith("<") and not file.startswith("<frozen"):
            return _module_file(obj.__module__) or file
        return file
    return _module_file(getattr(obj, "__module__", None))


def _is_library(obj: Any) -> bool:
    """Whether ``obj`` (a function, class or module) is library code, identified by name."""
    if isinstance(obj, types.ModuleType):
        file = getattr(obj, "__file__", None)
        return file is None or _is_library_file(file)
    file = _file_of(obj)
    if file is None:  # a builtin, or defined interactively in __main__
        return getattr(obj, "__module__", None) != "__main__"
    return _is_library_file(file)


def _name_of(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", type(obj).__qualname__)
    return f"{module}.{qual}"


def _names_read(code: types.CodeType) -> list[str]:
    """The global and attribute names ``code`` and its nested code read, in order."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names_read(const)
    return list(dict.fromkeys(names))


class _Walk:
    """One record: the parts reached from a root, each hashed on its own."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[str, str]] = {}
        self.keys: dict[int, str] = {}  # id of a function or class → its part's key
        self.todo: list[tuple[str, Any]] = []
        self.keep: list[Any] = []  # objects whose ids are keys (kept alive)

    def run(self, root: Callable, name: str) -> str:
        key = self.ref(root, None if isinstance(root, types.FunctionType | type) else name)
        while self.todo:
            part, obj = self.todo.pop(0)
            if len(self.parts) >= MAX_PARTS:
                raise Unhashable(f"it reaches more than {MAX_PARTS} functions and values")
            digest = hashlib.sha256()
            self.feed_part(obj, digest)
            file = _file_of(obj) if _is_code(obj) else None  # a value: its global's module
            self.parts[part] = (file or self.file_hint(part), digest.hexdigest()[:16])
        return key

    def file_hint(self, name: str) -> str:
        return _module_file(name.rpartition(".")[0]) or "?"

    def ref(self, obj: Any, key: str | None = None) -> str:
        """The key of the part ``obj`` (queued on first sight)."""
        if isinstance(obj, types.FunctionType | type):
            if id(obj) in self.keys:
                return self.keys[id(obj)]
            key = key or _name_of(obj)
            self.keys[id(obj)] = key
            self.keep.append(obj)
        if key in self.parts or any(key == k for k, _ in self.todo):
            return key
        self.todo.append((key, obj))
        return key

    def feed_part(self, obj: Any, digest) -> None:
        if isinstance(obj, types.FunctionType):
            self.feed_function(obj, digest)
        elif isinstance(obj, type):
            self.feed_class(obj, digest)
        elif isinstance(obj, types.ModuleType):  # a user module reached as a value
            digest.update(Path(obj.__file__).read_bytes())
        else:
            self.feed(obj, digest, 0)

    def feed_function(self, fn: types.FunctionType, digest) -> None:
        self.feed_code(fn.__code__, digest)
        cells = tuple(c.cell_contents for c in fn.__closure__ or () if _has_contents(c))
        self.feed((fn.__defaults__, fn.__kwdefaults__, cells), digest, 0)
        names = _names_read(fn.__code__)
        module = fn.__module__ or "__main__"
        for name in names:
            if name not in fn.__globals__:
                continue  # a builtin, an attribute name, or not defined (yet)
            value = fn.__globals__[name]
            digest.update(f"global {name}=".encode())
            if isinstance(value, types.ModuleType) and not _is_library(value):
                # A user module: the attributes the code names on it (helpers.scale).
                digest.update(f"module {value.__name__}".encode())
                for attr in names:
                    if not attr.startswith("__") and hasattr(value, attr):
                        digest.update(f" .{attr}".encode())
                        self.value_ref(getattr(value, attr), f"{value.__name__}.{attr}", digest)
            else:
                self.value_ref(value, f"{module}.{name}", digest)

    def value_ref(self, value: Any, key: str, digest) -> None:
        """A global's value: library code by name, anything else as the part ``key``."""
        if _is_code(value):
            self.code_ref(value, digest, key)
        else:
            digest.update(f"part {self.ref(value, key)};".encode())

    def code_ref(self, obj: Any, digest, key: str | None = None) -> None:
        """A function, class or module: library code by its name (a library function's
        closure values hashed), the user's as a reference to its part."""
        if _is_library(obj):
            digest.update(f"lib {_name_of(obj)};".encode())
            if isinstance(obj, types.FunctionType):
                self.feed_closure(obj, digest)
        else:
            key = key or (obj.__name__ if isinstance(obj, types.ModuleType) else None)
            digest.update(f"part {self.ref(obj, key)};".encode())

    def feed_closure(self, fn: types.FunctionType, digest) -> None:
        cells = tuple(c.cell_contents for c in fn.__closure__ or () if _has_contents(c))
        self.feed((fn.__defaults__, fn.__kwdefaults__, cells), digest, 0)

    def feed_code(self, code: types.CodeType, digest) -> None:
        digest.update(code.co_code + getattr(code, "co_exceptiontable", b""))
        counts = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
        digest.update(repr((counts, code.co_flags, code.co_names)).encode())
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self.feed_code(const, digest)
            else:
                self.feed(const, digest, 0)

    def feed_class(self, cls: type, digest) -> None:
        digest.update(f"class {cls.__qualname__}".encode())
        for base in cls.__bases__:
            self.feed(base, digest, 1)
        for name, value in sorted(vars(cls).items()):
            if name in _CLASS_META:
                continue
            digest.update(f" {name}=".encode())
            self.feed(value, digest, 1)

    def feed(self, obj: Any, digest, depth: int) -> None:
        """A value inside a part: its content, or a reference to another part."""
        if depth > MAX_DEPTH:
            raise Unhashable("a value nested too deeply")
        d = depth + 1
        if obj is None or isinstance(obj, bool | int | float | complex | str | bytes):
            digest.update(repr((type(obj).__name__, obj)).encode())
        elif isinstance(obj, tuple | list | set | frozenset | dict):
            items = list(obj.items()) if isinstance(obj, dict) else list(obj)
            if isinstance(obj, set | frozenset | dict):
                items = sorted(items, key=repr)
            digest.update(f"{type(obj).__name__}:{len(items)}(".encode())
            for x in items:
                self.feed(x, digest, d)
            digest.update(b")")
        elif isinstance(obj, types.CodeType):
            self.feed_code(obj, digest)
        elif _is_code(obj):
            self.code_ref(obj, digest)
        else:
            self.feed_object(obj, digest, d)

    def feed_object(self, obj: Any, digest, d: int) -> None:
        """A value that is neither plain data nor code."""
        digest.update(f"<{_name_of(type(obj))}>".encode())
        if isinstance(obj, np.dtype):
            digest.update(str(obj).encode())
        elif isinstance(obj, functools.partial):
            self.feed((obj.func, obj.args, obj.keywords), digest, d)
        elif isinstance(obj, types.MethodType):
            self.feed((obj.__func__, obj.__self__), digest, d)
        elif isinstance(obj, staticmethod | classmethod):
            self.feed(obj.__func__, digest, d)
        elif isinstance(obj, property):
            self.feed((obj.fget, obj.fset, obj.fdel), digest, d)
        elif _is_array(obj):
            arr = _array_bytes(obj)
            digest.update(f"{arr.dtype}{arr.shape}".encode() + arr.tobytes())
        elif isinstance(obj, types.BuiltinFunctionType | np.ufunc):
            digest.update(_name_of(obj).encode())
        elif hasattr(obj, "__wrapped__") and callable(obj):  # jax.jit(f), lru_cache(f)
            self.feed(obj.__wrapped__, digest, d)
        elif not _is_library(type(obj)):  # an instance of a user's class
            self.feed(type(obj), digest, d)
            state = dict(getattr(obj, "__dict__", {}))
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    state[slot] = getattr(obj, slot)
            self.feed(state, digest, d)
        elif isinstance(obj, types.SimpleNamespace):
            self.feed(vars(obj), digest, d)
        elif hasattr(type(obj), "__members__") and hasattr(obj, "value"):  # an enum member
            digest.update(repr(obj).encode())
        else:
            raise Unhashable(f"a {_name_of(type(obj))} object, whose content cannot be hashed")


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _is_code(obj: Any) -> bool:
    return isinstance(obj, types.FunctionType | type | types.ModuleType)


def _is_array(obj: Any) -> bool:
    if isinstance(obj, np.ndarray | np.generic):
        return True
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, jax.Array)


def _array_bytes(obj: Any) -> np.ndarray:
    import jax

    if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
        obj = jax.random.key_data(obj)
    try:
        arr = np.asarray(obj)
    except Exception as e:  # noqa: BLE001 - a jax object that is not an array
        raise Unhashable(f"a {_name_of(type(obj))} object, whose content cannot be hashed") from e
    if arr.dtype == object:
        raise Unhashable(f"a {_name_of(type(obj))} holding Python objects")
    return arr


def code_record(fn: Callable, name: str | None = None) -> dict[str, Any]:
    """The identity of a user's callable ``fn`` (see the module docstring):
    ``{"function": name, "hash": H, "parts": {key: [file, hash]}}``, or ``{"function":
    name, "unhashable": why}`` where a value it reaches cannot be hashed. ``name``: how
    the config names it (default: ``module:qualname``)."""
    name = name or f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"
    walk = _Walk()
    try:
        root = walk.run(fn, name)
    except Unhashable as e:
        return {"function": name, "unhashable": str(e)}
    except (RecursionError, OSError, ValueError, TypeError) as e:
        return {"function": name, "unhashable": f"{type(e).__name__}: {e}"}
    parts = {k: list(v) for k, v in sorted(walk.parts.items())}
    digest = hashlib.sha256(repr((root, sorted(walk.parts.items()))).encode())
    return {"function": name, "hash": digest.hexdigest()[:16], "root": root, "parts": parts}


def code_of(cfg: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The :func:`code_record` of every callable a resolved config names (its fields
    marked ``callables``, their swept values included), keyed by how the config names
    each: ``"problem.loss = mylosses:loss"``. Empty when it names none."""
    out = {}
    for key in keys_of(schema):
        sec, _, field_name = key.rpartition(".")
        if not schema[sec][field_name].callables:
            continue
        values = [get_dotted(cfg, key), *cfg.get("sweep", {}).get(key, [])]
        for value in values:
            if value is None:
                continue
            fn = load_callable(value)
            shown = value if isinstance(value, str) else _name_of(inspect.unwrap(fn))
            out[f"{key} = {shown}"] = code_record(fn, shown)
    return out


def code_hash(code: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    """One hash of the records of :func:`code_of` (None when there are none): what
    every chunk of the sweep records."""
    if not code:
        return None
    summary = sorted((k, r.get("hash") or "unhashable") for k, r in code.items())
    return hashlib.sha256(repr(summary).encode()).hexdigest()[:16]


def code_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What differs between two :func:`code_of` results, as a phrase naming each
    callable, the parts that changed and their files; None when nothing did (or the
    callables themselves differ: the config's difference says so)."""
    said = []
    for key in sorted(old.keys() & new.keys()):
        a, b = _table(old[key]), _table(new[key])
        if a.get("hash") == b.get("hash") or "unhashable" in b:
            continue  # the same, or not resumable (said elsewhere)
        if "unhashable" in a:
            said.append(f"{key} (its earlier version could not be hashed)")
            continue
        pa, pb = _parts(a), _parts(b)
        changed = [k for k in pb if pa.get(k, pb[k])[1] != pb[k][1]]
        changed += [k for k in pb if k not in pa] + [k for k in pa if k not in pb]
        by_file: dict[str, list[str]] = {}
        for k in changed:
            by_file.setdefault(_shown_file((pb.get(k) or pa[k])[0]), []).append(k)
        where = "; ".join(f"{', '.join(ks)} in {f}" for f, ks in by_file.items())
        said.append(f"{key} (changed: {where or 'its code'})")
    return ", and ".join(said) or None


def _table(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _parts(record: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """A record's parts as ``{key: (file, hash)}``, malformed entries (an edited
    manifest) left out."""
    parts = _table(record.get("parts"))
    return {
        k: (str(v[0]), str(v[1])) for k, v in parts.items() if isinstance(v, list) and len(v) == 2
    }


def _shown_file(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
