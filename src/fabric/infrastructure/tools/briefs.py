"""What a pack tells the model about the workspace before its first step (``Pack.brief``).

A small model spends its first steps guessing: it invents paths (``src/app.py`` in a project
with no ``src``) and claims a fix before it has seen what fails. ``WorkspaceBrief`` looks
first, as a person would: the files in the workspace, and how the project's tests fare right
now, trimmed to the failures. The text is appended to the task and recorded in the runlog's
``brief`` event, so a replay sends the model the same words.
"""

from __future__ import annotations

import asyncio
import re

from fabric.application.context import ToolContext
from fabric.domain.errors import FabricError
from fabric.domain.test_output import trim_test_output

from .files import list_files, read_file
from .verifiers import AUTO_COMMAND, has_pytest_tests, run_command

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


class WorkspaceBrief:
    """The workspace's files (up to ``max_files``) and, when it has pytest tests, their
    outcome now (failures trimmed to ``test_chars``)."""

    def __init__(self, max_files: int = 60, test_chars: int = 1_500) -> None:
        self.max_files, self.test_chars = max_files, test_chars

    async def __call__(self, ctx: ToolContext) -> str:
        files = await asyncio.to_thread(list_files, ctx, ".", True, self.max_files)
        parts = [f"Files in the workspace (paths relative to its root):\n{files}"]
        tests = await self._tests(ctx)
        if tests:
            parts.append(tests)
        return "Before you start, fabric looked at the workspace.\n\n" + "\n\n".join(parts)

    async def _tests(self, ctx: ToolContext) -> str:
        if ctx.commands is None or not await asyncio.to_thread(has_pytest_tests, ctx.workspace):
            return ""
        timeout = min(ctx.sandbox.command_timeout, TEST_TIMEOUT)
        try:
            outcome = await run_command(ctx, AUTO_COMMAND, timeout)
        except FabricError as exc:
            return f"The tests could not be run: {exc.message}"
        if outcome.stopped:
            return f"The tests did not finish: {outcome.stopped}."
        summary = trim_test_output(outcome.output, self.test_chars).strip()
        if outcome.exit_code == 0:
            last = summary.splitlines()[-1] if summary else ""
            return f"The tests pass now (`{AUTO_COMMAND}`): {last}"
        code = await self._code_under_test(ctx, outcome.output)
        return (
            f"The tests fail now (`{AUTO_COMMAND}` exited with code {outcome.exit_code}):\n"
            f"{summary}\n\n{FAILING_NEXT}{code}"
        )

    async def _code_under_test(self, ctx: ToolContext, output: str) -> str:
        """The workspace modules the failing test files import, numbered as read_file shows
        them (so ``old`` for edit_file can be copied from here)."""
        shown: list[str] = []
        for test in dict.fromkeys(_FAILED_IN.findall(output)):
            for module in await _imported_modules(ctx, test):
                if module in shown or module == test or len(shown) >= 3:
                    continue
                shown.append(module)
        parts = []
        for module in shown:
            try:
                text = await read_file(ctx, module, 1, SOURCE_LINES)
            except FabricError:
                continue
            parts.append(f"\n\n{module}:\n{text}")
        return "".join(parts)


async def _imported_modules(ctx: ToolContext, test: str) -> list[str]:
    """Workspace files a test file imports (``from shop.cart import x`` -> shop/cart.py or
    shop/cart/__init__.py), read through the workspace's confined reader."""
    try:
        source = await read_file(ctx, test, 1, 400)
    except FabricError:
        return []
    text = "\n".join(line.split("| ", 1)[-1] for line in source.splitlines())
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
