"""Reading Anthropic Messages API replies: the whole message (``stream: false``) and its
server-sent events (``stream: true``), both into one provider-neutral ``Reply``.

The event sequence is the documented one: ``message_start``, then for each content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop``, then
``message_delta`` (stop reason, output tokens) and ``message_stop``; ``ping`` may come anywhere
and ``error`` ends the stream. Tool input arrives as ``input_json_delta`` fragments that are only
JSON once joined. An event fabric does not know, or cannot read, becomes a warning, never a
failure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from msgspec import Struct, field

from fabric.application.ports import DeltaSink
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import ModelError, ModelResponseError
from fabric.domain.models import ChatDelta, ToolCall
from fabric.domain.secrets import Secrets

from .http_errors import BODY_LIMIT, status_error

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""Anthropic's documented error types and the HTTP status each comes with, so an error event
inside a stream maps to the same fabric error as the same error sent as a reply."""

_QUIET_DELTAS = frozenset({"thinking_delta", "signature_delta", "citations_delta"})
_MAX_WARNINGS = 20


_PROMPT = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class Reply(Struct):
    """One assistant message, however it arrived."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str | None = None
    model: str | None = None
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """The latest token count of each kind the server sent."""

    @property
    def input_tokens(self) -> int:
        """Prompt tokens, cached ones (read or written) included."""
        return sum(self.counts.get(name, 0) for name in _PROMPT)

    @property
    def output_tokens(self) -> int:
        return self.counts.get("output_tokens", 0)

    def warn(self, warning: str) -> None:
        if warning not in self.warnings and len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(warning)

    def add_usage(self, usage: Any) -> None:
        """Take the counts a ``usage`` object has (counts in a stream are cumulative; a null
        one keeps what came before)."""
        if isinstance(usage, Mapping):
            for name in (*_PROMPT, "output_tokens"):
                if usage.get(name) is not None:
                    self.counts[name] = count(usage[name])


def count(value: Any) -> int:
    """A token count as sent, or 0 when it is missing or not a count."""
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def parse_message(data: Any) -> Reply:
    """A whole Messages API reply (``{"type": "message", "content": [...], ...}``)."""
    content = data.get("content") if isinstance(data, Mapping) else None
    if not isinstance(content, list):
        raise ModelResponseError(
            f"the Anthropic API's reply has no content list: {str(data)[:300]}",
            hint="check that the anthropic backend's base_url points at the Anthropic API "
            "(https://api.anthropic.com) or a server that speaks its Messages API",
            body=str(data)[:BODY_LIMIT],
        )
    reply = Reply(stop_reason=_str(data.get("stop_reason")), model=_str(data.get("model")))
    reply.add_usage(data.get("usage"))
    texts = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            reply.tool_calls.append(_call(block, block.get("input"), len(reply.tool_calls)))
        elif kind not in ("thinking", "redacted_thinking"):
            reply.warn(f"skipped a content block fabric does not read: {str(block)[:200]}")
    reply.text = "".join(texts)
    return reply


def _call(block: Mapping[str, Any], arguments: Any, index: int) -> ToolCall:
    arguments_, raw, error = parse_arguments(arguments)
    call_id = str(block.get("id") or f"toolu_{index}")
    return ToolCall(call_id, str(block.get("name") or ""), arguments_, raw, error)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


class _Block(Struct):
    kind: str
    text: list[str] = field(default_factory=list)
    tool_index: int = 0
    start: Mapping[str, Any] = field(default_factory=dict)


class _Stream:
    """The state of one streamed message while its events arrive."""

    def __init__(
        self, on_delta: DeltaSink | None, *, model: str, server: str, secrets: Secrets | None
    ) -> None:
        self.reply = Reply()
        self.blocks: dict[int, _Block] = {}
        self.tools = 0
        self.started = self.stopped = False
        self._on_delta = on_delta
        self._model, self._server, self._secrets = model, server, secrets

    def event(self, name: str, data: str) -> None:
        """One server-sent event: its ``event:`` name and its joined ``data:`` lines."""
        if not data.strip():
            return
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            self.reply.warn(f"skipped a stream event that is not JSON ({name}): {data[:200]!r}")
            return
        if not isinstance(payload, Mapping):
            self.reply.warn(f"skipped a stream event that is not an object: {data[:200]!r}")
            return
        kind = str(payload.get("type") or name)
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            self.reply.warn(f"skipped a stream event fabric does not know: {kind}")
            return
        handler(payload)

    def _on_message_start(self, payload: Mapping[str, Any]) -> None:
        self.started = True
        message = payload.get("message")
        if isinstance(message, Mapping):
            self.reply.model = _str(message.get("model")) or self.reply.model
            self.reply.add_usage(message.get("usage"))

    def _on_content_block_start(self, payload: Mapping[str, Any]) -> None:
        start = payload.get("content_block")
        start = start if isinstance(start, Mapping) else {}
        block = _Block(str(start.get("type") or ""), start=start)
        self.blocks[count(payload.get("index"))] = block
        if block.kind == "text":
            if start.get("text"):
                self._text(block, str(start["text"]))
        elif block.kind == "tool_use":
            block.tool_index, self.tools = self.tools, self.tools + 1
            name = str(start.get("name") or "")
            self._emit(ChatDelta(tool_index=block.tool_index, tool_name=name))
        elif block.kind not in ("thinking", "redacted_thinking"):
            self.reply.warn(f"skipped a content block fabric does not read: {block.kind}")

    def _on_content_block_delta(self, payload: Mapping[str, Any]) -> None:
        block = self.blocks.get(count(payload.get("index")))
        delta = payload.get("delta")
        delta = delta if isinstance(delta, Mapping) else {}
        kind = delta.get("type")
        if block is None:
            self.reply.warn(f"skipped a delta for a content block that never started: {payload}")
        elif kind == "text_delta" and block.kind == "text":
            self._text(block, str(delta.get("text") or ""))
        elif kind == "input_json_delta" and block.kind == "tool_use":
            fragment = str(delta.get("partial_json") or "")
            block.text.append(fragment)
            if fragment:
                self._emit(ChatDelta(tool_index=block.tool_index, arguments=fragment))
        elif kind not in _QUIET_DELTAS:
            self.reply.warn(f"skipped a {kind} delta for a {block.kind or 'unknown'} block")

    def _on_content_block_stop(self, payload: Mapping[str, Any]) -> None:
        pass  # blocks are assembled once the message is complete, in content order

    def _on_message_delta(self, payload: Mapping[str, Any]) -> None:
        delta = payload.get("delta")
        if isinstance(delta, Mapping) and delta.get("stop_reason") is not None:
            self.reply.stop_reason = str(delta["stop_reason"])
        self.reply.add_usage(payload.get("usage"))

    def _on_message_stop(self, payload: Mapping[str, Any]) -> None:
        self.stopped = True

    def _on_ping(self, payload: Mapping[str, Any]) -> None:
        pass

    def _on_error(self, payload: Mapping[str, Any]) -> None:
        raise stream_error(payload, model=self._model, server=self._server, secrets=self._secrets)

    def _text(self, block: _Block, text: str) -> None:
        block.text.append(text)
        self._emit(ChatDelta(text=text))

    def _emit(self, delta: ChatDelta) -> None:
        if self._on_delta is not None:
            self._on_delta(delta)

    def finish(self) -> Reply:
        reply = self.reply
        if not self.started and not self.blocks:
            raise ModelResponseError(
                "the Anthropic API's stream ended without a message",
                hint="check that the anthropic backend's base_url points at the Anthropic API "
                "or a server that speaks its Messages API with stream: true",
            )
        if not self.stopped:
            reply.warn("the stream ended before message_stop; the reply may be incomplete")
        texts = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text":
                texts.append("".join(block.text))
            elif block.kind == "tool_use":
                joined = "".join(block.text)
                start_input = block.start.get("input")
                arguments = joined if joined.strip() or not start_input else start_input
                reply.tool_calls.append(_call(block.start, arguments, block.tool_index))
        reply.text = "".join(texts)
        return reply


def stream_error(
    payload: Mapping[str, Any], *, model: str, server: str, secrets: Secrets | None = None
) -> ModelError:
    """An ``error`` event (``{"type": "error", "error": {"type": ..., "message": ...}}``) as
    the fabric error the same error sent as an HTTP reply would be (``secrets`` as for
    ``status_error``)."""
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    status = _ERROR_STATUS.get(str(kind), 500)
    body = json.dumps(payload, ensure_ascii=False)
    server = f"{server} (in its stream)"
    return status_error(status, body, {}, model=model, server=server, secrets=secrets)


async def read_stream(
    lines: AsyncIterator[str],
    on_delta: DeltaSink | None,
    *,
    model: str,
    server: str,
    secrets: Secrets | None = None,
) -> Reply:
    """Read server-sent events line by line until the stream ends; an error event's text
    loses ``secrets`` (as for ``status_error``)."""
    stream = _Stream(on_delta, model=model, server=server, secrets=secrets)
    name = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                stream.event(name, "\n".join(data))
            name, data = "", []
            continue
        field_name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field_name == "event":
            name = value
        elif field_name == "data":
            data.append(value)
    if data:
        stream.event(name, "\n".join(data))
    return stream.finish()
