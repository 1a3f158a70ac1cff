"""A durable run's outside effects as recorded steps (ADR 0020), with an in-memory recorder:
the first run records every model reply, tool result, failure, answer, brief and verdict as
JSON; driven again, the run gets them all back without asking, running or looking again, and
ends the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fabric.application.durable import checkpointed
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Briefing, Pack
from fabric.application.replay.divergence import ReplayState
from fabric.application.verify import Verdict
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ToolError
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import FunctionChatClient, MemoryRunLog, ScriptedChatClient, tool_call

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


class Recorder:
    """Checkpoints in memory, as JSON (what a database would hold)."""

    def __init__(self) -> None:
        self.values: list[tuple[str, str]] = []
        self.at = 0

    def again(self) -> None:
        self.at = 0

    async def step(
        self, name: str, call: Callable[[], Awaitable[Any]], *, looks: bool = False
    ) -> Any:
        self.at += 1
        if self.at <= len(self.values):
            recorded_name, value = self.values[self.at - 1]
            assert recorded_name == name, f"step {self.at}: {recorded_name} recorded, {name} now"
            return json.loads(value)
        value = json.dumps(await call())
        self.values.append((name, value))
        return json.loads(value)


class Counts:
    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def count(self, what: str) -> None:
        self.runs[what] = self.runs.get(what, 0) + 1


def _pack(counts: Counts) -> Pack:
    def note(text: str) -> str:
        """Note it.

        Args:
            text: What to note.
        """
        counts.count("note")
        if text == "bad":
            raise ToolError("bad note", hint="write a good one")
        if text == "crash":
            raise KeyError("no such note")
        return f"noted {text}"

    async def brief(ctx: Any) -> Briefing:
        counts.count("brief")
        return Briefing("two notes are there", ran={"tests": 0})

    class Check:
        name = "notes are good"

        async def verify(self, payload: Any, ctx: Any, record: Any) -> Verdict:
            counts.count("verify")
            return Verdict(True, "fine", detail={"looked": 2}, confirms=True)

    return Pack(
        "notes",
        "notes",
        "You note.",
        [FunctionTool(note, name="note")],
        finish_schema=SCHEMA,
        brief=brief,
        verifiers=[Check()],
    )


class Yes:
    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.counts.count("asked")
        return ApprovalAnswer(True, "cli")


def _run(
    tmp_path: Path, recorder: Recorder, counts: Counts, script: list[Any]
) -> tuple[Any, list[dict[str, Any]]]:
    chat = ScriptedChatClient(script)
    log = MemoryRunLog()
    sandbox = SandboxSettings.model_validate(
        {"policy": {"rules": [{"tool": "note", "verdict": "ask"}]}}
    )
    job = Job("note things", _pack(counts), "r1", tmp_path, sandbox=sandbox)
    control = Control(approver=Yes(counts))
    job, kit, control = checkpointed(job, Kit(chat, log), control, recorder, ReplayState())
    result = asyncio.run(execute_task(job, kit, control))
    return result, log.events


def test_driven_again_a_run_gets_every_recorded_effect_back(tmp_path: Path) -> None:
    script = [
        tool_call("note", {"text": "one"}),
        tool_call("note", {"text": "bad"}),
        tool_call("note", {"text": "crash"}),
        tool_call("finish_task", {"answer": "noted"}),
    ]
    recorder, counts = Recorder(), Counts()
    first, events = _run(tmp_path, recorder, counts, script)
    assert first.status.value == "completed"
    assert counts.runs == {"brief": 1, "note": 3, "asked": 3, "verify": 1}
    names = [n for n, _ in recorder.values]
    assert names == [
        "brief", "model", "approval", "tool:note", "model", "approval", "tool:note",
        "model", "approval", "tool:note", "model", "verify:notes are good",
    ]  # fmt: skip

    # driven again from the records: a model that would fail, nothing runs, nobody is asked
    recorder.again()
    again, replayed = _run(tmp_path, recorder, counts, [])
    assert counts.runs == {"brief": 1, "note": 3, "asked": 3, "verify": 1}
    assert (again.status, again.payload, again.steps) == (first.status, first.payload, 4)

    def results(log: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (e["ok"], e["output"], (e.get("error") or {}).get("code"))
            for e in log
            if e["kind"] == "tool_result"
        ]

    assert results(replayed) == results(events)
    bad, crash = results(events)[1:]
    assert bad == (False, "error: bad note\n  hint: write a good one", "tool_error")
    assert crash[0] is False and "KeyError: 'no such note'" in crash[1]
    verdicts = [e for e in replayed if e["kind"] == "verification"]
    assert verdicts[0]["looked"] == 2 and verdicts[0]["ok"] is True
    briefs = [e["text"] for e in replayed if e["kind"] == "brief"]
    assert briefs == ["two notes are there"]


class No:
    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(False, "cli")


def test_a_call_cut_off_runs_again_only_if_a_person_says_so(tmp_path: Path) -> None:
    """A shell-like tool (not safe to repeat) whose call began in a process that died: the
    run driven again asks before running it again; refused, the call is not run."""
    from fabric.infrastructure.tools.function_tool import repeat_unsafe

    ran: list[str] = []

    @repeat_unsafe
    def append(text: str) -> str:
        """Append it.

        Args:
            text: What to append.
        """
        ran.append(text)
        return "appended"

    tool = FunctionTool(append, name="append")
    assert tool.spec.repeat_safe is False
    pack = Pack("appender", "appends", "You append.", [tool], finish_schema=SCHEMA)
    script = [tool_call("append", {"text": "x"}), tool_call("finish_task", {"answer": "ok"})]

    def drive(recorder: Recorder, approver: Any) -> tuple[Any, list[dict[str, Any]]]:
        log = MemoryRunLog()
        job = Job("append", pack, "r1", tmp_path)
        recorded = sum(1 for name, _ in recorder.values if name == "model")
        kit = Kit(ScriptedChatClient(script[recorded:]), log)  # asked only for the new steps
        job, kit, control = checkpointed(
            job, kit, Control(approver=approver), recorder, ReplayState()
        )
        return asyncio.run(execute_task(job, kit, control)), log.events

    # the process that died had recorded step 1's reply and the mark of its call, no more
    died = Recorder()
    died.values = [("model", json.dumps({"value": _reply_of(script[0])})),
                   ("begin:append", json.dumps({"value": "another process"}))]  # fmt: skip
    result, events = drive(died, No())
    assert ran == [] and result.status.value == "completed"
    asked = [e for e in events if e["kind"] == "approval_requested"]
    assert len(asked) == 1 and "cut off" in asked[0]["reason"] and asked[0]["call_id"]
    [denied] = [e for e in events if e["kind"] == "tool_result"]
    assert not denied["ok"] and denied["error"]["code"] == "approval_denied"

    died.values, died.at = died.values[:2], 0
    result, events = drive(died, Yes(Counts()))
    assert ran == ["x"]  # approved: run again, once
    # a call that began in this process is not asked about
    fresh, events = drive(Recorder(), No())
    assert fresh.status.value == "completed"
    assert ran == ["x", "x"] and not [e for e in events if e["kind"] == "approval_requested"]


def _reply_of(body: Any) -> dict[str, Any]:
    from fabric.application.durable import reply_json
    from fabric.testing import ScriptedChatClient as Chat

    async def one() -> Any:
        from fabric.domain.models import ChatRequest

        return await Chat([body]).chat(ChatRequest([], []))

    return reply_json(asyncio.run(one()))


def test_a_summary_written_to_fit_the_window_is_a_recorded_step_of_its_own(
    tmp_path: Path,
) -> None:
    """A durable run that summarises older turns records the summary as a ``summary`` step
    (not a model call of the run): driven again, it gets the summary back unasked."""
    from test_context_window import Thinker, short

    thinker = Thinker(last=6)
    pack = Pack("thinker", "thinks", "You think.", [FunctionTool(short)], {"type": "object"})
    recorder = Recorder()

    def drive(client: Any) -> Any:
        job = Job("think it through", pack, "r1", tmp_path)
        kit = Kit(client, MemoryRunLog(), context_size=4096)
        job, kit, control = checkpointed(job, kit, Control(), recorder, ReplayState())
        return asyncio.run(execute_task(job, kit, control))

    first = drive(FunctionChatClient(thinker))
    names = [n for n, _ in recorder.values]
    assert "summary" in names and names.count("model") == first.steps == 6
    asked = thinker.summaries
    recorder.again()
    again = drive(ScriptedChatClient([]))  # a model that would fail: everything is recorded
    assert (again.status, again.steps) == (first.status, first.steps)
    assert thinker.summaries == asked
