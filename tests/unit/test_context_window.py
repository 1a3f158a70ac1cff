"""Context that fits (ADR 0021): a run whose model's window is known elides its oldest tool
outputs when its requests come near the window, says so in the runlog, lets the model read
them back, replays the same way, and fails clearly when a request cannot fit."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support import assert_valid_runlog
from test_replay import do_replay

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.loop.window import FIRST_RATIO, Window, message_chars
from fabric.application.pack import Pack
from fabric.domain.models import ChatResponse, Message, RunStatus, Usage
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import FunctionChatClient, MemoryRunLog, reply, tool_call, tool_calls
from packs.engineering import EngineeringSettings, build

PAGE = 3000
"""Characters of each page the tool reads."""


def page(number: int) -> str:
    """Read one page of the book.

    Args:
        number: Which page.
    """
    return f"page {number}: " + ("lorem ipsum " * 400)[:PAGE]


def _pack() -> Pack:
    return Pack("reader", "reads", "You read.", [FunctionTool(page)], {"type": "object"})


class Reader:
    """Reads pages 1..``pages``, then asks for page 1 back when it was elided, then finishes;
    counts prompt tokens as a third of the characters it is sent, as a server would."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.sent: list[list[Message]] = []
        self.tools: list[list[str]] = []

    async def __call__(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        self.sent.append(list(messages))
        self.tools.append([t["function"]["name"] for t in tools])
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        usage = Usage(sum(len(str(m.get("content") or "")) for m in messages) // 3, 10)
        if step <= self.pages:
            return tool_calls(("page", {"number": step}), usage=usage)
        first = next(m for m in messages if m.get("role") == "tool")
        if "elided" in str(first["content"]) and step == self.pages + 1:
            return tool_calls(("recall_output", {"ref": "1:call_0"}), usage=usage)
        return tool_calls(("finish_task", {}), usage=usage)


def _run(tmp_path: Path, reader: Reader, window: int) -> tuple[Any, list[dict[str, Any]]]:
    log = MemoryRunLog("w-1")
    kit = Kit(FunctionChatClient(reader), log, context_size=window)
    result = asyncio.run(execute_task(Job("read the book", _pack(), "w-1", tmp_path), kit))
    return result, assert_valid_runlog(log.events)


def test_old_outputs_are_elided_near_the_window_and_can_be_read_back(tmp_path: Path) -> None:
    reader = Reader(pages=5)
    result, events = _run(tmp_path, reader, window=4096)
    assert result.status is RunStatus.COMPLETED, result.error
    compactions = [e for e in events if e["kind"] == "context_compacted"]
    compacted = compactions[0]
    assert compacted["window"] == 4096 and compacted["prompt_tokens_max"] == 3072
    assert all(c["tokens_after"] < c["tokens_before"] for c in compactions)
    elided = compacted["elided"]
    assert elided[0] == {"ref": "1:call_0", "call_id": "call_0", "tool": "page", "chars": PAGE + 8}
    # each output is elided once, oldest first (a call id may come back: the ref has the step)
    refs = [d["ref"] for c in compactions for d in c["elided"]]
    assert refs == sorted(set(refs)) and refs[0] == "1:call_0"
    step = compacted["step"]
    # the request of that step sends a reference in place of the oldest page...
    sent = reader.sent[step - 1]
    first = next(m for m in sent if m.get("role") == "tool")
    assert "output elided to save context" in first["content"]
    assert 'call recall_output with ref "1:call_0"' in first["content"]
    # ...keeps the latest turns whole, and offers recall_output from then on
    assert str(sent[-1]["content"]).startswith("page ")
    assert reader.tools[step - 2] == ["page", "finish_task"]
    assert reader.tools[step - 1] == ["page", "finish_task", "recall_output"]
    # the runlog keeps every output whole
    outputs = [e["output"] for e in events if e["kind"] == "tool_result" and e["name"] == "page"]
    assert all(len(o) == PAGE + 8 for o in outputs)
    # the model read page 1 back, whole
    [recalled] = [e for e in events if e["kind"] == "tool_result" and e["name"] == "recall_output"]
    assert recalled["ok"] and recalled["output"] == page(1)

    # a replay compacts the same way and is identical
    report, replayed = do_replay(events, _pack(), tmp_path)
    assert report.identical, report.divergence
    again = [e for e in replayed if e["kind"] == "context_compacted"]
    assert [e["elided"] for e in again] == [c["elided"] for c in compactions]


def test_a_run_without_a_known_window_elides_nothing(tmp_path: Path) -> None:
    reader = Reader(pages=5)
    log = MemoryRunLog("w-2")
    result = asyncio.run(
        execute_task(Job("read", _pack(), "w-2", tmp_path), Kit(FunctionChatClient(reader), log))
    )
    assert result.status is RunStatus.COMPLETED
    assert not [e for e in log.events if e["kind"] == "context_compacted"]


def test_a_request_that_cannot_fit_ends_the_run_with_a_clear_error(tmp_path: Path) -> None:
    async def huge(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> ChatResponse:
        return tool_call("page", number=1)

    log = MemoryRunLog("w-3")
    kit = Kit(FunctionChatClient(huge), log, context_size=1024)
    big = "x" * 5000
    result = asyncio.run(execute_task(Job(big, _pack(), "w-3", tmp_path), kit))
    events = assert_valid_runlog(log.events)
    assert result.status is RunStatus.FAILED
    error = events[-1]["error"]
    assert error["code"] == "context_length_exceeded"
    assert "context window of 1,024 holds 768 besides the reply" in error["message"]
    assert "context_size" in error["hint"]
    assert not [e for e in events if e["kind"] == "llm_response"]  # never sent


class Thinker:
    """Thinks aloud at length each step (long replies, short outputs: eliding cannot help),
    reads a page, finishes at step ``last``; writes the notes a summary request asks for."""

    NOTES = "NOTES: read pages 1 to 3; nothing left but to finish."

    def __init__(self, last: int) -> None:
        self.last = last
        self.sent: list[list[Message]] = []
        self.summaries = 0

    async def __call__(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = Usage(chars // 3, 50)
        if str(messages[0]["content"]).startswith("You write the working notes"):
            self.summaries += 1
            assert not tools  # a summary offers no tools
            return reply(self.NOTES, usage=usage)
        self.sent.append(list(messages))
        step = len(self.sent)  # the history sent no longer has every turn
        thought = f"step {step}: " + "I am thinking about what to read next. " * 60
        if step >= self.last:
            response = tool_calls(("finish_task", {}), usage=usage)
        else:
            response = tool_calls(("short", {}), usage=usage)
        message = {**response.message, "content": thought}
        return ChatResponse(message, thought, response.tool_calls, usage, "tool_calls")


def short() -> str:
    """Look around."""
    return "nothing new"


def test_when_eliding_is_not_enough_older_turns_are_summarised(tmp_path: Path) -> None:
    thinker = Thinker(last=6)
    log = MemoryRunLog("w-4")
    pack = Pack("thinker", "thinks", "You think.", [FunctionTool(short)], {"type": "object"})
    kit = Kit(FunctionChatClient(thinker), log, context_size=4096)
    result = asyncio.run(execute_task(Job("think it through", pack, "w-4", tmp_path), kit))
    events = assert_valid_runlog(log.events)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.steps == 6  # a summary is not a step
    summarised = [e for e in events if e["kind"] == "context_compacted" and "summary" in e]
    assert summarised and thinker.summaries == len(summarised)
    first = summarised[0]
    assert first["summary"]["text"] == Thinker.NOTES and first["elided"] == []
    assert first["tokens_after"] < first["tokens_before"]
    # the next request sends the task with the notes, then only the latest turns
    sent = thinker.sent[first["step"] - 1]
    assert sent[1]["content"].startswith("think it through")
    through = first["summary"]["through_step"]
    assert f"steps 1-{through} were summarised" in sent[1]["content"]
    assert Thinker.NOTES in sent[1]["content"]
    assert sum(1 for m in sent if m.get("role") == "assistant") == 2  # the two latest turns
    # the summary's tokens count as the run's
    replies = sum(e["usage"]["total_tokens"] for e in events if e["kind"] == "llm_response")
    written = sum(e["summary"]["usage"]["total_tokens"] for e in summarised)
    assert result.usage.total_tokens == replies + written

    # a replay gets the recorded summaries back and is identical; the model is not asked
    report, replayed = do_replay(events, pack, tmp_path)
    assert report.identical, report.divergence
    again = [e["summary"]["text"] for e in replayed if e["kind"] == "context_compacted"
             if "summary" in e]  # fmt: skip
    assert again == [e["summary"]["text"] for e in summarised]


LENDING = Path(__file__).resolve().parents[2] / "evals/engineering/workspaces/lending"


def test_the_brief_keeps_to_its_share_of_the_window_so_the_requests_fit(
    ctx: ToolContext,
) -> None:
    """The engineering pack on the lending workspace (eval case fix-late-day-count) with a
    6,144-token window, 1,536 of it for the reply: the brief of its ~490 lines of code under
    failing tests was ~16,000 characters, more than the whole prompt's room, and the run failed
    before its first request. Now the brief keeps to its share, recorded in the runlog, and the
    first request, and the one after reading a file, fit."""
    shutil.copytree(LENDING, ctx.workspace, dirs_exist_ok=True)
    window = Window.of(6144, 1536)
    sizes: list[int] = []

    async def model(
        messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        chars = len(json.dumps(tools)) + sum(message_chars(m) for m in messages)
        sizes.append(chars)
        usage = Usage(int(chars / 3.8), 20)  # as the embedded model counted
        if len(sizes) == 1:
            return tool_calls(("read_file", {"path": "dates.py"}), usage=usage)
        return tool_calls(("finish_task", {"summary": "read dates.py"}), usage=usage)

    log = MemoryRunLog("w-5")
    kit = Kit(FunctionChatClient(model), log, ctx.commands, context_size=6144, reply_tokens=1536)
    pack = build(EngineeringSettings(builder="packs.engineering:build"))
    job = Job("Members are charged one late day too few.", pack, "w-5", ctx.workspace)
    result = asyncio.run(execute_task(job, kit))
    events = assert_valid_runlog(log.events)  # room_chars is in the schema
    # it ran to its finish_task (nothing confirms work that only read a file)
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED, result.error
    (brief,) = [e for e in events if e["kind"] == "brief"]
    assert brief["room_chars"] == window.brief_chars() == 4032
    assert len(brief["text"]) <= brief["room_chars"]
    assert "FAILED tests/test_loans.py::test_three_days_late_costs_three_days" in brief["text"]
    assert "loans.py:\n  1| " in brief["text"] and "(also imported: " in brief["text"]
    first = next(e for e in events if e["kind"] == "llm_request")
    assert first["messages"][1]["content"].endswith(brief["text"])  # sent with the task
    assert len(sizes) == 2 and int(sizes[0] * FIRST_RATIO) <= window.prompt
    assert int(sizes[1] / 3.8) <= window.prompt  # at the ratio the model counted
