"""The shape of the code, measured (issues #13, #27): the packages' import layers with no
arrow running back up, no module using another's private names, no import cycle, no
module over 600 lines, at most 4 functions over 80 lines, and at most 12 pairs of
repeated code in ``duplicates --repo rankflow``. Read with ``ast`` from the source, so
the checks see exactly what a reader sees."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "rankflow"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 4
MAX_DUPLICATE_PAIRS = 12

# The import layers, lowest first: a package may import from its own layer's packages
# only where listed in SIDEWAYS, and from any lower layer; never from a higher one.
# config: the config language; numerics: solve, schedules, batching, linalg; theory: the
# exact results; engine: plan, programs, executors, store; the families; the analyses
# that read tables or parameters; plots (draw tables; no simulation code, tested in
# tests/plots/test_plots.py); reproduce; the command line. ``rankflow/__init__.py`` and
# ``rankflow.api`` are the front door over the families.
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
)
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


def _imports(module: str) -> tuple[set[str], list[tuple[str, str]], dict[str, str]]:
    """(modules imported, (module, private name) imported from another module, aliases
    of imported rankflow modules)."""
    tree = ast.parse(MODULES[module].read_text())
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
    if MODULES[module].name == "__init__.py":  # a package re-exporting its children
        deps = {d for d in deps if not d.startswith(module + ".")}
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


def test_modules_and_functions_stay_short():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    long_modules = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    long_functions = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long_functions.append(f"{m}.{node.name} ({n})")
    assert len(long_functions) <= MAX_LONG_FUNCTIONS, (
        f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
    )


def _package(module: str) -> str:
    """The layer package of a module: ``rankflow.core.program`` → ``core``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_layer():
    missing = {_package(m) for m in MODULES} - set(RANK) - {""}
    assert not missing, f"packages without a layer in LAYERS: {sorted(missing)}"


def test_no_import_runs_back_up_the_layers():
    upward = []
    for m in MODULES:
        a = _package(m)
        if not a:  # rankflow/__init__.py: the front door re-exports from any layer
            continue
        for d in _imports(m)[0]:
            b = _package(d)
            if not b or a == b or (a, b) in SIDEWAYS:
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


def test_duplicates_stay_few():
    """``duplicates --repo rankflow`` (the tool library's, 6 lines): at most
    ``MAX_DUPLICATE_PAIRS`` pairs. Skipped where the tool is not installed (CI machines
    of another kind)."""
    import shutil
    import subprocess

    tool = shutil.which("duplicates")
    if tool is None:
        import pytest

        pytest.skip("the duplicates tool is not on this machine")
    out = subprocess.run(
        [tool, "--repo", str(PKG), "--seconds", "60"], capture_output=True, text=True
    ).stdout
    first = out.splitlines()[0] if out else ""
    pairs = 0 if first.startswith("no duplicates") else int(first.split()[0])
    assert pairs <= MAX_DUPLICATE_PAIRS, out
