"""What a pack tells the model about the workspace before its first step (``Pack.brief``).

A small model spends its first steps guessing: it invents paths (``src/app.py`` in a project
with no ``src``) and claims a fix before it has seen what fails. ``WorkspaceBrief`` looks
first, as a person would: the files in the workspace, and how the project's tests fare right
now, trimmed to the failures. The text is appended to the task and recorded in the runlog's
``brief`` event, so a replay sends the model the same words.

The task's message is never compacted (ADR 0021), so when the run knows its model's window the
brief keeps to the share of it the run gives (``ToolContext.brief_chars``), spent in order of
worth: the files and the tests' outcome first, then the code under test, module by module, each
cut to the lines that fit; the modules left out are named.
"""

from __future__ import annotations

import asyncio
import os
import re
from itertools import accumulate, takewhile
from pathlib import PurePosixPath

from fabric.application.context import ToolContext
from fabric.application.pack import Briefing
from fabric.domain.errors import FabricError
from fabric.domain.test_output import trim_test_output

from .files import EMPTY, MIN_READ_LINES, list_files, read_file
from .snippets import NUMBERED
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
MIN_TEST_CHARS = 500
"""The least of the tests' outcome a brief shows, however small its room: the failing tests'
names and the assertion that failed."""
_NOTE_CHARS = 160
"""Room kept for the note read_file ends a partial window with (the longest, for a large file,
is about 150 characters)."""
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
    the run (``Briefing.keep``): a small model otherwise "fixes" the test. With
    ``ToolContext.brief_chars`` the text keeps within that many characters, unless the files
    and ``MIN_TEST_CHARS`` of the tests' outcome alone need more."""

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
        text = "Before you start, fabric looked at the workspace.\n\n" + "\n\n".join(parts)
        room = _less(ctx.brief_chars, len(text) + 2)
        tests = await self._tests(ctx, room) if has_tests else Briefing("")
        if tests.text:
            text += f"\n\n{tests.text}"
        return Briefing(text, tests.keep, tests.why, tests.ran)

    def _look(self, ctx: ToolContext) -> tuple[str, bool]:
        """The workspace's files, and whether it has pytest tests this run can run: what the
        brief reads of the disk, in one trip to a worker thread."""
        files = list_files(ctx, ".", True, self.max_files)
        return files, ctx.commands is not None and has_pytest_tests(ctx.workspace)

    async def _tests(self, ctx: ToolContext, room: int | None) -> Briefing:
        """How the tests fare now, in ``room`` characters (None: as many as it takes)."""
        timeout = min(ctx.sandbox.command_timeout, TEST_TIMEOUT)
        try:
            outcome = await run_command(ctx, AUTO_COMMAND, timeout)
        except FabricError as exc:
            return Briefing(f"The tests could not be run: {exc.message}")
        if outcome.stopped:
            return Briefing(f"The tests did not finish: {outcome.stopped}.")
        # how the tests fared before the run changed anything: the end's check compares
        ran = {} if outcome.exit_code is None else {AUTO_COMMAND: outcome.exit_code}
        if outcome.exit_code == 0:
            summary = self._summary(outcome.output, None)
            last = summary.splitlines()[-1] if summary else ""
            return Briefing(f"The tests pass now (`{AUTO_COMMAND}`): {last}", ran=ran)
        failing = [t for t in dict.fromkeys(_FAILED_IN.findall(outcome.output)) if _inside(t)]
        kept = ", ".join(failing) if self.keep_failing_tests else ""
        head = f"The tests fail now (`{AUTO_COMMAND}` exited with code {outcome.exit_code}):\n"
        tail = f"\n\n{FAILING_NEXT}" + (f"\n{KEPT_NOTE.format(tests=kept)}" if kept else "")
        text = head + self._summary(outcome.output, _less(room, len(head) + len(tail))) + tail
        code, modules = await _code_under_test(ctx, failing, _less(room, len(text)))
        if not kept:
            return Briefing(text + code, ran=ran)
        under_test = ", ".join(modules) or "the source files"
        return Briefing(text + code, tuple(failing), KEPT_WHY.format(code=under_test), ran)

    def _summary(self, output: str, room: int | None) -> str:
        """pytest's ``output`` trimmed to ``test_chars``, or further to fit in ``room`` with
        the note trim_test_output adds, though never under ``MIN_TEST_CHARS``."""
        limit = self.test_chars if room is None else max(min(self.test_chars, room), MIN_TEST_CHARS)
        summary = trim_test_output(output, limit).strip()
        while room is not None and len(summary) > room and limit > MIN_TEST_CHARS:
            limit = max(limit - (len(summary) - room), MIN_TEST_CHARS)
            summary = trim_test_output(output, limit).strip()
        return summary


def _less(room: int | None, used: int) -> int | None:
    """What is left of ``room`` (None: no limit) after ``used`` characters."""
    return None if room is None else room - used


def _inside(path: str) -> bool:
    """A path pytest named that stays inside the workspace (the output is the project's)."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


async def _code_under_test(
    ctx: ToolContext, failing: list[str], room: int | None
) -> tuple[str, list[str]]:
    """The code the failing tests exercise, numbered as read_file shows it (so ``old`` for
    edit_file can be copied from here): the start of each module, module by module, in
    ``room`` characters (None: ``SOURCE_LINES`` lines of each), and one line naming the
    modules that no longer fit. Returns the text and the modules, shown or named."""
    modules = await _modules_under_test(ctx, failing)
    left = _less(room, len(_also(modules)))  # kept for that line, however many it names
    code, named, dropped = "", [], []
    for module in modules:
        label = f"\n\n{module}:\n"
        try:
            source = await _source(ctx, module, _less(left, len(code) + len(label)))
        except FabricError:  # e.g. binary: as if it were not there
            continue
        named.append(module)
        if source is None:
            dropped.append(module)
        else:
            code += label + source
    return code + _also(dropped), named


async def _modules_under_test(ctx: ToolContext, failing: list[str]) -> list[str]:
    """The workspace modules the failing test files import and, after them, the modules
    those import; at most ``MAX_MODULES``."""
    shown: list[str] = []
    for source in (failing, shown):  # the tests' imports, then the imports of those modules
        for importer in list(source):
            for module in await asyncio.to_thread(_imported_modules, ctx, importer):
                if module not in shown and module not in failing and len(shown) < MAX_MODULES:
                    shown.append(module)
    return shown


async def _source(ctx: ToolContext, module: str, room: int | None) -> str | None:
    """The start of ``module`` as read_file shows it: ``SOURCE_LINES`` lines, or as many as
    fit in ``room`` characters, with read_file's note on the lines it left out; None when
    fewer lines than read_file's narrowest window (``MIN_READ_LINES``) would fit."""
    text = await read_file(ctx, module, 1, SOURCE_LINES)
    if room is None or len(text) <= room:
        return text
    lines = _lines_within(text, room - _NOTE_CHARS)
    if lines < MIN_READ_LINES:
        return None
    cut = await read_file(ctx, module, 1, lines)
    return cut if len(cut) <= room else None


def _lines_within(text: str, chars: int) -> int:
    """How many of the numbered lines read_file's ``text`` starts with fit in ``chars``."""
    numbered = takewhile(NUMBERED.match, text.split("\n"))
    return sum(1 for size in accumulate(len(line) + 1 for line in numbered) if size <= chars)


def _also(modules: list[str]) -> str:
    """The line naming the modules under test the brief had no room for ("": none)."""
    if not modules:
        return ""
    return f"\n\n(also imported: {', '.join(modules)}; read them with read_file)"


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
