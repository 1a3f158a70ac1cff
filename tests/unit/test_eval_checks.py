"""The checks of an attempt: file assertions read beneath the workspace only, payload
assertions look at the finish_task payload as data, command checks report their evidence."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fabric.application.commands import CommandOutcome
from fabric.application.evals.checks import file_check, payload_check, run_checks
from fabric.config.eval_suite import FileCheck, PayloadCheck, RunCheck
from fabric.domain.errors import SandboxError
from fabric.interfaces.eval_setup import AttemptFolders


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "a.py").write_text("def last_items(items, n):\n    return items[-n:]\n")
    (tmp_path / "secret.txt").write_text("items[-n:] the answer")
    (ws / "out.py").symlink_to(tmp_path / "secret.txt")
    (ws / "inside.py").symlink_to("pkg/a.py")
    os.mkfifo(ws / "pipe")
    return ws


def _file(folder: Path, **given: Any) -> tuple[bool, str]:
    check = FileCheck(**given)
    read = AttemptFolders().read(folder, check.file)
    result = file_check(check, read.data, read.problem)
    return result.passed, result.evidence


def test_file_assertions(folder: Path) -> None:
    assert _file(folder, file="pkg/a.py", contains="items[-n:]", matches=r"def last_items\(")[0]
    assert _file(folder, file="pkg/a.py", not_contains="TODO")[0]
    assert _file(folder, file="pkg/a.py", contains="items[-n - 1:]") == (
        False, "does not contain 'items[-n - 1:]'"
    )  # fmt: skip
    assert _file(folder, file="pkg/a.py", matches="^class ") == (False, "does not match /^class /")
    assert _file(folder, file="gone.py") == (False, "the file does not exist")
    assert _file(folder, file="gone.py", exists=False)[0]
    assert _file(folder, file="pkg/a.py", exists=False) == (False, "the file exists but must not")
    assert _file(folder, file="inside.py", contains="return")[0]  # a link that stays inside


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("out.py", "leads outside the workspace"),
        ("../secret.txt", "leads outside the workspace"),
        ("/etc/passwd", "absolute path"),
        ("pipe", "is not a regular file"),
        ("pkg", "is not a regular file"),
    ],
)
def test_file_checks_never_read_outside_the_workspace(
    folder: Path, path: str, problem: str
) -> None:
    passed, evidence = _file(folder, file=path, contains="the answer")
    assert not passed and problem in evidence


PAYLOAD = {"answer": "SQLite 3.45", "n": 42, "items": [{"url": "http://a/x"}], "ok": True}


@pytest.mark.parametrize(
    ("given", "passed", "evidence"),
    [
        ({"payload": "answer", "matches": r"(?i)\bsqlite\b"}, True, "value 'SQLite 3.45'"),
        ({"payload": "answer", "contains": "Postgres"}, False, "does not contain 'Postgres'"),
        ({"payload": "n", "equals": 42}, True, "value '42'"),
        ({"payload": "n", "equals": "42"}, False, "value is '42', not '\"42\"'"),
        ({"payload": "items.0.url", "one_of": ["http://a/x", "http://b"]}, True, ""),
        ({"payload": "items.1.url", "contains": "a"}, False, "the payload has no 'items.1.url'"),
        ({"payload": "ok", "equals": None}, False, "value is 'true', not 'null'"),
        ({"payload": "", "contains": '"n": 42'}, True, ""),
    ],
)
def test_payload_assertions(given: dict[str, Any], passed: bool, evidence: str) -> None:
    result = payload_check(PayloadCheck(**given), PAYLOAD)
    assert result.passed is passed and evidence in result.evidence


def test_a_run_without_a_payload_fails_payload_checks() -> None:
    result = payload_check(PayloadCheck(payload="answer", contains="x"), None)
    assert not result.passed and "without a finish_task payload" in result.evidence


class _Commands:
    """Command outcomes by command line; a missing one cannot be run."""

    def __init__(self, outcomes: Mapping[str, CommandOutcome]) -> None:
        self.outcomes, self.asked = outcomes, list[tuple[str, float]]()

    async def run(self, folder: Path, pack: str, command: str, timeout: float) -> CommandOutcome:
        self.asked.append((command, timeout))
        if command not in self.outcomes:
            raise SandboxError(f"program {command.split()[0]!r} is not installed")
        return self.outcomes[command]


def test_command_checks_keep_the_exit_code_and_the_end_of_the_output(folder: Path) -> None:
    long_output = "x" * 5000 + "\nFAILED tests/test_a.py::test_b - assert 1 == 2\n1 failed"
    commands = _Commands(
        {
            "pytest -q": CommandOutcome(1, long_output),
            "python -V": CommandOutcome(0, "Python 3.11"),
            "sleep 9": CommandOutcome(None, "", stopped="killed after 1s timeout"),
        }
    )
    checks: Sequence[RunCheck] = [
        RunCheck(run="pytest -q"),
        RunCheck(run="python -V", output_contains="3.11", timeout_s=5),
        RunCheck(run="python -V", output_contains="3.12"),
        RunCheck(run="sleep 9", timeout_s=1),
        RunCheck(run="nothere --x"),
    ]
    results = asyncio.run(
        run_checks(
            checks,
            folder=folder,
            pack="p",
            payload=None,
            workspaces=AttemptFolders(),
            commands=commands,
        )
    )
    first = results[0]
    assert not first.passed and first.evidence.startswith("exit code 1, expected 0; output ends:")
    assert first.evidence.endswith("assert 1 == 2\n1 failed") and len(first.evidence) < 700
    assert (results[1].passed, results[1].evidence) == (True, "exit code 0")
    assert not results[2].passed and "output lacks '3.12'" in results[2].evidence
    assert not results[3].passed and results[3].evidence.startswith("killed after 1s timeout")
    assert not results[4].passed and "could not run: program 'nothere'" in results[4].evidence
    assert ("python -V", 5.0) in commands.asked


def test_files_are_judged_as_the_run_left_them_before_any_check_command_runs(
    folder: Path,
) -> None:
    """A check command runs the workspace's code (its conftest.py, say), which could rewrite
    a file that a later file check reads: files are read first, results keep suite order."""

    class Rewriting(_Commands):
        async def run(
            self, folder: Path, pack: str, command: str, timeout: float
        ) -> CommandOutcome:
            (folder / "pkg" / "a.py").write_text("def last_items(items, n):\n    return []\n")
            return CommandOutcome(0, "1 passed")

    checks = [
        RunCheck(run="pytest -q"),
        FileCheck(file="pkg/a.py", contains="items[-n:]"),
        PayloadCheck(payload="summary", contains="fixed"),
    ]
    results = asyncio.run(
        run_checks(checks, folder=folder, pack="p", payload={"summary": "fixed"},
                   workspaces=AttemptFolders(), commands=Rewriting({}))
    )  # fmt: skip
    assert [r.kind for r in results] == ["run", "file", "payload"]
    assert all(r.passed for r in results)  # the file as the run left it, not as rewritten
