"""The loop, driven through its ports: a scripted or function-backed model, an in-memory (or
file) runlog, real FunctionTools. Every runlog produced here is checked against the published
schema. What the model is shown is read from the next request the model received."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, kinds

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.config.schema import Limits
from fabric.domain.errors import ModelAuthError, ModelConnectionError, ToolError
from fabric.domain.models import ChatResponse, Message, RunResult, RunStatus, ToolCall, Usage
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import (
    FunctionChatClient,
    MemoryRunLog,
    ScriptedChatClient,
    reply,
    tool_call,
    tool_calls,
)
from packs.engineering import EngineeringSettings, build

ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer"],
    "additionalProperties": False,
}


class Tools:
    """A few tools that record what they were called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.cancel = asyncio.Event()

    def echo(self, text: str, times: int = 1) -> str:
        """Say the text back.

        Args:
            text: What to say.
            times: How often.
        """
        self.calls.append(("echo", {"text": text, "times": times}))
        return text * times

    def refuse(self) -> str:
        """Always refuses."""
        self.calls.append(("refuse", {}))
        raise ToolError("refused on purpose", hint="try echo instead")

    def crash(self) -> str:
        """Has a bug."""
        self.calls.append(("crash", {}))
        raise RuntimeError("kaboom")

    def leave(self) -> str:
        """Calls sys.exit, like a CLI library might."""
        self.calls.append(("leave", {}))
        sys.exit(3)

    def big(self, size: int) -> str:
        """Returns a long text: a head, filler, a tail.

        Args:
            size: Characters in total.
        """
        self.calls.append(("big", {"size": size}))
        return "HEAD" + "x" * (size - 8) + "TAIL"

    def stop(self) -> str:
        """Asks the run to stop (as a user pressing cancel would)."""
        self.calls.append(("stop", {}))
        self.cancel.set()
        return "stopping"

    def pack(self) -> Pack:
        fns: list[Callable[..., str]] = [
            self.echo,
            self.refuse,
            self.crash,
            self.leave,
            self.big,
            self.stop,
        ]
        return Pack(
            name="test",
            description="a pack for tests",
            system_prompt="You are a test.",
            tools=[FunctionTool(fn) for fn in fns],
            finish_schema=ANSWER_SCHEMA,
        )

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def run(
    chat: ScriptedChatClient | FunctionChatClient,
    workspace: Path,
    tools: Tools | None = None,
    *,
    pack: Pack | None = None,
    limits: Limits | None = None,
    cancel: asyncio.Event | None = None,
    log: MemoryRunLog | None = None,
    protected: tuple[Path, ...] = (),
    task: str = "answer the question",
) -> tuple[RunResult, list[dict[str, Any]], MemoryRunLog]:
    tools = tools or Tools()
    log = log or MemoryRunLog("run-1")
    result = asyncio.run(
        execute_task(
            Job(task, pack or tools.pack(), "run-1", workspace, limits or Limits()),
            Kit(chat, log, protected=protected),
            Control(cancel=cancel if cancel is not None else tools.cancel),
        )
    )
    events = assert_valid_runlog(log.events)
    json.dumps(events, allow_nan=False)  # strict JSON: no NaN or Infinity slipped in
    assert log.closed
    return result, events, log


def finished(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["kind"] == "run_finished"
    return events[-1]


def last_tool_message(client: ScriptedChatClient, request: int) -> str:
    """The content of the last tool message in request number ``request`` (0-based)."""
    messages = client.requests[request][0]
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert tool_messages, f"request {request} has no tool message"
    return str(tool_messages[-1]["content"])


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


# --- the ordinary path -------------------------------------------------------------------


def test_tool_result_goes_back_and_finish_task_ends_the_run(workspace: Path) -> None:
    tools = Tools()
    client = ScriptedChatClient(
        [tool_call("echo", text="ab", times=2), tool_call("finish_task", answer="abab")]
    )
    result, events, _ = run(client, workspace, tools)

    assert result.status is RunStatus.COMPLETED and result.succeeded
    assert result.payload == {"answer": "abab"}
    assert result.steps == 2 and result.error is None and result.runlog_path is None
    assert tools.calls == [("echo", {"text": "ab", "times": 2})]
    assert last_tool_message(client, 1) == "abab"
    assert kinds(events) == [
        "run_started",
        "llm_request",
        "llm_response",
        "tool_call",
        "policy_decision",
        "tool_result",
        "llm_request",
        "llm_response",
        "tool_call",
        "run_finished",
    ]
    end = finished(events)
    assert end["status"] == "completed" and end["payload"] == {"answer": "abab"}
    assert end["steps"] == 2 and "error" not in end


def test_first_request_has_system_prompt_task_and_tools_with_finish_schema(
    workspace: Path,
) -> None:
    tools = Tools()
    client = ScriptedChatClient([tool_call("finish_task", answer="42")])
    _, events, _ = run(client, workspace, tools, task="what is six times seven?")

    messages, sent_tools = client.requests[0]
    assert messages == [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": "what is six times seven?"},
    ]
    names = [t["function"]["name"] for t in sent_tools]
    assert names == ["echo", "refuse", "crash", "leave", "big", "stop", "finish_task"]
    finish = sent_tools[-1]["function"]
    assert finish["parameters"] == ANSWER_SCHEMA
    assert finish["description"]
    echo = sent_tools[0]["function"]
    assert echo["description"] == "Say the text back."
    assert echo["parameters"]["required"] == ["text"]

    started = events[0]
    assert started["pack"] == "test" and started["task"] == "what is six times seven?"
    assert started["model"] == "scripted" and started["finish_schema"] == ANSWER_SCHEMA
    assert started["limits"] == Limits().model_dump()
    assert started["workspace"] == str(workspace)


def test_meta_is_recorded_but_cannot_overwrite_the_run_facts(workspace: Path) -> None:
    log = MemoryRunLog("run-1")
    asyncio.run(
        execute_task(
            Job(
                "t",
                Tools().pack(),
                "run-1",
                workspace,
                meta={"fabric_version": "9.9", "pack": "spoofed", "kind": "spoofed"},
            ),
            Kit(ScriptedChatClient([tool_call("finish_task", answer="a")]), log),
        )
    )
    started = assert_valid_runlog(log.events)[0]
    assert started["fabric_version"] == "9.9"
    assert started["pack"] == "test" and started["kind"] == "run_started"


# --- the runlog tells the history once, in order -----------------------------------------


def test_requests_log_only_new_messages_and_rebuild_the_exact_history(workspace: Path) -> None:
    """Concatenating llm_request messages and llm_response messages in seq order gives exactly
    what the model received at each step; tools are logged on the first request only."""
    script = [
        tool_call("echo", text="one"),
        tool_calls(("echo", {"text": "two"}), ("refuse", {})),
        reply("I think I am done."),
        tool_call("finish_task", {"answer": 7}),  # invalid: a repair round
        tool_call("finish_task", answer="done"),
    ]
    client = ScriptedChatClient(script)
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED
    assert len(client.requests) == 5

    history: list[Message] = []
    requests = of_kind(events, "llm_request")
    for event in events:
        if event["kind"] == "llm_request":
            history += event["messages"]
            assert history == client.requests[event["step"] - 1][0], f"step {event['step']}"
        elif event["kind"] == "llm_response":
            history.append(event["message"])
    assert [len(r["messages"]) for r in requests] == [2, 1, 2, 1, 1]
    assert requests[0]["tools"] == client.requests[0][1]
    assert all("tools" not in r for r in requests[1:])
    responses = [e["message"] for e in of_kind(events, "llm_response")]
    assert responses == [r.message for r in script]


def test_runlog_grows_linearly_not_with_the_whole_history(workspace: Path) -> None:
    """Twice the steps, about twice the log: no event repeats the whole history."""

    def log_size(steps: int) -> int:
        client = ScriptedChatClient(
            [tool_call("echo", text="y" * 2000) for _ in range(steps - 1)]
            + [tool_call("finish_task", answer="ok")]
        )
        _, events, _ = run(client, workspace, limits=Limits(max_steps=steps))
        return sum(len(json.dumps(e)) for e in events)

    assert log_size(40) < 2.2 * log_size(20)


# --- finish_task ---------------------------------------------------------------------------


def test_invalid_finish_shows_the_model_what_is_wrong_then_a_valid_one_completes(
    workspace: Path,
) -> None:
    client = ScriptedChatClient(
        [
            tool_call("finish_task", answer=42, extra="no"),
            tool_call("finish_task", answer="42", confidence=0.9),
        ]
    )
    result, events, _ = run(client, workspace)

    assert result.status is RunStatus.COMPLETED
    assert result.payload == {"answer": "42", "confidence": 0.9}
    shown = last_tool_message(client, 1)
    assert "finish_task was not accepted" in shown
    assert "answer: 42 is not of type 'string'" in shown
    assert "'extra' was unexpected" in shown
    first_result = of_kind(events, "tool_result")[0]
    assert first_result["name"] == "finish_task" and first_result["ok"] is False


@pytest.mark.parametrize("repairs", [0, 1, 2, 4])
def test_finish_repairs_are_bounded_and_end_as_invalid_output(
    workspace: Path, repairs: int
) -> None:
    bad = tool_call("finish_task", confidence="high")
    client = ScriptedChatClient([bad] * 10)
    result, events, _ = run(client, workspace, limits=Limits(finish_repairs=repairs, max_steps=10))

    assert result.status is RunStatus.INVALID_OUTPUT and not result.succeeded
    assert result.payload is None
    assert len(client.requests) == repairs + 1  # the first try plus the repair rounds
    assert result.error is not None and result.error["code"] == "invalid_output"
    assert "'answer' is a required property" in result.error["message"]
    assert result.error["hint"]
    end = finished(events)
    assert end["status"] == "invalid_output" and end["error"] == result.error


def test_finish_task_with_broken_json_counts_as_a_failed_finish(workspace: Path) -> None:
    """A model that keeps sending unparseable finish_task arguments stops after the repair
    rounds, not after max_steps."""
    client = ScriptedChatClient([tool_call("finish_task", '{"answer": "x"')] * 10)
    result, _, _ = run(client, workspace, limits=Limits(finish_repairs=1, max_steps=10))
    assert result.status is RunStatus.INVALID_OUTPUT
    assert len(client.requests) == 2
    assert "not a JSON object" in last_tool_message(client, 1)


def test_repair_rounds_count_across_the_run_not_per_turn(workspace: Path) -> None:
    client = ScriptedChatClient(
        [
            tool_call("finish_task", answer=1),
            tool_call("echo", text="thinking"),
            tool_call("finish_task", answer=2),
            tool_call("finish_task", answer="3"),
        ]
    )
    result, _, _ = run(client, workspace, limits=Limits(finish_repairs=1))
    assert result.status is RunStatus.INVALID_OUTPUT
    assert len(client.requests) == 3


# --- what the model sends wrong becomes a tool result ----------------------------------------


def test_unknown_tool_is_a_result_listing_the_tools(workspace: Path) -> None:
    client = ScriptedChatClient(
        [tool_call("delete_everything", path="/"), tool_call("finish_task", answer="ok")]
    )
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED
    shown = last_tool_message(client, 1)
    assert "unknown tool 'delete_everything'" in shown
    assert "echo" in shown and "finish_task" in shown
    tool_result = of_kind(events, "tool_result")[0]
    assert tool_result["ok"] is False and tool_result["error"]["code"] == "tool_error"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"text": "hi"', "invalid JSON"),
        ("text=hi", "invalid JSON"),
        ('["hi"]', "expected an object"),
        ('"hi"', "expected an object"),
        ("null", "expected an object"),
        ('{"text": NaN}', "invalid JSON"),
        ('{"text": "a", "times": 1e999}', "too large a number"),
    ],
)
def test_malformed_arguments_are_a_result_and_the_tool_does_not_run(
    workspace: Path, raw: str, expected: str
) -> None:
    tools = Tools()
    client = ScriptedChatClient([tool_call("echo", raw), tool_call("finish_task", answer="ok")])
    result, events, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    assert tools.calls == []
    shown = last_tool_message(client, 1)
    assert "the arguments of echo are not a JSON object" in shown and expected in shown
    assert of_kind(events, "tool_call")[0]["arguments"] == raw  # the raw text is kept


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "text: Field required"),
        ({"text": 5}, "text: Input should be a valid string"),
        ({"text": "a", "times": "many"}, "times: Input should be a valid integer"),
        ({"text": "a", "loud": True}, "loud: Extra inputs are not permitted"),
    ],
)
def test_argument_validation_failures_are_results_and_the_tool_does_not_run(
    workspace: Path, arguments: dict[str, Any], expected: str
) -> None:
    tools = Tools()
    client = ScriptedChatClient(
        [tool_call("echo", arguments), tool_call("finish_task", answer="ok")]
    )
    result, events, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    assert tools.calls == []
    shown = last_tool_message(client, 1)
    assert "invalid arguments for echo" in shown and expected in shown
    assert "hint:" in shown
    assert of_kind(events, "tool_result")[0]["error"]["code"] == "tool_argument_error"


def test_tool_error_is_shown_with_its_hint(workspace: Path) -> None:
    client = ScriptedChatClient([tool_call("refuse"), tool_call("finish_task", answer="ok")])
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED
    assert last_tool_message(client, 1) == "error: refused on purpose\n  hint: try echo instead"
    error = of_kind(events, "tool_result")[0]["error"]
    assert error == {
        "code": "tool_error",
        "message": "refused on purpose",
        "hint": "try echo instead",
    }


def test_a_bug_in_a_tool_is_a_result_and_the_run_goes_on(workspace: Path) -> None:
    tools = Tools()
    client = ScriptedChatClient(
        [
            tool_call("crash"),
            tool_call("echo", text="still here"),
            tool_call("finish_task", answer="ok"),
        ]
    )
    result, events, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    assert tools.names() == ["crash", "echo"]
    assert "the tool crash failed: RuntimeError: kaboom" in last_tool_message(client, 1)
    crashed = of_kind(events, "tool_result")[0]
    assert crashed["ok"] is False and crashed["error"]["code"] == "tool_crashed"
    assert last_tool_message(client, 2) == "still here"


def test_sys_exit_in_a_tool_is_a_result_not_the_end_of_fabric(workspace: Path) -> None:
    tools = Tools()
    client = ScriptedChatClient([tool_call("leave"), tool_call("finish_task", answer="ok")])
    result, _, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    assert "SystemExit: 3" in last_tool_message(client, 1)


# --- no tool calls ---------------------------------------------------------------------------


def test_one_nudge_then_the_model_finishes_properly(workspace: Path) -> None:
    client = ScriptedChatClient([reply("The answer is 4."), tool_call("finish_task", answer="4")])
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED
    nudge = client.requests[1][0][-1]
    assert nudge["role"] == "user" and "finish_task" in nudge["content"]
    assert client.requests[1][0][-2] == {"role": "assistant", "content": "The answer is 4."}
    assert kinds(events).count("nudge") == 1
    assert of_kind(events, "nudge")[0]["message"] == nudge["content"]


def test_text_after_the_nudge_completes_from_text(workspace: Path) -> None:
    client = ScriptedChatClient([reply("Let me think."), reply("The answer is 4.")])
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED_FROM_TEXT and not result.succeeded
    assert result.payload == {"text": "The answer is 4."}
    assert len(client.requests) == 2 and kinds(events).count("nudge") == 1
    assert finished(events)["payload"] == {"text": "The answer is 4."}


def test_the_nudge_is_given_once_per_run(workspace: Path) -> None:
    client = ScriptedChatClient(
        [reply("hmm"), tool_call("echo", text="x"), reply("so the answer is x")]
    )
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED_FROM_TEXT
    assert result.payload == {"text": "so the answer is x"}
    assert kinds(events).count("nudge") == 1


def test_an_empty_reply_completes_with_empty_text(workspace: Path) -> None:
    empty = ChatResponse({"role": "assistant", "content": None}, None, ())
    result, _, _ = run(ScriptedChatClient([empty, empty]), workspace)
    assert result.status is RunStatus.COMPLETED_FROM_TEXT
    assert result.payload == {"text": ""}


# --- limits, cancellation, errors ---------------------------------------------------------------


def test_max_steps_ends_the_run(workspace: Path) -> None:
    tools = Tools()
    client = ScriptedChatClient([tool_call("echo", text=str(i)) for i in range(10)])
    result, events, _ = run(client, workspace, tools, limits=Limits(max_steps=3))
    assert result.status is RunStatus.MAX_STEPS and result.payload is None
    assert result.steps == 3 and len(client.requests) == 3
    assert tools.names() == ["echo"] * 3  # the last step's tool calls still ran
    assert finished(events)["status"] == "max_steps"


def test_cancel_from_inside_a_tool_stops_before_the_next_call(workspace: Path) -> None:
    tools = Tools()
    client = ScriptedChatClient(
        [
            tool_calls(("stop", {}), ("echo", {"text": "never"})),
            tool_call("finish_task", answer="never"),
        ]
    )
    result, events, _ = run(client, workspace, tools)
    assert result.status is RunStatus.CANCELLED and result.payload is None
    assert tools.names() == ["stop"]
    assert len(client.requests) == 1
    assert finished(events)["status"] == "cancelled"


def test_cancel_while_the_model_thinks_wins_over_its_answer(workspace: Path) -> None:
    """Set during the model call: neither the text (even after the nudge) nor the tool calls
    of that answer are acted on."""
    tools = Tools()
    cancel = tools.cancel

    async def model(messages: Sequence[Message], _: Sequence[Mapping[str, Any]]) -> ChatResponse:
        if len(messages) == 2:
            return reply("thinking aloud")  # nudged
        cancel.set()
        return reply("final words")

    result, events, _ = run(FunctionChatClient(model), workspace, tools)
    assert result.status is RunStatus.CANCELLED
    assert result.steps == 2

    async def model_with_tools(
        messages: Sequence[Message], _: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        cancel.set()
        return tool_call("echo", text="x")

    cancel.clear()
    result, events, _ = run(FunctionChatClient(model_with_tools), workspace, tools)
    assert result.status is RunStatus.CANCELLED
    assert tools.calls == [] and "tool_call" not in kinds(events)


def test_cancel_set_before_the_start_ends_without_a_model_call(workspace: Path) -> None:
    cancel = asyncio.Event()
    cancel.set()
    client = ScriptedChatClient([tool_call("finish_task", answer="x")])
    result, events, _ = run(client, workspace, cancel=cancel)
    assert result.status is RunStatus.CANCELLED and result.steps == 0
    assert client.requests == []
    assert kinds(events) == ["run_started", "run_finished"]


def test_cancelling_the_asyncio_task_logs_the_end_and_propagates(workspace: Path) -> None:
    started = asyncio.Event()
    hits: list[str] = []

    async def slow(ctx: ToolContext) -> str:
        """Waits for ever."""
        hits.append(ctx.run_id)
        started.set()
        await asyncio.Event().wait()
        return "never"

    pack = Pack("slow", "", "s", [FunctionTool(slow)], ANSWER_SCHEMA)
    log = MemoryRunLog("run-1")
    client = ScriptedChatClient([tool_call("slow")])

    async def main() -> None:
        task = asyncio.create_task(
            execute_task(Job("t", pack, "run-1", workspace), Kit(client, log))
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    events = assert_valid_runlog(log.events)
    assert hits == ["run-1"]
    assert kinds(events)[-3:] == ["tool_call", "policy_decision", "run_finished"]
    assert finished(events)["status"] == "cancelled" and finished(events)["steps"] == 1
    assert log.closed


def test_fatal_model_error_fails_the_run_with_what_to_do(workspace: Path) -> None:
    error = ModelAuthError(
        "the model server answered 401", hint="set FABRIC_API_KEY", status_code=401, body="no"
    )
    client = ScriptedChatClient([tool_call("echo", text="x"), error])
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.FAILED and result.payload is None
    expected = {
        "code": "authentication",
        "message": "the model server answered 401",
        "hint": "set FABRIC_API_KEY",
        "status_code": "401",
    }
    assert result.error == expected
    end = finished(events)
    assert end["status"] == "failed" and end["error"] == expected and end["steps"] == 2
    assert kinds(events)[-2:] == ["llm_request", "run_finished"]


def test_connection_error_on_the_first_call_fails_cleanly(workspace: Path) -> None:
    client = ScriptedChatClient(
        [ModelConnectionError("cannot reach the model server", hint="start it")]
    )
    result, _, _ = run(client, workspace)
    assert result.status is RunStatus.FAILED
    assert result.error == {
        "code": "network",
        "message": "cannot reach the model server",
        "hint": "start it",
    }
    assert result.usage == Usage()


def test_a_bug_in_the_chat_client_is_recorded_not_raised(workspace: Path) -> None:
    client = ScriptedChatClient([KeyError("choices")])
    result, events, _ = run(client, workspace)
    assert result.status is RunStatus.FAILED
    assert result.error == {"code": "internal_error", "message": "KeyError: 'choices'"}
    assert finished(events)["error"] == result.error


def test_a_script_that_runs_out_fails_with_a_clear_error(workspace: Path) -> None:
    client = ScriptedChatClient([tool_call("echo", text="x")])
    result, _, _ = run(client, workspace)
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["code"] == "invalid_response"
    assert "the script has 1 responses but step 2 asked for another" in result.error["message"]


# --- odd things a model may send --------------------------------------------------------------


def _response(*calls: ToolCall, content: str | None = None) -> ChatResponse:
    message: Message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in calls
        ],
    }
    return ChatResponse(message, content, calls)


def test_empty_tool_name_is_an_unknown_tool(workspace: Path) -> None:
    client = ScriptedChatClient(
        [_response(ToolCall("c1", "", {}, "{}")), tool_call("finish_task", answer="ok")]
    )
    result, _, _ = run(client, workspace)
    assert result.status is RunStatus.COMPLETED
    assert "unknown tool ''" in last_tool_message(client, 1)


def test_finish_task_in_the_middle_of_a_turn_ends_the_run_there(workspace: Path) -> None:
    """Calls before finish_task run; calls after it are not run (the result is final)."""
    tools = Tools()
    client = ScriptedChatClient(
        [
            tool_calls(
                ("echo", {"text": "before"}),
                ("finish_task", {"answer": "done"}),
                ("echo", {"text": "after"}),
            )
        ]
    )
    result, events, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED and result.payload == {"answer": "done"}
    assert tools.calls == [("echo", {"text": "before", "times": 1})]
    assert [e["name"] for e in of_kind(events, "tool_call")] == ["echo", "finish_task"]


def test_invalid_finish_in_the_middle_of_a_turn_lets_the_other_calls_run(
    workspace: Path,
) -> None:
    tools = Tools()
    client = ScriptedChatClient(
        [
            tool_calls(("finish_task", {}), ("echo", {"text": "after"})),
            tool_call("finish_task", answer="ok"),
        ]
    )
    result, _, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    assert tools.names() == ["echo"]
    results = [m for m in client.requests[1][0] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_0", "call_1"]
    assert "not accepted" in results[0]["content"] and results[1]["content"] == "after"


def test_many_tool_calls_in_one_turn_each_get_their_result(workspace: Path) -> None:
    tools = Tools()
    calls = [("echo", {"text": str(i)}) for i in range(20)]
    client = ScriptedChatClient([tool_calls(*calls), tool_call("finish_task", answer="ok")])
    result, _, _ = run(client, workspace, tools)
    assert result.status is RunStatus.COMPLETED
    results = [m for m in client.requests[1][0] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        (f"call_{i}", str(i)) for i in range(20)
    ]


def test_huge_model_output_and_absurd_names_do_not_break_the_run(workspace: Path) -> None:
    """A 50,000-character tool name, 5,000-character call ids and 200,000 characters of text
    end up as short tool results and sane artifact file names."""
    client = ScriptedChatClient(
        [
            _response(
                ToolCall("c" * 5000, "n" * 50_000, {"x": "y" * 100_000}, "{}"),
                ToolCall("d" * 5000, "big", {"size": 5000}, '{"size": 5000}'),
                content="z" * 200_000,
            ),
            tool_call("finish_task", answer="ok"),
        ]
    )
    result, _, log = run(client, workspace, limits=Limits(tool_output_chars=1000))
    assert result.status is RunStatus.COMPLETED
    unknown, big = [m["content"] for m in client.requests[1][0] if m["role"] == "tool"]
    assert unknown.startswith("error: unknown tool 'nnn") and len(unknown) < 1000
    assert big.startswith("HEAD") and big.endswith("TAIL")
    (ref,) = log.artifacts
    assert ref.startswith("artifacts/step1-big-ddd") and ref.endswith(".txt") and len(ref) < 100
    assert len(log.artifacts[ref]) == 5000


def test_a_lone_surrogate_from_the_model_is_logged_and_run_on(
    workspace: Path, tmp_path: Path
) -> None:
    """JSON allows "\\ud800"; it decodes to a string UTF-8 cannot hold. The file runlog must
    stay valid UTF-8 JSON and the run must go on."""
    client = ScriptedChatClient(
        [tool_call("echo", '{"text": "a\\ud800b"}'), tool_call("finish_task", answer="ok")]
    )
    log = JsonlRunLog(tmp_path / "runs", "run-1")
    result = asyncio.run(
        execute_task(Job("t", Tools().pack(), "run-1", workspace), Kit(client, log))
    )
    assert result.status is RunStatus.COMPLETED
    raw = Path(log.location).read_bytes()
    raw.decode("utf-8")  # strict: raises if the file is not valid UTF-8
    events = assert_valid_runlog(log.location)
    assert of_kind(events, "tool_call")[0]["arguments"] == {"text": "a\ud800b"}
    assert of_kind(events, "tool_result")[0]["output"] == "a\ud800b"


# --- outputs, artifacts, tokens --------------------------------------------------------------


def test_long_output_is_cut_for_the_model_and_kept_whole_as_an_artifact(workspace: Path) -> None:
    size, limit = 10_000, 1_000
    client = ScriptedChatClient(
        [tool_call("big", size=size), tool_call("finish_task", answer="ok")]
    )
    _, events, log = run(client, workspace, limits=Limits(tool_output_chars=limit))

    result_event = of_kind(events, "tool_result")[0]
    ref = result_event["artifact"]
    assert ref.startswith("artifacts/") and ref.endswith(".txt")
    full = log.artifacts[ref]
    assert len(full) == size and full.startswith("HEAD") and full.endswith("TAIL")
    shown = last_tool_message(client, 1)
    assert shown == result_event["output"]
    assert shown.startswith("HEAD") and shown.endswith("TAIL")
    assert f"{size - limit} characters cut" in shown and ref in shown
    assert len(shown) < limit + 200


def test_output_at_the_limit_is_not_cut(workspace: Path) -> None:
    client = ScriptedChatClient(
        [tool_call("big", size=1000), tool_call("finish_task", answer="ok")]
    )
    _, events, log = run(client, workspace, limits=Limits(tool_output_chars=1000))
    assert len(last_tool_message(client, 1)) == 1000
    assert "artifact" not in of_kind(events, "tool_result")[0] and log.artifacts == {}


def test_artifacts_go_beside_the_file_runlog(workspace: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    client = ScriptedChatClient(
        [
            tool_calls(("big", {"size": 5000}), ("big", {"size": 6000})),
            tool_call("finish_task", answer="ok"),
        ]
    )
    log = JsonlRunLog(runs, "run-7")
    result = asyncio.run(
        execute_task(
            Job("t", Tools().pack(), "run-7", workspace, Limits(tool_output_chars=500)),
            Kit(client, log),
        )
    )
    assert result.runlog_path == str(runs / "run-7" / "runlog.jsonl")
    events = assert_valid_runlog(result.runlog_path)
    refs = [e["artifact"] for e in of_kind(events, "tool_result")]
    assert len(set(refs)) == 2
    sizes = [len((runs / "run-7" / ref).read_text("utf-8")) for ref in refs]
    assert sizes == [5000, 6000]


def test_token_usage_is_summed_over_the_run(workspace: Path) -> None:
    client = ScriptedChatClient(
        [
            tool_calls(("echo", {"text": "a"}), usage=Usage(100, 20)),
            reply("hmm", usage=Usage(150, 7)),
            tool_calls(("finish_task", {"answer": "a"}), usage=Usage(170, 3)),
        ]
    )
    result, events, _ = run(client, workspace)
    assert result.usage == Usage(420, 30)
    assert finished(events)["usage"] == {
        "prompt_tokens": 420,
        "completion_tokens": 30,
        "total_tokens": 450,
    }
    per_step = [e["usage"]["total_tokens"] for e in of_kind(events, "llm_response")]
    assert per_step == [120, 157, 173]


# --- the engineering pack's protected folders -------------------------------------------------


def test_protected_folder_refuses_writes_and_the_model_is_told(workspace: Path) -> None:
    runs = workspace / "runs"
    runs.mkdir()
    pack = build(EngineeringSettings(builder="packs.engineering:build"))
    client = ScriptedChatClient(
        [
            tool_call("write_file", path="runs/evil.txt", content="x"),
            tool_call("write_file", path="runs/../runs/sneaky.txt", content="x"),
            tool_call("write_file", path="notes.txt", content="fine"),
            tool_call("finish_task", summary="wrote notes", artifacts=["notes.txt"]),
        ]
    )
    result, events, _ = run(client, workspace, pack=pack, protected=(runs,))
    # done, with no tests in the workspace to confirm it
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED
    assert list(runs.iterdir()) == []
    assert (workspace / "notes.txt").read_text() == "fine"
    for step in (1, 2):
        assert "protected place" in last_tool_message(client, step)
    errors = [e.get("error", {}).get("code") for e in of_kind(events, "tool_result")]
    assert errors == ["sandbox_error", "sandbox_error", None]


# --- with the real thread pool: a sync tool does not block the loop ---------------------------


def test_sync_tools_run_off_the_event_loop_thread(workspace: Path) -> None:
    seen: list[int] = []

    def where() -> str:
        """Reports its thread."""
        seen.append(threading.get_ident())
        return "ok"

    async def model(messages: Sequence[Message], _: Sequence[Mapping[str, Any]]) -> ChatResponse:
        seen.append(threading.get_ident())
        if len(messages) == 2:
            return tool_call("where")
        return tool_call("finish_task", answer="ok")

    pack = Pack("t", "", "s", [FunctionTool(where)], ANSWER_SCHEMA)
    result, _, _ = run(FunctionChatClient(model), workspace, pack=pack)
    assert result.status is RunStatus.COMPLETED
    loop_thread, tool_thread, loop_again = seen
    assert loop_thread == loop_again != tool_thread


# --- whatever ends the run, run_finished ends the log -----------------------------------------


class _Abort(BaseException):
    """Something outside Exception, like a signal handler's own exception."""


@pytest.mark.parametrize(
    ("raised", "status"), [(KeyboardInterrupt(), "cancelled"), (_Abort("stop"), "failed")]
)
def test_base_exceptions_still_end_the_log_then_propagate(
    workspace: Path, raised: BaseException, status: str
) -> None:
    log = MemoryRunLog("run-1")
    client = ScriptedChatClient([tool_call("echo", text="x"), raised])
    with pytest.raises(type(raised)):
        asyncio.run(execute_task(Job("t", Tools().pack(), "run-1", workspace), Kit(client, log)))
    events = assert_valid_runlog(log.events)
    assert finished(events)["status"] == status and finished(events)["steps"] == 2
    assert log.closed


# --- odd replies through the real parser never make the loop raise ----------------------------

_ODD_CALLS: list[Any] = [
    {"id": "a", "function": {"name": "echo", "arguments": {"text": "obj"}}},
    {"id": "a", "function": {"name": "echo", "arguments": '{"text": "dup id"}'}},
    {"function": {"name": "echo"}},
    {"function": {"name": None, "arguments": None}},
    {"function": "echo"},
    {"type": "function"},
    "echo",
    None,
    42,
    {"function": {"name": "finish_task", "arguments": "[]"}},
    {"function": {"name": "finish_task", "arguments": {"answer": ["not", "a", "string"]}}},
    {"function": {"name": "echo", "arguments": '{"text": "\\ud83d"}'}},
    {"function": {"name": "echo", "arguments": '{"text": 1e999}'}},
    {"function": {"name": "big", "arguments": '{"size": 100000}'}},
    {"function": {"name": "big", "arguments": '{"size": -5}'}},
    {"function": {"name": "crash", "arguments": "{}"}},
    {"function": {"name": "echo", "arguments": '{"text": "x", "times": 99999999999999999999}'}},
]


@pytest.mark.parametrize("index", range(len(_ODD_CALLS)))
def test_odd_tool_calls_from_a_real_server_reply_never_break_the_loop(
    workspace: Path, index: int
) -> None:
    from fabric.infrastructure.llm.openai_compat import parse_completion
    from fabric.testing import completion

    body = completion("odd")
    body["choices"][0]["message"]["tool_calls"] = [_ODD_CALLS[index], _ODD_CALLS[index]]
    odd = parse_completion(json.loads(json.dumps(body)))
    client = ScriptedChatClient([odd, odd, tool_call("finish_task", answer="ok")])
    result, _, _ = run(client, workspace, limits=Limits(tool_output_chars=500))
    assert result.status in (RunStatus.COMPLETED, RunStatus.INVALID_OUTPUT), result.error
    tool_messages = [m for m in client.requests[-1][0] if m["role"] == "tool"]
    assert all(isinstance(m["content"], str) for m in tool_messages)


# --- a tool that takes too long ----------------------------------------------------------------


def test_a_tool_past_the_tool_timeout_is_reported_and_the_run_goes_on(workspace: Path) -> None:
    release = asyncio.Event()

    async def hang() -> str:
        """Waits for something that never comes."""
        await release.wait()
        return "never"

    pack = Pack(
        name="slow",
        description="",
        system_prompt="s",
        tools=[FunctionTool(hang)],
        finish_schema=ANSWER_SCHEMA,
    )
    chat = ScriptedChatClient([tool_call("hang"), tool_call("finish_task", answer="gave up")])
    result, events, _ = run(chat, workspace, pack=pack, limits=Limits(tool_timeout=0.2))
    assert result.status is RunStatus.COMPLETED
    [tool_message] = [m for m in chat.requests[1][0] if m["role"] == "tool"]
    assert "hang did not finish within 0.2 s" in tool_message["content"]
    assert "limits.tool_timeout" in tool_message["content"]
    [failed] = [e for e in events if e["kind"] == "tool_result"]
    assert failed["ok"] is False


def test_a_timeout_raised_by_the_tool_itself_is_its_own_failure(workspace: Path) -> None:
    async def gives_up() -> str:
        """Its own backend timed out."""
        raise TimeoutError("backend did not answer")

    pack = Pack(
        name="t",
        description="",
        system_prompt="s",
        tools=[FunctionTool(gives_up)],
        finish_schema=ANSWER_SCHEMA,
    )
    chat = ScriptedChatClient([tool_call("gives_up"), tool_call("finish_task", answer="ok")])
    result, _, _ = run(chat, workspace, pack=pack)
    [tool_message] = [m for m in chat.requests[1][0] if m["role"] == "tool"]
    assert "backend did not answer" in tool_message["content"]
    assert "did not finish within" not in tool_message["content"]
    assert result.status is RunStatus.COMPLETED


# --- what a run leaves behind ------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["completed", "failed"])
def test_a_run_is_let_go_when_it_ends_not_left_to_the_cyclic_collector(
    workspace: Path, ending: str
) -> None:
    """How the loop stops (a signal carrying the loop's frames) must not tie the run into a
    cycle: its history, and a replay's whole recording, are freed as the run ends, not at
    the collector's next full pass in the middle of some later run."""
    gc.collect()
    gc.disable()
    try:
        last = (
            tool_call("finish_task", answer="done")
            if ending == "completed"
            else ModelConnectionError("the server went away", hint="start it again")
        )
        chat = ScriptedChatClient([tool_call("echo", text="hi"), last])
        gone = weakref.ref(chat)
        result, _, _ = run(chat, workspace)
        del chat
        assert result.status.value == ending
        assert gone() is None, "the run's chat client is still held: the run is in a cycle"
    finally:
        gc.enable()
