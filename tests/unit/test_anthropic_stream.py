"""Streaming from the Anthropic Messages API (server-sent events), at the HTTP transport: the
documented event sequences delivered in small network chunks, live deltas, tool input split
mid-JSON, usage, error events, and events fabric cannot read (warned, never fatal)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fabric.domain.errors import (
    ModelConnectionError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
)
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, Usage
from fabric.infrastructure.llm.anthropic import AnthropicChatClient

FIXTURES = Path(__file__).parent.parent / "fixtures" / "anthropic"
MESSAGES = [{"role": "user", "content": "Weather in SF?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather.",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
]


class Chunks(httpx.AsyncByteStream):
    """A body that arrives a few bytes at a time (lines and UTF-8 characters split), then
    optionally fails like a dropped connection."""

    def __init__(self, body: bytes, size: int = 7, fail: Exception | None = None) -> None:
        self._body, self._size, self._fail = body, size, fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), self._size):
            yield self._body[start : start + self._size]
        if self._fail is not None:
            raise self._fail


def sse(*events: dict[str, Any] | str) -> str:
    """Events as server-sent events text; a str is sent as the data line as it is."""
    out = []
    for event in events:
        if isinstance(event, str):
            out.append(f"event: unknown\ndata: {event}\n\n")
        else:
            out.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return "".join(out)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def start(input_tokens: int = 10, **usage: int) -> dict[str, Any]:
    message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant"}
    message["content"] = []
    message |= {"model": "claude-haiku-4-5", "stop_reason": None, "stop_sequence": None}
    message["usage"] = {"input_tokens": input_tokens, "output_tokens": 1, **usage}
    return {"type": "message_start", "message": message}


def tool_start(index: int, call_id: str, name: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, fragment: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": fragment}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def end(stop_reason: str = "tool_use", output_tokens: int = 20) -> tuple[dict[str, Any], ...]:
    return (
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    )


def stream_chat(
    body: str | httpx.Response, *, fail: Exception | None = None
) -> tuple[ChatResponse, list[ChatDelta], list[dict[str, Any]]]:
    requests: list[dict[str, Any]] = []
    deltas: list[ChatDelta] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        if isinstance(body, httpx.Response):
            return body
        stream = Chunks(body.encode(), fail=fail)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream; charset=utf-8"}, stream=stream
        )

    async def main() -> ChatResponse:
        client = AnthropicChatClient(
            base_url="https://api.anthropic.test",
            model="claude-haiku-4-5",
            api_key="sk-ant-test",
            max_tokens=512,
            timeout=5.0,
            transport=httpx.MockTransport(answer),
        )
        try:
            return await client.chat(ChatRequest(MESSAGES, TOOLS, on_delta=deltas.append))
        finally:
            await client.aclose()

    return asyncio.run(main()), deltas, requests


def stream_error(body: str | httpx.Response, **kwargs: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        stream_chat(body, **kwargs)
    return info.value


def test_the_documented_text_stream() -> None:
    response, deltas, requests = stream_chat(fixture("stream_text.sse"))
    assert requests[0]["stream"] is True
    assert [d.text for d in deltas] == ["Hello", "!"]
    assert response.content == "Hello!" and response.tool_calls == ()
    assert response.message == {"role": "assistant", "content": "Hello!"}
    assert response.usage == Usage(25, 15)
    assert (response.finish_reason, response.model) == ("stop", "claude-sonnet-4-5-20250929")
    assert response.warnings == ()


def test_the_documented_tool_use_stream() -> None:
    response, deltas, _ = stream_chat(fixture("stream_tool_use.sse"))
    text = "Okay, let's check the weather for San Francisco, CA:"
    assert "".join(d.text for d in deltas) == text
    tool_deltas = [d for d in deltas if d.tool_index is not None]
    assert tool_deltas[0] == ChatDelta(tool_index=0, tool_name="get_weather")
    fragments = "".join(d.arguments for d in tool_deltas)
    assert json.loads(fragments) == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    (call,) = response.tool_calls
    assert (call.id, call.name) == ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
    assert call.arguments == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    assert response.content == text
    assert response.message["tool_calls"] == [
        {
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "type": "function",
            "function": {"name": "get_weather", "arguments": call.raw_arguments},
        }
    ]
    assert json.loads(response.message["tool_calls"][0]["function"]["arguments"]) == call.arguments
    assert response.usage == Usage(472, 89) and response.finish_reason == "tool_calls"


def test_tool_input_split_inside_strings_escapes_and_characters_assembles() -> None:
    wanted = {"path": 'a "quoted" name ü 日本.txt', "lines": [1, 2]}
    text = json.dumps(wanted, ensure_ascii=False)
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]  # splits \" and multi-byte chars
    body = sse(
        start(), tool_start(0, "toolu_A", "write"), *(json_delta(0, p) for p in pieces), *end()
    )
    response, deltas, _ = stream_chat(body)
    (call,) = response.tool_calls
    assert call.arguments == wanted and call.arguments_error is None
    assert "".join(d.arguments for d in deltas) == text


def test_several_tool_calls_are_numbered_in_order_with_their_own_input() -> None:
    body = sse(
        start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Two."},
        },
        tool_start(1, "toolu_A", "get_weather"),
        json_delta(1, '{"location": "S'),
        json_delta(1, 'F"}'),
        tool_start(2, "toolu_B", "get_weather"),
        json_delta(2, '{"location": "LA"}'),
        *end(),
    )
    response, deltas, _ = stream_chat(body)
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("toolu_A", {"location": "SF"}),
        ("toolu_B", {"location": "LA"}),
    ]
    names = [(d.tool_index, d.tool_name) for d in deltas if d.tool_name]
    assert names == [(0, "get_weather"), (1, "get_weather")]
    assert {d.tool_index for d in deltas if d.arguments} == {0, 1}


def test_an_empty_tool_input_is_an_empty_object() -> None:
    body = sse(start(), tool_start(0, "toolu_A", "list_files"), json_delta(0, ""), *end())
    response, _, _ = stream_chat(body)
    (call,) = response.tool_calls
    assert call.arguments == {} and call.raw_arguments == "{}" and call.arguments_error is None


def test_tool_input_cut_off_at_max_tokens_is_kept_raw_with_what_is_wrong() -> None:
    body = sse(
        start(),
        tool_start(0, "toolu_A", "write"),
        json_delta(0, '{"text": "abc'),
        *end("max_tokens"),
    )
    response, _, _ = stream_chat(body)
    (call,) = response.tool_calls
    assert call.arguments is None and call.raw_arguments == '{"text": "abc'
    assert call.arguments_error is not None and "invalid JSON" in call.arguments_error
    assert response.finish_reason == "length"


def test_cached_prompt_tokens_count_and_a_null_count_later_keeps_the_earlier_one() -> None:
    last = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": None, "cache_read_input_tokens": None, "output_tokens": 33},
    }
    body = sse(
        start(5, cache_read_input_tokens=300, cache_creation_input_tokens=20),
        last,
        {"type": "message_stop"},
    )
    response, _, _ = stream_chat(body)
    assert response.usage == Usage(325, 33)


def test_unknown_and_malformed_events_are_warned_not_fatal() -> None:
    body = sse(
        start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        "{not json",
        {"type": "brand_new_event", "index": 0},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "?"}},
        *end("end_turn"),
    )
    response, _, _ = stream_chat(body)
    assert response.content == "ok"
    warnings = "\n".join(response.warnings)
    assert "not JSON" in warnings and "brand_new_event" in warnings and "never started" in warnings


def test_crlf_line_endings_and_comment_lines_are_read() -> None:
    body = ": keep-alive\r\n" + fixture("stream_text.sse").replace("\n", "\r\n")
    response, _, _ = stream_chat(body)
    assert response.content == "Hello!" and response.warnings == ()


def test_a_stream_cut_before_message_stop_is_warned() -> None:
    body = sse(
        start(),
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": "par"},
        },
    )
    response, _, _ = stream_chat(body)
    assert response.content == "par"
    assert any("message_stop" in w for w in response.warnings)


def test_an_empty_stream_is_an_invalid_response() -> None:
    error = stream_error(": nothing here\n\n")
    assert type(error) is ModelResponseError and "base_url" in error.hint


def test_the_documented_overloaded_error_event_is_a_retryable_server_error() -> None:
    error = stream_error(fixture("stream_overloaded.sse"))
    assert type(error) is ModelServerError and error.retryable
    assert error.status_code == 529 and error.body is not None and "Overloaded" in error.body


@pytest.mark.parametrize(
    ("kind", "message", "error_type"),
    [
        ("rate_limit_error", "Too many requests", ModelRateLimitError),
        (
            "invalid_request_error",
            "prompt is too long: 201000 tokens > 200000",
            ModelContextLengthError,
        ),
        ("api_error", "Internal server error", ModelServerError),
        ("some_new_error", "?", ModelServerError),
    ],
)
def test_error_events_map_like_error_replies(
    kind: str, message: str, error_type: type[ModelError]
) -> None:
    event = {"type": "error", "error": {"type": kind, "message": message}}
    assert type(stream_error(sse(start(), event))) is error_type


def test_an_http_error_reply_to_a_streaming_request_is_read_and_mapped() -> None:
    reply = httpx.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    error = stream_error(reply)
    assert type(error) is ModelServerError and error.body is not None and "Overloaded" in error.body


def test_a_connection_dropped_mid_stream_is_a_network_error() -> None:
    error = stream_error(
        fixture("stream_tool_use.sse")[:400], fail=httpx.ReadError("connection reset")
    )
    assert type(error) is ModelConnectionError and error.retryable


def test_a_server_that_answers_a_stream_request_with_one_json_message_is_understood() -> None:
    whole = json.loads((FIXTURES / "message_tool_use.json").read_text())
    response, deltas, _ = stream_chat(httpx.Response(200, json=whole))
    assert response.tool_calls[0].id == "toolu_01A09q90qw90lq917835lq9" and deltas == []
