"""One ``fabric eval``: the suite, the output folder, the web service, a runner built by the one
composition root over the config with the suite's pack settings, the attempts, and the results.

``prepare`` does everything that can be refused before anything runs (ConfigError: exit 2);
``execute`` runs the attempts and always writes results.json and summary.md, also when it was
stopped or cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct, field

import fabric
from fabric.application.evals.attempts import EvalRun, Planned, plan, run_eval
from fabric.application.evals.ports import EvalPorts
from fabric.application.evals.records import AttemptRecord
from fabric.application.evals.results import build_results
from fabric.application.evals.summary import render_summary
from fabric.config.eval_suite import EvalCase, LoadedSuite
from fabric.config.eval_suite_loader import load_suite
from fabric.config.eval_suite_settings import with_pack_settings
from fabric.config.loader import LoadedConfig
from fabric.domain.errors import ConfigError
from fabric.interfaces.compose import Runner, build_runner
from fabric.interfaces.model_resolver import ChatFactory

from .eval_setup import AttemptFolders, ConfinedChecks, RunnerTasks
from .eval_store import ATTEMPTS, MANIFEST, RESULTS, SUMMARY, EvalFolder
from .eval_web import WebFixture

TIER_PREFIX = "tier:"


class EvalOptions(Struct, frozen=True):
    suite: Path
    out: Path | None = None
    repeats: int = 1
    jobs: int = 1
    pack: str | None = None
    backend: str | None = None
    model: str | None = None
    cases: tuple[str, ...] = ()
    """Globs on case ids, or ``tier:<glob>`` on tiers; a case matching any is run."""
    restart: bool = False
    command: str = ""
    """The command line, for the summary."""


class Prepared(Struct):
    suite: LoadedSuite
    folder: EvalFolder
    planned: list[Planned]
    done_before: int
    options: EvalOptions


class EvalReport(Struct):
    folder: Path
    results: dict[str, Any]
    run: EvalRun = field(default_factory=EvalRun)


def prepare(loaded: LoadedConfig, options: EvalOptions) -> Prepared:
    """Load the suite, choose the cases, open the output folder and plan what is left to do."""
    suite = load_suite(options.suite)
    chosen = select_cases(suite, options.cases)
    backend = options.backend
    if backend and backend != "auto" and backend not in loaded.config.llm.backends:
        raise ConfigError(
            f"--backend {backend!r} is not a backend of {loaded.source}",
            hint=f"use auto or one of: {', '.join(loaded.config.llm.backends)}",
        )
    out = options.out or Path("evals-out") / f"{suite.name}-{_stamp()}"
    suite_dir = _suite_folder(suite)
    if suite_dir is not None and out.resolve().is_relative_to(suite_dir):
        raise ConfigError(
            f"--out {out} lies inside the suite folder {suite_dir}, which runs may not read",
            hint="give --out a folder outside the suite",
        )
    manifest = {
        "format": 1,
        "suite": {"name": suite.name, "path": str(suite.path), "hash": suite.content_hash},
        "suite_hash": suite.content_hash,
        "pack": options.pack,
        "backend": options.backend,
        "model": options.model,
        "repeats": options.repeats,
        "jobs": options.jobs,
        "config": loaded.source,
        "fabric_version": fabric.__version__,
        "started": _now(),
    }
    folder = EvalFolder.open(out, manifest, restart=options.restart)
    done = {(r.case, r.attempt) for r in folder.records()}
    planned = plan(chosen, options.repeats, done, options.pack)
    before = sum((c.id, n) in done for c in chosen for n in range(1, options.repeats + 1))
    return Prepared(suite, folder, planned, before, options)


def select_cases(suite: LoadedSuite, patterns: Sequence[str]) -> list[EvalCase]:
    """The suite's cases that match one of ``patterns`` (all for none); a pattern that
    matches nothing is a mistake."""
    if not patterns:
        return list(suite.cases)
    for pattern in patterns:
        if not any(_matches(case, pattern) for case in suite.cases):
            ids = ", ".join(c.id for c in suite.cases[:12]) + (
                ", ..." if len(suite.cases) > 12 else ""
            )
            raise ConfigError(
                f"--case {pattern!r} matches no case of suite {suite.name}",
                hint=f"its cases: {ids}; or a tier: tier:easy, tier:medium, tier:hard",
            )
    return [c for c in suite.cases if any(_matches(c, p) for p in patterns)]


def _matches(case: EvalCase, pattern: str) -> bool:
    if pattern.startswith(TIER_PREFIX):
        return fnmatch.fnmatchcase(case.tier, pattern[len(TIER_PREFIX) :])
    return fnmatch.fnmatchcase(case.id, pattern)


async def execute(
    prepared: Prepared,
    loaded: LoadedConfig,
    *,
    stop: asyncio.Event,
    chat_factory: ChatFactory | None = None,
    on_status: Callable[[str], None] | None = None,
    on_start: Callable[[Planned], None] | None = None,
    on_finish: Callable[[AttemptRecord], None] | None = None,
) -> EvalReport:
    """Run the planned attempts; results.json and summary.md are written whatever happens."""
    suite, folder = prepared.suite, prepared.folder
    report = EvalReport(folder.path, {})
    try:
        with WebFixture(suite.pages) if suite.pages else contextlib.nullcontext() as web:
            variables = {"web_url": web.url} if isinstance(web, WebFixture) else {}
            try:
                config = with_pack_settings(loaded, suite, variables)
            except ConfigError as exc:
                report.run.error = exc
                return report
            runner = build_runner(
                config,
                runs_dir=folder.runs,
                chat_factory=chat_factory,
                on_status=on_status,
                protected=_protected(suite, folder.path),
            )
            try:
                report.run = await _attempts(prepared, runner, variables, stop, on_start, on_finish)
            finally:
                await runner.aclose()
    finally:
        report.results = write_results(prepared, loaded)
    return report


async def _attempts(
    prepared: Prepared,
    runner: Runner,
    variables: dict[str, str],
    stop: asyncio.Event,
    on_start: Callable[[Planned], None] | None,
    on_finish: Callable[[AttemptRecord], None] | None,
) -> EvalRun:
    options, folder = prepared.options, prepared.folder
    try:
        _load_packs(runner.pack, prepared.suite, {p.case.pack for p in prepared.planned})
        _check_memory(runner, [p.case for p in prepared.planned])
        await asyncio.to_thread(folder.reserve, [p.key for p in prepared.planned])
    except ConfigError as exc:
        return EvalRun(left=list(prepared.planned), error=exc)
    ports = EvalPorts(
        RunnerTasks(runner, backend=options.backend, model=options.model, apart=folder.apart),
        AttemptFolders(),
        ConfinedChecks(runner, apart=folder.apart),
        folder,
    )
    return await run_eval(
        prepared.planned,
        ports,
        out=prepared.folder.path,
        jobs=options.jobs,
        variables=variables,
        stop=stop,
        on_start=on_start,
        on_finish=on_finish,
    )


def write_results(prepared: Prepared, loaded: LoadedConfig) -> dict[str, Any]:
    """results.json and summary.md from every attempt the folder holds."""
    suite, folder, options = prepared.suite, prepared.folder, prepared.options
    meta = {
        "suite": {"name": suite.name, "path": str(suite.path), "hash": suite.content_hash},
        "command": options.command,
        "pack": options.pack,
        "backend": options.backend,
        "model": options.model,
        "jobs": options.jobs,
        "config": loaded.source,
        "fabric_version": fabric.__version__,
        "started": folder.manifest().get("started"),
        "date": _now(),
    }
    records = folder.records()
    # the cases this command chose (--case), and any the folder has attempts of already
    chosen = {c.id for c in select_cases(suite, options.cases)} | {r.case for r in records}
    cases = [c for c in suite.cases if c.id in chosen]
    results = build_results(records, cases, options.repeats, meta)
    folder.write_results(results, render_summary(results))
    return results


def _load_packs(load: Callable[[str], Any], suite: LoadedSuite, names: set[str]) -> None:
    """Build every pack the attempts use before any runs, so a mistake stops the eval at once;
    one the suite's pack_settings changed says so."""
    for name in sorted(names):
        try:
            load(name)
        except ConfigError as exc:
            if name in suite.pack_settings:
                where = suite.where("pack_settings", name)
                raise ConfigError(
                    f"with the suite's pack_settings ({where}): {exc.message}", hint=exc.hint
                ) from exc
            raise


def _check_memory(runner: Runner, cases: Sequence[EvalCase]) -> None:
    """Refuse a case that gives its workspace memories when its pack has memory off: its runs
    would never see them."""
    for case in cases:
        if case.memory and not runner.pack(case.pack).settings.memory.enabled:
            raise ConfigError(
                f"{case.where}: case {case.id} has memories, but pack {case.pack!r} has "
                "memory off, so its runs would not see them",
                hint=f"turn it on in the suite's pack_settings: {{{case.pack}: {{memory: "
                "{enabled: true}}}",
            )


def _suite_folder(suite: LoadedSuite) -> Path | None:
    return suite.path.resolve() if suite.path.is_dir() else None


def _protected(suite: LoadedSuite, out: Path) -> list[Path]:
    """What no run's tools or commands may read: the suite (its checks and reference
    solutions), the git repository that holds it (its objects hold the solutions too), other
    evals' output folders beside ``out`` (solved workspaces, whole transcripts), and the
    eval's own files (each attempt hides the rest of ``out`` too: ``EvalFolder.apart``)."""
    source = Path(suite.source).resolve()
    folder = _suite_folder(suite)
    places = [folder] if folder is not None else [source, source.parent / "solutions"]
    places += _repositories_holding(folder or source.parent)
    places += _other_evals(out.resolve())
    return places + [(out / name).resolve() for name in (MANIFEST, ATTEMPTS, RESULTS, SUMMARY)]


def _repositories_holding(folder: Path) -> list[Path]:
    """The ``.git`` of every repository ``folder`` lies in (a checkout, and one it is a
    submodule or worktree of)."""
    return [p / ".git" for p in (folder, *folder.parents) if (p / ".git").exists()]


def _other_evals(out: Path) -> list[Path]:
    """Eval output folders (they hold ``eval.json``) beside ``out``."""
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return []
    return [p for p in siblings if p != out and (p / MANIFEST).is_file()]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
