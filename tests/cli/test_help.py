"""What ``--help`` tells, and how the command ends when its reader goes away.

``rankflow run --help`` and ``rankflow attention train --help`` list every enumerated
config key with each of its allowed values (compared with the schema, and a dropped
value fails), the results columns, every ``RANKFLOW_*`` variable the package reads and a
``--set`` sweep example that parses; a closed pipe (``rankflow info --json | head -c
100``) ends quietly with exit status 141; the commands' default output folders and those of
the README's and the site's commands are in ``.gitignore``."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rankflow import cli
from rankflow.attention import config as AC
from rankflow.attention.observables import HEAD_COLUMNS
from rankflow.attention.sweep import STRUCT_COLUMNS as HEAD_STRUCT
from rankflow.config.fields import OneOf, parse_set, read_config
from rankflow.core import config as C
from rankflow.core.observables import OBSERVABLES
from rankflow.core.program import STRUCT_COLUMNS
from rankflow.engine.store import STATUS

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {"run": (("run",), C), "attention": (("attention", "train"), AC)}
# The start of a key's entry in the epilogue: `  *dynamics.lam = 0.05: …`.
ENTRY = re.compile(r"^  [ *](\S+) = ")


def help_text(capsys, *command: str) -> str:
    """``rankflow COMMAND --help`` as printed (80 columns)."""
    with pytest.raises(SystemExit) as stop:
        cli.main([*command, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def entries(text: str) -> dict[str, str]:
    """Each config key's entry of the epilogue, its wrapped lines joined."""
    keys = text[text.index("config keys") : text.index("results columns")]
    out: dict[str, str] = {}
    key = None
    for line in keys.splitlines():
        if m := ENTRY.match(line):
            key = m.group(1)
            out[key] = line
        elif key and line.strip():
            out[key] += " " + line.strip()
        else:
            key = None
    return out


def missing_values(text: str, schema) -> list[tuple[str, str]]:
    """``(key, value)`` of every allowed value of an enumerated key of ``schema`` that
    the key's ``one of:`` list in ``text`` lacks (the key itself missing: value "")."""
    found = entries(text)
    out = []
    for sec, fields in schema.items():
        for name, f in fields.items():
            if f.choices is None:
                continue
            key = f"{sec}.{name}" if sec else name
            if key not in found or "one of: " not in found[key]:
                out.append((key, ""))
                continue
            listed = found[key].split("one of: ", 1)[1].split(", ")
            out += [(key, v) for v in f.choices if v not in listed]
    return out


@pytest.fixture(autouse=True)
def _columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize("name", COMMANDS)
def test_help_lists_every_allowed_value(capsys, name):
    command, config = COMMANDS[name]
    text = help_text(capsys, *command)
    enumerated = [k for k in entries(text) if "one of: " in entries(text)[k]]
    assert {"dynamics.kind", "dynamics.schedule", "solver.method"} <= set(enumerated)
    assert missing_values(text, config.SCHEMA) == []
    # every key of the schema has its entry
    assert set(entries(text)) == set(config.ALL_KEYS)


def test_run_help_names_the_issue_keys(capsys):
    found = entries(help_text(capsys, "run"))
    for key in ("problem.kind", "init.kind", "dynamics.kind"):
        assert "one of: " in found[key], key


def test_a_dropped_value_fails(capsys, monkeypatch):
    """The mutant: problem.kind's check without its last value ("custom", which other
    entries mention too) renders a help the comparison with the schema refuses."""
    true_schema = {sec: dict(fields) for sec, fields in C.SCHEMA.items()}
    kind = C.SCHEMA["problem"]["kind"]
    dropped = kind.choices[-1]
    fewer = dataclasses.replace(kind, check=OneOf(kind.choices[:-1]))
    monkeypatch.setitem(C.SCHEMA["problem"], "kind", fewer)
    text = help_text(capsys, "run")
    assert dropped in text  # named elsewhere: only the key's own list counts
    assert missing_values(text, true_schema) == [("problem.kind", dropped)]


def test_a_key_without_its_list_fails(capsys, monkeypatch):
    """The other mutant: an enumerated key rendered without its list is caught too."""
    from rankflow.cli import helptext

    def no_lists(schema, numeric):
        plain = {
            s: {k: dataclasses.replace(f, check=None) for k, f in fs.items()}
            for s, fs in schema.items()
        }
        return real(plain, numeric)

    real = helptext.keys_help
    monkeypatch.setattr(helptext, "keys_help", no_lists)
    text = help_text(capsys, "run")
    assert ("init.kind", "") in missing_values(text, C.SCHEMA)


def _package_variables() -> set[str]:
    found = set()
    for path in (ROOT / "rankflow").rglob("*.py"):
        found |= set(re.findall(r"RANKFLOW_[A-Z0-9_]+", path.read_text()))
    return found


@pytest.mark.parametrize("name", COMMANDS)
def test_help_lists_every_environment_variable(capsys, name):
    text = help_text(capsys, *COMMANDS[name][0])
    section = text[text.index("environment variables:") :]
    variables = _package_variables()
    assert {"RANKFLOW_CPU_DEVICES", "RANKFLOW_MAX_RUNS"} <= variables
    assert [v for v in sorted(variables) if f"  {v}: " not in section] == []


@pytest.mark.parametrize("name", COMMANDS)
def test_the_set_examples_in_the_help_parse(capsys, name):
    """Every ``--set`` example line of the help, split as a shell splits it, sets what it
    says: a key, and a sweep axis of the schema."""
    command, config = COMMANDS[name]
    text = help_text(capsys, *command)
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("--set ")]
    sweeps = [line for line in lines if "sweep." in line and "KEY" not in line]
    assert sweeps, lines
    for line in lines:
        if "KEY" in line:
            continue
        words = shlex.split(line)
        assert words[::2] == ["--set"] * (len(words) // 2)
        overrides = parse_set(words[1::2])
        cfg = read_config({}, overrides, config.SCHEMA)
        for key, value in overrides.items():
            if key.startswith("sweep."):
                assert cfg["sweep"][key.removeprefix("sweep.")] == value
            else:
                sec, _, k = key.rpartition(".")
                assert cfg[sec][k] == value
    ((key, values),) = parse_set(shlex.split(sweeps[0])[1:]).items()
    assert key == "sweep.dynamics.lam" and values == [0.01, 0.1]
    config.resolve({}, {key: values})  # every point validates


def _columns_section(text: str) -> str:
    start = text.index("results columns")
    return " ".join(text[start : text.index("--set KEY", start)].split())


def test_run_help_lists_the_columns(capsys):
    text = help_text(capsys, "run")
    columns = _columns_section(text)
    for name in (*OBSERVABLES, *STRUCT_COLUMNS, *STATUS, "run_id", "sv_1", "lr_clock"):
        assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", columns), name


def test_attention_help_lists_the_columns(capsys):
    text = help_text(capsys, "attention", "train")
    columns = _columns_section(text)
    for name in (*HEAD_COLUMNS, *HEAD_STRUCT, "train_loss", "val_loss", "layer", "pair"):
        assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", columns), name


@pytest.mark.parametrize("name", COMMANDS)
def test_the_epilogue_is_wrapped(capsys, name):
    from rankflow.cli.helptext import WIDTH

    text = help_text(capsys, *COMMANDS[name][0])
    long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert long == []


# --- a closed pipe ------------------------------------------------------------------------

ENV = dict(os.environ, PYTHONPATH=str(ROOT), RANKFLOW_CACHE_DIR="off")


def test_a_closed_pipe_ends_quietly():
    """The reader closes the pipe before the command writes (as `| head -c 0` would):
    nothing on stderr, exit status 141 (128 + SIGPIPE)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankflow.cli", "info", "--json"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == cli.CLOSED_PIPE
    assert stderr == b""


def test_head_of_info_is_quiet():
    """The issue's pipeline: `rankflow info --json | head -c 100`."""
    script = f"{shlex.quote(sys.executable)} -m rankflow.cli info --json | head -c 100"
    done = subprocess.run(
        ["bash", "-c", script + '; echo " ${PIPESTATUS[0]}"'],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr == ""
    assert done.stdout.startswith("{")
    assert done.stdout.rsplit(" ", 1)[1].strip() in ("0", str(cli.CLOSED_PIPE))


def test_a_closed_pipe_in_process_is_141(monkeypatch, capsys):
    """Any command: the write that finds the pipe closed ends main quietly."""

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert cli.main(["run", "--help"]) == cli.CLOSED_PIPE
    assert capsys.readouterr().err == ""


# --- output folders in .gitignore ---------------------------------------------------------


def _default_outputs() -> set[str]:
    """The default ``--out`` of every command and subcommand of the parser."""
    found = set()

    def walk(parser) -> None:
        for action in parser._actions:
            if "--out" in action.option_strings and isinstance(action.default, str):
                found.add(action.default)
            if isinstance(action.choices, dict):  # subcommands: name → parser
                for sub in action.choices.values():
                    walk(sub)

    walk(cli.build_parser())
    return found


def _documented_outputs() -> set[str]:
    """The relative ``--out`` folders of the commands in README.md and the site's pages
    (docs/, where the README's guides moved): figures, absolute paths and placeholders
    (DIR) left out."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    outs = {o.strip("`") for o in re.findall(r"\brankflow [a-z].*?--out (\S+)", text)}
    return {o for o in outs if re.fullmatch(r"[a-z0-9_][\w/-]*", o)}


def test_output_folders_are_ignored():
    documented = _documented_outputs()
    assert {"out/compare_sweep", "out/attention_vit"} <= documented  # the guides are read
    folders = _default_outputs() | documented
    assert {"rankflow-demo", "rankflow-report"} <= folders
    paths = [f"{folder}/results.parquet" for folder in sorted(folders)]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True
    )
    ignored = set(done.stdout.split())
    assert [p for p in paths if p not in ignored] == []
