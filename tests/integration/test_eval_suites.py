"""The eval suites shipped in evals/: every case loads through the eval's own loader, its
checks fail on the untouched workspace (doing nothing fails) and pass once its reference
solution (solutions/<id>/ copied over the workspace, solutions/<id>.payload.json as the
finish_task payload) is applied. The checks run through the eval's check runner, with commands
confined exactly as in a real ``fabric eval`` (the suite folder hidden from them). Research
citations must quote their page as fetch_url reads it from the suite's own web service.

All cases are checked at once, concurrently, by one module fixture; each case then gets its own
test so a failure names the case and the check."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fabric.application.context import ToolContext
from fabric.application.evals.attempts import substitute_check
from fabric.application.evals.checks import run_checks
from fabric.application.evals.records import CheckResult
from fabric.application.verify import RunRecord, ToolUse
from fabric.config.eval_suite import EvalCase, LoadedSuite, RunCheck
from fabric.config.eval_suite_loader import load_suite
from fabric.config.eval_suite_settings import substitute, with_pack_settings
from fabric.config.loader import load_config
from fabric.interfaces.compose import Runner, build_runner
from fabric.interfaces.eval_setup import AttemptFolders, ConfinedChecks
from fabric.interfaces.eval_web import WebFixture

REPO = Path(__file__).resolve().parents[2]
EVALS = REPO / "evals"
SUITE_NAMES = ("engineering", "research", "many-tools")
JOBS = 4
"""Cases checked at once (their commands are mostly waiting on process start-up)."""
LINES_OF_CODE = 150
LONG_CONTEXT_LINES = 600
"""A case tagged long-context is long on purpose: its code does not fit a small window."""
"""The most non-blank Python lines one engineering workspace may hold, tests included."""


def _load(name: str) -> LoadedSuite:
    return load_suite(EVALS / name)


SUITES = {name: _load(name) for name in SUITE_NAMES}
CASES = [(name, case.id) for name, suite in SUITES.items() for case in suite.cases]


@dataclass(frozen=True)
class Verdicts:
    """What the checks said about one case, untouched and solved."""

    untouched: tuple[CheckResult, ...]
    solved: tuple[CheckResult, ...]


def _solution(suite: LoadedSuite, case: EvalCase) -> tuple[Path | None, dict[str, Any] | None]:
    folder = suite.path / "solutions" / case.id
    payload_file = suite.path / "solutions" / f"{case.id}.payload.json"
    payload = json.loads(payload_file.read_text("utf-8")) if payload_file.is_file() else None
    return (folder if folder.is_dir() else None), payload


async def _check_case(
    suite: LoadedSuite,
    case: EvalCase,
    runner: Runner,
    work: Path,
    variables: dict[str, str],
    jobs: asyncio.Semaphore,
) -> Verdicts:
    folders, commands = AttemptFolders(), ConfinedChecks(runner)
    checks = [substitute_check(c, variables) for c in case.checks]

    async def check(folder: Path, some: Sequence[Any], payload: Any) -> tuple[CheckResult, ...]:
        return await run_checks(
            some, folder=folder, pack=case.pack, payload=payload, workspaces=folders,
            commands=commands,
        )  # fmt: skip

    async with jobs:
        untouched = work / case.id / "untouched"
        await asyncio.to_thread(folders.prepare, case.workspace, untouched)
        # doing nothing must fail: the cheap checks first, then commands (test runs last)
        # until one fails
        ordered = sorted(checks, key=_cost)
        before: list[CheckResult] = []
        for one in ordered:
            before += await check(untouched, [one], None)
            if not before[-1].passed:
                break
        solved = work / case.id / "solved"
        await asyncio.to_thread(folders.prepare, case.workspace, solved)
        files, payload = _solution(suite, case)
        if files is not None:
            await asyncio.to_thread(shutil.copytree, files, solved, dirs_exist_ok=True)
        after = await check(solved, checks, substitute(payload, variables))
    return Verdicts(tuple(before), after)


async def _check_suite(suite: LoadedSuite, work: Path) -> dict[str, Verdicts]:
    with WebFixture(suite.pages) if suite.pages else contextlib.nullcontext() as web:
        variables = {"web_url": web.url} if isinstance(web, WebFixture) else {}
        config = with_pack_settings(load_config(REPO / "fabric.yaml"), suite, variables)
        runner = build_runner(config, runs_dir=work / "runs", protected=[suite.path.resolve()])
        try:
            jobs = asyncio.Semaphore(JOBS)
            verdicts = await asyncio.gather(
                *(_check_case(suite, c, runner, work, variables, jobs) for c in suite.cases)
            )
        finally:
            await runner.aclose()
    return {case.id: v for case, v in zip(suite.cases, verdicts, strict=True)}


def _cost(check: Any) -> int:
    if not isinstance(check, RunCheck):
        return 0
    return 2 if "pytest" in check.run else 1


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Verdicts]]:
    work = tmp_path_factory.mktemp("suites")

    async def every_suite() -> list[dict[str, Verdicts]]:
        return await asyncio.gather(*(_check_suite(s, work / n) for n, s in SUITES.items()))

    return dict(zip(SUITES, asyncio.run(every_suite()), strict=True))


def _said(results: Sequence[CheckResult]) -> str:
    return "\n".join(f"  {'ok  ' if r.passed else 'FAIL'} {r.label}: {r.evidence}" for r in results)


@pytest.mark.parametrize(("suite", "case"), CASES, ids=[f"{s}/{c}" for s, c in CASES])
def test_doing_nothing_fails_and_the_reference_solution_passes(
    verdicts: dict[str, dict[str, Verdicts]], suite: str, case: str
) -> None:
    found = verdicts[suite][case]
    assert not all(r.passed for r in found.untouched), (
        f"{suite}/{case}: every check passes on the untouched workspace:\n{_said(found.untouched)}"
    )
    assert all(r.passed for r in found.solved), (
        f"{suite}/{case}: the reference solution fails:\n{_said(found.solved)}"
    )


def test_the_suites_have_the_promised_cases() -> None:
    engineering, research = SUITES["engineering"], SUITES["research"]
    tiers = Counter(case.tier for case in engineering.cases)
    assert len(engineering.cases) >= 22
    assert tiers["easy"] >= 8 and tiers["medium"] >= 8 and tiers["hard"] >= 6, tiers
    assert {case.pack for case in engineering.cases} == {"engineering"}
    assert len(research.cases) >= 6
    assert {case.pack for case in research.cases} == {"research"}
    assert research.pages is not None and research.pages.is_dir()
    assert any("not-on-any-page" in case.tags for case in research.cases)


@pytest.mark.parametrize("name", SUITE_NAMES)
def test_every_solution_belongs_to_a_case_and_every_case_has_one(name: str) -> None:
    suite = SUITES[name]
    ids = {case.id for case in suite.cases}
    named = {p.name.removesuffix(".payload.json") for p in (suite.path / "solutions").iterdir()}
    assert named == ids


def test_engineering_workspaces_are_small_stdlib_projects_with_tests() -> None:
    suite = SUITES["engineering"]
    for case in suite.cases:
        assert case.workspace is not None, case.id
        tests = sorted((case.workspace / "tests").glob("test_*.py"))
        assert tests, f"{case.id}: {case.workspace} has no tests/test_*.py"
        sources = sorted(_python_files(case.workspace))
        lines = sum(
            1 for f in sources for line in f.read_text("utf-8").splitlines() if line.strip()
        )
        most = LONG_CONTEXT_LINES if "long-context" in case.tags else LINES_OF_CODE
        assert lines <= most, f"{case.workspace.name}: {lines} lines of Python"
        solved = sorted(_python_files(suite.path / "solutions" / case.id))
        local_names = {f.stem for f in sources + solved}
        for file in sources + solved:
            for module in _imports(file.read_text("utf-8")):
                allowed = module in sys.stdlib_module_names or module in local_names
                allowed = allowed or (module == "pytest" and file.parent.name == "tests")
                assert allowed, f"{file.relative_to(EVALS)} imports {module}, not stdlib"


def test_research_citations_quote_the_pages_as_fetch_url_reads_them(tmp_path: Path) -> None:
    """Each reference payload's quotes pass the research pack's own citation verifier after
    the cited pages are fetched, with the pack's own fetch_url, from the suite's web service."""
    suite = SUITES["research"]
    assert suite.pages is not None
    with WebFixture(suite.pages) as web:
        variables = {"web_url": web.url}
        config = with_pack_settings(load_config(REPO / "fabric.yaml"), suite, variables)
        runner = build_runner(config, runs_dir=tmp_path / "runs")
        try:
            pack = runner.pack("research")
            fetch = next(t for t in pack.pack.tools if t.spec.name == "fetch_url")
            for case in suite.cases:
                payload = substitute(_solution(suite, case)[1], variables)
                assert isinstance(payload, dict), case.id
                ctx = ToolContext(f"quotes-{case.id}", tmp_path, pack.settings.sandbox)
                record = RunRecord()
                for url in sorted({c["url"] for c in payload["citations"]}):
                    assert url.startswith(web.url + "/"), f"{case.id}: {url} is no fixture page"
                    output = asyncio.run(fetch({"url": url}, ctx))
                    record.uses.append(ToolUse("fetch_url", {"url": url}, True, output))
                said = [asyncio.run(v.verify(payload, ctx, record)) for v in pack.pack.verifiers]
                verdicts = [v for v in said if v is not None]
                assert verdicts or not payload["citations"], f"{case.id}: nothing checked"
                for verdict in verdicts:
                    assert verdict.ok, f"{case.id}: {verdict.summary}\n{verdict.evidence}"
        finally:
            asyncio.run(runner.aclose())


def _python_files(folder: Path) -> Iterator[Path]:
    for path in folder.rglob("*.py"):
        if "__pycache__" not in path.parts:
            yield path


def _imports(source: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]
