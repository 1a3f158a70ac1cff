"""The checks packs use to verify a finished run's claim (``fabric.application.verify``).

``CommandVerifier`` runs a command (the project's tests) confined in the workspace, exactly as
the shell tool runs commands; ``CitationVerifier`` checks that every cited page was read during
the run and holds the quoted words, and that the quotes hold the figures the answer states.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from fabric.application.commands import CommandOutcome
from fabric.application.context import ToolContext
from fabric.application.verify import RunRecord, Verdict
from fabric.domain.errors import ConfigError, RunError, SandboxError
from fabric.domain.figures import Figure, backed, figures
from fabric.domain.test_output import trim_test_output

from .shell import scrubbed_env

AUTO = "auto"
"""``verify.command: auto``: the project's pytest tests, when the workspace has any."""
AUTO_COMMAND = "python -m pytest -q -x -p no:cacheprovider"
PLAN_TOOL = "update_plan"
"""The model's own checklist (``application/plan.py``, imported only by a run that has it)."""
READ_ONLY_TOOLS = frozenset(
    {"read_file", "list_files", "search_files", "web_search", "fetch_url", PLAN_TOOL}
)
"""Tools that change nothing (the library's readers, and the plan): a run that used only
these has nothing to verify."""
EVIDENCE_CHARS = 4_000
_NO_TESTS_COLLECTED = 5  # pytest's exit code when it found no tests


class CommandVerifier:
    """Runs ``command`` in the finished workspace; exit code 0 passes. ``when='changed'``
    checks only runs that did more than read (wrote a file, ran a command).

    A command someone named is their definition of done: its pass confirms the work. ``auto``
    (the project's whole test suite) confirms it only when the brief saw the tests fail before
    the run began (``RunRecord.before``): tests that already passed pass after a run that did
    nothing, or answered a question. A run that changed the tests confirms nothing."""

    def __init__(
        self,
        command: str,
        *,
        when: Literal["changed", "always"] = "changed",
        timeout: float | None = None,
    ) -> None:
        if command != AUTO:
            _split(command)  # a bad command line is a configuration error, found at once
        self.command, self.when, self.timeout = command, when, timeout

    @property
    def name(self) -> str:
        if self.command == AUTO:
            return f"command: auto ({AUTO_COMMAND}, when the workspace has tests)"
        return f"command: {self.command}"

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        if self.when == "changed" and all(u.name in READ_ONLY_TOOLS for u in record.uses):
            return None  # a run that only read changed nothing a command could judge
        command = self.command
        if command == AUTO:
            if not await asyncio.to_thread(has_pytest_tests, ctx.workspace):
                return None
            command = AUTO_COMMAND
        timeout = self.timeout or ctx.sandbox.command_timeout
        outcome = await run_command(ctx, command, timeout)
        if outcome.stopped:  # the model cannot fix a check that does not finish: say so now
            raise RunError(
                f"`{command}` did not finish: {outcome.stopped}",
                hint=f"give the check more time (the pack's verify.timeout, now {timeout:g} s), "
                "or set verify.command to a faster check (e.g. the tests of one folder)",
            )
        code = outcome.exit_code
        touched = tests_changed(record)
        # "no tests collected" is a pass only for a project that really has none any more,
        # and not when the run itself touched the tests or their configuration
        ok = code == 0 or (self.command == AUTO and code == _NO_TESTS_COLLECTED and not touched)
        if ok:
            summary = f"`{command}` passed (exit code {code})"
        else:
            summary = f"`{command}` failed with exit code {code}"
        detail: dict[str, Any] = {"command": command, "exit_code": code}
        if touched:  # a model can make tests pass by changing them: the reader should know
            summary += f"; the run changed tests or their settings: {', '.join(touched)}"
            detail["tests_changed"] = touched
        confirms = not touched
        if ok and self.command == AUTO:
            before = record.before.get(command)
            detail["before"] = before
            # the whole test suite is a proxy: it shows the work only when it failed before it
            confirms = confirms and before not in (None, 0, _NO_TESTS_COLLECTED)
            if before is None:
                summary += "; how they fared before the run is not known"
            elif not confirms and not touched:
                summary += "; they passed before the run too, so they do not show the work"
        evidence = "" if ok else trim_test_output(outcome.output, EVIDENCE_CHARS).strip()
        return Verdict(ok, summary, evidence, detail, confirms=confirms)


async def run_command(ctx: ToolContext, command: str, timeout: float) -> CommandOutcome:
    """Run a command line of fabric's own (a check, not the model's) in the workspace,
    confined and with the scrubbed environment, as the shell tool runs the model's."""
    argv = _split(command)
    env = scrubbed_env(ctx.sandbox)
    program = shutil.which(argv[0], path=env["PATH"])
    if program is None:
        raise ConfigError(
            f"the verification program {argv[0]!r} is not installed on this machine",
            hint="install it, or change the pack's verify.command (or the task's --verify)",
        )
    if ctx.commands is None:
        raise SandboxError(
            "this run has no command runner, so its verification command cannot run",
            hint="start runs through fabric (CLI or HTTP), which confines commands",
        )
    return await ctx.commands.run([program, *argv[1:]], env=env, timeout=timeout)


_TEST_FILES = re.compile(
    r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$|pytest\.ini$|"
    r"pyproject\.toml$|setup\.cfg$|tox\.ini$|sitecustomize\.py$)"
)
_WRITING_TOOLS = ("write_file", "edit_file")


def tests_changed(record: RunRecord) -> list[str]:
    """The test files and test settings the run's file tools changed (what its commands
    changed is not known here)."""
    paths = {
        str(u.arguments.get("path", ""))
        for u in record.uses
        if u.ok and u.name in _WRITING_TOOLS and isinstance(u.arguments.get("path"), str)
    }
    return sorted(p for p in paths if _TEST_FILES.search(p.lstrip("./")))


def _split(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"cannot parse the verify command {command!r}: {exc}") from None
    if not argv or "/" in argv[0]:
        raise ConfigError(
            f"the verify command {command!r} must start with a program name",
            hint="e.g. 'python -m pytest -q'; the program is looked up on PATH",
        )
    return argv


_PYTEST_CONFIGS = ("pytest.ini", "conftest.py")
_TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")


def has_pytest_tests(workspace: Path, depth: int = 3) -> bool:
    """Whether ``workspace`` looks like a project with pytest tests: a pytest config, or a
    ``test_*.py`` / ``*_test.py`` file within ``depth`` folders (hidden folders and virtualenvs
    skipped). Never follows symbolic links."""
    if any((workspace / name).is_file() for name in _PYTEST_CONFIGS):
        return True
    for name in ("pyproject.toml", "setup.cfg", "tox.ini"):
        config = workspace / name
        if config.is_file() and not config.is_symlink():
            try:
                text = config.read_text("utf-8", errors="replace")[:200_000]
            except OSError:
                continue
            if re.search(r"^\[(tool\.pytest|tool:pytest|pytest)", text, re.MULTILINE):
                return True
    return _find_test_file(workspace, depth)


def _find_test_file(folder: Path, depth: int) -> bool:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return False
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_file() and _TEST_FILE.match(entry.name):
            return True
    if depth <= 1:
        return False
    return any(
        _find_test_file(entry, depth - 1)
        for entry in entries
        if entry.is_dir()
        and not entry.is_symlink()
        and not entry.name.startswith(".")
        and not (entry / "pyvenv.cfg").exists()
        and entry.name not in ("node_modules", "__pycache__")
    )


class CitationVerifier:
    """Every citation (``{url, quote}`` items of the payload's ``field``) must name a page
    that ``fetch_tool`` read during this run, and its quote must be on that page.

    ``grounded`` (the default) also holds the answer (the payload's ``answer_field``) to its
    quotes: each figure it states, a number, version, date or time of day, must be in one of
    them (``fabric.domain.figures`` says what counts and how loosely it is compared), or in
    the task itself, whose figures are the user's own. A read page and a real quote do not
    make an answer right: a small model quotes one line and states a version from another.
    This checks figures, not meaning: a quoted figure used for the wrong thing passes."""

    def __init__(
        self,
        field: str = "citations",
        fetch_tool: str = "fetch_url",
        *,
        answer_field: str = "answer",
        grounded: bool = True,
    ) -> None:
        self.field, self.fetch_tool = field, fetch_tool
        self.answer_field, self.grounded = answer_field, grounded

    @property
    def name(self) -> str:
        name = f"citations: every cited page was read with {self.fetch_tool} and holds the quote"
        return f"{name}; every figure of the answer is quoted" if self.grounded else name

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        citations = payload.get(self.field)
        items = citations if isinstance(citations, list) else []
        cited = [c for c in items if isinstance(c, Mapping)]
        answer = payload.get(self.answer_field) if self.grounded else None
        stated = figures(answer) if isinstance(answer, str) else []
        if not cited and not stated:
            return None  # nothing claimed from a source, nothing to check
        pages: dict[str, list[str]] = {}
        for use in record.outputs_of(self.fetch_tool):
            for url in _urls_of(use.arguments, use.output):
                pages.setdefault(url, []).append(_plain(use.output))
        problems = []
        for index, citation in enumerate(items):
            if not isinstance(citation, Mapping):
                continue
            url, quote = str(citation.get("url", "")), str(citation.get("quote", ""))
            read = pages.get(_url_key(url))
            if read is None:
                problems.append(
                    f"- citations[{index}]: {url[:200]} was not read during this run "
                    f"(fetch it with {self.fetch_tool} before citing it)"
                )
            elif not _quote_found(quote, read):
                problems.append(
                    f"- citations[{index}]: the quote is not on {url[:200]} as read "
                    "(copy the words exactly from the page)"
                )
        if problems:
            summary = f"{len(problems)} of {len(cited)} citation(s) not backed by a page read"
            return Verdict(False, summary, "\n".join(problems))
        quotes = [str(c.get("quote", "")) for c in cited]
        known = backed([*quotes, record.task])
        missing = [f for f in stated if f.key not in known]
        if missing:
            return _ungrounded(missing, len(stated), len(cited))
        summary = f"all {len(cited)} citation(s) were read and quoted"
        if stated:
            summary += f"; they hold the answer's {len(stated)} figure(s)"
        # read pages and real quotes ground an answer; they do not show it answers the question
        return Verdict(True, summary, confirms=False)


class SeenFigures:
    """Every figure the payload's ``field`` states (a number, version, date or time:
    ``fabric.domain.figures``) must be one the run saw: in the task, the pack's brief or the
    output of one of its tool calls. A small model answers a question about the code with a
    number it made up ("the largest PNG is 1024 bytes") and the tests, which pass, cannot tell.
    It checks figures, not meaning: a summary that states none, or a seen figure put to the
    wrong use, passes."""

    def __init__(self, field: str = "summary") -> None:
        self.field = field

    @property
    def name(self) -> str:
        return f"figures: every number the {self.field} states was seen during the run"

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        text = payload.get(self.field)
        stated = figures(text) if isinstance(text, str) else []
        if not stated:
            return None  # nothing checkable claimed
        # the plan's answer repeats the model's own words: no evidence of anything
        seen = (use.output for use in record.uses if use.name != PLAN_TOOL)
        known = backed([record.task, record.brief, *seen])
        missing = [f for f in stated if f.key not in known]
        if missing:
            lines = _listed(
                missing,
                f"(in the {self.field}) is in no file, test or command output this run saw: "
                "run the code or read the file that gives it, or leave it out",
            )
            summary = (
                f"{len(missing)} of the {self.field}'s {len(stated)} figure(s) were never seen "
                "during the run"
            )
            return Verdict(False, summary, "\n".join(lines), {"unseen": [f.text for f in missing]})
        return Verdict(
            True,
            f"the {self.field}'s {len(stated)} figure(s) were all seen in the run",
            confirms=False,  # seen is not right: a figure can be the wrong one
        )


_LISTED = 12
"""The most unbacked figures named one by one in a verdict."""


def _listed(missing: list[Figure], why: str) -> list[str]:
    """One line per unbacked figure (at most ``_LISTED``), each saying ``why`` and what to do."""
    lines = [f'- "{f.text[:80]}" {why}' for f in missing[:_LISTED]]
    if len(missing) > _LISTED:
        lines.append(f"- and {len(missing) - _LISTED} more")
    return lines


def _ungrounded(missing: list[Figure], stated: int, cited: int) -> Verdict:
    """The verdict on an answer stating figures that none of its quotes holds: each one named,
    with what to do about it, in words a small model can act on."""
    lines = _listed(
        missing,
        "(in the answer) is in none of the quotes: quote the sentence of the page that states "
        "it, or leave it out",
    )
    lines.append(
        "Every number, version and date in the answer must be in one of its quotes, written as "
        "the page writes it (figures from the question itself excepted)."
    )
    are = "is" if len(missing) == 1 else "are"
    summary = f"{len(missing)} of the answer's {stated} figure(s) {are} in none of the quotes"
    if not cited:
        summary = f"the answer states {stated} figure(s) and cites no page that holds them"
    detail = {"unquoted": [f.text for f in missing]}
    return Verdict(False, summary, "\n".join(lines), detail)


def _urls_of(arguments: Mapping[str, Any], output: str) -> set[str]:
    """The URL asked for and the one finally read (after redirects: the output's first line)."""
    urls = {_url_key(str(arguments.get("url", "")))}
    first = output.split("\n", 1)[0]
    if first.startswith("URL: "):
        urls.add(_url_key(first[5:].strip()))
    return urls


def _url_key(url: str) -> str:
    """A URL compared loosely: no fragment, no trailing slash, host in lower case."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


_MARKUP = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_NOISE = str.maketrans({"*": "", "`": "", "#": " ", "_": " ", ">": " ", "|": " "})
_SPACE_BEFORE = re.compile(r" ([,.;:!?)\]])")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_ELLIPSIS = re.compile(r"\.\.\.|\u2026|\[\.\.\.\]")


def _plain(text: str) -> str:
    """Text compared loosely: Markdown links and emphasis dropped, quotes and dashes
    straightened, case folded, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", _MARKUP.sub(r"\1", text))
    text = text.translate(_QUOTES).translate(_NOISE).replace("\u2014", "-").replace("\u2013", "-")
    return _SPACE_BEFORE.sub(r"\1", " ".join(text.casefold().split()))


def _quote_found(quote: str, pages: list[str]) -> bool:
    """Whether every part of ``quote`` (split at ellipses) is on one of ``pages``."""
    parts = [_plain(p).strip(" \"'.,;:") for p in _ELLIPSIS.split(quote)]
    parts = [p for p in parts if p]
    if not parts:
        return False
    return any(all(p in page for p in parts) for page in pages)
