"""The policy gate inside the loop: allow, ask, deny; who answered; "always for this run";
timeouts; cancellation while waiting; and what the model is told when a call is refused.
Tools here only record their calls, so a refused call that ran anyway would show."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog

from fabric.application.approvals import AutoApprover, RecordedApprover
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.application.ports import Approver
from fabric.config.policy import PolicySettings
from fabric.config.schema import SandboxSettings
from fabric.domain.models import RunResult, RunStatus
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import MemoryRunLog, ScriptedChatClient, tool_call, tool_calls

SCHEMA = {"type": "object", "properties": {"done": {"type": "string"}}, "required": ["done"]}
PUSH = {"tool": "shell", "command": "git push **", "verdict": "ask"}
LOCKS = {"tool": "write_file", "path": "**/*.lock", "verdict": "deny"}


class Recorder:
    """Stand-ins for shell and write_file that only record their calls."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def shell(self, command: str) -> str:
        """Run a command.

        Args:
            command: The command line.
        """
        self.ran.append(command)
        return f"[exit 0]\nran {command}"

    def write_file(self, path: str, content: str) -> str:
        """Write a file.

        Args:
            path: Where.
            content: What.
        """
        self.ran.append(f"write {path}")
        return f"wrote {path}"

    def pack(self, *rules: dict[str, Any], default: str = "allow", timeout: float = 300) -> Pack:
        policy = PolicySettings.model_validate(
            {"default": default, "approval_timeout": timeout, "rules": list(rules)}
        )
        return Pack(
            "gated", "", "You test.", [FunctionTool(self.shell), FunctionTool(self.write_file)],
            SCHEMA, sandbox=SandboxSettings(policy=policy),
        )  # fmt: skip


class Scripted:
    """An approver answering from a list, recording what it was asked."""

    def __init__(self, *answers: ApprovalAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return self.answers.pop(0)


class Silent:
    """An approver that never answers (a person who walked away); notes its clean-up."""

    def __init__(self, on_ask: asyncio.Event | None = None) -> None:
        self.cleaned = False
        self.on_ask = on_ask

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self.on_ask is not None:
            self.on_ask.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cleaned = True
        raise AssertionError("never answered")


def run(
    pack: Pack,
    *turns: Any,
    approver: Approver | None = None,
    cancel: asyncio.Event | None = None,
) -> tuple[RunResult, list[dict[str, Any]], ScriptedChatClient]:
    client = ScriptedChatClient([*turns, tool_call("finish_task", done="yes")])
    log = MemoryRunLog("run-p")
    result = asyncio.run(
        execute_task(
            Job("do it", pack, "run-p", Path(".")),
            Kit(client, log),
            Control(cancel=cancel, approver=approver),
        )
    )
    return result, assert_valid_runlog(log.events), client


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


def seen_by_model(client: ScriptedChatClient, request: int) -> list[str]:
    return [str(m["content"]) for m in client.requests[request][0] if m["role"] == "tool"]


def policy_kinds(events: list[dict[str, Any]]) -> list[str]:
    wanted = {"tool_call", "policy_decision", "approval_requested", "approval", "tool_result"}
    return [e["kind"] for e in events if e["kind"] in wanted and e.get("name") != "finish_task"]


# --- allow and deny ----------------------------------------------------------------------------


def test_an_allowed_call_runs_after_its_decision_is_logged() -> None:
    tools = Recorder()
    result, events, _ = run(tools.pack(PUSH), tool_call("shell", command="git status"))
    assert result.status is RunStatus.COMPLETED
    assert tools.ran == ["git status"]
    assert policy_kinds(events) == ["tool_call", "policy_decision", "tool_result"]
    [decision] = of(events, "policy_decision")
    assert decision == {
        **decision,
        "step": 1, "call_id": "call_0", "tool": "shell", "verdict": "allow", "rule": None,
    }  # fmt: skip
    assert "no rule matches" in decision["reason"]


def test_finish_task_gets_no_policy_decision() -> None:
    _, events, _ = run(Recorder().pack(default="deny"))
    assert of(events, "policy_decision") == []
    assert events[-1]["status"] == "completed"


def test_a_denied_call_never_runs_and_the_model_is_told_why_and_what_to_do() -> None:
    tools = Recorder()
    result, events, client = run(
        tools.pack(LOCKS),
        tool_call("write_file", path="deps/poetry.lock", content="x"),
    )
    assert tools.ran == []
    assert result.status is RunStatus.COMPLETED  # the run goes on; the model adapts
    assert policy_kinds(events) == ["tool_call", "policy_decision", "tool_result"]
    [decision] = of(events, "policy_decision")
    assert decision["verdict"] == "deny"
    assert decision["rule"] == 'rules[0]: {tool: write_file, path: "**/*.lock", verdict: deny}'
    [refused] = of(events, "tool_result")
    assert refused["ok"] is False
    assert refused["error"]["code"] == "policy_denied"
    assert refused["error"]["hint"]
    [told] = seen_by_model(client, 1)
    assert told == refused["output"]
    assert told.startswith("error: the policy denies this write_file call")
    assert "**/*.lock" in told
    assert "hint: do not repeat this call" in told


def test_shell_syntax_is_refused_before_the_rules_and_the_command_never_runs() -> None:
    tools = Recorder()
    allow_all = {"tool": "shell", "command": "**", "verdict": "allow"}
    _, events, client = run(tools.pack(allow_all), tool_call("shell", command="ls && rm -rf /"))
    assert tools.ran == []
    [decision] = of(events, "policy_decision")
    assert decision["verdict"] == "deny" and decision["rule"] is None
    [told] = seen_by_model(client, 1)
    assert "'&&'" in told and "without a shell" in told


# --- ask ---------------------------------------------------------------------------------------


def test_an_ask_puts_the_exact_call_to_the_approver_and_runs_it_when_approved() -> None:
    tools = Recorder()
    approver = Scripted(ApprovalAnswer(True, "cli"))
    _, events, client = run(
        tools.pack(PUSH, timeout=42), tool_call("shell", command="git push origin main"),
        approver=approver,
    )  # fmt: skip
    assert tools.ran == ["git push origin main"]
    assert policy_kinds(events) == [
        "tool_call", "policy_decision", "approval_requested", "approval", "tool_result",
    ]  # fmt: skip
    [asked] = approver.asked
    rule = 'rules[0]: {tool: shell, command: "git push **", verdict: ask}'
    assert (asked.run_id, asked.step, asked.call_id, asked.tool) == ("run-p", 1, "call_0", "shell")
    assert asked.arguments == {"command": "git push origin main"}
    assert asked.rule == rule and "git push **" in asked.reason and asked.timeout == 42
    [requested] = of(events, "approval_requested")
    assert requested["arguments"] == {"command": "git push origin main"}
    assert (requested["rule"], requested["timeout_s"]) == (rule, 42)
    [approval] = of(events, "approval")
    assert (approval["approved"], approval["by"], approval["scope"]) == (True, "cli", "once")
    assert seen_by_model(client, 1) == ["[exit 0]\nran git push origin main"]


def test_a_refused_ask_is_a_tool_result_the_model_sees() -> None:
    tools = Recorder()
    _, events, client = run(
        tools.pack(PUSH), tool_call("shell", command="git push"),
        approver=Scripted(ApprovalAnswer(False, "http")),
    )  # fmt: skip
    assert tools.ran == []
    [approval] = of(events, "approval")
    assert (approval["approved"], approval["by"]) == (False, "http")
    [refused] = of(events, "tool_result")
    assert refused["error"]["code"] == "approval_denied"
    [told] = seen_by_model(client, 1)
    assert told.startswith("error: a person refused this shell call (http)")


def test_always_for_this_run_answers_later_calls_of_the_same_rule_from_memory() -> None:
    tools = Recorder()
    approver = Scripted(ApprovalAnswer(True, "cli", "run"), ApprovalAnswer(False, "cli"))
    ask_writes = {"tool": "write_file", "verdict": "ask"}
    _, events, _ = run(
        tools.pack(PUSH, ask_writes),
        tool_call("shell", command="git push origin a"),
        tool_calls(("shell", {"command": "git push origin b"}),
                   ("write_file", {"path": "x.txt", "content": ""})),
        approver=approver,
    )  # fmt: skip
    assert tools.ran == ["git push origin a", "git push origin b"]
    assert [a.arguments for a in approver.asked] == [
        {"command": "git push origin a"},
        {"path": "x.txt", "content": ""},  # another rule: asked again
    ]
    answers = [(a["call_id"], a["step"], a["by"], a["scope"]) for a in of(events, "approval")]
    assert answers == [
        ("call_0", 1, "cli", "run"),
        ("call_0", 2, "policy memory", "run"),
        ("call_1", 2, "cli", "once"),
    ]
    assert len(of(events, "approval_requested")) == 2  # memory asks no one


def test_refusing_for_the_rest_of_the_run_refuses_later_calls_without_asking() -> None:
    tools = Recorder()
    approver = Scripted(ApprovalAnswer(False, "http", "run"))
    _, events, client = run(
        tools.pack(PUSH),
        tool_call("shell", command="git push"),
        tool_call("shell", command="git push --force"),
        approver=approver,
    )
    assert tools.ran == [] and len(approver.asked) == 1
    assert [a["by"] for a in of(events, "approval")] == ["http", "policy memory"]
    assert "refused for the rest of this run" in seen_by_model(client, 2)[-1]


def test_with_no_approver_an_ask_is_denied_and_says_how_to_approve() -> None:
    tools = Recorder()
    _, events, client = run(tools.pack(PUSH), tool_call("shell", command="git push"))
    assert tools.ran == []
    assert of(events, "approval_requested") == []  # no one was asked
    [approval] = of(events, "approval")
    assert (approval["approved"], approval["by"], approval["scope"]) == (
        False, "no terminal", "once",
    )  # fmt: skip
    [told] = seen_by_model(client, 1)
    assert "no one could be asked" in told
    assert "--yes" in told and "sandbox.policy" in told


def test_yes_approves_every_ask() -> None:
    tools = Recorder()
    _, events, _ = run(
        tools.pack(PUSH, default="ask"),
        tool_calls(
            ("shell", {"command": "git push"}), ("write_file", {"path": "a", "content": ""})
        ),
        approver=AutoApprover("cli --yes"),
    )
    assert tools.ran == ["git push", "write a"]
    assert [(a["approved"], a["by"]) for a in of(events, "approval")] == [(True, "cli --yes")] * 2


def test_an_unanswered_ask_times_out_into_a_denial() -> None:
    tools = Recorder()
    approver = Silent()
    _, events, client = run(
        tools.pack(PUSH, timeout=0.05), tool_call("shell", command="git push"), approver=approver
    )
    assert tools.ran == []
    assert approver.cleaned  # the approver was told to stop asking
    [approval] = of(events, "approval")
    assert (approval["approved"], approval["by"]) == (False, "timeout")
    [told] = seen_by_model(client, 1)
    assert "no one approved this shell call within 0.05 s" in told
    assert events[-1]["status"] == "completed"


def test_cancelling_while_an_ask_waits_ends_the_run_without_running_the_call() -> None:
    tools = Recorder()
    cancel = asyncio.Event()
    approver = Silent(on_ask=cancel)  # the person presses cancel instead of answering
    result, events, _ = run(
        tools.pack(PUSH), tool_call("shell", command="git push"), approver=approver, cancel=cancel
    )
    assert result.status is RunStatus.CANCELLED
    assert tools.ran == [] and approver.cleaned
    assert of(events, "approval") == []
    [refused] = of(events, "tool_result")
    assert refused["error"]["code"] == "approval_denied"
    assert "cancelled" in refused["error"]["message"]


# --- recorded answers (replay and resume) ------------------------------------------------------


def test_recorded_answers_are_given_again_for_the_same_calls() -> None:
    turns = [
        tool_call("shell", command="git push a"),
        tool_call("shell", command="git push b"),
    ]
    _, events, _ = run(
        Recorder().pack(PUSH), *turns,
        approver=Scripted(ApprovalAnswer(True, "cli"), ApprovalAnswer(False, "cli")),
    )  # fmt: skip
    tools = Recorder()
    _, again, _ = run(tools.pack(PUSH), *turns, approver=RecordedApprover(events))
    assert tools.ran == ["git push a"]
    assert [(a["approved"], a["by"]) for a in of(again, "approval")] == [
        (True, "replay"),
        (False, "replay"),
    ]


def test_recorded_answers_cover_the_redone_steps_then_a_live_approver_takes_over() -> None:
    recorded = [{"kind": "approval", "step": 1, "call_id": "call_0", "approved": True,
                 "by": "cli", "scope": "once"}]  # fmt: skip
    live = Scripted(ApprovalAnswer(False, "cli"))
    tools = Recorder()
    _, events, _ = run(
        tools.pack(PUSH),
        tool_call("shell", command="git push a"),
        tool_call("shell", command="git push b"),
        approver=RecordedApprover(recorded, then=live, upto_step=1),
    )
    assert tools.ran == ["git push a"]
    assert [a["by"] for a in of(events, "approval")] == ["replay", "cli"]
    assert [r.step for r in live.asked] == [2]


@pytest.mark.parametrize("step", [1, 2])
def test_a_call_the_recording_has_no_answer_for_is_denied(step: int) -> None:
    tools = Recorder()
    _, events, _ = run(
        tools.pack(PUSH), tool_call("shell", command="git push"),
        approver=RecordedApprover([], upto_step=None if step == 1 else 0),
    )  # fmt: skip
    assert tools.ran == []
    assert of(events, "approval")[0]["by"] == ("replay" if step == 1 else "no terminal")
