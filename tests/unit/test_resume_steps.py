"""Resuming a run in process: more steps for a run that hit max_steps, a torn last line, and
runs that cannot be resumed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, kinds, read_events
from test_replay import Counter, make_pack

from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit, RunRequest
from fabric.application.replay import Recording, replay
from fabric.application.resume import plan_resume, resume_task
from fabric.config.loader import load_config
from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.errors import ConfigError, ModelConnectionError
from fabric.domain.models import ChatResponse, Message
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.infrastructure.runlog import JsonlRunLog, read_runlog
from fabric.interfaces.compose import build_runner
from fabric.testing import FunctionChatClient, MemoryRunLog, ScriptedChatClient, tool_call

CONFIG = """
version: 1
llm: {models: {default: m}}
runs_dir: runs
packs:
  engineering: {builder: packs.engineering:build}
"""


class Model:
    """Appends one line a step; calls finish_task at ``finish_at``; counts its calls."""

    def __init__(self, finish_at: int) -> None:
        self.finish_at = finish_at
        self.steps: list[int] = []

    def __call__(self, model: str) -> FunctionChatClient:
        async def answer(
            messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
        ) -> ChatResponse:
            step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
            self.steps.append(step)
            if step >= self.finish_at:
                return tool_call("finish_task", summary="done")
            return tool_call("write_file", path="log.txt", content=f"{step}\n", append=True)

        return FunctionChatClient(answer, model=model)


def _runner(tmp_path: Path, model: Model) -> Any:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    return build_runner(load_config(tmp_path / "fabric.yaml"), chat_factory=model)


def test_a_run_that_hit_max_steps_goes_on_with_more(tmp_path: Path, workspace: Path) -> None:
    model = Model(finish_at=4)
    runner = _runner(tmp_path, model)
    first = asyncio.run(
        runner.run(RunRequest("engineering", "log", workspace=workspace, max_steps=2))
    )
    assert first.status.value == "max_steps"
    path = Path(str(first.runlog_path))
    events = read_events(path)
    with pytest.raises(ConfigError, match="--max-steps above 2"):
        plan_resume(events)
    result = asyncio.run(runner.resume(events, path, max_steps=5))
    assert result.status.value == "completed_unconfirmed", result.error
    assert result.run_id == first.run_id and result.steps == 4
    assert model.steps == [1, 2, 3, 4]
    assert (workspace / "log.txt").read_text() == "1\n2\n3\n"
    after = read_events(path)
    assert [e["seq"] for e in after] == list(range(len(after)))
    # one run, one end: the first end's line gave way to run_resumed, which keeps it
    assert after[: len(events) - 1] == events[:-1]
    assert kinds(after).count("run_finished") == 1
    mark = after[len(events) - 1]
    assert mark["kind"] == "run_resumed" and mark["seq"] == events[-1]["seq"]
    assert mark["from_step"] == 3 and mark["reason"] == "max_steps"
    ended = {k: v for k, v in events[-1].items() if k not in {"v", "seq", "run_id", "kind"}}
    assert mark["ended"] == ended and ended["status"] == "max_steps" and ended["steps"] == 2
    assert after[-1]["kind"] == "run_finished" and after[-1]["status"] == "completed_unconfirmed"
    # usage counts the steps fed back from the log too
    assert after[-1]["usage"]["total_tokens"] == 4 * 15
    # the log of a resumed run still replays as one run of four steps
    assert len(Recording(after).steps) == 4
    assert mark["limits"]["max_steps"] == 5
    report = asyncio.run(
        replay(
            after,
            pack=runner.pack("engineering").pack,
            run_id="again",
            workspace=workspace,
            kit=Kit(None, MemoryRunLog()),
        )
    )
    assert report.identical, report.divergence
    # a completed run cannot be resumed
    with pytest.raises(ConfigError, match="already ended"):
        plan_resume(after)
    assert_valid_runlog(path)


def test_a_half_done_step_and_a_torn_line_are_redone(tmp_path: Path, workspace: Path) -> None:
    model = Model(finish_at=3)
    runner = _runner(tmp_path, model)
    first = asyncio.run(
        runner.run(RunRequest("engineering", "log", workspace=workspace, max_steps=2))
    )
    path = Path(str(first.runlog_path))
    lines = path.read_text().splitlines(keepends=True)
    # cut the log after step 2's tool_call: its result and the end are lost, a line is torn
    cut = next(i for i, line in enumerate(lines) if '"tool_call"' in line and '"step":2' in line)
    path.write_text("".join(lines[: cut + 1]) + '{"v":1,"seq":')
    (workspace / "log.txt").write_text("1\n")  # step 2's write never happened
    events, problems = read_runlog(path)
    assert problems and "torn" in problems[0]
    assert plan_resume(events).completed == 1
    result = asyncio.run(runner.resume(events, path, max_steps=5))
    assert result.status.value == "completed_unconfirmed", result.error
    assert model.steps == [1, 2, 2, 3]
    assert (workspace / "log.txt").read_text() == "1\n2\n"
    after = read_events(path)
    assert [e["seq"] for e in after] == list(range(len(after)))
    assert after[cut + 1]["kind"] == "run_resumed" and after[cut + 1]["from_step"] == 2
    assert len(Recording(after).steps) == 3
    assert_valid_runlog(path)


def test_a_resume_that_fails_to_start_still_leaves_one_end(tmp_path: Path, workspace: Path) -> None:
    """A resume stopped by a configuration error leaves the log as it was; one whose model
    cannot be set up ends failed, with the earlier end kept in run_resumed."""
    runner = _runner(tmp_path, Model(finish_at=9))
    first = asyncio.run(
        runner.run(RunRequest("engineering", "log", workspace=workspace, max_steps=1))
    )
    path = Path(str(first.runlog_path))
    before = path.read_bytes()
    events = read_events(path)
    gone = tmp_path / "elsewhere"
    workspace.rename(gone)
    with pytest.raises(ConfigError, match="not a folder any more"):
        asyncio.run(runner.resume(events, path, max_steps=3))
    assert path.read_bytes() == before  # nothing was written: the run still ends max_steps
    gone.rename(workspace)
    result = asyncio.run(
        resume_task(
            plan_resume(events, max_steps=3),
            pack=runner.pack("engineering").pack,
            workspace=workspace,
            kit=Kit(
                None,
                JsonlRunLog.reopen(path),
                start_error=ModelConnectionError("the model server is down"),
            ),
        )
    )
    assert result.status.value == "failed"
    after = assert_valid_runlog(path)
    assert kinds(after)[len(events) - 1 :] == ["run_resumed", "run_finished"]
    assert after[-1]["status"] == "failed" and "down" in after[-1]["error"]["message"]
    assert after[-2]["ended"]["status"] == "max_steps" and after[-2]["ended"]["steps"] == 1


def test_reopen_needs_a_complete_line(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_text('{"v":1,"se')
    with pytest.raises(ConfigError):
        JsonlRunLog.reopen(path)


class CountingApprover:
    """Approves every call and notes which (step, call id) it was asked about."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, str]] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append((request.step, request.call_id))
        return ApprovalAnswer(True, "http")


def test_a_resumed_run_does_not_ask_again_for_the_steps_it_redoes(tmp_path: Path) -> None:
    rules = [{"tool": "shout", "verdict": "ask"}]
    sandbox = SandboxSettings.model_validate({"policy": {"rules": rules}})
    script = [
        tool_call("shout", text="hi"),
        tool_call("shout", text="there"),
        tool_call("finish_task", answer="HI THERE"),
    ]
    log = JsonlRunLog(tmp_path / "runs", "asks")
    first = CountingApprover()
    asyncio.run(
        execute_task(
            Job("shout", make_pack(Counter()), "asks", tmp_path, Limits(max_steps=1), sandbox),
            Kit(ScriptedChatClient(script[:1]), log),
            Control(approver=first),
        )
    )
    assert first.asked == [(1, "call_0")]
    events = read_events(log.path)
    plan = plan_resume(events, max_steps=5)
    assert plan.completed == 1
    second, counter = CountingApprover(), Counter()
    result = asyncio.run(
        resume_task(
            plan,
            pack=make_pack(counter),
            workspace=tmp_path,
            kit=Kit(ScriptedChatClient(script[1:]), JsonlRunLog.reopen(log.path)),
            control=Control(approver=second),
            sandbox=sandbox,
        )
    )
    assert result.status.value == "completed", result.error
    assert second.asked == [(2, "call_0")]  # step 1's answer came from the log
    assert counter.calls == 1  # step 1's shout was not run again
    after = assert_valid_runlog(log.path)
    assert [(e["step"], e["by"]) for e in after if e["kind"] == "approval"] == [
        (1, "http"),
        (2, "http"),
    ]


def _logged(*steps: tuple[str, bool]) -> list[dict[str, Any]]:
    """A run's events: each step a reply calling one tool, with its result when True."""
    events: list[dict[str, Any]] = [
        {"kind": "run_started", "run_id": "r1", "pack": "p", "task": "t", "limits": {}}
    ]
    for number, (tool, answered) in enumerate(steps, 1):
        message = {"role": "assistant", "tool_calls": [{"id": f"c{number}"}]}
        events.append({"kind": "llm_response", "step": number, "message": message})
        events.append({"kind": "tool_call", "step": number, "call_id": f"c{number}", "name": tool})
        if answered:
            events.append({"kind": "tool_result", "step": number, "call_id": f"c{number}",
                           "name": tool, "ok": True, "output": "x"})  # fmt: skip
    return events


def test_a_recovered_durable_run_redoes_a_read_whose_next_reply_is_not_logged() -> None:
    from fabric.application.resume import recovered_plan

    looks = {"read_file"}
    # step 2's read is whole in the log, but step 3's reply is not: it rides with that reply
    plan = recovered_plan(_logged(("write_file", True), ("read_file", True)), looks)
    assert plan.completed == 1 and plan.reason == "recovered"
    assert not [e for e in plan.events if e.get("step") == 2]
    # a write is its own recorded step: nothing to redo
    assert recovered_plan(_logged(("read_file", True), ("write_file", True)), looks).completed == 2
    # step 3's reply was logged, so it was recorded, and the read with it
    events = _logged(("write_file", True), ("read_file", True), ("write_file", False))
    assert recovered_plan(events, looks).completed == 2
