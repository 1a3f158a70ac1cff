"""The Anthropic Messages API adapter, tested at the HTTP transport: the request it sends (an
OpenAI-form history translated to alternating user/assistant turns with tool_use and
tool_result blocks), how it reads a whole reply back into OpenAI form, the fabric error each
failure becomes, and the model catalog. Fixtures follow the shapes in Anthropic's API docs."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fabric.domain.errors import (
    ModelAuthError,
    ModelConnectionError,
    ModelContextLengthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
)
from fabric.domain.models import ChatRequest, ChatResponse, ModelInfo, Usage
from fabric.infrastructure.llm.anthropic import AnthropicCatalog, AnthropicChatClient

FIXTURES = Path(__file__).parent.parent / "fixtures" / "anthropic"
URL = "https://api.anthropic.test/v1/messages"
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["location"],
        },
    },
}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in SF?"},
]
Answer = Callable[[httpx.Request], httpx.Response] | httpx.Response | dict[str, Any]


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


class Recorder:
    """A transport answering each request with the next answer, keeping every request."""

    def __init__(self, *answers: Answer) -> None:
        self.requests: list[httpx.Request] = []
        self._answers = list(answers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]
        if isinstance(answer, httpx.Response):
            return answer
        if isinstance(answer, dict):
            return httpx.Response(200, json=answer)
        return answer(request)

    def body(self, index: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[index].content)  # type: ignore[no-any-return]


def client(recorder: Recorder, **options: Any) -> AnthropicChatClient:
    options = {
        "base_url": "https://api.anthropic.test",
        "model": "claude-sonnet-4-5",
        "api_key": "sk-ant-test",
        "max_tokens": 1024,
        "timeout": 5.0,
        "stream": False,
        **options,
    }
    return AnthropicChatClient(transport=httpx.MockTransport(recorder), **options)


def chat(
    *answers: Answer,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> tuple[ChatResponse, Recorder]:
    recorder = Recorder(*answers)

    async def main() -> ChatResponse:
        chat_client = client(recorder, **options)
        try:
            return await chat_client.chat(
                ChatRequest(messages or MESSAGES, [WEATHER] if tools is None else tools)
            )
        finally:
            await chat_client.aclose()

    return asyncio.run(main()), recorder


def chat_error(*answers: Answer, **options: Any) -> tuple[ModelError, Recorder]:
    recorder = Recorder(*answers)

    async def main() -> None:
        chat_client = client(recorder, **options)
        try:
            await chat_client.chat(ChatRequest(MESSAGES, [WEATHER]))
        finally:
            await chat_client.aclose()

    with pytest.raises(ModelError) as info:
        asyncio.run(main())
    return info.value, recorder


def assert_alternates(turns: list[dict[str, Any]]) -> None:
    roles = [turn["role"] for turn in turns]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles


# --- the request ------------------------------------------------------------------------------


def test_request_goes_to_v1_messages_with_key_version_and_translated_body() -> None:
    _, recorder = chat(fixture("message_text.json"))
    request = recorder.requests[0]
    assert (request.method, str(request.url)) == ("POST", URL)
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers
    assert recorder.body() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in SF?"}]}],
        "tools": [
            {
                "name": "get_weather",
                "description": "Get the current weather in a given location.",
                "input_schema": WEATHER["function"]["parameters"],
            }
        ],
    }


@pytest.mark.parametrize(
    "base_url",
    ["https://api.anthropic.test", "https://api.anthropic.test/", "https://api.anthropic.test/v1"],
)
def test_base_url_with_or_without_v1_reaches_the_same_endpoint(base_url: str) -> None:
    _, recorder = chat(fixture("message_text.json"), base_url=base_url)
    assert str(recorder.requests[0].url) == URL


def test_temperature_only_when_set_and_no_tools_field_without_tools() -> None:
    _, recorder = chat(fixture("message_text.json"), temperature=0.2, tools=[])
    assert recorder.body()["temperature"] == 0.2 and "tools" not in recorder.body()
    _, recorder = chat(fixture("message_text.json"))
    assert "temperature" not in recorder.body() and "stream" not in recorder.body()


def test_all_system_messages_are_joined_into_the_system_field() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Rule one."},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "Rule two."}]},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    body = recorder.body()
    assert body["system"] == "Rule one.\n\nRule two."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_multi_turn_history_becomes_alternating_turns_with_tool_blocks() -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                tool_call("toolu_01", "get_weather", '{"location": "SF", "unit": "celsius"}'),
                tool_call("toolu_02", "get_weather", '{"location": "LA"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "15 C"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "24 C"},
        {"role": "user", "content": "Now call finish_task."},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("toolu_03", "x", "")]},
        {"role": "tool", "tool_call_id": "toolu_03", "content": ""},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    turns = recorder.body()["messages"]
    assert_alternates(turns)
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in SF?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"location": "SF", "unit": "celsius"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "get_weather",
                    "input": {"location": "LA"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 C"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "24 C"},
                {"type": "text", "text": "Now call finish_task."},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_03", "name": "x", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_03"}]},
    ]


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_empty_assistant_text_is_not_sent_as_a_text_block(content: str | None) -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [tool_call("t1", "get_weather", "{}")],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    assistant = recorder.body()["messages"][1]
    assert [block["type"] for block in assistant["content"]] == ["tool_use"]


def test_unparseable_arguments_go_out_as_an_empty_input_and_the_request_still_goes() -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("t1", "get_weather", '{"loc')],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "error: invalid JSON"},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    assert recorder.body()["messages"][1]["content"][0]["input"] == {}


def test_tool_ids_the_api_would_refuse_are_made_safe_on_both_sides() -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call:1/a", "get_weather", "{}")],
        },
        {"role": "tool", "tool_call_id": "call:1/a", "content": "ok"},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    turns = recorder.body()["messages"]
    assert turns[1]["content"][0]["id"] == turns[2]["content"][0]["tool_use_id"] == "call_1_a"


def test_tool_results_lead_their_user_turn_even_after_a_user_note() -> None:
    """The API wants tool_result blocks first in the turn after the tool calls."""
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("t1", "get_weather", "{}")],
        },
        {"role": "user", "content": "(the user pressed a key)"},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
    ]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    turns = recorder.body()["messages"]
    assert_alternates(turns)
    assert [block["type"] for block in turns[2]["content"]] == ["tool_result", "text"]


def test_a_tool_result_without_its_tool_call_turn_is_kept_as_text() -> None:
    """The API refuses a tool_result whose tool_use is not in the turn before."""
    history = [*MESSAGES, {"role": "tool", "tool_call_id": "gone", "content": "42"}]
    _, recorder = chat(fixture("message_text.json"), messages=history)
    assert recorder.body()["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in SF?"},
                {"type": "text", "text": "[tool gone] 42"},
            ],
        }
    ]


def test_a_reply_goes_back_into_the_history_and_out_again_unchanged() -> None:
    """Round trip: Anthropic's tool_use → OpenAI-form history → the same tool_use block, with
    its id, and the tool's result right after it."""
    recorder = Recorder(fixture("message_tool_use.json"), fixture("message_text.json"))

    async def main() -> list[ChatResponse]:
        chat_client = client(recorder)
        try:
            history = list(MESSAGES)
            first = await chat_client.chat(ChatRequest(history, [WEATHER]))
            history.append(first.message)
            for call in first.tool_calls:
                history.append({"role": "tool", "tool_call_id": call.id, "content": "15 C"})
            return [first, await chat_client.chat(ChatRequest(history, [WEATHER]))]
        finally:
            await chat_client.aclose()

    asyncio.run(main())
    turns = recorder.body(1)["messages"]
    assert_alternates(turns)
    assert turns[1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "I'll check the current weather in San Francisco for you.",
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA", "unit": "celsius"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": "15 C",
                }
            ],
        },
    ]


# --- the reply --------------------------------------------------------------------------------


def test_a_text_reply_with_usage_stop_reason_and_model() -> None:
    response, _ = chat(fixture("message_text.json"))
    assert response.content == "Hi! My name is Claude." and response.tool_calls == ()
    assert response.message == {"role": "assistant", "content": "Hi! My name is Claude."}
    assert response.usage == Usage(2095, 503)
    assert response.finish_reason == "stop"
    assert response.model == "claude-sonnet-4-5-20250929"
    assert response.warnings == () and not response.tool_calls_from_text


def test_a_tool_use_reply_becomes_openai_form_tool_calls() -> None:
    response, _ = chat(fixture("message_tool_use.json"))
    (call,) = response.tool_calls
    assert (call.id, call.name) == ("toolu_01A09q90qw90lq917835lq9", "get_weather")
    assert call.arguments == {"location": "San Francisco, CA", "unit": "celsius"}
    assert json.loads(call.raw_arguments) == call.arguments and call.arguments_error is None
    assert response.content == "I'll check the current weather in San Francisco for you."
    assert response.message == {
        "role": "assistant",
        "content": response.content,
        "tool_calls": [
            {
                "id": "toolu_01A09q90qw90lq917835lq9",
                "type": "function",
                "function": {"name": "get_weather", "arguments": call.raw_arguments},
            }
        ],
    }
    assert response.finish_reason == "tool_calls"


def test_cached_prompt_tokens_count_as_prompt_tokens() -> None:
    response, _ = chat(fixture("message_tool_use.json"))
    assert response.usage == Usage(384 + 100 + 1000, 92)


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("max_tokens", "length"), ("stop_sequence", "stop"), ("refusal", "refusal"), (None, None)],
)
def test_stop_reasons_map_to_openai_finish_reasons(
    stop_reason: str | None, finish_reason: str | None
) -> None:
    reply = fixture("message_text.json") | {"stop_reason": stop_reason}
    response, _ = chat(reply)
    assert response.finish_reason == finish_reason


def test_a_reply_with_only_a_tool_call_has_no_content_and_unknown_blocks_are_warned() -> None:
    reply = fixture("message_tool_use.json")
    reply["content"] = [{"type": "web_search_tool_result", "content": []}, reply["content"][1]]
    response, _ = chat(reply)
    assert response.content is None and response.message["content"] is None
    assert len(response.tool_calls) == 1
    assert any("web_search_tool_result" in w for w in response.warnings)


@pytest.mark.parametrize(
    "answer",
    [httpx.Response(200, text="<html>gateway</html>"), httpx.Response(200, json={"id": "x"})],
)
def test_a_reply_fabric_cannot_read_is_an_invalid_response(answer: httpx.Response) -> None:
    error, _ = chat_error(answer)
    assert type(error) is ModelResponseError and "base_url" in error.hint


# --- errors -----------------------------------------------------------------------------------


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011"}


@pytest.mark.parametrize(
    ("status", "kind", "message", "error_type", "hint"),
    [
        (401, "authentication_error", "invalid x-api-key", ModelAuthError, "ANTHROPIC_API_KEY"),
        (403, "permission_error", "no access", ModelAuthError, "ANTHROPIC_API_KEY"),
        (404, "not_found_error", "model: claude-nope", ModelNotFoundError, "--model"),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            ModelContextLengthError,
            "longer context",
        ),
        (400, "invalid_request_error", "max_tokens: too big", ModelError, "fabric.yaml"),
        (500, "api_error", "Internal server error", ModelServerError, "try again"),
        (529, "overloaded_error", "Overloaded", ModelServerError, "try again"),
    ],
)
def test_error_replies_become_fabric_errors(
    status: int, kind: str, message: str, error_type: type[ModelError], hint: str
) -> None:
    error, _ = chat_error(httpx.Response(status, json=anthropic_error(kind, message)))
    assert type(error) is error_type
    assert error.status_code == status and error.body is not None and message in error.body
    assert hint in error.hint
    if error_type is not ModelContextLengthError:
        assert f"the Anthropic API at https://api.anthropic.test answered {status}" in error.message
    assert error.retryable is (status >= 500)


def test_rate_limit_is_retryable_and_keeps_retry_after() -> None:
    reply = httpx.Response(
        429,
        headers={"retry-after": "7"},
        json=anthropic_error("rate_limit_error", "Number of request tokens has exceeded"),
    )
    error, _ = chat_error(reply)
    assert type(error) is ModelRateLimitError and error.retryable and error.retry_after == 7.0


@pytest.mark.parametrize("api_key", [None, ""])
def test_a_missing_api_key_fails_before_any_request_with_what_to_set(api_key: str | None) -> None:
    error, recorder = chat_error(fixture("message_text.json"), api_key=api_key)
    assert type(error) is ModelAuthError and "ANTHROPIC_API_KEY" in error.hint
    assert recorder.requests == []


@pytest.mark.parametrize(
    ("exc", "error_type"),
    [(httpx.ConnectError, ModelConnectionError), (httpx.ReadTimeout, ModelTimeoutError)],
)
def test_transport_failures_become_network_or_timeout_errors(
    exc: type[httpx.TransportError], error_type: type[ModelError]
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)

    error, _ = chat_error(fail)
    assert type(error) is error_type and URL in error.message and error.retryable


# --- the catalog ------------------------------------------------------------------------------


def catalog_models(
    *answers: Answer, api_key: str | None = "sk-ant-test"
) -> tuple[list[ModelInfo], Recorder]:
    recorder = Recorder(*answers)
    catalog = AnthropicCatalog(
        name="claude",
        base_url="https://api.anthropic.test/",
        api_key=api_key,
        timeout=5.0,
        transport=httpx.MockTransport(recorder),
    )
    assert catalog.backend == "claude"
    return asyncio.run(catalog.list_models()), recorder


def test_catalog_lists_every_model_as_tool_capable() -> None:
    models, recorder = catalog_models(fixture("models.json"))
    assert models == [
        ModelInfo("claude-sonnet-4-5-20250929", "claude", tools=True),
        ModelInfo("claude-haiku-4-5-20251001", "claude", tools=True),
    ]
    (request,) = recorder.requests
    assert (request.method, request.url.path) == ("GET", "/v1/models")
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"


def test_catalog_follows_pages_and_reads_a_context_length_when_given() -> None:
    first = {"data": [{"type": "model", "id": "a"}], "has_more": True, "last_id": "a"}
    second = {"data": [{"type": "model", "id": "b", "max_input_tokens": 200000}], "has_more": False}
    models, recorder = catalog_models(first, second)
    assert [(m.name, m.context_length) for m in models] == [("a", None), ("b", 200000)]
    assert recorder.requests[1].url.params["after_id"] == "a"


def test_catalog_errors_are_fabric_errors() -> None:
    reply = httpx.Response(401, json=anthropic_error("authentication_error", "invalid x-api-key"))
    with pytest.raises(ModelAuthError, match="401"):
        catalog_models(reply)
    with pytest.raises(ModelAuthError) as info:
        catalog_models(fixture("models.json"), api_key=None)
    assert "ANTHROPIC_API_KEY" in info.value.hint


# --- tool calls written as text (the per-model text_tool_calls option) -------------------------

TEXT_CALL = 'Sure.\n<tool_call>{"name": "get_weather", "arguments": {"location": "SF"}}</tool_call>'


def text_reply(text: str) -> dict[str, Any]:
    return fixture("message_text.json") | {"content": [{"type": "text", "text": text}]}


def test_a_call_written_as_text_stays_text_unless_the_option_is_on() -> None:
    response, _ = chat(text_reply(TEXT_CALL))
    assert response.tool_calls == () and response.content == TEXT_CALL
    assert not response.tool_calls_from_text


def test_with_the_option_a_call_written_as_text_becomes_a_native_tool_call() -> None:
    recorder = Recorder(text_reply(TEXT_CALL), fixture("message_text.json"))

    async def main() -> ChatResponse:
        chat_client = client(recorder, text_tool_calls=True)
        try:
            first = await chat_client.chat(ChatRequest(MESSAGES, [WEATHER]))
            history = [*MESSAGES, first.message]
            history.append(
                {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "15 C"}
            )
            await chat_client.chat(ChatRequest(history, [WEATHER]))
            return first
        finally:
            await chat_client.aclose()

    first = asyncio.run(main())
    assert first.tool_calls_from_text and first.content == "Sure."
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"location": "SF"})
    assert first.message["tool_calls"][0]["id"] == call.id
    turns = recorder.body(1)["messages"]
    assert turns[1]["content"][1] == {
        "type": "tool_use",
        "id": call.id,
        "name": "get_weather",
        "input": {"location": "SF"},
    }
    assert turns[2]["content"][0]["tool_use_id"] == call.id
