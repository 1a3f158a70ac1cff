"""A ``ChatClient`` for any OpenAI-compatible ``/chat/completions`` endpoint.

Covers Ollama's ``/v1``, vLLM, llama.cpp's server, LM Studio, OpenAI and OpenRouter. Tools go
in the ``tools`` field; ``tool_calls`` come back with arguments as a JSON string (OpenAI) or an
object (some local servers). With ``stream`` on, the reply arrives as server-sent events
(``openai_stream``) and each piece goes to ``on_delta``; either way the same ``ChatResponse``
comes back, and the whole request (the reply read to its end) has ``request_timeout`` seconds.
httpx errors and HTTP error replies become fabric errors here, so nothing above this module
sees httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from msgspec.structs import replace

from fabric.application.ports import DeltaSink
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import ModelConnectionError, ModelError, ModelResponseError
from fabric.domain.models import (
    ChatDelta,
    ChatRequest,
    ChatResponse,
    ToolCall,
    Usage,
    assistant_message,
)
from fabric.domain.secrets import Secrets

from .http import (
    DEFAULT_REQUEST_TIMEOUT,
    ClientPool,
    ModelHttp,
    encode_json,
    within_deadline,
)
from .http_errors import BODY_LIMIT, key_secrets, status_error, transport_error
from .openai_catalog import OpenAICatalog
from .openai_stream import StreamAccumulator, sse_data
from .text_tool_calls import apply_text_tool_calls, tool_call_schema

__all__ = ["OpenAICatalog", "OpenAIChatClient", "parse_completion"]

_JSON = {"Content-Type": "application/json"}


class OpenAIChatClient:
    """Chat completions over httpx (async), streamed or not.

    ``text_tool_calls`` (a per-model option for weak local models): a reply without native
    tool calls is searched for calls written as JSON in its text (see ``text_tool_calls``).
    ``constrained_tool_calls`` (llama.cpp, and other servers that honour ``response_format``
    with a JSON schema): every reply is constrained to one ``{"name", "arguments"}`` call of an
    offered tool, and read as that call. The model can then never answer in plain text.
    ``pool``: the HTTP client is taken from it (``ClientPool``) and given back by ``aclose``,
    for the runner's next run.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: httpx.Timeout | float = 600.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        temperature: float | None = None,
        stream: bool = False,
        text_tool_calls: bool = False,
        constrained_tool_calls: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        pool: ClientPool | None = None,
        secrets: Secrets | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._model = model
        self._max_tokens = max_tokens
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._request_timeout = request_timeout
        self._temperature = temperature
        self._stream = stream
        self._text_tool_calls = text_tool_calls
        self._constrained = constrained_tool_calls
        # redacted from the errors it raises
        self._secrets = key_secrets(api_key) if secrets is None else secrets
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._use = ModelHttp(
            base_url, timeout=timeout, headers=headers, transport=transport, pool=pool
        )

    @property
    def model(self) -> str:
        return self._model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        messages, tools = request.messages, request.tools
        body: dict[str, Any] = {"model": self._model, "messages": messages}
        if tools:
            body["tools"] = tools
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        if self._constrained and tools:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "tool_call", "schema": tool_call_schema(tools)},
            }
        if self._stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            sent = self._chat_streamed(encode_json(body), request.on_delta)
        else:
            sent = self._chat_once(encode_json(body))
        response = await within_deadline(sent, self._request_timeout, self._url)
        if self._text_tool_calls or self._constrained:
            response = apply_text_tool_calls(response, tools, messages)
        return response

    async def _chat_once(self, content: bytes) -> ChatResponse:
        try:
            reply = await self._use.client.post(self._url, content=content, headers=_JSON)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._url) from exc
        if reply.status_code >= 400:
            raise self._status_error(reply)
        return parse_completion(self._json(reply))

    async def _chat_streamed(self, content: bytes, on_delta: DeltaSink | None) -> ChatResponse:
        request = self._use.client.build_request("POST", self._url, content=content, headers=_JSON)
        try:
            reply = await self._use.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self._url) from exc
        try:
            kind = reply.headers.get("content-type", "").split(";")[0].strip().lower()
            if reply.status_code >= 400 or kind == "application/json":
                await reply.aread()
                if reply.status_code >= 400:
                    raise self._status_error(reply)
                return _replayed(parse_completion(self._json(reply)), on_delta)
            stream = StreamAccumulator(on_delta, model=self._model, secrets=self._secrets)
            lines = reply.aiter_lines()
            async for event in sse_data(lines):
                stream.feed(event)
                if stream.done:
                    break
            body = stream.completion()
            if stream.done:
                await _drained(lines)
        except httpx.TimeoutException as exc:
            raise transport_error(exc, self._url) from exc
        except httpx.HTTPError as exc:
            raise ModelConnectionError(
                f"the connection to the model server at {self._url} broke during the reply: "
                f"{exc or type(exc).__name__}",
                hint="try again; if it keeps happening, check the server's logs (it may have "
                "crashed or run out of memory)",
            ) from exc
        finally:
            await reply.aclose()
        return replace(parse_completion(body), warnings=tuple(stream.warnings))

    def _status_error(self, reply: httpx.Response) -> ModelError:
        return status_error(
            reply.status_code,
            reply.text,
            reply.headers,
            model=self._model,
            server="the model server",
            secrets=self._secrets,
        )

    def _json(self, reply: httpx.Response) -> Any:
        try:
            return reply.json()
        except (ValueError, RecursionError) as exc:
            raise ModelResponseError(
                f"the model server sent a reply that is not JSON: {reply.text[:200]!r}",
                hint="check that llm.base_url points at an OpenAI-compatible API (ending in /v1)",
                status_code=reply.status_code,
                body=reply.text[:BODY_LIMIT],
            ) from exc

    async def aclose(self) -> None:
        await self._use.aclose()


_DRAIN_CHARS = 65536
_DRAIN_SECONDS = 0.5


async def _drained(lines: AsyncIterator[str]) -> None:
    """Read what a stream sends after its ``[DONE]``: the end of the body, a few bytes from a
    server that behaves. A connection whose reply was not read to its end cannot serve another
    request, so without this every streamed step connected anew (with a TLS handshake to a
    cloud API). A server that sends more than ``_DRAIN_CHARS`` after it, or takes longer than
    ``_DRAIN_SECONDS``, costs its connection and nothing else: the reply is complete."""
    left = _DRAIN_CHARS
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(_DRAIN_SECONDS):
            async for line in lines:
                left -= len(line) + 1
                if left < 0:
                    return


def _replayed(response: ChatResponse, on_delta: DeltaSink | None) -> ChatResponse:
    """A server that ignored ``stream`` and sent the whole reply: pass it on as deltas."""
    if on_delta is not None:
        if response.content:
            on_delta(ChatDelta(text=response.content))
        for index, call in enumerate(response.tool_calls):
            on_delta(ChatDelta(tool_index=index, tool_name=call.name, arguments=call.raw_arguments))
    return response


def parse_completion(data: Any) -> ChatResponse:
    """Turn a chat completion JSON object into a ``ChatResponse`` (shared with other adapters
    that speak the same shape)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise _no_message(data) from exc
    if not isinstance(message, Mapping):
        raise _no_message(data)
    content = _text(message.get("content"))
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    calls = _unique_ids([_tool_call(raw, index) for index, raw in enumerate(raw_calls)])
    wire = assistant_message(content, calls)
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    reason, model = choice.get("finish_reason"), data.get("model")
    return ChatResponse(
        message=wire,
        content=content,
        tool_calls=calls,
        usage=Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))),
        finish_reason=None if reason is None else str(reason),
        model=None if model is None else str(model),
    )


def _no_message(data: Any) -> ModelResponseError:
    return ModelResponseError(
        f"the model server's reply has no choices[0].message: {str(data)[:300]}",
        hint="check that llm.base_url points at an OpenAI-compatible chat API",
        body=str(data)[:BODY_LIMIT],
    )


def _text(content: Any) -> str | None:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    return json.dumps(content)


def _count(value: Any) -> int:
    """A token count as sent, or 0 when it is missing or not a count."""
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _tool_call(raw: Any, index: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, Mapping) else None
    if not isinstance(function, Mapping):
        return ToolCall(f"call_{index}", "", None, json.dumps(raw), "no function in tool call")
    call_id = str(raw.get("id") or f"call_{index}")
    name = str(function.get("name") or "")
    arguments, raw_arguments, error = parse_arguments(function.get("arguments"))
    return ToolCall(call_id, name, arguments, raw_arguments, error)


def _unique_ids(calls: list[ToolCall]) -> tuple[ToolCall, ...]:
    """Each call's result is matched to it by id, so ids repeated in one reply get a suffix."""
    seen: set[str] = set()
    out = []
    for call in calls:
        call_id, number = call.id, 1
        while call_id in seen:
            number += 1
            call_id = f"{call.id}_{number}"
        seen.add(call_id)
        out.append(call if call_id == call.id else replace(call, id=call_id))
    return tuple(out)
