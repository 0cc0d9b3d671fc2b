"""``rankflow reproduce``: the paper's claims as runnable experiments, figures and a
verdict report.

Each experiment is one module (``toy``, ``balancing``, ``rank``, ``discrete``,
``optimizers``, ``geometry``, ``noise``, ``attention``, ``rebuttal``, ``depth``, ``reference``,
``pretrained``) with a ``run_experiment(ctx)`` that runs its configs from
``sims/reproduce/`` through the same machinery as the rest of rankflow (``rankflow.run``,
``rankflow.compare``, ``rankflow.attention``, ``rankflow.inspect``), writes tables and
figures, and records claims with verdicts.
``--quick`` runs the configs as written (minutes on a laptop); ``--full`` applies the
overrides of ``sims/reproduce/full.toml`` (more seeds, larger sizes).

    from rankflow.reproduce import reproduce
    result = reproduce("out/reproduce", mode="quick", only=["toy"])
    result.ok, result.claims, result.report
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import shutil
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config.fields import ConfigError
from ..engine import programs, progress
from ..engine.writer import claimed
from . import report as report_lib
from ._common import MODES, Claim, Context

__all__ = ["EXPERIMENTS", "Claim", "Result", "check_options", "passable_claims", "reproduce"]

# name → module; in the order they run and appear in the report.
EXPERIMENTS = {
    "toy": "toy",
    "balancing": "balancing",
    "rank": "rank",
    "discrete": "discrete",
    "optimizers": "optimizers",
    "geometry": "geometry",
    "noise": "noise",
    "attention": "attention",
    "rebuttal": "rebuttal",
    "depth": "depth",
    "reference": "reference",
    "pretrained": "pretrained",
}


# What a run writes beside runs/: a rerun replaces them as a whole, while runs/ stays
# (it holds the sweeps, which a rerun resumes).
OUTPUTS = ("tables", "figures", "report.md")
# Where the previous run's outputs wait while a rerun writes its own.
PREVIOUS = ".rankflow.previous"


def passable_claims() -> list[str]:
    """The names of every claim whose verdict can be ``pass`` (each experiment's
    ``CLAIMS``), in report order; each has a mutant in ``tests/`` that makes it fail."""
    return [
        name
        for module in EXPERIMENTS.values()
        for name in importlib.import_module(f".{module}", __name__).CLAIMS
    ]


@dataclass(frozen=True)
class Result:
    claims: list[Claim]
    report: Path
    seconds: dict[str, float]
    # experiment → its error, for each experiment that crashed (its claims are missing)
    crashed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No claim failed and no experiment crashed (observations do not count)."""
        return not self.crashed and all(c.verdict != "fail" for c in self.claims)


def check_options(
    quick: bool = False,
    full: bool = False,
    only: Sequence[str] | None = None,
    checkpoint: str | Path | None = None,
) -> tuple[str, list[str]]:
    """The size and the experiments to run, or a ConfigError naming the bad option."""
    if quick and full:
        raise ConfigError("--quick/--full: choose one size, --quick or --full, not both")
    mode = "full" if full else "quick"
    names = list(EXPERIMENTS)
    if only:
        bad = [n for n in only if n not in EXPERIMENTS]
        if bad:
            raise ConfigError(
                f"--only: unknown experiment {bad[0]!r}; experiments are {', '.join(EXPERIMENTS)}"
            )
        names = [n for n in EXPERIMENTS if n in only]
        if "pretrained" in names and checkpoint is None:
            raise ConfigError("--only pretrained: needs --checkpoint PATH (a safetensors model)")
    elif checkpoint is None:
        names.remove("pretrained")
    if checkpoint is not None and not Path(checkpoint).exists():
        raise ConfigError(f"--checkpoint: no such file or folder {str(checkpoint)!r}")
    return mode, names


def _validate(names: list[str], mode: str) -> None:
    """Resolve every config of the chosen experiments before anything compiles."""
    for name in names:
        module = importlib.import_module(f".{EXPERIMENTS[name]}", __name__)
        validate = getattr(module, "validate", None)
        if validate is not None:
            validate(mode)


def reproduce(
    out: str | Path,
    *,
    mode: str = "quick",
    only: Sequence[str] | None = None,
    checkpoint: str | Path | None = None,
    quiet: bool = False,
    command: str | None = None,
) -> Result:
    """Run the experiments (all, or ``only``), write ``out/report.md``,
    ``out/figures/*.png``, ``out/tables/``, and return the claims.

    Args:
      out: output directory (created). Runs are kept in ``out/runs/<mode>/``, so a
        rerun into the same directory resumes the sweeps instead of recomputing them;
        its report, tables and figures replace the previous run's as a whole (those of
        experiments not run this time go; a rerun that fails leaves the previous ones).
      mode: ``"quick"`` (the configs as written) or ``"full"`` (``sims/reproduce/full.toml``).
      only: experiment names (see :data:`EXPERIMENTS`); default all but ``pretrained``,
        which runs when ``checkpoint`` is given.
      checkpoint: a safetensors checkpoint (file, index or folder) for ``pretrained``.

    Raises:
      ConfigError: on a bad option or config, before anything is compiled.
    """
    if mode not in MODES:
        raise ConfigError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
    _, names = check_options(mode == "quick", mode == "full", only, checkpoint)
    _validate(names, mode)
    from ..core.family import enable_compilation_cache

    enable_compilation_cache()
    out = Path(out)
    with (
        claimed(out, "reproduce", keep=lambda: any((out / "runs").rglob("chunk-*.parquet"))),
        _replacing(out),
    ):
        return _reproduce(out, mode, names, only, checkpoint, quiet, command)


def _remove(out: Path, names: Sequence[str]) -> None:
    for name in names:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def _replacing(out: Path) -> Iterator[None]:
    """Set the previous run's :data:`OUTPUTS` aside while the block writes its own;
    remove them when it succeeds, put them back in place of the partial new ones when
    it fails: ``out`` holds one run's tables, figures and report, never a mix of
    experiments of two runs."""
    previous = out / PREVIOUS
    if previous.exists():  # a run that was killed: its partial outputs go
        _remove(out, OUTPUTS)
    else:
        previous.mkdir()
        for name in OUTPUTS:
            if os.path.lexists(out / name):
                os.replace(out / name, previous / name)
    try:
        yield
    except BaseException:
        if any(previous.iterdir()):
            _remove(out, OUTPUTS)
        for name in OUTPUTS:
            if os.path.lexists(previous / name):
                os.replace(previous / name, out / name)
        shutil.rmtree(previous, ignore_errors=True)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _reproduce(out, mode, names, only, checkpoint, quiet, command) -> Result:
    """The body of :func:`reproduce`, under its claim on ``out``."""
    from ..engine.provenance import provenance

    ctx = Context(out=out, mode=mode, checkpoint=None if checkpoint is None else str(checkpoint))
    seconds: dict[str, float] = {}
    notes: dict[str, list[str]] = {}
    crashed: dict[str, str] = {}
    prov = provenance()
    info = {
        "rankflow": prov["versions"].get("rankflow", "?"),
        "jax": prov["versions"].get("jax", "?"),
        "devices": ", ".join(prov["devices"]),
        "git commit": (prov["git_commit"] or "none")[:12],
    }
    command = command or "rankflow reproduce " + " ".join(
        shlex.quote(a)
        for a in [f"--{mode}", *(["--only", *only] if only else []), "--out", str(out)]
    )
    path = out / "report.md"
    start = time.perf_counter()
    with progress.heartbeat(quiet):
        for i, name in enumerate(names, 1):
            step = f"rankflow reproduce: [{i}/{len(names)}] {name}"
            if not quiet:
                progress.say(f"{step} … ({time.perf_counter() - start:.0f} s in all)")
            with progress.activity(f"{name} {i}/{len(names)}"):
                notes[name], seconds[name], error = _experiment(ctx, name)
            if error is not None:
                crashed[name] = error
            if not quiet:
                n = report_lib.counts([c for c in ctx.claims if c.experiment == name])
                progress.say(
                    f"{step}: {n['pass']} pass, {n['fail']} fail, "
                    f"{n['observation']} observations in {seconds[name]:.0f} s "
                    f"({time.perf_counter() - start:.0f} s in all)"
                )
            path = report_lib.write(
                out, ctx.claims, mode=mode, seconds=seconds, notes=notes, provenance=info,
                command=command,
            )  # fmt: skip
    return Result(list(ctx.claims), path, seconds, crashed)


def _experiment(ctx: Context, name: str) -> tuple[list[str], float, str | None]:
    """Run experiment ``name`` into ``ctx``: its notes, its seconds and, when it crashed,
    its error (the traceback in ``tables/crash_NAME.txt``, a note saying so)."""
    t0 = time.perf_counter()
    module = importlib.import_module(f".{EXPERIMENTS[name]}", __name__)
    ctx.notes = []
    error = None
    try:
        module.run_experiment(ctx)
    except ConfigError:
        raise  # the user's mistake (a bad checkpoint): one line, nothing replaced
    except Exception as e:  # noqa: BLE001 - a crash is reported; the others still run
        error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        trace = ctx.tables / f"crash_{name}.txt"
        trace.write_text("".join(traceback.format_exception(e)))
        ctx.notes.append(
            f"**Crashed** ({error}): no verdict from this experiment; the "
            f"traceback is in `tables/{trace.name}`; `rankflow reproduce` exits with status 2."
        )
    programs.release()  # an experiment's programs are not reused by the next
    return list(ctx.notes), time.perf_counter() - t0, error
