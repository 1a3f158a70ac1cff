"""What a pack tells the model about the workspace before its first step (``Pack.brief``).

A small model spends its first steps guessing: it invents paths (``src/app.py`` in a project
with no ``src``) and claims a fix before it has seen what fails. ``WorkspaceBrief`` looks
first, as a person would: the files in the workspace, and how the project's tests fare right
now, trimmed to the failures. The text is appended to the task and recorded in the runlog's
``brief`` event, so a replay sends the model the same words.
"""

from __future__ import annotations

import asyncio

from fabric.application.context import ToolContext
from fabric.domain.errors import FabricError
from fabric.domain.test_output import trim_test_output

from .files import list_files
from .verifiers import AUTO_COMMAND, has_pytest_tests, run_command

TEST_TIMEOUT = 60.0
FAILING_NEXT = (
    "If the task is to make these tests pass: the tests are right and the source code is "
    "wrong. Read the source file the failing test imports (not the test), find the mistake, "
    "fix it with edit_file, and run the tests. Do not call finish_task before they pass."
)


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
        return (
            f"The tests fail now (`{AUTO_COMMAND}` exited with code {outcome.exit_code}):\n"
            f"{summary}\n\n{FAILING_NEXT}"
        )
