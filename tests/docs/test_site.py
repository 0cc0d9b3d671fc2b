"""The documentation site: ``mkdocs build --strict`` builds it offline (warnings are
errors: a broken link, a nav entry to a missing page, a page left out of the nav, a
docstring that names no parameter of its function); its generated reference pages
(docs/hooks.py) cover every config key of both families and every column of the results
tables, each with a meaning. Mutants show each check failing."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rankflow
from rankflow.cli.helptext import toml_literal

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


def _load_hooks():
    spec = importlib.util.spec_from_file_location("rankflow_docs_hooks", ROOT / "docs/hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``site``, offline: every HTTP(S)
    request goes to a closed port, so a build that needs the network fails."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", NO_MKDOCS_2_WARNING="1")
    env |= {
        k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
    }
    env.pop("no_proxy", None), env.pop("NO_PROXY", None)
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
    return subprocess.run(
        [*command, "-d", str(site)], cwd=config.parent, env=env, capture_output=True, text=True
    )


def test_the_site_builds_strict_and_offline(tmp_path):
    res = build(CONFIG, tmp_path / "site")
    assert res.returncode == 0, res.stderr[-6000:]
    for page in ("index", "reference/config", "reference/columns", "reference/api/theory"):
        assert (tmp_path / "site" / f"{page}.html").is_file(), page
    html = (tmp_path / "site/reference/config.html").read_text()
    assert hooks.CONFIG_MARKER not in html and "dynamics.lam" in html


def _small_site(tmp_path: Path, index: str, nav: list) -> Path:
    """The real mkdocs.yml (theme, plugins, validation, hook) over a docs folder of one
    page, ``index``, with ``nav``."""
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    shutil.copy(ROOT / "docs/hooks.py", docs / "hooks.py")
    (docs / "index.md").write_text(index)
    config = yaml.safe_load(CONFIG.read_text())
    config["nav"] = nav
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, allow_unicode=True))
    return tmp_path / "mkdocs.yml"


@pytest.mark.parametrize(
    "mutant",
    [
        "none",
        "a link to a missing page",
        "a link to a missing anchor",
        "a nav entry to a missing page",
        "a page off the nav",
    ],
)
def test_a_broken_link_or_nav_entry_fails_the_build(tmp_path, mutant):
    """The real configuration's strict build over a one-page site: it builds as it is,
    and fails on each mutant."""
    index, nav = "# Home\n\nSee [the columns](#home).\n", [{"Home": "index.md"}]
    if mutant == "a link to a missing page":
        index += "\nAnd [a page](guides/missing.md).\n"
    elif mutant == "a link to a missing anchor":
        index = index.replace("#home", "#missing")
    elif mutant == "a nav entry to a missing page":
        nav.append({"Missing": "guides/missing.md"})
    elif mutant == "a page off the nav":
        (tmp_path / "docs" / "guides").mkdir(parents=True)
        (tmp_path / "docs" / "guides" / "extra.md").write_text("# Extra\n")
    res = build(_small_site(tmp_path, index, nav), tmp_path / "site")
    if mutant == "none":
        assert res.returncode == 0, res.stderr[-3000:]
    else:
        assert res.returncode != 0, mutant
        named = ("missing.md", "#missing", "extra.md")
        assert any(n in res.stderr for n in named), res.stderr[-3000:]


# --- the config reference ----------------------------------------------------------------


def config_errors(markdown: str) -> list[str]:
    """Every key of both families' schemas not in ``markdown`` as a row with its type,
    default, allowed values (an enumerated key's every value), traced or not, and
    meaning; every ``[compare]`` option and environment variable not in it."""
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split("|")[1].strip().strip("`"), []).append(line)
    errors = []
    for _, module, _ in hooks.FAMILIES:
        for _, key, f, traced in hooks.family_keys(module):
            row = next((r for r in rows.get(key, []) if hooks.md_text(f.doc) in r), None)
            if row is None:
                errors.append(f"{module}: {key}")
                continue
            cells = [c.strip() for c in row.strip("|").split(" | ")]
            want = [f"`{toml_literal(f.default)}`", "yes" if traced else "no"]
            if cells[2] != want[0] or cells[4] != want[1]:
                errors.append(f"{key}: default or traced {cells[2]}, {cells[4]} ≠ {want}")
            if any(f"`{c}`" not in cells[3] for c in f.choices or ()):
                errors.append(f"{key}: a value of {f.choices} missing")
    from rankflow.cli.helptext import ENVIRONMENT
    from rankflow.compare import OPTIONS

    errors += [
        k for k in [f"compare.{o}" for o in OPTIONS] + [e for e, _ in ENVIRONMENT] if k not in rows
    ]
    return errors


def test_the_config_reference_has_every_key_of_both_schemas():
    markdown = hooks.config_reference()
    assert config_errors(markdown) == []
    from rankflow.attention import config as attention
    from rankflow.core import config as core

    assert markdown.count("\n| `") >= len(core.SCHEMA["dynamics"]) + len(attention.ALL_KEYS)


def test_a_key_dropped_from_the_config_reference_is_reported(monkeypatch):
    real = hooks.family_keys
    drop = lambda module: [r for r in real(module) if r[1] != "dynamics.lam"]
    monkeypatch.setattr(hooks, "family_keys", drop)
    dropped = hooks.config_reference()
    monkeypatch.setattr(hooks, "family_keys", real)
    assert config_errors(dropped) == [
        "rankflow.core.config: dynamics.lam",
        "rankflow.attention.config: dynamics.lam",
    ]
    wrong = hooks.config_reference().replace("| `0.05` |", "| `0.5` |")
    assert config_errors(wrong) == [
        "dynamics.lam: default or traced `0.5`, yes ≠ ['`0.05`', 'yes']"
    ]


# --- the columns reference ---------------------------------------------------------------

# A column's placeholder on the page: one column per index or name.
PLACEHOLDERS = (
    (re.compile(r"sv_\d+"), "sv_1 … sv_k"),
    (re.compile(r"balance_gap_\d+"), "balance_gap_1 … balance_gap_{L−1}"),
)


def uncovered(columns, markdown: str) -> list[str]:
    """The ``columns`` that ``markdown`` names in no table row, as themselves or by
    their placeholder."""
    named = set(re.findall(r"^\| `([^`]+)` \|", markdown, re.M))
    out = []
    for c in columns:
        shown = next((p for rx, p in PLACEHOLDERS if rx.fullmatch(c)), c)
        if shown not in named:
            out.append(c)
    return out


@pytest.fixture(scope="module")
def small_table():
    """A real results table: GD on a 2×2 diagonal problem with a linear schedule, at
    depth 2 and 3 (both observable sets), three saves."""
    config = {
        "problem": {"kind": "diagonal", "singular_values": [1.0, 0.5]},
        "model": {"r": 2},
        "dynamics": {"kind": "gd", "schedule": "linear", "warmup": 1},
        "save": {"t1": 4, "num": 3},
        "sweep": {"model.depth": [2, 3]},
    }
    return rankflow.run(config)


def test_the_columns_page_covers_every_column_of_a_real_table_and_the_declared_ones(
    small_table,
):
    from rankflow.attention import config as attention
    from rankflow.attention.observables import HEAD_COLUMNS
    from rankflow.attention.sweep import STRUCT_COLUMNS
    from rankflow.compare import COLUMNS, SWEEP_COLUMNS
    from rankflow.inspect import SPECTRUM_COLUMNS, STATISTICS

    markdown = hooks.columns_reference()
    assert len(small_table.columns) > 40 and "schatten_gap" in small_table.columns
    assert uncovered(small_table.columns, markdown) == []
    declared = [*attention.NUMERIC_KEYS, *STRUCT_COLUMNS, *HEAD_COLUMNS]
    declared += [c for cs in COLUMNS.values() for c in cs]
    declared += [c for cs in SWEEP_COLUMNS.values() for c in cs if not c.startswith("weak_order.")]
    declared += [*STATISTICS, *SPECTRUM_COLUMNS, "train_loss", "val_loss"]
    assert uncovered(declared, markdown) == []
    missing = {t.title: t.missing() for ts in hooks.column_tables().values() for t in ts}
    assert {title: cs for title, cs in missing.items() if cs} == {}


def test_a_column_without_a_row_or_a_meaning_is_reported(small_table, monkeypatch):
    markdown = hooks.columns_reference()
    assert uncovered([*small_table.columns, "new_column"], markdown) == ["new_column"]
    from rankflow.core import observables

    monkeypatch.setattr(observables, "OBSERVABLES", (*observables.OBSERVABLES, "new_observable"))
    (core, *_) = hooks.core_tables()
    assert core.missing() == ["new_observable"]


def test_the_examples_section_lists_every_example_page(tmp_path):
    (tmp_path / "examples").mkdir()
    for name in ("index", "b_second", "a_first"):
        (tmp_path / "examples" / f"{name}.md").write_text(f"# {name}\n")
    nav = [{"Home": "index.md"}, {"Examples": ["examples/index.md"]}]
    assert hooks.examples_nav(nav, tmp_path) == [
        {"Home": "index.md"},
        {"Examples": ["examples/index.md", "examples/a_first.md", "examples/b_second.md"]},
    ]
