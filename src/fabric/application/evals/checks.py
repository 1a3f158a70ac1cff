"""The checks of a finished attempt. None trusts the model: commands run confined in the
workspace it left, files are read without following links out of it, and the payload is
looked at as data, never run."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric.config.eval_suite import CheckSpec, FileCheck, PayloadCheck, RunCheck
from fabric.domain.errors import FabricError

from .ports import CheckCommands, Workspaces
from .records import CheckResult

TAIL_CHARS = 600
"""How much of a command's output the evidence keeps (its end, where the verdict usually is)."""
_SHOWN = 80


async def run_checks(
    checks: Sequence[CheckSpec],
    *,
    folder: Path,
    pack: str,
    payload: Mapping[str, Any] | None,
    workspaces: Workspaces,
    commands: CheckCommands,
) -> tuple[CheckResult, ...]:
    """Every check (all of them, so the evidence is complete), reported in the suite's
    order. Files are judged before any command runs: a check command runs the workspace's
    own code (a conftest.py, say), which could otherwise rewrite what a file check reads."""
    results: dict[int, CheckResult] = {}
    for index, check in enumerate(checks):
        if isinstance(check, FileCheck):
            read = await asyncio.to_thread(workspaces.read, folder, check.file)
            results[index] = file_check(check, read.data, read.problem)
        elif isinstance(check, PayloadCheck):
            results[index] = payload_check(check, payload)
    for index, check in enumerate(checks):
        if isinstance(check, RunCheck):
            results[index] = await _run(check, folder, pack, commands)
    return tuple(results[index] for index in range(len(checks)))


async def _run(check: RunCheck, folder: Path, pack: str, commands: CheckCommands) -> CheckResult:
    label = f"run: {check.run}"
    try:
        outcome = await commands.run(folder, pack, check.run, check.timeout_s)
    except FabricError as exc:
        return CheckResult("run", label, False, f"could not run: {exc.message}", errored=True)
    except Exception as exc:  # the machine failed us, not the workspace: still evidence
        why = f"could not run: {type(exc).__name__}: {exc}"
        return CheckResult("run", label, False, why, errored=True)
    tail = _tail(outcome.output)
    if outcome.stopped:
        return CheckResult("run", label, False, f"{outcome.stopped}; output ends: {tail}")
    evidence = f"exit code {outcome.exit_code}"
    if outcome.exit_code != check.exit_code:
        return CheckResult(
            "run", label, False, f"{evidence}, expected {check.exit_code}; output ends: {tail}"
        )
    if check.output_contains is not None and check.output_contains not in outcome.output:
        missing = _quote(check.output_contains)
        return CheckResult("run", label, False, f"{evidence}; output lacks {missing}: {tail}")
    return CheckResult("run", label, True, evidence)


def file_check(check: FileCheck, data: bytes | None, problem: str | None = None) -> CheckResult:
    """A file assertion on what was read (``data`` None: the file does not exist)."""
    label = f"file: {check.file}"
    if problem is not None:
        return CheckResult("file", label, False, problem)
    if data is None:
        if check.exists:
            return CheckResult("file", label, False, "the file does not exist")
        return CheckResult("file", label, True, "the file does not exist, as required")
    if not check.exists:
        return CheckResult("file", label, False, "the file exists but must not")
    text = data.decode("utf-8", errors="replace")
    failed = _text_assertions(text, check.contains, check.matches, check.not_contains)
    if failed:
        return CheckResult("file", label, False, failed)
    return CheckResult("file", label, True, f"{len(data)} bytes, assertions hold")


def payload_check(check: PayloadCheck, payload: Mapping[str, Any] | None) -> CheckResult:
    """A payload assertion on the value at the check's dotted path."""
    label = f"payload: {check.payload or '(whole)'}"
    if payload is None:
        return CheckResult("payload", label, False, "the run ended without a finish_task payload")
    found, value = _at(payload, check.payload)
    if not found:
        return CheckResult("payload", label, False, f"the payload has no {check.payload!r}")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    failed = _text_assertions(text, check.contains, check.matches, None)
    if not failed and "equals" in check.model_fields_set and value != check.equals:
        failed = f"value is {_quote(text)}, not {_quote(json.dumps(check.equals))}"
    if not failed and check.one_of is not None and value not in check.one_of:
        failed = f"value {_quote(text)} is none of {_quote(json.dumps(check.one_of))}"
    if failed:
        return CheckResult("payload", label, False, failed)
    return CheckResult("payload", label, True, f"value {_quote(text)}")


def _text_assertions(
    text: str, contains: str | None, matches: str | None, not_contains: str | None
) -> str | None:
    """The first assertion that fails, said in a line; None when all hold."""
    if contains is not None and contains not in text:
        return f"does not contain {_quote(contains)}"
    if not_contains is not None and not_contains in text:
        return f"contains {_quote(not_contains)}, which it must not"
    if matches is not None and re.search(matches, text) is None:
        return f"does not match /{matches}/"
    return None


def _at(payload: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """The value at a dotted path ('' is the whole payload; list items by number)."""
    value: Any = payload
    for part in path.split(".") if path else ():
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _tail(output: str) -> str:
    text = output.strip()
    if len(text) > TAIL_CHARS:
        text = "…" + text[-TAIL_CHARS:]
    return text or "(no output)"


def _quote(text: str) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= _SHOWN else one_line[: _SHOWN - 1] + "…")
