"""The shape of the code, measured (issues #13, #27, #42): the packages' import layers with
no arrow running back up (the root package ``rankflow`` is the top layer: it may import
any, and no module imports it), no module using another's private names or another
package's private (underscore) modules, no import cycle, at most 3 modules over 500
lines, at most 2 functions over 80 lines, and at most 8 pairs of repeated code in
``duplicates --repo rankflow``. The three caps are ratchets: each is what the code meets
today, lowered when it improves and never raised; a failure names the offenders. Read
with ``ast`` from the source, so the checks see exactly what a reader sees."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "rankflow"
# Ratchets (lower them as the code improves, never raise them): at most MAX_LONG_MODULES
# modules over MAX_MODULE_LINES lines, MAX_LONG_FUNCTIONS functions over
# MAX_FUNCTION_LINES lines, and MAX_DUPLICATE_PAIRS pairs of repeated code.
MAX_MODULE_LINES = 500
MAX_LONG_MODULES = 3
MAX_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 2
MAX_DUPLICATE_PAIRS = 8

# The import layers, lowest first: a package may import from its own layer's packages
# only where listed in SIDEWAYS, and from any lower layer; never from a higher one.
# config: the config language; numerics: solve, schedules, batching, linalg; theory: the
# exact results; engine: plan, programs, executors, store; the families; the analyses
# that read tables or parameters; plots (draw tables; no simulation code, tested in
# tests/plots/test_plots.py); reproduce; the command line; the root package
# ``rankflow/__init__.py`` (:data:`ROOT`, the front door: it re-exports from any layer and
# no module may import it, lazily or not). ``rankflow.api`` is the front door over the
# families.
LAYERS = (
    ("config",),
    ("numerics",),
    ("theory",),
    ("engine",),
    ("core",),
    ("attention",),
    ("api", "compare", "inspect", "fitting"),
    ("track",),
    ("plots",),
    ("reproduce",),
    ("cli",),
    ("rankflow",),
)
ROOT = "rankflow"  # the root package's module name, and its layer's
# Arrows between packages of one layer that are part of the design (none today).
SIDEWAYS: set[tuple[str, str]] = set()
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute name a ``from … import`` reads from."""
    if not node.level:
        return node.module
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(
    module: str, source: str | None = None
) -> tuple[set[str], list[tuple[str, str]], dict[str, str]]:
    """(modules imported, (module, private name) imported from another module, aliases
    of imported rankflow modules), read from ``source`` (default: the module's file).
    ``ast.walk`` visits every node, so imports inside functions count as well."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    deps, private, aliases = set(), [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _target(module, node)
            if not src or not src.startswith("rankflow"):
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                if sub in MODULES:
                    deps.add(sub)
                    aliases[a.asname or a.name] = sub
                else:
                    deps.add(src)
                    if a.name.startswith("_") and not a.name.startswith("__") and src != module:
                        private.append((src, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rankflow"):
                    deps.add(a.name)
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            private.append((aliases[node.value.id], node.attr))
    # A module reading the re-exports of its own sub-package (``from . import x`` in a
    # child of rankflow.engine): not an arrow. A package's arrows to its children are kept,
    # and so is any arrow to the root, so that one up to it closes a cycle the cycle check
    # sees (``rankflow`` → ``api`` → ``core.family`` → ``engine`` → ``engine.execute`` → …).
    deps = {d for d in deps if d == ROOT or not module.startswith(d + ".")}
    return deps & set(MODULES), private, aliases


def test_no_module_uses_another_modules_private_names():
    uses = [(m, src, name) for m in MODULES for src, name in _imports(m)[1]]
    assert not uses, "private names used across modules: " + ", ".join(
        f"{m} uses {src}.{name}" for m, src, name in uses
    )


def test_no_import_cycle():
    graph = {m: _imports(m)[0] for m in MODULES}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " → ".join(path[path.index(d) :] + [d]))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m)


def _long_modules() -> list[str]:
    """The modules over ``MAX_MODULE_LINES`` lines, as ``name (lines)``."""
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    return [f"{m} ({n})" for m, n in sizes.items() if n > MAX_MODULE_LINES]


def _long_functions() -> list[str]:
    """The functions over ``MAX_FUNCTION_LINES`` lines, as ``module.name (lines)``."""
    out = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{m}.{node.name} ({n})")
    return out


def test_modules_and_functions_stay_short():
    """The ratchets on length: at most ``MAX_LONG_MODULES`` modules over
    ``MAX_MODULE_LINES`` lines and ``MAX_LONG_FUNCTIONS`` functions over
    ``MAX_FUNCTION_LINES``; a failure lists them all."""
    long_modules, long_functions = _long_modules(), _long_functions()
    assert len(long_modules) <= MAX_LONG_MODULES, (
        f"{len(long_modules)} modules over {MAX_MODULE_LINES} lines (at most "
        f"{MAX_LONG_MODULES}): {long_modules}"
    )
    assert len(long_functions) <= MAX_LONG_FUNCTIONS, (
        f"{len(long_functions)} functions over {MAX_FUNCTION_LINES} lines (at most "
        f"{MAX_LONG_FUNCTIONS}): {long_functions}"
    )


def test_the_length_ratchets_fail_with_the_offenders(monkeypatch):
    """The wrong versions: with the caps at 0 the check fails, naming a long module and
    a long function (with its length) of today's code."""
    modules, functions = _long_modules(), _long_functions()
    assert modules and functions, "no module or function over the line caps to test with"
    monkeypatch.setitem(globals(), "MAX_LONG_MODULES", 0)
    _fails(test_modules_and_functions_stay_short, "modules over", modules[0])
    monkeypatch.setitem(globals(), "MAX_LONG_MODULES", len(modules))
    monkeypatch.setitem(globals(), "MAX_LONG_FUNCTIONS", 0)
    _fails(test_modules_and_functions_stay_short, "functions over", functions[0])


def _package(module: str) -> str:
    """The layer package of a module: ``rankflow.core.program`` → ``core``; the root
    package ``rankflow`` → ``rankflow`` (:data:`ROOT`, the top layer)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def test_every_package_has_a_layer():
    missing = {_package(m) for m in MODULES} - set(RANK)
    assert not missing, f"packages without a layer in LAYERS: {sorted(missing)}"


def test_no_import_runs_back_up_the_layers():
    upward = []
    for m in MODULES:
        a = _package(m)
        for d in _imports(m)[0]:
            b = _package(d)
            if a == b or (a, b) in SIDEWAYS:
                continue
            if RANK[b] >= RANK[a]:
                upward.append(f"{m} → {d} ({a} may not import {b})")
    assert not upward, "imports against the layers:\n" + "\n".join(sorted(upward))


def test_the_layer_check_fails_on_an_arrow_up(monkeypatch):
    """The wrong version: numerics importing the engine is refused."""
    real = _imports

    def with_arrow_up(module):
        deps, private, aliases = real(module)
        if module == "rankflow.numerics.solve":
            deps = deps | {"rankflow.engine.plan"}
        return deps, private, aliases

    monkeypatch.setitem(globals(), "_imports", with_arrow_up)
    try:
        test_no_import_runs_back_up_the_layers()
    except AssertionError as e:
        assert "rankflow.numerics.solve → rankflow.engine.plan" in str(e)
    else:
        raise AssertionError("an import from numerics up to engine passed the layer check")


def _with_arrows(monkeypatch, arrows: dict[str, str]) -> None:
    """The wrong version of the code: ``_imports`` with each ``module → dep`` of ``arrows``
    added, as if the module imported it."""
    real = _imports

    def with_arrows(module, source=None):
        deps, private, aliases = real(module, source)
        return deps | ({arrows[module]} if module in arrows else set()), private, aliases

    monkeypatch.setitem(globals(), "_imports", with_arrows)


def _fails(check, *expected: str) -> None:
    """``check()`` raises an AssertionError naming each of ``expected``."""
    try:
        check()
    except AssertionError as e:
        assert all(x in str(e) for x in expected), str(e)
    else:
        raise AssertionError(f"{check.__name__} passed the wrong version: {expected}")


def test_no_module_imports_the_root_package_and_the_wrong_version_fails(monkeypatch):
    """The root is the top layer (the front door may import any layer: no exemption),
    and an arrow up to it is refused as an arrow up and seen as the cycle it closes
    (``rankflow`` → ``api`` → … → ``engine``): the writer's former ``from .. import
    __version__``."""
    assert _package("rankflow") == ROOT and RANK[ROOT] == len(LAYERS) - 1
    assert {"rankflow.api", "rankflow.engine.store"} <= _imports(ROOT)[0]
    _with_arrows(monkeypatch, {"rankflow.engine.writer": ROOT})
    _fails(test_no_import_runs_back_up_the_layers, "rankflow.engine.writer → rankflow (engine")
    _fails(test_no_import_cycle, "import cycle: ", "rankflow.engine.writer → rankflow")


def test_lazy_and_plain_imports_of_the_root_are_seen():
    """The arrow the layer check must find, as the writer had it before issue #42 (a
    lazy ``from .. import __version__`` inside a method), and ``import rankflow``
    inside a function: both are imports of the root."""
    writer = MODULES["rankflow.engine.writer"].read_text()
    assert ROOT not in _imports("rankflow.engine.writer")[0]
    lazy = writer + "\n\ndef _mark():\n    from .. import __version__\n    return __version__\n"
    plain = writer + "\n\ndef _mark():\n    import rankflow\n\n    return rankflow\n"
    for source in (lazy, plain):
        assert ROOT in _imports("rankflow.engine.writer", source)[0]


def _private_module_owner(dep: str) -> str | None:
    """The package that owns ``dep``'s first underscore-prefixed part
    (``rankflow.inspect._series`` → ``rankflow.inspect``), or None if it has none."""
    parts = dep.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_module_imports_another_packages_private_modules():
    """A private (underscore) module is imported only from inside its package: outside
    it, its names come from the package (``from ..inspect import permutation_test``), so
    that the package may split or rename its private modules freely."""
    uses = []
    for m in MODULES:
        for d in _imports(m)[0]:
            owner = _private_module_owner(d)
            if owner is not None and m != owner and not m.startswith(owner + "."):
                uses.append(f"{m} → {d}")
    assert not uses, "private modules imported from outside their package:\n" + "\n".join(
        sorted(uses)
    )


def test_the_private_module_check_fails_on_an_import_from_outside(monkeypatch):
    """The wrong version: reproduce importing ``rankflow.inspect._series`` is refused;
    the package's own ``__init__`` importing it is not."""
    assert _private_module_owner("rankflow.inspect._series") == "rankflow.inspect"
    assert _private_module_owner("rankflow.inspect") is None
    _with_arrows(
        monkeypatch,
        {
            "rankflow.reproduce.pretrained": "rankflow.inspect._series",
            "rankflow.inspect": "rankflow.inspect._series",
        },
    )
    _fails(
        test_no_module_imports_another_packages_private_modules,
        "rankflow.reproduce.pretrained → rankflow.inspect._series",
    )
    try:
        test_no_module_imports_another_packages_private_modules()
    except AssertionError as e:
        assert "rankflow.inspect →" not in str(e)


# The package whose imports from the rest of rankflow must be public names only: it shows
# how the library is used, so that it reads as a user's code would.
PUBLIC_ONLY = "rankflow.reproduce"


def _public_names(module: str) -> frozenset[str]:
    """The ``__all__`` of a rankflow module (imported: a package's ``__all__`` may be
    built from its modules' lists, as ``rankflow.plots`` builds it)."""
    import importlib

    return frozenset(getattr(importlib.import_module(module), "__all__", ()))


def _non_public_uses(module: str, source: str | None = None) -> list[str]:
    """What ``module`` (or ``source`` read as it) takes from rankflow outside its own
    package that is not public: an underscore name or module, or a name its owning
    module's ``__all__`` does not list, imported (``from ..core.program import x``) or
    read off an imported module (``plots.depth_figure``). A module imported by name is
    public unless a part of its path starts with an underscore."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    own = PUBLIC_ONLY + "."
    bad, aliases = [], {}

    def check(owner: str, name: str) -> None:
        sub = f"{owner}.{name}"
        if sub in MODULES:
            if _private_module_owner(sub) is not None:
                bad.append(sub)
        elif name.startswith("_") or name not in _public_names(owner):
            bad.append(sub)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _target(module, node)
            if not src or not src.startswith("rankflow") or (src + ".").startswith(own):
                continue
            for a in node.names:
                check(src, a.name)
                if f"{src}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{src}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rankflow") and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            check(aliases[node.value.id], node.attr)
    return sorted(set(bad))


def test_reproduce_uses_the_packages_public_names_only():
    """``rankflow.reproduce`` takes from the other packages only what their ``__all__``
    lists: no underscore name, no name a module keeps to itself."""
    uses = [
        f"{m} uses {name}"
        for m in MODULES
        if m == PUBLIC_ONLY or m.startswith(PUBLIC_ONLY + ".")
        for name in _non_public_uses(m)
    ]
    assert not uses, "names outside their module's __all__:\n" + "\n".join(uses)


def test_the_public_name_check_fails_on_private_and_unlisted_names():
    """The wrong versions: an underscore name imported, one read off an imported module,
    a private module, and a name the module imports for itself (``dataclasses`` in
    ``numerics.solve``, not in its ``__all__``) are each refused; reproduce's own
    private modules (``._common``) and the public names of the real module are not."""
    module = "rankflow.reproduce.noise"
    source = MODULES[module].read_text()
    assert _non_public_uses(module, source) == []
    wrong = {
        "from ..core.program import _something\n": ["rankflow.core.program._something"],
        "from ..core import program as simulate\nsimulate._run\n": ["rankflow.core.program._run"],
        "from ..inspect import _series\n": ["rankflow.inspect._series"],
        "from ..numerics.solve import dataclasses\n": ["rankflow.numerics.solve.dataclasses"],
        "from .. import plots\nplots.no_such_figure\n": ["rankflow.plots.no_such_figure"],
    }
    for extra, expected in wrong.items():
        assert _non_public_uses(module, source + extra) == expected, extra


def test_duplicates_stay_few():
    """``duplicates --repo rankflow`` (the tool library's, 6 lines): at most
    ``MAX_DUPLICATE_PAIRS`` pairs (a ratchet), a failure showing the tool's rows (each
    pair, most shared first). Skipped where the tool is not installed (CI machines of
    another kind)."""
    import shutil
    import subprocess

    tool = shutil.which("duplicates")
    if tool is None:
        import pytest

        pytest.skip("the duplicates tool is not on this machine")
    out = subprocess.run(
        [tool, "--repo", str(PKG), "--seconds", "60", "--most", "100"],
        capture_output=True,
        text=True,
    ).stdout
    first = out.splitlines()[0] if out else ""
    pairs = 0 if first.startswith("no duplicates") else int(first.split()[0])
    assert pairs <= MAX_DUPLICATE_PAIRS, f"at most {MAX_DUPLICATE_PAIRS} pairs:\n{out}"
