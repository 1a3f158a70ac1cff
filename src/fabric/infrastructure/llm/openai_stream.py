"""Reading a streamed OpenAI-compatible chat completion (server-sent events).

The stream is ``data: {chunk}`` events separated by blank lines and ended by ``data: [DONE]``;
lines starting with ``:`` are comments (OpenRouter's ``: OPENROUTER PROCESSING`` keep-alives).
Each chunk carries ``choices[0].delta``: text in ``content``, tool calls in ``tool_calls`` as
fragments ``{index, id?, type?, function: {name?, arguments?}}`` that are joined by index (the
id and name usually come only with a call's first fragment; some servers repeat them, some
send a whole call at once). Usage comes in a last chunk whose ``choices`` is empty (OpenAI's
``stream_options.include_usage``) or with the finishing chunk (older llama.cpp).

What arrives is put back together into the body a non-streaming call would have returned, so
both paths share one parser. Chunks that cannot be read are skipped and reported as warnings;
an ``{"error": ...}`` event is raised as the matching model error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from msgspec import Struct, field

from fabric.application.ports import DeltaSink
from fabric.domain.errors import ModelError
from fabric.domain.models import ChatDelta
from fabric.domain.secrets import Secrets

from .http_errors import status_error

_MAX_WARNINGS = 10
_STATUS_BY_CODE = {
    "invalid_request_error": 400,
    "badrequesterror": 400,
    "context_length_exceeded": 400,
    "exceed_context_size_error": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
}


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (several ``data:`` lines joined by newlines).
    A bare JSON line (a server that streams JSON lines without the ``data:`` prefix) counts as
    an event of its own."""
    data: list[str] = []
    async for line in lines:
        if not line.strip():
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if name == "data" and colon:
            data.append(value[1:] if value.startswith(" ") else value)
        elif name not in ("event", "id", "retry") and line.lstrip().startswith("{"):
            if data:
                yield "\n".join(data)
                data = []
            yield line
    if data:
        yield "\n".join(data)


class _Call(Struct):
    position: int
    id: str | None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Joins stream chunks into one completion body, passing each piece to ``on_delta``."""

    def __init__(
        self, on_delta: DeltaSink | None, *, model: str, secrets: Secrets | None = None
    ) -> None:
        self._on_delta = on_delta
        self._requested_model = model
        self._secrets = secrets
        self._text: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._usage: Mapping[str, Any] | None = None
        self._finish: str | None = None
        self._model: str | None = None
        self._skipped = 0
        self.warnings: list[str] = []
        self.done = False

    def feed(self, data: str) -> None:
        """Take one event's data. Raises the model error an error event stands for."""
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            lines = [line for line in data.splitlines() if line.strip()]
            if len(lines) > 1:  # several JSON chunks in one event
                for line in lines:
                    self.feed(line)
            else:
                self._skip("a chunk that is not JSON", data)
            return
        if not isinstance(chunk, dict):
            self._skip("a chunk that is not a JSON object", data)
            return
        if chunk.get("error") or chunk.get("object") == "error":
            raise stream_error(chunk, self._requested_model, self._secrets)
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices is None and "usage" in chunk:
            return
        if not isinstance(choices, list):
            self._skip("a chunk without a choices list", data)
            return
        for choice in choices:
            self._choice(choice, data)

    def completion(self) -> dict[str, Any]:
        """The completion body this stream amounts to (``choices[0].message``, usage, ...)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        calls = [c for c in self._calls if c.name or "".join(c.arguments)]
        if len(calls) < len(self._calls):
            self._warn("the stream had a tool call with neither a name nor arguments; dropped")
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id or f"call_{c.position}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": "".join(c.arguments)},
                }
                for c in calls
            ]
        if not self.done:
            self._warn(
                "the stream ended without [DONE]; the reply may be incomplete (kept what came)"
            )
        if self._skipped > _MAX_WARNINGS:
            self.warnings.append(f"{self._skipped - _MAX_WARNINGS} more chunks skipped")
        return {
            "model": self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }

    def _choice(self, choice: Any, data: str) -> None:
        if not isinstance(choice, Mapping):
            self._skip("a choice that is not an object", data)
            return
        if choice.get("index", 0) not in (0, None):
            return  # only one reply was asked for
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, Mapping):
            self._skip("a delta that is not an object", data)
            return
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text.append(content)
            self._emit(ChatDelta(text=content))
        elif content is not None and not isinstance(content, str):
            self._skip("delta content that is not text", data)
        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for fragment in fragments:
                self._fragment(fragment, data)
        elif fragments is not None:
            self._skip("delta tool_calls that is not a list", data)
        if choice.get("finish_reason"):
            self._finish = str(choice["finish_reason"])

    def _fragment(self, raw: Any, data: str) -> None:
        function = raw.get("function") if isinstance(raw, Mapping) else None
        if function is None and isinstance(raw, Mapping):
            function = {}
        if not isinstance(raw, Mapping) or not isinstance(function, Mapping):
            self._skip("a tool call fragment that is not an object", data)
            return
        index = raw.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else None
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else None
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        call = self._slot(index, call_id, bool(name))
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping | list):
            arguments = json.dumps(arguments)
        elif arguments is None:
            arguments = ""
        elif not isinstance(arguments, str):
            self._skip("tool call arguments that are not text", data)
            arguments = ""
        first_name = bool(name) and not call.name
        if first_name:
            call.name = name
        if arguments:
            call.arguments.append(arguments)
        if first_name or arguments:
            self._emit(
                ChatDelta(
                    tool_index=call.position,
                    tool_name=name if first_name else None,
                    arguments=arguments,
                )
            )

    def _slot(self, index: int | None, call_id: str | None, named: bool) -> _Call:
        """The call a fragment belongs to: by index; a new id with a new name at a used index
        is a new call (servers that number every call 0); without an index, by id, else the
        last call."""
        call: _Call | None = None
        if index is not None:
            call = self._by_index.get(index)
            if call and call_id and call.id and call_id != call.id and named and call.name:
                call = None
        elif call_id is not None:
            call = next((c for c in self._calls if c.id == call_id), None)
        elif self._calls:
            call = self._calls[-1]
        if call is None:
            call = _Call(position=len(self._calls), id=call_id)
            self._calls.append(call)
        elif call_id and not call.id:
            call.id = call_id
        if index is not None:
            self._by_index[index] = call
        return call

    def _emit(self, delta: ChatDelta) -> None:
        if self._on_delta is not None:
            self._on_delta(delta)

    def _skip(self, what: str, data: str) -> None:
        self._skipped += 1
        if self._skipped <= _MAX_WARNINGS:
            self._warn(f"skipped {what} in the stream: {data[:200]!r}")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)


def stream_error(
    chunk: Mapping[str, Any], model: str, secrets: Secrets | None = None
) -> ModelError:
    """An error event (``{"error": {...}}`` or vLLM's ``{"object": "error", ...}``) as the
    model error its code stands for; an unknown code counts as a server failure (500).
    ``secrets`` as for ``status_error``."""
    inner = chunk.get("error")
    error: Mapping[str, Any] = inner if isinstance(inner, Mapping) else chunk
    status = 500
    for key in ("code", "status", "type"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            status = value
            break
        if isinstance(value, str) and value.lower() in _STATUS_BY_CODE:
            status = _STATUS_BY_CODE[value.lower()]
            break
    body = json.dumps(chunk, ensure_ascii=False)  # cut short once redacted (status_error)
    server = "the model server (mid-stream)"
    return status_error(status, body, {}, model=model, server=server, secrets=secrets)
