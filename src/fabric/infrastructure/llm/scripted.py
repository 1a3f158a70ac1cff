"""Chat clients that need no model server: for tests of fabric and of users' own packs.

client = ScriptedChatClient([
    tool_call("write_file", path="a.txt", content="hi"),
    tool_call("finish_task", summary="wrote a.txt"),
])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from fabric.application.ports import DeltaSink
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import ModelError, ModelResponseError
from fabric.domain.models import (
    ChatDelta,
    ChatRequest,
    ChatResponse,
    Message,
    ToolCall,
    Usage,
    assistant_message,
)

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


def tool_calls(
    *calls: tuple[str, Mapping[str, Any] | str], usage: Usage | None = None
) -> ChatResponse:
    """Several tool calls in one assistant turn."""
    parsed: list[ToolCall] = []
    for index, (name, args) in enumerate(calls):
        arguments, raw, error = parse_arguments(args)
        parsed.append(ToolCall(f"call_{index}", name, arguments, raw, error))
    message = assistant_message(None, parsed)
    return ChatResponse(message, None, tuple(parsed), usage or Usage(10, 5), "tool_calls")


def check_history(messages: Sequence[Message]) -> str | None:
    """What an OpenAI server would reject in this history, or None if it is well formed:
    known roles, string contents for tool messages, and every assistant tool call answered
    by exactly one tool message before the next turn."""
    open_ids: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in ("system", "user", "assistant", "tool"):
            return f"messages[{index}] has an unknown role {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                return f"messages[{index}] answers tool call {call_id!r}, which is not pending"
            if not isinstance(message.get("content"), str):
                return f"messages[{index}]: a tool message's content must be a string"
            open_ids.discard(call_id)
            continue
        if open_ids:
            return f"messages[{index}] comes before tool call(s) {sorted(open_ids)} got results"
        if role == "assistant":
            open_ids = {c.get("id") for c in message.get("tool_calls") or ()}
    if open_ids:
        return f"the history ends before tool call(s) {sorted(open_ids)} got results"
    return None


class ScriptedChatClient:
    """Answers with the given responses in order; records every request it received.

    An item may also be an exception, which is raised at that step (to test error paths).
    Like a real OpenAI server, it refuses (``ModelError``, status 400) a history that is not
    well formed (see ``check_history``), so a test cannot pass on a history no server takes.
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

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests.append((list(request.messages), list(request.tools)))
        problem = check_history(request.messages)
        if problem:
            raise ModelError(
                f"the scripted model refused the request, as an OpenAI server would: {problem}",
                hint="the code that built this history has a bug",
                status_code=400,
            )
        if len(self.requests) > len(self._script):
            raise ModelResponseError(
                f"the script has {len(self._script)} responses but step {len(self.requests)} "
                "asked for another",
                hint="add responses to the ScriptedChatClient script",
            )
        item = self._script[len(self.requests) - 1]
        if isinstance(item, BaseException):
            raise item
        return _streamed(item, request.on_delta)

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

    async def chat(self, request: ChatRequest) -> ChatResponse:
        response = await self._responder(request.messages, request.tools)
        return _streamed(response, request.on_delta)

    async def aclose(self) -> None:
        return None


def _streamed(response: ChatResponse, on_delta: DeltaSink | None) -> ChatResponse:
    """Pass a whole response to ``on_delta`` as a streaming client would: text, then each
    tool call's name and arguments."""
    if on_delta is not None:
        if response.content:
            on_delta(ChatDelta(text=response.content))
        for index, call in enumerate(response.tool_calls):
            on_delta(ChatDelta(tool_index=index, tool_name=call.name, arguments=call.raw_arguments))
    return response
