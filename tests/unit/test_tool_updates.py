"""Tools that come and go during a run (an MCP server's list changing): the model is offered
the new set from its next call, the runlog says what changed, and a replay offers the same
sets at the same steps without the source."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from support import assert_valid_runlog

from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.pack import Pack
from fabric.application.ports import Tool, ToolChange
from fabric.application.replay import replay
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import MemoryRunLog, ScriptedChatClient, tool_call

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def shout(text: str) -> str:
    """Say it loudly.

    Args:
        text: What to say.
    """
    return text.upper()


def whisper(text: str) -> str:
    """Say it softly.

    Args:
        text: What to say.
    """
    return text.lower()


SHOUT = FunctionTool(shout, name="shout")
WHISPER = FunctionTool(whisper, name="srv__whisper")


class Grows:
    """Adds ``srv__whisper`` before model call ``at``, as a server's new tool."""

    def __init__(self, at: int) -> None:
        self.at, self.asked = at, []  # type: ignore[var-annotated]

    async def changed(self, step: int) -> ToolChange | None:
        self.asked.append(step)
        if step != self.at:
            return None
        added = {"name": "srv__whisper", "server": "srv", "tool": "whisper"}
        return ToolChange((SHOUT, WHISPER), {"servers": ["srv"], "added": [added]})


def _pack(tools: tuple[Tool, ...] = (SHOUT,)) -> Pack:
    return Pack("talker", "talks", "You talk.", tools, finish_schema=SCHEMA)


def _run(tmp_path: Path, script: list[Any]) -> tuple[list[dict[str, Any]], Any]:
    log, updates = MemoryRunLog(), Grows(at=2)
    kit = Kit(ScriptedChatClient(script), log, tool_updates=updates)
    result = asyncio.run(execute_task(Job("talk", _pack(), "r1", tmp_path), kit))
    assert updates.asked == list(range(1, result.steps + 1))  # before every model call
    return assert_valid_runlog(log.events), result


def _names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["tools"]]


def test_a_tool_added_during_the_run_is_offered_from_the_next_call(tmp_path: Path) -> None:
    script = [
        tool_call("srv__whisper", {"text": "A"}),  # not offered yet
        tool_call("srv__whisper", {"text": "B"}),
        tool_call("finish_task", {"answer": "done"}),
    ]
    events, result = _run(tmp_path, script)
    assert result.status.value == "completed"
    requests = [e for e in events if e["kind"] == "llm_request"]
    assert _names(requests[0]) == ["shout", "finish_task"]
    assert _names(requests[1]) == ["shout", "srv__whisper", "finish_task"]
    assert requests[1]["tools_changed"]["added"][0]["server"] == "srv"
    assert "tools" not in requests[2] and "tools_changed" not in requests[2]
    first, second = [e for e in events if e["kind"] == "tool_result"][:2]
    assert not first["ok"] and "use one of: shout, finish_task" in first["error"]["hint"]
    assert second["ok"] and second["output"] == "b"


def test_a_replay_offers_the_recorded_sets_without_the_source(tmp_path: Path) -> None:
    script = [
        tool_call("srv__whisper", {"text": "B"}),
        tool_call("finish_task", {"answer": "done"}),
    ]
    events, _ = _run(tmp_path, script)
    replayed = MemoryRunLog()
    report = asyncio.run(
        replay(events, pack=_pack(), run_id="r2", workspace=tmp_path, kit=Kit(None, replayed))
    )
    assert report.identical, report.divergence
    requests = [e for e in replayed.events if e["kind"] == "llm_request"]
    assert _names(requests[1]) == ["shout", "srv__whisper", "finish_task"]
    recorded = [e for e in events if e["kind"] == "llm_request"]
    assert requests[1]["tools_changed"] == recorded[1]["tools_changed"]
    # the pack's own tool renamed since: the first step that sends tools shows it
    renamed = FunctionTool(shout, name="yell")
    report = asyncio.run(
        replay(
            events,
            pack=_pack((renamed,)),
            run_id="r3",
            workspace=tmp_path,
            kit=Kit(None, MemoryRunLog()),
        )
    )
    assert report.divergence is not None and report.divergence.step == 1
    assert report.divergence.field.startswith("tools[0]")
