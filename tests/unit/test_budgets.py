"""Budgets (``limits.budget``): each kind of limit ends a run ``budget_exceeded`` before the
call that would pass it, says which limit and how much was used, and the runlog records what
was spent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog
from test_replay import Counter, make_pack

from fabric.application.budget import Spending
from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.config.schema import Budget, Limits
from fabric.domain.models import ChatResponse, Message, RunStatus, Usage
from fabric.testing import FunctionChatClient, MemoryRunLog, ScriptedChatClient, tool_calls


def _shouting() -> ScriptedChatClient:
    """Shouts once a step, forever (the budget must end it)."""
    return ScriptedChatClient([tool_calls(("shout", {"text": "hi"}), usage=Usage(100, 20))] * 50)


def _run(
    tmp_path: Path,
    budget: Budget,
    chat: Any = None,
    *,
    prices: Mapping[str, tuple[float | None, float | None]] | None = None,
    counter: Counter | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    log = MemoryRunLog("b-1")
    job = Job("shout", make_pack(counter or Counter()), "b-1", tmp_path, Limits(budget=budget))
    kit = Kit(chat or _shouting(), log, prices=prices)
    result = asyncio.run(execute_task(job, kit))
    return result, assert_valid_runlog(log.events)


def _end(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["kind"] == "run_finished"
    return events[-1]


def test_model_calls_and_tool_calls_stop_before_the_call_that_would_pass_them(
    tmp_path: Path,
) -> None:
    counter = Counter()
    result, events = _run(tmp_path, Budget(model_calls=3), counter=counter)
    assert result.status is RunStatus.BUDGET_EXCEEDED and result.steps == 3
    assert counter.calls == 3
    error = _end(events)["error"]
    assert error["code"] == "budget_exceeded"
    assert "allows 3 model calls; 3 model calls used" in error["message"]
    assert "limits.budget.model_calls" in error["hint"] and "--max-model-calls" in error["hint"]
    assert _end(events)["budget"]["used"]["model_calls"] == 3

    counter = Counter()
    result, events = _run(tmp_path, Budget(tool_calls=2), counter=counter)
    assert result.status is RunStatus.BUDGET_EXCEEDED and counter.calls == 2
    assert result.steps == 3  # the third reply asked for a third call: not run
    assert "allows 2 tool calls; 2 tool calls used" in _end(events)["error"]["message"]
    calls = [e for e in events if e["kind"] == "tool_call"]
    assert len(calls) == 2


def test_tokens_stop_before_a_call_whose_request_would_pass_them(tmp_path: Path) -> None:
    # each call: 100 prompt + 20 reply tokens; the next call sends at least that again
    result, events = _run(tmp_path, Budget(tokens=300))
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert result.steps == 2 and result.usage.total_tokens == 240
    message = _end(events)["error"]["message"]
    assert "allows 300 tokens; 240 tokens used, and the next call would add about" in message
    spent = [e["spent"]["tokens"] for e in events if e["kind"] == "llm_response"]
    assert spent == [120, 240]  # shown live, with every reply


def test_cost_needs_a_price_and_then_holds(tmp_path: Path) -> None:
    result, events = _run(tmp_path, Budget(cost_usd=0.01))
    assert result.status is RunStatus.FAILED
    assert "model scripted has no price" in _end(events)["error"]["message"]
    assert "llm.model_options.scripted" in _end(events)["error"]["hint"]

    # $10 / $50 a million tokens: a call costs 100 x 10 + 20 x 50 = $0.002
    prices = {"scripted": (10.0, 50.0)}
    result, events = _run(tmp_path, Budget(cost_usd=0.005), prices=prices)
    assert result.status is RunStatus.BUDGET_EXCEEDED and result.steps == 2
    assert "allows $0.0050; $0.0040 used" in _end(events)["error"]["message"]
    assert result.cost_usd == pytest.approx(0.004)


def test_time_cuts_a_model_call_that_outlasts_it(tmp_path: Path) -> None:
    async def slow(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> ChatResponse:
        await asyncio.sleep(30)
        raise AssertionError("the budget's time should have cut this call")

    result, events = _run(tmp_path, Budget(seconds=0.3), FunctionChatClient(slow))
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert "allows 0.3 seconds" in _end(events)["error"]["message"]
    assert result.duration_s < 30


def test_time_stops_a_tool_call_that_outlasts_it(tmp_path: Path) -> None:
    log = MemoryRunLog("b-2")

    async def wait(seconds: float) -> str:
        """Wait.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return "waited"

    from fabric.application.pack import Pack
    from fabric.infrastructure.tools.function_tool import FunctionTool

    pack = Pack("waiter", "waits", "You wait.", [FunctionTool(wait)], {"type": "object"})
    chat = ScriptedChatClient([tool_calls(("wait", {"seconds": 30}))] * 3)
    job = Job("wait", pack, "b-2", tmp_path, Limits(budget=Budget(seconds=0.5)))
    result = asyncio.run(execute_task(job, Kit(chat, log)))
    events = assert_valid_runlog(log.events)
    assert result.status is RunStatus.BUDGET_EXCEEDED
    [told] = [e for e in events if e["kind"] == "tool_result"]
    assert not told["ok"] and "the run's time budget ran out" in told["output"]
    assert result.duration_s < 30


def test_a_delegating_runs_budget_holds_for_the_runs_under_it() -> None:
    parent = Spending(Budget(tool_calls=3), "parent", clock=lambda: 0.0)
    child = Spending(Budget(tool_calls=10), "child", parent=parent, clock=lambda: 0.0)
    for _ in range(3):
        child.check(tool_calls=1)
        child.charge_tool()
    assert parent.used.tool_calls == 3
    with pytest.raises(Exception, match="the budget of run parent allows 3 tool calls"):
        child.check(tool_calls=1)
    assert child.as_json()["parent"] == {
        "run_id": "parent",
        "used": parent.used_json(),
        "limits": {"tool_calls": 3},
    }


def test_a_runs_own_budget_only_tightens_its_packs() -> None:
    pack = Budget(tokens=1000, seconds=60)
    assert pack.tightened(Budget(tokens=5000, tool_calls=4)) == Budget(
        tokens=1000, seconds=60, tool_calls=4
    )
    assert pack.tightened(None) == pack
