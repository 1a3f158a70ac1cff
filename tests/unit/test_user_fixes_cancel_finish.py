"""A cancel that comes just as the model's final answer arrives: a valid finish_task in that
reply is kept (the run ends completed, with its payload); nothing else in it is acted on."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, kinds

from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.domain.models import ChatResponse, Message, RunResult, RunStatus
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import FunctionChatClient, MemoryRunLog, tool_call, tool_calls

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def _run_cancelled_as_it_answers(
    answer: ChatResponse, workspace: Path
) -> tuple[RunResult, list[dict[str, Any]], list[str]]:
    """One run whose first model reply is ``answer``, with the cancel set as it arrives."""
    cancel = asyncio.Event()
    echoed: list[str] = []

    def echo(text: str) -> str:
        """Say the text back.

        Args:
            text: What to say.
        """
        echoed.append(text)
        return text

    async def model(messages: Sequence[Message], _: Sequence[Mapping[str, Any]]) -> ChatResponse:
        cancel.set()  # the person presses cancel as the reply comes in
        return answer

    log = MemoryRunLog("run-1")
    pack = Pack("p", "", "You answer.", [FunctionTool(echo)], SCHEMA)
    result = asyncio.run(
        execute_task(
            Job("what is six times seven?", pack, "run-1", workspace),
            Kit(FunctionChatClient(model), log),
            Control(cancel=cancel),
        )
    )
    return result, assert_valid_runlog(log.events), echoed


def test_a_valid_final_answer_arriving_with_the_cancel_is_kept(workspace: Path) -> None:
    answer = tool_call("finish_task", answer="42")
    result, events, _ = _run_cancelled_as_it_answers(answer, workspace)
    assert result.status is RunStatus.COMPLETED
    assert result.payload == {"answer": "42"}
    assert events[-1]["status"] == "completed" and events[-1]["payload"] == {"answer": "42"}


def test_an_invalid_final_answer_arriving_with_the_cancel_ends_cancelled(workspace: Path) -> None:
    answer = tool_call("finish_task", reply="42")  # not the schema: nothing to keep
    result, events, _ = _run_cancelled_as_it_answers(answer, workspace)
    assert result.status is RunStatus.CANCELLED and result.payload is None
    assert result.steps == 1  # the model is not asked to repair it
    assert events[-1]["status"] == "cancelled"


def test_other_tool_calls_arriving_with_the_cancel_are_not_run(workspace: Path) -> None:
    """A tool call before the finish_task is not run, so the answer, which may count on it,
    is not kept either."""
    answer = tool_calls(("echo", {"text": "x"}), ("finish_task", {"answer": "42"}))
    result, events, echoed = _run_cancelled_as_it_answers(answer, workspace)
    assert result.status is RunStatus.CANCELLED and result.payload is None
    assert echoed == [] and "tool_call" not in kinds(events)
