"""What a pack tells the model about the workspace before its first step (``Pack.brief``).

A small model spends its first steps guessing: it invents paths (``src/app.py`` in a project
with no ``src``) and claims a fix before it has seen what fails. ``WorkspaceBrief`` looks
first, as a person would: the files in the workspace, and how the project's tests fare right
now, trimmed to the failures. The text is appended to the task and recorded in the runlog's
``brief`` event, so a replay sends the model the same words.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import PurePosixPath

from fabric.application.context import ToolContext
from fabric.application.pack import Briefing
from fabric.domain.errors import FabricError
from fabric.domain.test_output import trim_test_output

from .files import EMPTY, list_files, read_file
from .verifiers import AUTO_COMMAND, has_pytest_tests, run_command
from .workspace import Workspace

TEST_TIMEOUT = 60.0
FAILING_NEXT = (
    "If the task is to make these tests pass: the tests are right and the source code is "
    "wrong. The code the failing test imports is shown below: find the mistake there (not in "
    "the test), fix it with edit_file, and run the tests. Do not call finish_task before they "
    "pass."
)
_FAILED_IN = re.compile(r"^(?:FAILED|ERROR) ([\w./-]+\.py)(?:::|\s|$)", re.MULTILINE)
_IMPORTS = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)
SOURCE_LINES = 120
"""Lines of each module under test shown in the brief (a window; read_file shows the rest)."""
MAX_MODULES = 3
_MAX_SOURCE_BYTES = 400_000
KEPT_NOTE = (
    "The failing tests ({tests}) are kept as they are in this run: edit_file and write_file "
    "will not change them."
)
KEPT_WHY = (
    "it is a test that failed when the run started, and the failing tests say what the code "
    "must do. Change the code they test ({code}) instead"
)


EMPTY_NEXT = (
    "The workspace is empty: nothing exists yet to read or run. Create the files the task "
    "asks for with write_file, at the paths the task names (relative to the workspace root)."
)


class WorkspaceBrief:
    """The workspace's files (up to ``max_files``) and, when it has pytest tests, their
    outcome now (failures trimmed to ``test_chars``), with the code the failing tests
    exercise. With ``keep_failing_tests`` the test files that fail are kept as they are for
    the run (``Briefing.keep``): a small model otherwise "fixes" the test."""

    def __init__(
        self, max_files: int = 60, test_chars: int = 1_500, *, keep_failing_tests: bool = False
    ) -> None:
        self.max_files, self.test_chars = max_files, test_chars
        self.keep_failing_tests = keep_failing_tests

    async def __call__(self, ctx: ToolContext) -> Briefing:
        files, has_tests = await asyncio.to_thread(self._look, ctx)
        parts = [f"Files in the workspace (paths relative to its root):\n{files}"]
        if files == EMPTY:  # the embedded model ran `python -m hello` in an empty folder
            parts.append(EMPTY_NEXT)
        tests = await self._tests(ctx) if has_tests else Briefing("")
        if tests.text:
            parts.append(tests.text)
        text = "Before you start, fabric looked at the workspace.\n\n" + "\n\n".join(parts)
        return Briefing(text, tests.keep, tests.why, tests.ran)

    def _look(self, ctx: ToolContext) -> tuple[str, bool]:
        """The workspace's files, and whether it has pytest tests this run can run: what the
        brief reads of the disk, in one trip to a worker thread."""
        files = list_files(ctx, ".", True, self.max_files)
        return files, ctx.commands is not None and has_pytest_tests(ctx.workspace)

    async def _tests(self, ctx: ToolContext) -> Briefing:
        timeout = min(ctx.sandbox.command_timeout, TEST_TIMEOUT)
        try:
            outcome = await run_command(ctx, AUTO_COMMAND, timeout)
        except FabricError as exc:
            return Briefing(f"The tests could not be run: {exc.message}")
        if outcome.stopped:
            return Briefing(f"The tests did not finish: {outcome.stopped}.")
        summary = trim_test_output(outcome.output, self.test_chars).strip()
        # how the tests fared before the run changed anything: the end's check compares
        ran = {} if outcome.exit_code is None else {AUTO_COMMAND: outcome.exit_code}
        if outcome.exit_code == 0:
            last = summary.splitlines()[-1] if summary else ""
            return Briefing(f"The tests pass now (`{AUTO_COMMAND}`): {last}", ran=ran)
        failing = [t for t in dict.fromkeys(_FAILED_IN.findall(outcome.output)) if _inside(t)]
        modules = await _code_under_test(ctx, failing)
        code = "".join(f"\n\n{module}:\n{text}" for module, text in modules)
        text = (
            f"The tests fail now (`{AUTO_COMMAND}` exited with code {outcome.exit_code}):\n"
            f"{summary}\n\n{FAILING_NEXT}"
        )
        if not self.keep_failing_tests or not failing:
            return Briefing(text + code, ran=ran)
        under_test = ", ".join(m for m, _ in modules) or "the source files"
        kept = ", ".join(failing)
        return Briefing(
            f"{text}\n{KEPT_NOTE.format(tests=kept)}{code}",
            tuple(failing),
            KEPT_WHY.format(code=under_test),
            ran,
        )


def _inside(path: str) -> bool:
    """A path pytest named that stays inside the workspace (the output is the project's)."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


async def _code_under_test(ctx: ToolContext, failing: list[str]) -> list[tuple[str, str]]:
    """The workspace modules the failing test files import and, after them, the modules
    those import, numbered as read_file shows them (so ``old`` for edit_file can be copied
    from here); at most ``MAX_MODULES``."""
    shown: list[str] = []
    for source in (failing, shown):  # the tests' imports, then the imports of those modules
        for importer in list(source):
            for module in await asyncio.to_thread(_imported_modules, ctx, importer):
                if module not in shown and module not in failing and len(shown) < MAX_MODULES:
                    shown.append(module)
    found = []
    for module in shown:
        try:
            found.append((module, await read_file(ctx, module, 1, SOURCE_LINES)))
        except FabricError:
            continue
    return found


def _imported_modules(ctx: ToolContext, importer: str) -> list[str]:
    """Workspace files a Python file imports (``from shop.cart import x`` -> shop/cart.py or
    shop/cart/__init__.py), read through the workspace's confined reader."""
    try:
        with Workspace(ctx) as ws, ws.open(importer) as opened:
            data = os.pread(opened.fd, _MAX_SOURCE_BYTES, 0)
    except (FabricError, OSError):
        return []
    text = data.decode("utf-8", errors="replace")
    found = []
    for dotted in (a or b for a, b in _IMPORTS.findall(text)):
        if dotted.split(".")[0] in ("pytest", "unittest", "__future__"):
            continue
        base = dotted.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py", f"src/{base}.py"):
            if (ctx.workspace / candidate).is_file():
                found.append(candidate)
                break
    return found
