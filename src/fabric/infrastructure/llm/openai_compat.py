"""A ``ChatClient`` for any OpenAI-compatible ``/chat/completions`` endpoint.

Covers Ollama's ``/v1``, vLLM, llama.cpp's server, LM Studio, OpenAI and OpenRouter. Tools go
in the ``tools`` field; ``tool_calls`` come back with arguments as a JSON string (OpenAI) or an
object (some local servers). httpx errors and HTTP error replies become fabric errors here, so
nothing above this module sees httpx.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx

from fabric.domain.errors import (
    ModelAuthError,
    ModelCapabilityError,
    ModelConnectionError,
    ModelError,
    ModelNotFoundError,
    ModelResponseError,
)
from fabric.domain.models import ChatResponse, Message, ToolCall, Usage

from .arguments import parse_arguments

_BODY_LIMIT = 2000
_TOOLS_UNSUPPORTED = ("does not support tools", "tool use is not supported", "tools are not")
_CONTEXT_EXCEEDED = ("context length", "context_length", "maximum context", "too many tokens")
_JSON = {"Content-Type": "application/json"}


class OpenAIChatClient:
    """Non-streaming chat completions over httpx (async)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: httpx.Timeout | float = 600.0,
        temperature: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._model = model
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._temperature = temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
            verify=_tls_context(),
        )

    @property
    def model(self) -> str:
        return self._model

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        body: dict[str, Any] = {"model": self._model, "messages": messages}
        if tools:
            body["tools"] = tools
        if self._temperature is not None:
            body["temperature"] = self._temperature
        content = _encode(body)
        try:
            reply = await self._http.post(self._url, content=content, headers=_JSON)
        except httpx.TimeoutException as exc:
            raise ModelConnectionError(
                f"the model server at {self._url} did not answer in time ({type(exc).__name__})",
                hint="raise llm.timeouts in fabric.yaml, or use a smaller or faster model",
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelConnectionError(
                f"cannot reach the model server at {self._url}: {exc}",
                hint="start it (for Ollama: `ollama serve`) or point FABRIC_BASE_URL or "
                "llm.base_url at a running OpenAI-compatible server",
            ) from exc
        if reply.status_code >= 400:
            raise self._http_error(reply)
        try:
            data = reply.json()
        except ValueError as exc:
            raise ModelResponseError(
                f"the model server sent a reply that is not JSON: {reply.text[:200]!r}",
                hint="check that llm.base_url points at an OpenAI-compatible API (ending in /v1)",
                status_code=reply.status_code,
                body=reply.text[:_BODY_LIMIT],
            ) from exc
        return parse_completion(data)

    def _http_error(self, reply: httpx.Response) -> ModelError:
        status, text = reply.status_code, reply.text[:_BODY_LIMIT]
        lowered = text.lower()
        what = f"the model server answered {status} for model {self._model!r}: {text[:500]}"
        kwargs: dict[str, Any] = {"status_code": status, "body": text}
        if status in (401, 403):
            return ModelAuthError(
                what,
                hint="set FABRIC_API_KEY (or OPENAI_API_KEY) to a valid key for this server",
                **kwargs,
            )
        if status == 404:
            return ModelNotFoundError(
                what,
                hint=f"check the model name (for Ollama: `ollama pull {self._model}`), pick "
                "another with --model, and check that llm.base_url ends in /v1",
                **kwargs,
            )
        if any(s in lowered for s in _TOOLS_UNSUPPORTED):
            return ModelCapabilityError(
                f"model {self._model!r} cannot call tools: {text[:300]}",
                hint="pick a tool-capable model (e.g. qwen2.5-coder, llama3.1, mistral-nemo) "
                "with --model or FABRIC_MODEL",
                **kwargs,
            )
        if status == 400 and any(s in lowered for s in _CONTEXT_EXCEEDED):
            return ModelCapabilityError(
                f"the conversation no longer fits model {self._model!r}'s context: {text[:300]}",
                hint="use a model with a longer context, or lower limits.tool_output_chars",
                **kwargs,
            )
        if status == 429:
            hint = "the server is rate limiting or out of quota; wait and try again, or check "
            hint += "your plan with the provider"
        elif status >= 500:
            hint = "the server had a problem; try again, and check its logs"
        else:
            hint = "check the request settings in fabric.yaml (model name, temperature)"
        return ModelError(what, hint=hint, **kwargs)

    async def aclose(self) -> None:
        await self._http.aclose()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one loads the CA bundle (~15 ms), which
    httpx would otherwise do for every client, i.e. for every run."""
    return httpx.create_ssl_context()


def _encode(body: Mapping[str, Any]) -> bytes:
    """The request body as compact UTF-8 JSON. A lone surrogate (a model can send one as a JSON
    escape) cannot be UTF-8; then the body goes ASCII-escaped, surrogate and all."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


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
    wire: Message = {"role": "assistant", "content": content}
    if calls:
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in calls
        ]
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
        body=str(data)[:_BODY_LIMIT],
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
