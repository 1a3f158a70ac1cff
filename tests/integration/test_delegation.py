"""Delegation (ADR 0021) through ``Runner.run`` with a scripted model: a pack hands part of its
task to another, the two runlogs name each other, and the sub-run never does more than its
parent allows (sandbox, policy, budget); cancel and approvals reach it; depth is limited."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, read_events

from fabric.application.job import Control, RunRequest
from fabric.config.loader import load_config
from fabric.domain.errors import ConfigError
from fabric.domain.models import ChatResponse, Message, RunStatus
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.interfaces.compose import build_runner
from fabric.testing import FunctionChatClient, tool_call, tool_calls

CONFIG = """
    llm:
      backends:
        mock: {{kind: openai, base_url: "http://127.0.0.1:9/v1", models: {{default: m}}}}
    runs_dir: runs
    packs:
      lead:
        builder: declarative
        description: Leads the work.
        system_prompt: You lead.
        tools: [write_file]
        delegates: [helper]
        finish_schema:
          {{type: object, properties: {{answer: {{type: string}}}}, required: [answer]}}
        {lead}
      helper:
        builder: declarative
        description: Helps with one part.
        system_prompt: You help.
        tools: [write_file, shell]
        delegates: [helper]
        finish_schema:
          {{type: object, properties: {{answer: {{type: string}}}}, required: [answer]}}
        {helper}
"""

Script = Callable[[str, int, Sequence[Message]], ChatResponse]
"""Answers by pack (its system prompt's first words) and step."""


Held = Callable[[str, int], Awaitable[None]]
"""Awaited before the script answers (who, step): a test holds a model call there."""


def _runner(
    tmp_path: Path, script: Script, lead: str = "", helper: str = "", held: Held | None = None
) -> Any:
    config = tmp_path / "fabric.yaml"
    config.write_text(textwrap.dedent(CONFIG.format(lead=lead, helper=helper)))
    (tmp_path / "ws").mkdir(exist_ok=True)

    async def answer(
        messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        who = "lead" if str(messages[0]["content"]).startswith("You lead") else "helper"
        step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        if held is not None:
            await held(who, step)
        return script(who, step, messages)

    return build_runner(load_config(config), chat_factory=lambda m: FunctionChatClient(answer))


def _last_tool_output(messages: Sequence[Message]) -> str:
    return str([m for m in messages if m.get("role") == "tool"][-1]["content"])


def _run(runner: Any, tmp_path: Path, control: Control | None = None) -> Any:
    request = RunRequest("lead", "find the answer", workspace=tmp_path / "ws")
    return asyncio.run(runner.run(request, control))


def _log(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    return assert_valid_runlog(read_events(tmp_path / "runs" / run_id / "runlog.jsonl"))


def test_a_pack_hands_part_of_its_task_to_another_and_gets_its_payload(tmp_path: Path) -> None:
    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="work out the answer")
        if who == "helper" and step == 1:
            return tool_call("write_file", path="part.txt", content="helped")
        if who == "helper":
            return tool_call("finish_task", answer="42")
        told = json.loads(_last_tool_output(messages))
        return tool_call("finish_task", answer=f"the helper said {told['result']['answer']}")

    result = _run(_runner(tmp_path, script), tmp_path)
    assert result.status is RunStatus.COMPLETED, result.error
    assert result.payload == {"answer": "the helper said 42"}
    lead = _log(tmp_path, result.run_id)
    [delegated] = [e for e in lead if e["kind"] == "tool_result"]
    assert delegated["name"] == "delegate_helper" and delegated["ok"]
    [child_id] = delegated["child_run_ids"]
    told = json.loads(delegated["output"])
    assert told == {
        "run_id": child_id,
        "status": "completed",
        "result": {"answer": "42"},
    }
    child = _log(tmp_path, child_id)
    assert child[0]["pack"] == "helper" and child[0]["task"] == "work out the answer"
    assert child[0]["parent"] == {"run_id": result.run_id, "call_id": delegated["call_id"],
                                  "depth": 1}  # fmt: skip
    assert child[0]["workspace"] == lead[0]["workspace"]  # the same workspace
    assert (tmp_path / "ws" / "part.txt").read_text() == "helped"
    # a replay of the lead answers the delegation from its log: identical, no sub-run
    runner = _runner(tmp_path, script)
    before = set((tmp_path / "runs").iterdir())
    report = asyncio.run(runner.replay(tmp_path / "runs" / result.run_id / "runlog.jsonl"))
    assert report.identical, report.divergence
    assert len(set((tmp_path / "runs").iterdir()) - before) == 1  # the replay's own log
    # a delegated run goes on only as part of its parent
    child_log = tmp_path / "runs" / child_id / "runlog.jsonl"
    with pytest.raises(ConfigError, match=f"delegated by run {result.run_id}"):
        asyncio.run(runner.resume(read_events(child_log), child_log))
    # the tool's description tells the model what the other pack is for
    tools = [t["function"]["name"] for t in lead[1]["tools"]]
    assert tools == ["write_file", "delegate_helper", "finish_task"]


def test_delegation_stops_at_its_depth_limit_with_a_clear_error(tmp_path: Path) -> None:
    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if step == 1:  # every run hands the work on
            return tool_call("delegate_helper", task="go deeper")
        return tool_call("finish_task", answer=_last_tool_output(messages)[:200])

    runner = _runner(tmp_path, script, lead="limits: {max_depth: 2}")
    result = _run(runner, tmp_path)
    assert result.status is RunStatus.COMPLETED
    depths = sorted(
        json.loads(p.read_text().splitlines()[0]).get("parent", {}).get("depth", 0)
        for p in (tmp_path / "runs").glob("*/runlog.jsonl")
    )
    assert depths == [0, 1, 2]  # the lead, its helper, and the helper's helper
    [deepest] = [
        p for p in (tmp_path / "runs").glob("*/runlog.jsonl")
        if json.loads(p.read_text().splitlines()[0]).get("parent", {}).get("depth") == 2
    ]  # fmt: skip
    refused = next(e for e in read_events(deepest) if e["kind"] == "tool_result")
    assert not refused["ok"]
    assert "delegation is limited to 2 level(s) below the first run" in refused["output"]


def test_a_sub_run_never_does_more_than_its_parent_allows(tmp_path: Path) -> None:
    """The parent's policy denies writes to secret.txt and its sandbox allows only python:
    the helper's own settings (git allowed, no policy) do not widen either."""

    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="write the secret")
        if who == "helper" and step == 1:
            return tool_calls(
                ("write_file", {"path": "secret.txt", "content": "x"}),
                ("shell", {"command": "git status"}),
            )
        return tool_call("finish_task", answer="done")

    lead = """sandbox:
          allowed_commands: [python]
          policy: {rules: [{tool: write_file, path: "secret.txt", verdict: deny}]}"""
    helper = "sandbox: {allowed_commands: [python, git], confinement: none}"
    result = _run(_runner(tmp_path, script, lead=lead, helper=helper), tmp_path)
    [child_id] = next(e for e in _log(tmp_path, result.run_id) if e["kind"] == "tool_result")[
        "child_run_ids"
    ]
    child = _log(tmp_path, child_id)
    assert child[0]["sandbox"]["allowed_commands"] == ["python"]
    assert child[0]["sandbox"]["confinement"] == "auto"  # not unconfined: the parent is not
    write, git = [e for e in child if e["kind"] == "tool_result"]
    assert not write["ok"] and write["error"]["code"] == "policy_denied"
    assert "the policy of the run that delegated this one" in write["output"]
    assert not (tmp_path / "ws" / "secret.txt").exists()
    assert not git["ok"] and "git" in git["output"]


class Asked:
    """Answers every ask with yes and keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.requests.append(request)
        return ApprovalAnswer(True, "test")


def test_a_sub_runs_asks_go_to_whoever_answers_the_parents(tmp_path: Path) -> None:
    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="write it")
        if who == "helper" and step == 1:
            return tool_call("write_file", path="asked.txt", content="yes")
        return tool_call("finish_task", answer="done")

    helper = "sandbox: {policy: {rules: [{tool: write_file, verdict: ask}]}}"
    asked = Asked()
    result = _run(_runner(tmp_path, script, helper=helper), tmp_path, Control(approver=asked))
    assert result.status is RunStatus.COMPLETED
    [request] = asked.requests
    assert request.tool == "write_file" and request.run_id != result.run_id  # the child's
    assert (tmp_path / "ws" / "asked.txt").read_text() == "yes"


def test_cancelling_the_parent_cancels_its_sub_run(tmp_path: Path) -> None:
    cancel = asyncio.Event()

    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if who == "lead":
            return tool_call("delegate_helper", task="take forever")
        raise AssertionError("not cancelled")

    async def go() -> Any:
        started = asyncio.Event()

        async def held(who: str, step: int) -> None:
            if who == "helper":
                started.set()
                await asyncio.sleep(60)  # the helper's model call: cut by the cancel

        runner = _runner(tmp_path, script, held=held)
        request = RunRequest("lead", "cancel me", workspace=tmp_path / "ws")
        running = asyncio.ensure_future(runner.run(request, Control(cancel=cancel)))
        await asyncio.wait_for(started.wait(), 30)
        cancel.set()
        return await asyncio.wait_for(running, 30)

    result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED
    statuses = sorted(
        e["status"] for p in (tmp_path / "runs").glob("*/runlog.jsonl")
        for e in read_events(p) if e["kind"] == "run_finished"
    )  # fmt: skip
    assert statuses == ["cancelled", "cancelled"]


def test_a_budget_holds_for_the_whole_task_tree(tmp_path: Path) -> None:
    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="write many files")
        if who == "helper":
            return tool_call("write_file", path=f"f{step}.txt", content="x")
        return tool_call("finish_task", answer=_last_tool_output(messages)[:300])

    lead = "limits: {budget: {tool_calls: 3}}"
    result = _run(_runner(tmp_path, script, lead=lead), tmp_path)
    lead_log = _log(tmp_path, result.run_id)
    [delegated] = [e for e in lead_log if e["kind"] == "tool_result"]
    [child_id] = delegated["child_run_ids"]
    child_end = _log(tmp_path, child_id)[-1]
    # the delegate call is one; the helper may make two more before the tree's budget is spent
    assert child_end["status"] == "budget_exceeded"
    assert f"the budget of run {result.run_id} allows 3 tool calls" in child_end["error"]["message"]
    assert sorted(p.name for p in (tmp_path / "ws").glob("f*.txt")) == ["f1.txt", "f2.txt"]
    assert child_end["budget"]["parent"]["used"]["tool_calls"] == 3
    assert not delegated["ok"] and "ended budget_exceeded" in delegated["output"]
    # the lead's next tool call would pass it too; its finish_task is not a tool call
    assert result.status is RunStatus.COMPLETED


def test_resuming_the_parent_goes_on_with_the_sub_run_it_had_started(tmp_path: Path) -> None:
    """The parent is cancelled while its sub-run waits for the model; resumed, the parent
    redoes its call, which finds the sub-run by its id and continues it (its first step is
    not asked for again) instead of starting another."""
    cancel = asyncio.Event()
    asked: list[tuple[str, int]] = []
    hold = {"on": True}

    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        asked.append((who, step))
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="two steps of work")
        if who == "helper" and step == 1:
            return tool_call("write_file", path="half.txt", content="first half")
        if who == "helper":
            return tool_call("finish_task", answer="both halves")
        return tool_call("finish_task", answer=_last_tool_output(messages)[:300])

    async def held(who: str, step: int) -> None:
        if who == "helper" and step == 2 and hold["on"]:
            cancel.set()  # the parent is cancelled while its sub-run asks
            await asyncio.sleep(60)

    async def go() -> Any:
        runner = _runner(tmp_path, script, held=held)
        request = RunRequest("lead", "delegate two steps", workspace=tmp_path / "ws")
        first = await runner.run(request, Control(cancel=cancel))
        hold["on"] = False
        path = tmp_path / "runs" / first.run_id / "runlog.jsonl"
        return first, await runner.resume(read_events(path), path)

    first, resumed = asyncio.run(go())
    assert first.status is RunStatus.CANCELLED
    assert resumed.status is RunStatus.COMPLETED, resumed.error
    logs = sorted((tmp_path / "runs").glob("*/runlog.jsonl"))
    assert len(logs) == 2  # the lead and its one sub-run
    [child] = [p for p in logs if p.parent.name != first.run_id]
    assert child.parent.name.startswith(f"{first.run_id}.d")
    events = assert_valid_runlog(read_events(child))
    [again] = [e for e in events if e["kind"] == "run_resumed"]
    assert again["from_step"] == 2
    assert events[-1]["status"] == "completed"
    assert asked.count(("helper", 1)) == 1  # its first step was not asked for again
    assert json.loads(
        next(
            e["output"]
            for e in reversed(read_events(logs[0] if logs[0] != child else logs[1]))
            if e["kind"] == "tool_result"
        )
    )["result"] == {"answer": "both halves"}


def test_a_parent_that_makes_the_call_again_takes_the_finished_sub_runs_result(
    tmp_path: Path,
) -> None:
    """The parent's log lost what came after its call (it was killed as the sub-run ended):
    resumed, it redoes the call and takes the sub-run's logged result; the sub-run is not run
    again."""
    asked: list[tuple[str, int]] = []

    def script(who: str, step: int, messages: Sequence[Message]) -> ChatResponse:
        asked.append((who, step))
        if who == "lead" and step == 1:
            return tool_call("delegate_helper", task="once")
        if who == "helper":
            return tool_call("finish_task", answer="done once")
        return tool_call("finish_task", answer=_last_tool_output(messages)[:300])

    runner = _runner(tmp_path, script)
    result = _run(runner, tmp_path)
    path = tmp_path / "runs" / result.run_id / "runlog.jsonl"
    lines = path.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "tool_result")
    path.write_text("\n".join(lines[:cut]) + "\n")  # killed before its call's result
    [child] = [p for p in (tmp_path / "runs").glob("*/runlog.jsonl") if p != path]
    before = child.read_bytes()
    asked.clear()
    resumed = asyncio.run(runner.resume(read_events(path), path))
    assert resumed.status is RunStatus.COMPLETED, resumed.error
    assert ("helper", 1) not in asked and child.read_bytes() == before
    assert resumed.payload is not None and "done once" in resumed.payload["answer"]
