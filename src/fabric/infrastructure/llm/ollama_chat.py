"""A ``ChatClient`` for Ollama's native ``/api/chat``.

Why native: Ollama's OpenAI-compatible ``/v1`` ignores ``options.num_ctx`` and silently cuts a
long prompt down to the server's default context. Here ``num_ctx`` is sent, and a prompt the
server still cut (it counted far fewer prompt tokens than were sent) is reported in
``ChatResponse.warnings``.

The history stays in OpenAI wire form; this module translates at its edge, both ways:
assistant ``tool_calls`` go out with ``arguments`` as objects, a ``tool`` message goes out with
the ``tool_name`` of the call it answers, and a reply comes back as an OpenAI-shaped assistant
message with ids ``call_<n>`` and arguments as a JSON string.

Streaming replies are NDJSON, one object a line: ``message.content`` fragments, whole
``message.tool_calls``, and a last ``done: true`` line with the token counts. A line that cannot
be read is skipped and reported as a warning, never fatal. The whole request, the stream read
to its end, has ``request_timeout`` seconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from fabric.application.ports import DeltaSink
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import ModelError, ModelResponseError, ModelServerError
from fabric.domain.models import (
    ChatDelta,
    ChatRequest,
    ChatResponse,
    Message,
    ToolCall,
    Usage,
    assistant_message,
    content_text,
)

from .http import (
    DEFAULT_REQUEST_TIMEOUT,
    ClientPool,
    ModelHttp,
    encode_json,
    within_deadline,
)
from .http_errors import BODY_LIMIT, status_error, transport_error
from .text_tool_calls import apply_text_tool_calls

_JSON = {"Content-Type": "application/json"}
DEFAULT_WINDOW = 2048
"""The context Ollama used when a request set no ``num_ctx`` (until 0.6; later versions pick
4096 or more), the floor below which no truncation is suspected."""
CHARS_PER_TOKEN = 4
TRUNCATED_BELOW = 0.5
"""A prompt counted under this share of the estimate (and larger than the window) was cut."""


class OllamaChatClient:
    """Chat through Ollama's ``/api/chat`` (async httpx), streaming by default. ``pool``: as for
    ``OpenAIChatClient``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        timeout: httpx.Timeout | float = 600.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        num_ctx: int | None = None,
        stream: bool = True,
        temperature: float | None = None,
        text_tool_calls: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        pool: ClientPool | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._model = model
        self._max_tokens = max_tokens
        self._url = base_url.rstrip("/") + "/api/chat"
        self._request_timeout = request_timeout
        self._num_ctx = num_ctx
        self._stream = stream
        self._temperature = temperature
        self._text_tool_calls = text_tool_calls
        self._use = ModelHttp(base_url, timeout=timeout, transport=transport, pool=pool)

    @property
    def model(self) -> str:
        return self._model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": to_ollama_messages(request.messages),
            "stream": self._stream,
        }
        if request.tools:
            body["tools"] = list(request.tools)
        options: dict[str, Any] = {}
        if self._num_ctx is not None:
            options["num_ctx"] = self._num_ctx
        if self._temperature is not None:
            options["temperature"] = self._temperature
        if self._max_tokens is not None:
            options["num_predict"] = self._max_tokens
        if options:
            body["options"] = options
        content = encode_json(body)
        reply = _Reply(self._model, request.on_delta if self._stream else None)
        read = self._read_stream if self._stream else self._read_whole
        try:
            await within_deadline(read(content, reply), self._request_timeout, self._url)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._url) from exc
        warning = truncation_warning(
            len(content) // CHARS_PER_TOKEN, reply.prompt_tokens, self._num_ctx, self._model
        )
        if warning:
            reply.warnings.append(warning)
        response = reply.response()
        if self._text_tool_calls and request.tools:
            response = apply_text_tool_calls(response, request.tools)
        return response

    async def _read_stream(self, content: bytes, reply: _Reply) -> None:
        async with self._use.client.stream("POST", self._url, content=content, headers=_JSON) as r:
            if r.status_code >= 400:
                await r.aread()
                raise self._status_error(r.status_code, _error_text(r.text), r.headers)
            async for line in r.aiter_lines():
                if line.strip():
                    self._feed_line(line, reply)
        if not reply.done:
            reply.warnings.append(
                "Ollama's stream ended before its last line (done: true): the reply may be "
                "cut short, and its token counts are missing"
            )

    async def _read_whole(self, content: bytes, reply: _Reply) -> None:
        r = await self._use.client.post(self._url, content=content, headers=_JSON)
        if r.status_code >= 400:
            raise self._status_error(r.status_code, _error_text(r.text), r.headers)
        try:
            data = r.json()
        except (ValueError, RecursionError) as exc:
            raise ModelResponseError(
                f"Ollama at {self._url} sent a reply that is not JSON: {r.text[:200]!r}",
                hint="check that the backend's base_url (or OLLAMA_HOST) points at an Ollama "
                "server's native API, without /v1",
                status_code=r.status_code,
                body=r.text[:BODY_LIMIT],
            ) from exc
        if isinstance(data, Mapping) and "error" in data:
            raise self._failed(str(data["error"]))
        if not isinstance(data, Mapping) or not isinstance(data.get("message"), Mapping):
            raise ModelResponseError(
                f"Ollama's reply has no message: {str(data)[:300]}",
                hint="check that the backend's base_url points at an Ollama server",
                body=str(data)[:BODY_LIMIT],
            )
        reply.feed(data)

    def _feed_line(self, line: str, reply: _Reply) -> None:
        try:
            chunk = json.loads(line)
        except (ValueError, RecursionError):
            reply.warnings.append(f"skipped a stream line that is not JSON: {line[:120]!r}")
            return
        if isinstance(chunk, Mapping) and "error" in chunk:
            raise self._failed(str(chunk["error"]))
        reply.feed(chunk)

    def _failed(self, text: str) -> ModelError:
        """An ``{"error": ...}`` object after a 200 (in a stream, or as the whole reply): mapped
        like an error reply, worded as what happened (the server failed while answering)."""
        error = self._status_error(500, text, {})
        if type(error) is ModelServerError:
            return ModelServerError(
                f"Ollama failed while answering with model {self._model!r}: {text[:500]}",
                hint="try again; if it keeps failing, read the Ollama server's log (the model "
                "may not fit in memory: try a smaller model or a lower num_ctx)",
                body=text[:BODY_LIMIT],
            )
        return error

    def _status_error(self, status: int, text: str, headers: Mapping[str, str]) -> ModelError:
        return status_error(status, text, headers, model=self._model, server="Ollama")

    async def aclose(self) -> None:
        await self._use.aclose()


def to_ollama_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI wire messages as ``/api/chat`` wants them (see the module docstring)."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        item: dict[str, Any] = {"role": role, "content": content_text(message.get("content"))}
        if role == "assistant" and message.get("tool_calls"):
            item["tool_calls"] = [_call_out(call, names) for call in message["tool_calls"]]
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id"))) or message.get("name")
            if name:
                item["tool_name"] = name
        out.append(item)
    return out


def _call_out(call: Any, names: dict[str, str]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    function = function if isinstance(function, Mapping) else {}
    name = str(function.get("name") or "")
    if isinstance(call, Mapping) and call.get("id") is not None:
        names[str(call["id"])] = name
    arguments, _, _ = parse_arguments(function.get("arguments"))
    # Ollama reads arguments as an object; what was not one was already reported to the model
    return {"function": {"name": name, "arguments": arguments if arguments is not None else {}}}


def truncation_warning(
    sent_tokens: int, counted: int, num_ctx: int | None, model: str
) -> str | None:
    """A warning when the server counted far fewer prompt tokens than were sent (estimated at
    ~4 characters a token): Ollama then kept only what fits its context window."""
    window = num_ctx or DEFAULT_WINDOW
    if counted <= 0 or sent_tokens <= window or counted >= sent_tokens * TRUNCATED_BELOW:
        return None
    now = f"now {num_ctx}" if num_ctx else "unset, so the server's default"
    return (
        f"the prompt was probably truncated to the context window: about {sent_tokens} tokens "
        f"were sent but Ollama read only {counted}, so {model} did not see part of the "
        f"conversation. Raise num_ctx (llm.model_options.{json.dumps(model)}.num_ctx in "
        f"fabric.yaml; {now}) or use a model with a longer context"
    )


def _error_text(body: str) -> str:
    """The ``error`` of Ollama's ``{"error": "..."}`` replies, else the body as it came."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if isinstance(data, Mapping) and isinstance(data.get("error"), str):
        return str(data["error"])
    return body


class _Reply:
    """One reply being read, chunk by chunk (a non-streamed reply is one chunk)."""

    def __init__(self, model: str, on_delta: DeltaSink | None) -> None:
        self._on_delta = on_delta
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.warnings: list[str] = []
        self.done = False
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.reason: str | None = None
        self.model = model

    def feed(self, chunk: Any) -> None:
        if not isinstance(chunk, Mapping):
            self.warnings.append(f"skipped a stream line that is not an object: {chunk!r:.120}")
            return
        message = chunk.get("message")
        if isinstance(message, Mapping):
            self._message(message)
        elif message is not None:
            self.warnings.append(f"skipped a message that is not an object: {message!r:.120}")
        if chunk.get("done") is True:
            self.done = True
            self.prompt_tokens = _count(chunk.get("prompt_eval_count"))
            self.completion_tokens = _count(chunk.get("eval_count"))
            reason = chunk.get("done_reason")
            self.reason = None if reason is None else str(reason)
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]

    def _message(self, message: Mapping[str, Any]) -> None:
        text = message.get("content")
        if isinstance(text, str) and text:
            self.text.append(text)
            if self._on_delta:
                self._on_delta(ChatDelta(text=text))
        elif text not in (None, ""):
            self.warnings.append(f"skipped content that is not text: {text!r:.120}")
        raw_calls = message.get("tool_calls") or []
        for raw in raw_calls if isinstance(raw_calls, list) else [raw_calls]:
            call = _tool_call(raw, len(self.calls))
            self.calls.append(call)
            if self._on_delta:
                self._on_delta(
                    ChatDelta(
                        tool_index=len(self.calls) - 1,
                        tool_name=call.name,
                        arguments=call.raw_arguments,
                    )
                )

    def response(self) -> ChatResponse:
        content = "".join(self.text) or None
        wire = assistant_message(content, self.calls)
        reason = self.reason
        if self.calls and reason in (None, "stop"):
            reason = "tool_calls"  # what OpenAI-compatible servers say, for one runlog shape
        return ChatResponse(
            message=wire,
            content=content,
            tool_calls=tuple(self.calls),
            usage=Usage(self.prompt_tokens, self.completion_tokens),
            finish_reason=reason,
            model=self.model,
            warnings=tuple(self.warnings),
        )


def _tool_call(raw: Any, index: int) -> ToolCall:
    call_id = f"call_{index}"
    function = raw.get("function") if isinstance(raw, Mapping) else None
    if not isinstance(function, Mapping):
        return ToolCall(call_id, "", None, json.dumps(raw), "no function in tool call")
    arguments, raw_arguments, error = parse_arguments(function.get("arguments"))
    return ToolCall(call_id, str(function.get("name") or ""), arguments, raw_arguments, error)


def _count(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError, OverflowError):
        return 0
