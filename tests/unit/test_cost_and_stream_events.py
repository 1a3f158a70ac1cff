"""What the loop adds to the runlog for the model layer: the run's cost from a price table,
replies whose tool calls were parsed from text, adapter warnings, live deltas, and the retry and
fallback events of the resilient clients, all valid against the published runlog schema."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import OnDelta, assert_valid_runlog, kinds

from fabric.application.cost import Prices
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.application.ports import ChatClient
from fabric.application.resilience import FallbackChatClient, RetryingChatClient
from fabric.config.schema import FallbackStep, RetrySettings
from fabric.domain.errors import ModelAuthError, ModelServerError, ModelToolsUnsupportedError
from fabric.domain.models import ChatDelta, ChatResponse, RunResult, RunStatus, Usage
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import MemoryRunLog, ScriptedChatClient, reply, tool_calls

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: What to say.
    """
    return text


PACK = Pack(
    name="t",
    description="test pack",
    system_prompt="You are a test.",
    tools=[FunctionTool(echo)],
    finish_schema=SCHEMA,
)


def step(name: str, args: dict[str, Any], prompt: int, completion: int) -> ChatResponse:
    return tool_calls((name, args), usage=Usage(prompt, completion))


def run(
    chat: ChatClient,
    workspace: Path,
    log: MemoryRunLog | None = None,
    *,
    prices: Prices | None = None,
    control: Control | None = None,
) -> tuple[RunResult, list[dict[str, Any]]]:
    log = log or MemoryRunLog("run-1")
    result = asyncio.run(
        execute_task(
            Job("answer", PACK, "run-1", workspace),
            Kit(chat, log, prices=prices),
            control or Control(),
        )
    )
    return result, assert_valid_runlog(log.events)


TWO_STEPS = [
    step("echo", {"text": "a"}, 1000, 200),
    step("finish_task", {"answer": "a"}, 3000, 100),
]


# --- cost ---------------------------------------------------------------------------------------


def test_cost_is_the_tokens_at_the_configured_prices(workspace: Path) -> None:
    chat = ScriptedChatClient(TWO_STEPS, model="gpt-4o-mini")
    result, events = run(chat, workspace, prices={"gpt-4o-mini": (0.15, 0.60)})
    expected = (4000 * 0.15 + 300 * 0.60) / 1_000_000
    assert result.status is RunStatus.COMPLETED
    assert result.cost_usd == pytest.approx(expected)
    assert events[-1]["cost"] == {"usd": pytest.approx(expected), "unknown_models": []}


def test_the_model_the_server_names_is_priced_else_the_clients(workspace: Path) -> None:
    named = [msgspec.structs.replace(r, model="gpt-4o-mini-2024-07-18") for r in TWO_STEPS]
    chat = ScriptedChatClient(named, model="gpt-4o-mini")
    result, events = run(chat, workspace, prices={"gpt-4o-mini": (1.0, 2.0)})
    assert result.cost_usd == pytest.approx((4000 * 1.0 + 300 * 2.0) / 1_000_000)
    assert events[-1]["cost"]["unknown_models"] == []

    chat = ScriptedChatClient(named, model="alias")
    result, _ = run(chat, workspace, prices={"gpt-4o-mini-2024-07-18": (1.0, 0.0)})
    assert result.cost_usd == pytest.approx(4000 / 1_000_000)


def test_a_model_without_a_price_counts_as_zero_and_is_flagged(workspace: Path) -> None:
    chat = ScriptedChatClient(TWO_STEPS, model="qwen2.5-coder:7b")
    result, events = run(chat, workspace, prices={"gpt-4o": (2.5, 10.0)})
    assert result.status is RunStatus.COMPLETED and result.cost_usd == 0.0
    assert events[-1]["cost"] == {"usd": 0.0, "unknown_models": ["qwen2.5-coder:7b"]}


def test_a_missing_output_price_counts_the_input_and_flags_the_model(workspace: Path) -> None:
    chat = ScriptedChatClient(TWO_STEPS, model="m")
    result, events = run(chat, workspace, prices={"m": (1.0, None)})
    assert result.cost_usd == pytest.approx(4000 / 1_000_000)
    assert events[-1]["cost"]["unknown_models"] == ["m"]


def test_without_a_price_table_there_is_no_cost(workspace: Path) -> None:
    result, events = run(ScriptedChatClient(TWO_STEPS), workspace)
    assert result.cost_usd is None and "cost" not in events[-1]


def test_a_failed_run_still_reports_its_cost(workspace: Path) -> None:
    chat = ScriptedChatClient([ModelAuthError("refused", hint="set the key", status_code=401)])
    result, events = run(chat, workspace, prices={"scripted": (1.0, 1.0)})
    assert result.status is RunStatus.FAILED and result.cost_usd == 0.0
    assert events[-1]["cost"] == {"usd": 0.0, "unknown_models": []}


# --- what a reply carries -------------------------------------------------------------------------


def test_tool_calls_parsed_from_text_and_adapter_warnings_are_recorded(workspace: Path) -> None:
    from_text = msgspec.structs.replace(
        step("echo", {"text": "a"}, 10, 5),
        tool_calls_from_text=True,
        warnings=("the server counted 812 prompt tokens for a prompt of about 9000",),
    )
    chat = ScriptedChatClient([from_text, step("finish_task", {"answer": "a"}, 10, 5)])
    _, events = run(chat, workspace)
    first, second = [e for e in events if e["kind"] == "llm_response"]
    assert first["tool_calls_from_text"] is True
    assert first["warnings"] == ["the server counted 812 prompt tokens for a prompt of about 9000"]
    assert "tool_calls_from_text" not in second and "warnings" not in second


def test_streamed_pieces_reach_on_delta_in_order(workspace: Path) -> None:
    deltas: list[ChatDelta] = []
    chat = ScriptedChatClient([reply("thinking"), step("finish_task", {"answer": "a"}, 1, 1)])
    result, _ = run(chat, workspace, control=Control(observers=(OnDelta(deltas.append),)))
    assert result.status is RunStatus.COMPLETED
    assert deltas[0] == ChatDelta(text="thinking")
    assert deltas[-1] == ChatDelta(
        tool_index=0, tool_name="finish_task", arguments='{"answer": "a"}'
    )


# --- retry and fallback events in a run ----------------------------------------------------------


def test_retries_and_a_fallback_are_in_the_runlog(workspace: Path) -> None:
    log = MemoryRunLog("run-1")
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    local = ScriptedChatClient(
        [
            ModelServerError("the server answered 503", hint="try again", status_code=503),
            ModelToolsUnsupportedError("gemma:2b does not support tools", status_code=400),
        ],
        model="gemma:2b",
    )
    cloud = ScriptedChatClient(TWO_STEPS, model="claude-sonnet-4")
    retry = RetrySettings(attempts=3, initial_delay=0.5)
    primary = RetryingChatClient(local, retry, on_event=log.emit, sleep=sleep, rng=lambda: 1.0)
    chat = FallbackChatClient(
        primary,
        [(FallbackStep(backend="anthropic", model="claude-sonnet-4"), lambda: cloud)],
        on_event=log.emit,
        backend="ollama",
    )
    result, events = run(chat, workspace, log, prices={"claude-sonnet-4": (3.0, 15.0)})

    assert result.status is RunStatus.COMPLETED and waits == [0.5]
    assert kinds(events)[:5] == [
        "run_started",
        "llm_request",
        "llm_retry",
        "llm_fallback",
        "llm_response",
    ]
    retry_event, fallback_event = events[2], events[3]
    assert retry_event["attempt"] == 2 and retry_event["of"] == 3
    assert retry_event["status_code"] == 503 and retry_event["error"]["code"] == "server_error"
    assert fallback_event["from"] == {"model": "gemma:2b", "backend": "ollama"}
    assert fallback_event["to"] == {"backend": "anthropic", "model": "claude-sonnet-4"}
    assert fallback_event["reason"] == "tools_unsupported"
    assert result.cost_usd == pytest.approx((4000 * 3.0 + 300 * 15.0) / 1_000_000)
