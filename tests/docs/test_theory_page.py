"""docs/theory.md against the code it names, and the code's references to documents.

- Every label T1…T14 the page uses has its own section. Every ``pytest -k EXPR`` command
  on the page selects at least one test, evaluated as pytest's ``-k`` evaluates it, on one
  collection of the whole suite (``-m slow`` commands among the slow tests). A label's
  section selects every test whose name carries the label (``test_T4_…``, ``…_and_T9``),
  and says "no test name carries Tn" exactly when there is none.
- Every test function (``test_…``) and test file (``tests/….py``) the page names exists.
- Every claim id the page names (``toy.soft_threshold``) is a claim of ``rankflow
  reproduce``; a claim that can pass, listed under Tn, has Tn in its source, and every
  such claim whose source carries Tn is listed under Tn.
- Every ``theory.X`` / ``rankflow.theory.X`` is a public name of :mod:`rankflow.theory`.
- The page's links lead to pages of docs/, and every ``theory.md#id`` link of docs/ and
  README.md to an id of the page (``#t4``, ``#attention-layers``).
- No file under rankflow/, tests/, benchmarks/, sims/, docs/ refers to the theory,
  design or style notes the repository does not contain, and every ``docs/….md`` path
  they mention exists.

Each check is a function that returns its problems, so that the mutants below (a page
naming a label, claim, function or test that does not exist; a tree with a dangling
reference) can show that each one fails.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression

from rankflow import theory
from rankflow.reproduce import EXPERIMENTS, passable_claims

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "theory.md"
LABELS = range(1, 15)
SCANNED = ("rankflow", "tests", "benchmarks", "sims", "docs")
TEXT_SUFFIXES = {".py", ".toml", ".md", ".txt", ".yml", ".yaml", ".cfg", ".ini", ".sh"}

# --- the test suite, collected once ------------------------------------------------------

# Collects every test (slow ones included: ``-m ""`` replaces the default ``not slow``)
# and writes, per test, its node id, function name, slow mark and the names ``-k``
# matches against (pytest's own KeywordMatcher).
_COLLECT = r"""
import json, sys
import pytest
from _pytest.mark import KeywordMatcher

class Dump:
    items = []

    def pytest_collection_finish(self, session):
        self.items = [
            {
                "nodeid": item.nodeid,
                "function": getattr(item, "originalname", item.name),
                "slow": item.get_closest_marker("slow") is not None,
                "keywords": sorted(KeywordMatcher.from_item(item)._names),
            }
            for item in session.items
        ]

dump = Dump()
args = ["--collect-only", "-q", "-m", "", "-p", "no:cacheprovider",
        "--continue-on-collection-errors"]
pytest.main(args, plugins=[dump])
with open(sys.argv[1], "w") as f:
    json.dump(dump.items, f)
"""


@dataclass(frozen=True)
class Item:
    nodeid: str
    function: str
    slow: bool
    keywords: frozenset[str]


def collect(tmp: Path) -> list[Item]:
    out = tmp / "items.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    subprocess.run(
        [sys.executable, "-c", _COLLECT, str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return [
        Item(d["nodeid"], d["function"], d["slow"], frozenset(d["keywords"]))
        for d in json.loads(out.read_text())
    ]


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> list[Item]:
    items = collect(tmp_path_factory.mktemp("collect"))
    assert len(items) > 100, "the suite did not collect"
    return items


def select(items: list[Item], expr: str) -> list[Item]:
    """The tests ``pytest -k expr`` selects among ``items``."""
    compiled = Expression.compile(expr)
    return [i for i in items if compiled.evaluate(KeywordMatcher(i.keywords))]


def carries(item: Item, n: int) -> bool:
    """The test's function name carries the label Tn as a word: ``test_T4_…``,
    ``test_t5_…``, ``…_and_T9`` (not ``T10`` for T1, nor ``float16``)."""
    return re.search(rf"(?:^|_)[Tt]{n}(?:_|$)", item.function) is not None


# --- the page ----------------------------------------------------------------------------


def sections(page: str) -> dict[int, str]:
    """Label → the text of its section (a heading ``### Tn — …`` up to the next heading)."""
    out: dict[int, str] = {}
    parts = re.split(r"^(#{1,6} .*)$", page, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        m = re.match(r"#{1,6} T(\d+)\b", heading)
        if m:
            out[int(m.group(1))] = heading + body
    return out


def commands(text: str) -> list[tuple[bool, str]]:
    """Every ``pytest [-m slow] -k EXPR`` code span: (slow, EXPR without its quotes)."""
    found = re.findall(r"`pytest( -m slow)? -k ([^`]+)`", text)
    return [(bool(slow), expr.strip().strip("\"'")) for slow, expr in found]


def label_problems(page: str, items: list[Item]) -> list[str]:
    problems = []
    secs = sections(page)
    for n in sorted({int(x) for x in re.findall(r"\bT(\d+)\b", page)}):
        if n not in LABELS:
            problems.append(f"T{n}: not a label of the theory (T1–T14)")
        elif n not in secs:
            problems.append(f"T{n}: used on the page but has no section")
    for slow, expr in commands(page):
        pool = [i for i in items if i.slow == slow]
        try:
            chosen = select(pool, expr)
        except Exception as err:  # pytest's own error for a malformed expression
            problems.append(f"pytest -k {expr}: {err}")
            continue
        if not chosen:
            problems.append(f"`pytest{' -m slow' if slow else ''} -k {expr}` selects no test")
    for n, text in secs.items():
        exprs = [expr for _, expr in commands(text)]
        if not exprs:
            problems.append(f"T{n}: its section gives no `pytest -k` command")
            continue
        chosen = {i.nodeid for e in exprs for i in _safe_select(items, e)}
        labelled = [i for i in items if carries(i, n)]
        missed = [i.nodeid for i in labelled if i.nodeid not in chosen]
        if missed:
            problems.append(f"T{n}: the section's commands miss labelled tests {missed[:3]}")
        says_none = f"no test name carries T{n}" in " ".join(text.split())
        if says_none and labelled:
            problems.append(f"T{n}: the page says no test carries it; {labelled[0].nodeid} does")
        if not says_none and not labelled:
            problems.append(f"T{n}: no test name carries T{n}, and the page does not say so")
    return problems


def _safe_select(items: list[Item], expr: str) -> list[Item]:
    try:
        return select(items, expr)
    except Exception:
        return []


def named_test_problems(page: str, items: list[Item]) -> list[str]:
    names = {i.function for i in items}
    problems = [
        f"{name}: no such test"
        for name in sorted(set(re.findall(r"`(test_\w+)`", page)))
        if name not in names
    ]
    problems += [
        f"{path}: no such file"
        for path in sorted(set(re.findall(r"`(tests/[\w/.-]+\.py)`", page)))
        if not (ROOT / path).is_file()
    ]
    return problems


# --- claims of rankflow reproduce --------------------------------------------------------


def claim_sources() -> dict[str, str]:
    """Claim id → its ``source`` for every claim created with literal strings in
    rankflow/reproduce (observations included); ids built at run time (f-strings) are
    covered by :func:`passable_claims` without a source."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "rankflow" / "reproduce").glob("*.py")):
        tree = ast.parse(path.read_text())
        consts = {
            t.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for t in node.targets
            if isinstance(t, ast.Name) and isinstance(node.value.value, str)
        }
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            kw = {k.arg: k.value for k in call.keywords}
            name, source = kw.get("name"), kw.get("source")
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            if "." not in name.value or name.value.split(".")[0] not in EXPERIMENTS:
                continue
            if isinstance(source, ast.Constant):
                out[name.value] = str(source.value)
            elif isinstance(source, ast.Name):
                out[name.value] = consts.get(source.id, "")
            else:
                out[name.value] = ""
    return out


def theory_labels(source: str) -> set[int]:
    """The labels a claim checks: those of a source that is the theory's ("T5", "T2 with
    T4", "T6 (derived, Itô)"), none for the paper's claims and observations."""
    if not source.startswith("T"):
        return set()
    return {int(x) for x in re.findall(r"\bT(\d+)\b", source)}


def claim_ids(text: str) -> list[str]:
    experiments = "|".join(map(re.escape, EXPERIMENTS))
    return re.findall(rf"`((?:{experiments})\.[a-z0-9_]+)`", text)


def claim_problems(page: str) -> list[str]:
    sources = claim_sources()
    passable = set(passable_claims())
    known = passable | set(sources)
    problems = [
        f"{c}: no such claim of rankflow reproduce"
        for c in sorted(set(claim_ids(page)))
        if c not in known
    ]
    secs = sections(page)
    for n, text in secs.items():
        listed = set(claim_ids(text))
        for c in sorted(listed & passable):
            labels = theory_labels(sources.get(c, ""))
            if labels and n not in labels:
                problems.append(f"T{n}: lists {c}, whose source is {sources[c]!r}")
        for c in sorted(passable):
            if n in theory_labels(sources.get(c, "")) and c not in listed:
                problems.append(f"T{n}: {c} checks T{n} but its section does not list it")
        says_none = f"no claim of `rankflow reproduce` checks T{n}" in " ".join(text.split())
        if says_none == bool(listed & passable):
            problems.append(f"T{n}: the section's claims and its 'no claim' note disagree")
    return problems


# --- rankflow.theory ---------------------------------------------------------------------


def function_problems(page: str) -> list[str]:
    names = set(re.findall(r"`(?:rankflow\.)?theory\.([A-Za-z_]\w*)", page))
    return [
        f"theory.{name}: not a public name of rankflow.theory"
        for name in sorted(names)
        if name not in theory.__all__ or not hasattr(theory, name)
    ]


# --- links ------------------------------------------------------------------------------


def slugify(text: str) -> str:
    """A heading's id as Python-Markdown's toc extension makes it."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(page: str) -> set[str]:
    """The ids of the page: its headings' and its ``<a id="…">`` anchors."""
    headings = re.findall(r"^#{1,6} (.+?)\s*$", page, flags=re.M)
    return {slugify(h) for h in headings} | set(re.findall(r'<a id="([^"]+)"', page))


def link_problems(page: str, root: Path) -> list[str]:
    """The page's relative links lead to pages of docs/ (or pages docs/hooks.py makes),
    and every ``theory.md#id`` of docs/ and README.md is an id of the page."""
    docs = root / "docs"
    hooks = docs / "hooks.py"
    generated = hooks.read_text() if hooks.is_file() else ""
    problems = [
        f"link {target}: no such page"
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page)
        if not (docs / target).is_file() and target not in generated
    ]
    ids = anchors(page)
    readme = root / "README.md"
    sources = sorted(docs.rglob("*.md")) + ([readme] if readme.is_file() else [])
    for path in sources:
        for anchor in re.findall(r"theory\.md#([\w-]+)", path.read_text()):
            if anchor not in ids:
                problems.append(f"{path.relative_to(root)}: theory.md#{anchor} has no anchor")
    return problems


# --- references of the code to documents -------------------------------------------------

MISSING_DOCUMENT = re.compile(r"\bTHEORY\b|\b(?:DESIGN|STYLE)\.md\b")
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]+\.md\b")
TEMPLATE = re.compile(r"/[A-Z][A-Z_]*(?:/|\.md$)")


def text_files(root: Path, skip: Path | None = None):
    for top in SCANNED:
        for path in sorted((root / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in TEXT_SUFFIXES
                and "__pycache__" not in path.parts
                and path.resolve() != skip
            ):
                yield path


def reference_problems(root: Path, skip: Path | None = None) -> list[str]:
    """Lines that name a document the repository lacks, or a ``docs/….md`` that does not
    exist (pages that docs/hooks.py generates, named in its source, count as existing)."""
    hooks = root / "docs" / "hooks.py"
    generated = hooks.read_text() if hooks.is_file() else ""
    problems = []
    for path in text_files(root, skip):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(root)
        for n, line in enumerate(lines, 1):
            if MISSING_DOCUMENT.search(line):
                problems.append(f"{rel}:{n}: refers to a document not in the repository")
            for ref in DOCS_PATH.findall(line):
                page = ref.removeprefix("docs/")
                if TEMPLATE.search(ref):  # docs/examples/NAME.md: a pattern, not a path
                    continue
                if not (root / ref).is_file() and page not in generated:
                    problems.append(f"{rel}:{n}: {ref} does not exist")
    return problems


# --- the checks --------------------------------------------------------------------------


def test_every_label_has_its_section_and_its_tests(suite):
    page = PAGE.read_text()
    assert set(sections(page)) == set(LABELS)
    assert label_problems(page, suite) == []
    assert named_test_problems(page, suite) == []


def test_every_claim_exists_and_sits_under_its_labels():
    assert claim_problems(PAGE.read_text()) == []


def test_every_theory_function_exists():
    page = PAGE.read_text()
    assert len(set(re.findall(r"`(?:rankflow\.)?theory\.(\w+)", page))) > 30
    assert function_problems(page) == []


def test_links_lead_to_pages_and_anchors():
    page = PAGE.read_text()
    assert {f"t{n}" for n in LABELS} | {"attention-layers", "observables"} <= anchors(page)
    assert link_problems(page, ROOT) == []


def test_no_reference_to_a_missing_document():
    assert reference_problems(ROOT, skip=Path(__file__).resolve()) == []


# --- mutants: each check fails on a wrong page or tree -----------------------------------


def _mutate(page: str, old: str, new: str) -> str:
    assert page.count(old) >= 1, old  # the mutant must change the page
    return page.replace(old, new)


def test_mutant_labels(suite):
    page = PAGE.read_text()
    unknown = page + "\nSee T15.\n"
    assert any("T15" in p for p in label_problems(unknown, suite))
    section = page + "\n### T15 — nothing\n\n`pytest -k T15`\n"
    assert any("selects no test" in p for p in label_problems(section, suite))
    nothing = _mutate(page, "`pytest -k T7`", "`pytest -k T7_no_such_test`")
    assert any("selects no test" in p for p in label_problems(nothing, suite))
    narrow = _mutate(page, "`pytest -k T4`", "`pytest -k T4_gf`")
    assert any("miss labelled tests" in p for p in label_problems(narrow, suite))
    # A section that says no test carries its label while one does, and a label whose
    # tests are gone from the suite.
    wrong = _mutate(
        page, "**Tests:** `pytest -k T11`", "**Tests:** no test name carries T11; `pytest -k T11`"
    )
    assert any("says no test carries" in p for p in label_problems(wrong, suite))
    gone = [item for item in suite if "T11" not in item.function]
    assert any("T11" in p for p in label_problems(page, gone))


def test_mutant_tests(suite):
    page = PAGE.read_text() + "\n`test_T4_no_such_test`, `tests/theory/test_no_such_file.py`\n"
    problems = named_test_problems(page, suite)
    assert any("test_T4_no_such_test" in p for p in problems)
    assert any("test_no_such_file.py" in p for p in problems)


def test_mutant_claims():
    page = PAGE.read_text()
    assert any("toy.no_such_claim" in p for p in claim_problems(page + "`toy.no_such_claim`"))
    misplaced = _mutate(page, "`discrete.gd_order`", "`balancing.gradient_flow`")
    problems = claim_problems(misplaced)
    assert any("T8: lists balancing.gradient_flow" in p for p in problems)
    assert any("T8: discrete.gd_order checks T8" in p for p in problems)
    # A note that no claim checks T11, in a section that lists T11's claims.
    none = _mutate(
        page,
        "**Reproduce:** GD under warmup-cosine",
        "**Reproduce:** no claim of `rankflow reproduce` checks T11. GD under warmup-cosine",
    )
    assert any("T11: the section's claims and its 'no claim'" in p for p in claim_problems(none))


def test_mutant_functions():
    page = PAGE.read_text() + "\n`theory.no_such_function(A)` and `rankflow.theory._common`\n"
    problems = function_problems(page)
    assert any("no_such_function" in p for p in problems)
    assert any("_common" in p for p in problems)


def test_mutant_links(tmp_path):
    (tmp_path / "docs" / "guides").mkdir(parents=True)
    (tmp_path / "docs" / "guides" / "depth.md").write_text("[T12](../theory.md#t12)\n")
    page = '<a id="t12"></a>\n\n### T12 — depth\n\nSee [depth](guides/depth.md).\n'
    assert link_problems(page, tmp_path) == []
    assert link_problems(page + "[x](guides/missing.md)\n", tmp_path) == [
        "link guides/missing.md: no such page"
    ]
    (tmp_path / "README.md").write_text("[T99](docs/theory.md#t99)\n")
    assert link_problems(page, tmp_path) == ["README.md: theory.md#t99 has no anchor"]


def test_mutant_references(tmp_path):
    (tmp_path / "rankflow").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "theory.md").write_text("# Theory\n")
    ok = '"""The identity (docs/theory.md, T4)."""\n'
    (tmp_path / "rankflow" / "ok.py").write_text(ok + "# docs/examples/NAME.md per example\n")
    assert reference_problems(tmp_path) == []
    theory_ref = "THE" + "ORY.md"  # split, so that this file does not name it
    (tmp_path / "rankflow" / "a.py").write_text(f"# the identity ({theory_ref} T4)\n")
    (tmp_path / "rankflow" / "b.toml").write_text("# see docs/guides/missing.md\n")
    (tmp_path / "rankflow" / "c.py").write_text("# the sections of " + "DES" + "IGN.md\n")
    problems = reference_problems(tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "rankflow/a.py",
        "rankflow/b.toml",
        "rankflow/c.py",
    ]
    (tmp_path / "docs" / "hooks.py").write_text('PAGES = {"guides/missing.md": ...}\n')
    assert len(reference_problems(tmp_path)) == 2  # a page the hook generates exists
