"""The verification command as the engineering pack runs it: a real, confined process in the
workspace after the model's finish_task; by default the project's pytest tests, when there
are any and the run changed something."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import msgspec
import pytest

from fabric.application.context import ToolContext
from fabric.application.verify import RunRecord, ToolUse, Verdict
from fabric.domain.errors import ConfigError, RunError, SandboxError
from fabric.infrastructure.sandbox import command_runner
from fabric.infrastructure.tools.verifiers import AUTO_COMMAND, CommandVerifier, has_pytest_tests

LENDING = Path(__file__).resolve().parents[2] / "evals/engineering/workspaces/lending"
"""The workspace of the eval case fix-late-day-count: ~490 lines of code under failing tests."""
WROTE = RunRecord([ToolUse("write_file", {"path": "calc.py"}, True, "wrote calc.py")])
READ = RunRecord([ToolUse("read_file", {"path": "calc.py"}, True, "...")])


def project(folder: Path, body: str = "return a + b") -> None:
    (folder / "calc.py").write_text(f"def add(a, b):\n    {body}\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (folder / "conftest.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n"
    )


def check(verifier: CommandVerifier, ctx: ToolContext, record: RunRecord = WROTE):  # type: ignore[no-untyped-def]
    return asyncio.run(verifier.verify({"summary": "done"}, ctx, record))


def test_auto_runs_the_projects_tests_and_passes_when_they_do(ctx: ToolContext) -> None:
    project(ctx.workspace)
    verdict = check(CommandVerifier("auto"), ctx)
    assert verdict is not None and verdict.ok, verdict
    assert verdict.detail == {
        "command": "python -m pytest -q -x -p no:cacheprovider",
        "exit_code": 0,
        "before": None,  # the record has no brief's run of them: not known
    }
    assert not verdict.confirms and "how they fared before the run is not known" in (
        verdict.summary
    )


def test_auto_fails_with_the_failing_test_as_evidence(ctx: ToolContext) -> None:
    project(ctx.workspace, body="return a - b")
    verdict = check(CommandVerifier("auto"), ctx)
    assert verdict is not None and not verdict.ok
    assert "failed with exit code 1" in verdict.summary
    assert "test_add" in verdict.evidence and "assert -1 == 5" in verdict.evidence


def test_auto_has_nothing_to_check_without_tests_or_changes(ctx: ToolContext) -> None:
    (ctx.workspace / "notes.md").write_text("hello\n")
    assert check(CommandVerifier("auto"), ctx) is None  # no tests
    project(ctx.workspace)
    assert check(CommandVerifier("auto"), ctx, READ) is None  # the run only read
    assert check(CommandVerifier("auto", when="always"), ctx, READ) is not None


def test_tests_are_found_the_way_pytest_finds_them(tmp_path: Path) -> None:
    assert not has_pytest_tests(tmp_path)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "thing_test.py").write_text("")
    assert has_pytest_tests(tmp_path)
    other = tmp_path / "other"
    (other / ".venv" / "lib").mkdir(parents=True)
    (other / ".venv" / "lib" / "test_x.py").write_text("")
    assert not has_pytest_tests(other)  # hidden folders and virtualenvs are not the project's
    (other / "pyproject.toml").write_text("[project]\nname='x'\n\n[tool.pytest.ini_options]\n")
    assert has_pytest_tests(other)


def test_the_command_runs_confined_like_the_packs_commands(ctx: ToolContext) -> None:
    outside = ctx.workspace.parent / "outside.txt"
    script = f"open({str(outside)!r}, 'w').write('escaped')"
    verdict = check(CommandVerifier(f'python -c "{script}"', when="always"), ctx)
    assert verdict is not None
    assert not outside.exists()  # refused, or written to the sandbox's own /tmp: never here


def test_a_check_that_does_not_finish_cannot_verify_the_work(ctx: ToolContext) -> None:
    with pytest.raises(RunError, match="`sleep 30` did not finish") as stopped:
        check(CommandVerifier("sleep 30", when="always", timeout=1), ctx)
    assert "verify.timeout, now 1 s" in stopped.value.hint


def test_bad_commands_are_reported_as_what_they_are(ctx: ToolContext) -> None:
    with pytest.raises(ConfigError, match="must start with a program name"):
        CommandVerifier("./run-tests.sh")
    with pytest.raises(ConfigError, match="cannot parse"):
        CommandVerifier("pytest 'unclosed")
    with pytest.raises(ConfigError, match="not installed"):
        check(CommandVerifier("no-such-program-xyz --check", when="always"), ctx)
    bare = ToolContext("r", ctx.workspace, ctx.sandbox)
    with pytest.raises(SandboxError, match="no command runner"):
        check(CommandVerifier("python -V", when="always"), bare)


def test_the_engineering_brief_lists_the_files_and_says_how_the_tests_fare(
    ctx: ToolContext,
) -> None:
    from fabric.infrastructure.tools.briefs import WorkspaceBrief

    project(ctx.workspace, body="return a - b")
    (ctx.workspace / ".git").mkdir()
    told = asyncio.run(WorkspaceBrief()(ctx))
    text = told.text
    assert "calc.py" in text and "tests/test_calc.py" in text and ".git" not in text
    assert "The tests fail now" in text and "assert -1 == 5" in text
    assert "calc.py:\n  1| def add(a, b):\n  2|     return a - b" in text  # the code under test
    assert told.keep == () and "kept as they are" not in text  # not asked to keep tests
    assert told.ran == {"python -m pytest -q -x -p no:cacheprovider": 1}  # for the end's check
    (fixed := ctx.workspace.parent / "fixed").mkdir()
    project(fixed)
    runner = command_runner(ctx.sandbox, fixed)
    brief = WorkspaceBrief(keep_failing_tests=True)
    passing = asyncio.run(brief(ToolContext("r", fixed, ctx.sandbox, commands=runner)))
    assert "The tests pass now" in passing.text and "1 passed" in passing.text
    assert passing.keep == ()  # nothing fails, nothing kept
    assert passing.ran == {"python -m pytest -q -x -p no:cacheprovider": 0}
    (other := ctx.workspace / "plain").mkdir()
    (other / "notes.md").write_text("hi\n")
    bare = asyncio.run(WorkspaceBrief()(ToolContext("r", other, ctx.sandbox))).text
    assert "notes.md" in bare and "tests" not in bare  # no tests, no command runner: no run
    assert "The workspace is empty" not in bare
    (empty := ctx.workspace / "empty").mkdir()
    told_empty = asyncio.run(WorkspaceBrief()(ToolContext("r", empty, ctx.sandbox))).text
    assert "(empty)\n\nThe workspace is empty" in told_empty and "write_file" in told_empty


def test_the_brief_shows_the_code_the_tested_module_imports_and_keeps_failing_tests(
    ctx: ToolContext,
) -> None:
    """The bug is one import away from the test (posts.py calls slug.py): both are shown, and
    with keep_failing_tests the failing test file is named and kept."""
    from fabric.infrastructure.tools.briefs import WorkspaceBrief

    ws = ctx.workspace
    (ws / "slug.py").write_text(
        'def slugify(title, sep="_"):\n    return sep.join(title.split())\n'
    )
    (ws / "posts.py").write_text(
        "from slug import slugify\n\n\ndef url(t):\n    return slugify(t)\n"
    )
    (ws / "tests").mkdir()
    (ws / "tests" / "test_posts.py").write_text(
        "from posts import url\n\n\ndef test_url():\n    assert url('a b') == 'a-b'\n"
    )
    (ws / "conftest.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n"
    )
    told = asyncio.run(WorkspaceBrief(keep_failing_tests=True)(ctx))
    assert "posts.py:\n  1| from slug import slugify" in told.text
    assert 'slug.py:\n  1| def slugify(title, sep="_"):' in told.text
    assert told.keep == ("tests/test_posts.py",)
    assert "The failing tests (tests/test_posts.py) are kept as they are" in told.text
    assert "Change the code they test (posts.py, slug.py) instead" in told.why


def test_a_brief_with_little_room_keeps_the_outcome_and_cuts_the_code_to_fit(
    ctx: ToolContext,
) -> None:
    """A window's share of 4,000 characters for the lending workspace (whose brief would be
    ~16,000): the files and the failing test come first, then as many of loans.py's lines as
    fit, ended as read_file ends a partial view; the other modules are named."""
    from fabric.infrastructure.tools.briefs import SOURCE_LINES, WorkspaceBrief
    from fabric.infrastructure.tools.files import MIN_READ_LINES, read_file

    shutil.copytree(LENDING, ctx.workspace, dirs_exist_ok=True)
    room = 4_000
    limited = msgspec.structs.replace(ctx, brief_chars=room)
    told = asyncio.run(WorkspaceBrief(keep_failing_tests=True)(limited))
    text = told.text
    assert len(text) <= room
    assert "tests/test_loans.py\ntests/test_reminders.py" in text  # the files
    assert "FAILED tests/test_loans.py::test_three_days_late_costs_three_days" in text
    assert "E       AssertionError: assert 50 == 75" in text
    shown = re.search(r"\[\.\.\. lines 1-(\d+) of 123 shown; call read_file with start_line=", text)
    assert shown is not None
    last = int(shown[1])
    assert MIN_READ_LINES <= last < SOURCE_LINES
    # the lines shown are read_file's own window, numbered and noted as it does
    window = asyncio.run(read_file(ctx, "loans.py", 1, last))
    assert window.startswith('  1| """Loans: checking items out and in')
    assert window.endswith(f"call read_file with start_line={last + 1} for more ...]")
    assert f"\n\nloans.py:\n{window}\n\n(also imported: members.py, dates.py; " in text
    assert text.endswith("(also imported: members.py, dates.py; read them with read_file)")
    assert told.keep == ("tests/test_loans.py",)
    assert "Change the code they test (loans.py, members.py, dates.py)" in told.why


def test_a_brief_without_a_room_or_with_room_enough_shows_the_code_as_it_did(
    ctx: ToolContext,
) -> None:
    """No known window: the first SOURCE_LINES lines of each module, as before; a room that
    holds them all changes nothing."""
    from fabric.infrastructure.tools.briefs import FAILING_NEXT, SOURCE_LINES, WorkspaceBrief
    from fabric.infrastructure.tools.files import read_file

    shutil.copytree(LENDING, ctx.workspace, dirs_exist_ok=True)
    whole = asyncio.run(WorkspaceBrief()(ctx)).text
    modules = ("loans.py", "members.py", "dates.py")
    code = "".join(f"\n\n{m}:\n{asyncio.run(read_file(ctx, m, 1, SOURCE_LINES))}" for m in modules)
    assert whole.endswith(f"{FAILING_NEXT}{code}") and "also imported" not in whole
    # the workspace as it was: running its tests may leave files (a pytest plugin's folder)
    for entry in ctx.workspace.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(LENDING, ctx.workspace, dirs_exist_ok=True)
    roomy_ctx = msgspec.structs.replace(ctx, brief_chars=len(whole) + 100)
    roomy = asyncio.run(WorkspaceBrief()(roomy_ctx)).text

    def timeless(text: str) -> str:  # pytest's duration differs from run to run
        return re.sub(r" in [\d.]+s\b", " in 0.01s", text)

    assert timeless(roomy) == timeless(whole)


def test_a_pass_after_the_run_changed_the_tests_says_so(ctx: ToolContext) -> None:
    project(ctx.workspace, body="return a - b")
    (ctx.workspace / "tests" / "test_calc.py").write_text("def test_add():\n    pass\n")
    record = RunRecord(
        [
            ToolUse("edit_file", {"path": "tests/test_calc.py"}, True, "edited"),
            ToolUse("write_file", {"path": "calc.py"}, True, "wrote"),
        ]
    )
    verdict = check(CommandVerifier("auto"), ctx, record)
    assert verdict is not None and verdict.ok  # the tests pass: that is what was observed
    assert "the run changed tests or their settings: tests/test_calc.py" in verdict.summary
    assert verdict.detail["tests_changed"] == ["tests/test_calc.py"]
    failing_before = msgspec.structs.replace(record, before={AUTO_COMMAND: 1})
    again = check(CommandVerifier("auto"), ctx, failing_before)
    assert again is not None and again.ok and not again.confirms  # changed tests prove nothing


def test_the_tests_confirm_the_work_only_when_they_failed_before_the_run(
    ctx: ToolContext,
) -> None:
    """A whole test suite that passed before the run passes after a run that did nothing;
    one that failed before and passes now shows the fix. A command someone named for the
    task is their definition of done, so its pass confirms."""
    project(ctx.workspace)

    def verdict(record: RunRecord, command: str = "auto") -> Verdict:
        made = check(CommandVerifier(command), ctx, record)
        assert made is not None and made.ok, made
        return made

    fixed = verdict(msgspec.structs.replace(WROTE, before={AUTO_COMMAND: 1}))
    assert fixed.confirms and fixed.detail["before"] == 1
    assert fixed.summary == f"`{AUTO_COMMAND}` passed (exit code 0)"
    unchanged = verdict(msgspec.structs.replace(WROTE, before={AUTO_COMMAND: 0}))
    assert not unchanged.confirms
    assert unchanged.summary.endswith(
        "they passed before the run too, so they do not show the work"
    )
    assert not verdict(msgspec.structs.replace(WROTE, before={AUTO_COMMAND: 5})).confirms
    named = verdict(msgspec.structs.replace(WROTE, before={AUTO_COMMAND: 0}), "python -m pytest -q")
    assert named.confirms and "before" not in named.detail


def test_no_tests_collected_after_the_run_touched_their_settings_is_no_pass(
    ctx: ToolContext,
) -> None:
    project(ctx.workspace, body="return a - b")
    (ctx.workspace / "conftest.py").write_text('collect_ignore_glob = ["*"]\n')
    record = RunRecord([ToolUse("write_file", {"path": "conftest.py"}, True, "wrote")])
    verdict = check(CommandVerifier("auto"), ctx, record)
    assert verdict is not None and not verdict.ok
    assert verdict.detail["exit_code"] == 5 and verdict.detail["tests_changed"] == ["conftest.py"]
