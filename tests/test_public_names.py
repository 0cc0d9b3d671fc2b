"""The import surface: after ``import rankflow`` every public subpackage and every
``rankflow.…`` name the documentation uses is reachable as an attribute, the heavy
subpackages are imported only when first used, and nothing else is needed."""

import re
import subprocess
import sys
import textwrap

from tests.helpers import ROOT

# A dotted name the documents use, not part of a path or a file name (``.rankflow.lock``);
# lines that map an old name to a new one (``old`` → ``new``) name removed modules.
NAME = re.compile(r"(?<![\w./-])rankflow(?:\.[A-Za-z_]\w*)+")
DOCUMENTS = ("README.md", "BENCHMARKS.md", "docs")


def documented_names() -> list[str]:
    files = []
    for doc in DOCUMENTS:
        path = ROOT / doc
        files += sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.exists() else []
    names = set()
    for path in files:
        for line in path.read_text().splitlines():
            if "→" not in line:
                names.update(m.rstrip(".") for m in NAME.findall(line))
    return sorted(names)


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_every_public_subpackage_and_its_names_are_attributes_after_import_rankflow():
    """Each subpackage of ``rankflow.SUBPACKAGES`` is reached by attribute alone (no
    ``import rankflow.plots``), every name of its ``__all__`` exists, and the heavy ones
    (matplotlib's, flax's, the checkpoint readers) were not imported by ``import rankflow``."""
    out = _run(
        """
        import sys
        import rankflow
        lazy = ("attention", "cli", "compare", "inspect", "plots", "reproduce")
        early = [n for n in lazy if f"rankflow.{n}" in sys.modules]
        assert not early, f"imported by import rankflow: {early}"
        assert "matplotlib" not in sys.modules
        for sub in rankflow.SUBPACKAGES:
            mod = getattr(rankflow, sub)
            assert sub in dir(rankflow)
            missing = [n for n in getattr(mod, "__all__", ()) if not hasattr(mod, n)]
            assert not missing, (sub, missing)
        rankflow.plots.quick_plot, rankflow.compare.compare, rankflow.theory.fit_rate
        try:
            rankflow.plot
        except AttributeError as e:
            assert "'plot'" in str(e)
        else:
            raise SystemExit("rankflow.plot exists")
        print(len(rankflow.SUBPACKAGES))
        """
    )
    assert int(out) >= 11


def test_every_name_the_documents_use_resolves():
    """Walk each ``rankflow.a.b.c`` of README.md, BENCHMARKS.md and docs/ from
    ``import rankflow``: attributes first, then a module of that name."""
    names = documented_names()
    assert "rankflow.compare.compare" in names and "rankflow.plots.write_compare_figures" in names
    out = _run(
        f"""
        import importlib
        import rankflow
        bad = []
        for name in {names!r}:
            obj = rankflow
            for i, part in enumerate(name.split(".")[1:], start=2):
                try:
                    obj = getattr(obj, part)
                except AttributeError:
                    try:
                        obj = importlib.import_module(".".join(name.split(".")[:i]))
                    except ImportError:
                        bad.append(name)
                        break
        print("\\n".join(bad))
        """
    )
    assert out.strip() == "", f"documented but not found: {out.split()}"
