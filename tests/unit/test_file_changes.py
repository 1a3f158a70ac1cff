"""``tool_result.changes``: what write_file and edit_file changed, as a unified diff in the
runlog for people (the console shows it), while the model is shown exactly what it was shown
before. Replay and resume of a run that recorded changes still work."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
from support import assert_valid_runlog

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.pack import Pack
from fabric.application.replay import replay
from fabric.domain.models import RunStatus
from fabric.infrastructure.tools.changes import MAX_DIFF_CHARS
from fabric.infrastructure.tools.edit import edit_file
from fabric.infrastructure.tools.files import read_file, write_file
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import MemoryRunLog, ScriptedChatClient, tool_call, tool_calls

SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
OLD = "def greet():\n    return 'hello'\n"


def writer_pack() -> Pack:
    tools = [FunctionTool(write_file), FunctionTool(edit_file), FunctionTool(read_file)]
    return Pack("writer", "writes files", "You write files.", tools, SCHEMA)


def run(
    workspace: Path, script: list[Any], run_id: str = "changes-1"
) -> tuple[list[dict[str, Any]], ScriptedChatClient]:
    chat = ScriptedChatClient([*script, tool_call("finish_task", done=True)])
    log = MemoryRunLog(run_id)
    job = Job("change the files", writer_pack(), run_id, workspace)
    result = asyncio.run(execute_task(job, Kit(chat, log)))
    assert result.status is RunStatus.COMPLETED, result.error
    return assert_valid_runlog(log.events), chat


def results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "tool_result" and e["name"] != "finish_task"]


def test_a_new_file_and_an_edit_are_recorded_as_diffs(workspace: Path) -> None:
    (workspace / "greet.py").write_text(OLD)
    events, _ = run(
        workspace,
        [
            tool_call("write_file", path="docs/notes.txt", content="first line\nsecond line\n"),
            tool_call("edit_file", path="greet.py", old="return 'hello'", new="return 'hi'"),
        ],
    )
    written, edited = results(events)
    assert written["changes"] == [
        {
            "path": "docs/notes.txt",
            "diff": "--- /dev/null\n+++ b/docs/notes.txt\n@@ -0,0 +1,2 @@\n"
            "+first line\n+second line\n",
            "created": True,
            "deleted": False,
        }
    ]
    [change] = edited["changes"]
    assert (change["path"], change["created"], change["deleted"]) == ("greet.py", False, False)
    assert change["diff"] == (
        "--- a/greet.py\n+++ b/greet.py\n@@ -1,2 +1,2 @@\n"
        " def greet():\n-    return 'hello'\n+    return 'hi'\n"
    )


def test_the_model_is_shown_exactly_what_the_tools_answer_without_a_recorder(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "greet.py").write_text(OLD)
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)
    script = [
        tool_call("write_file", path="a.txt", content="one\n"),
        tool_call("write_file", path="a.txt", content="two\n", append=True),
        tool_call("edit_file", path="greet.py", old="'hello'", new="'hi'"),
    ]
    events, chat = run(workspace, script)
    assert all("changes" in r for r in results(events))

    # the same calls, outside any run (nobody records changes): the same answers
    ctx = ToolContext("plain", pristine, writer_pack().sandbox)
    assert ctx.changes is None
    expected = [
        write_file(ctx, "a.txt", "one\n"),
        write_file(ctx, "a.txt", "two\n", append=True),
        edit_file(ctx, "greet.py", "'hello'", "'hi'"),
    ]
    messages, _tools = chat.requests[-1]
    assert [m["content"] for m in messages if m["role"] == "tool"] == expected
    sent = json.dumps([messages for messages, _ in chat.requests])
    assert "@@" not in sent and "/dev/null" not in sent and '"changes"' not in sent


def test_an_append_shows_the_added_lines_and_an_unchanged_write_records_nothing(
    workspace: Path,
) -> None:
    (workspace / "log.txt").write_text("a\nb")
    events, _ = run(
        workspace,
        [
            tool_call("write_file", path="log.txt", content="\nc\n", append=True),
            tool_call("write_file", path="log.txt", content="a\nb\nc\n"),  # the same text
        ],
    )
    appended, unchanged = results(events)
    assert appended["changes"][0]["diff"] == (
        "--- a/log.txt\n+++ b/log.txt\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n"
        "+b\n+c\n"
    )
    assert "no change" in unchanged["output"]
    assert "changes" not in unchanged


def test_a_refused_or_failed_call_records_no_change(workspace: Path) -> None:
    (workspace / "greet.py").write_text(OLD)
    events, _ = run(
        workspace,
        [
            tool_calls(
                ("write_file", {"path": "../outside.txt", "content": "x"}),
                ("edit_file", {"path": "greet.py", "old": "not there", "new": "x"}),
            )
        ],
    )
    for result in results(events):
        assert result["ok"] is False
        assert "changes" not in result
    assert not (workspace.parent / "outside.txt").exists()


def test_a_long_diff_is_cut_with_a_note(workspace: Path) -> None:
    content = "".join(f"line {n} of a long file\n" for n in range(5000))
    events, _ = run(workspace, [tool_call("write_file", path="big.txt", content=content)])
    [change] = results(events)[0]["changes"]
    assert len(change["diff"]) < MAX_DIFF_CHARS + 200
    assert change["diff"].startswith("--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,5000 @@\n+line 0 ")
    assert change["diff"].endswith("more diff line(s) not shown ...]\n")
    assert "[... diff cut at 20,000 characters:" in change["diff"]


def test_a_binary_or_huge_file_gets_a_note_instead_of_a_diff(workspace: Path) -> None:
    (workspace / "blob.txt").write_bytes(b"\x00\x01binary")
    (workspace / "huge.txt").write_text("x\n" * 200_000)
    events, _ = run(
        workspace,
        [
            tool_call("write_file", path="blob.txt", content="text now\n"),
            tool_call("write_file", path="huge.txt", content="small now\n"),
        ],
    )
    binary, huge = (r["changes"][0]["diff"] for r in results(events))
    assert binary == "[blob.txt: binary file, 8 bytes -> 9 bytes; no diff shown]\n"
    assert huge == "[huge.txt: 400,000 bytes -> 10 bytes; too large to show a diff]\n"


def test_a_run_with_recorded_changes_replays_identically(workspace: Path) -> None:
    (workspace / "greet.py").write_text(OLD)
    events, _ = run(
        workspace,
        [
            tool_call("write_file", path="new.txt", content="new\n"),
            tool_call("edit_file", path="greet.py", old="'hello'", new="'hi'"),
        ],
    )
    log = MemoryRunLog("replay-1")
    pack = writer_pack()
    report = asyncio.run(
        replay(events, pack=pack, run_id="replay-1", workspace=workspace, kit=Kit(None, log))
    )
    assert report.identical, report.divergence
    assert report.result.status is RunStatus.COMPLETED
    replayed = results(assert_valid_runlog(log.events))
    assert [r["output"] for r in replayed] == [r["output"] for r in results(events)]


def test_the_context_each_call_gets_is_its_own(workspace: Path) -> None:
    """A change noted by one call never shows up in the next call's result."""
    seen: list[int] = []

    def spy(ctx: ToolContext) -> str:
        """Report how many changes the call's list holds.

        Args:
        """
        assert ctx.changes is not None
        seen.append(len(ctx.changes))
        return "ok"

    pack = msgspec.structs.replace(writer_pack(), tools=[*writer_pack().tools, FunctionTool(spy)])
    chat = ScriptedChatClient(
        [
            tool_calls(("write_file", {"path": "a.txt", "content": "a"}), ("spy", {})),
            tool_call("finish_task", done=True),
        ]
    )
    log = MemoryRunLog("spy")
    asyncio.run(execute_task(Job("t", pack, "spy", workspace), Kit(chat, log)))
    assert seen == [0]
    spied = [e for e in log.events if e["kind"] == "tool_result" and e["name"] == "spy"]
    assert "changes" not in spied[0]
