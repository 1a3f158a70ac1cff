"""Chat clients that need no model server: for tests of fabric and of users' own packs.

client = ScriptedChatClient([
    tool_call("write_file", path="a.txt", content="hi"),
    tool_call("finish_task", summary="wrote a.txt"),
])
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from fabric.domain.errors import ModelResponseError
from fabric.domain.models import ChatResponse, Message, ToolCall, Usage

Responder = Callable[[Sequence[Message], Sequence[Mapping[str, Any]]], Awaitable[ChatResponse]]


def reply(text: str, *, usage: Usage | None = None) -> ChatResponse:
    """An assistant answer in plain text, with no tool calls."""
    return ChatResponse(
        {"role": "assistant", "content": text}, text, (), usage or Usage(10, 5), "stop"
    )


def tool_call(
    name: str, arguments: Mapping[str, Any] | str | None = None, /, **kwargs: Any
) -> ChatResponse:
    """One tool call. Pass a raw string as ``arguments`` to send malformed JSON."""
    return tool_calls((name, kwargs if arguments is None else arguments))


def tool_calls(*calls: tuple[str, Mapping[str, Any] | str]) -> ChatResponse:
    """Several tool calls in one assistant turn."""
    parsed: list[ToolCall] = []
    for index, (name, args) in enumerate(calls):
        raw = args if isinstance(args, str) else json.dumps(args)
        try:
            value = json.loads(raw)
        except ValueError as exc:
            parsed.append(ToolCall(f"call_{index}", name, None, raw, f"invalid JSON ({exc})"))
            continue
        if isinstance(value, dict):
            parsed.append(ToolCall(f"call_{index}", name, value, raw))
        else:
            parsed.append(ToolCall(f"call_{index}", name, None, raw, "expected an object"))
    message: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in parsed
        ],
    }
    return ChatResponse(message, None, tuple(parsed), Usage(10, 5), "tool_calls")


class ScriptedChatClient:
    """Answers with the given responses in order; records every request it received.

    An item may also be an exception, which is raised at that step (to test error paths).
    """

    def __init__(
        self, script: Iterable[ChatResponse | BaseException], *, model: str = "scripted"
    ) -> None:
        self._script = list(script)
        self._model = model
        self.requests: list[tuple[list[Message], list[Mapping[str, Any]]]] = []
        self.closed = False

    @property
    def model(self) -> str:
        return self._model

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        self.requests.append((list(messages), list(tools)))
        if len(self.requests) > len(self._script):
            raise ModelResponseError(
                f"the script has {len(self._script)} responses but step {len(self.requests)} "
                "asked for another",
                hint="add responses to the ScriptedChatClient script",
            )
        item = self._script[len(self.requests) - 1]
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


class FunctionChatClient:
    """Answers by calling ``responder(messages, tools)``: for models that react to input."""

    def __init__(self, responder: Responder, *, model: str = "function") -> None:
        self._responder = responder
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        return await self._responder(messages, tools)

    async def aclose(self) -> None:
        return None
