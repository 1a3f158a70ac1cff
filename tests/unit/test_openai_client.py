"""The OpenAI-compatible client, tested at the HTTP transport: what it sends, how it reads
what comes back, and which fabric error each failure becomes (status code, body and a hint
kept)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from fabric.domain.errors import (
    ModelAuthError,
    ModelCapabilityError,
    ModelConnectionError,
    ModelContextLengthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ChatRequest, ChatResponse, Usage
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient, parse_completion
from fabric.testing import completion

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Say it back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
]

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """An httpx transport that answers with ``answer`` and keeps every request."""

    def __init__(self, answer: Handler | httpx.Response | dict[str, Any]) -> None:
        self.requests: list[httpx.Request] = []
        self._answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if callable(self._answer):
            return self._answer(request)
        if isinstance(self._answer, httpx.Response):
            return self._answer
        return httpx.Response(200, json=self._answer)

    def body(self, index: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[index].content)  # type: ignore[no-any-return]


def chat(
    answer: Handler | httpx.Response | dict[str, Any],
    *,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> tuple[ChatResponse, Recorder]:
    recorder = Recorder(answer)
    options.setdefault("base_url", "http://llm.test/v1")
    options.setdefault("model", "qwen2.5-coder:7b")

    async def main() -> ChatResponse:
        client = OpenAIChatClient(transport=httpx.MockTransport(recorder), **options)
        try:
            return await client.chat(
                ChatRequest(messages or MESSAGES, TOOLS if tools is None else tools)
            )
        finally:
            await client.aclose()

    return asyncio.run(main()), recorder


def chat_error(answer: Handler | httpx.Response | dict[str, Any], **options: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        chat(answer, **options)
    return info.value


# --- the request ------------------------------------------------------------------------------


def test_request_body_carries_model_messages_and_tools() -> None:
    _, recorder = chat(completion("hello"))
    request = recorder.requests[0]
    assert request.method == "POST"
    assert str(request.url) == "http://llm.test/v1/chat/completions"
    assert request.headers["content-type"] == "application/json"
    assert recorder.body() == {"model": "qwen2.5-coder:7b", "messages": MESSAGES, "tools": TOOLS}
    assert "authorization" not in request.headers


@pytest.mark.parametrize(
    "base_url", ["http://llm.test/v1", "http://llm.test/v1/", "http://llm.test/v1//"]
)
def test_url_is_base_url_plus_chat_completions(base_url: str) -> None:
    _, recorder = chat(completion("x"), base_url=base_url)
    assert str(recorder.requests[0].url) == "http://llm.test/v1/chat/completions"


def test_api_key_goes_in_a_bearer_header() -> None:
    _, recorder = chat(completion("x"), api_key="sk-test-123")
    assert recorder.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_empty_api_key_sends_no_header() -> None:
    _, recorder = chat(completion("x"), api_key="")
    assert "authorization" not in recorder.requests[0].headers


def test_temperature_is_sent_only_when_set() -> None:
    _, recorder = chat(completion("x"), temperature=0.0)
    assert recorder.body()["temperature"] == 0.0
    _, recorder = chat(completion("x"), temperature=None)
    assert "temperature" not in recorder.body()


def test_max_tokens_bounds_a_reply_only_when_set() -> None:
    _, recorder = chat(completion("x"), max_tokens=1536)
    assert recorder.body()["max_tokens"] == 1536
    _, recorder = chat(completion("x"))
    assert "max_tokens" not in recorder.body()


def test_no_tools_means_no_tools_field() -> None:
    _, recorder = chat(completion("x"), tools=[])
    assert "tools" not in recorder.body()


def test_history_with_tool_calls_is_sent_as_is() -> None:
    history: list[dict[str, Any]] = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "ü"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "ü 日本"},
    ]
    _, recorder = chat(completion("done"), messages=history)
    assert recorder.body()["messages"] == history


def test_a_lone_surrogate_in_the_history_is_sent_not_a_crash() -> None:
    """A model can send "\\ud800" inside JSON; the next request must still go out."""
    history = [*MESSAGES, {"role": "user", "content": "a\ud800b"}]
    _, recorder = chat(completion("ok"), messages=history)
    assert recorder.body()["messages"][-1]["content"] == "a\ud800b"


def test_a_real_loopback_server_receives_the_request_path_and_headers() -> None:
    from fabric.testing import MockOpenAIServer

    with MockOpenAIServer([completion("hi there")]) as server:

        async def main() -> ChatResponse:
            client = OpenAIChatClient(base_url=server.base_url, model="m", api_key="k")
            try:
                return await client.chat(ChatRequest(MESSAGES, TOOLS))
            finally:
                await client.aclose()

        response = asyncio.run(main())
    assert response.content == "hi there"
    (body,) = server.requests
    assert body["_path"] == "/v1/chat/completions" and body["_authorization"] == "Bearer k"
    assert body["model"] == "m" and body["messages"] == MESSAGES and body["tools"] == TOOLS


# --- the response -----------------------------------------------------------------------------


def test_text_answer_with_usage_and_finish_reason() -> None:
    response, _ = chat(
        completion("hello", model="served-model", prompt_tokens=12, completion_tokens=3)
    )
    assert response.content == "hello" and response.tool_calls == ()
    assert response.message == {"role": "assistant", "content": "hello"}
    assert response.usage == Usage(12, 3)
    assert response.finish_reason == "stop" and response.model == "served-model"


def _with_calls(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    body = completion(content)
    body["choices"][0]["message"]["tool_calls"] = list(calls)
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def test_tool_call_arguments_as_a_json_string() -> None:
    response, _ = chat(
        _with_calls(
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "echo", "arguments": '{"text": "hi"}'},
            }
        )
    )
    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_abc", "echo", {"text": "hi"})
    assert call.arguments_error is None
    assert response.message["tool_calls"] == [
        {
            "id": "call_abc",
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text": "hi"}'},
        }
    ]


def test_tool_call_arguments_as_an_object_go_back_as_a_string() -> None:
    """Ollama and some local servers send an object; the history gets the OpenAI form."""
    response, _ = chat(
        _with_calls({"function": {"name": "echo", "arguments": {"text": "hi", "n": 2}}})
    )
    (call,) = response.tool_calls
    assert call.arguments == {"text": "hi", "n": 2}
    arguments = response.message["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, str) and json.loads(arguments) == {"text": "hi", "n": 2}


def test_missing_and_repeated_call_ids_are_made_unique() -> None:
    response, _ = chat(
        _with_calls(
            {"function": {"name": "a", "arguments": "{}"}},
            {"id": "", "function": {"name": "b", "arguments": "{}"}},
            {"id": "x", "function": {"name": "c", "arguments": "{}"}},
            {"id": "x", "function": {"name": "d", "arguments": "{}"}},
        )
    )
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 4
    assert ids[2] == "x"
    assert [c["id"] for c in response.message["tool_calls"]] == ids


@pytest.mark.parametrize(
    ("arguments", "parsed", "error"),
    [
        ("", {}, None),
        (None, {}, None),
        ("   ", {}, None),
        ('{"a": ', None, "invalid JSON"),
        ("[1, 2]", None, "expected an object, got list"),
        ('"text"', None, "expected an object, got str"),
        ('{"a": NaN}', None, "invalid JSON"),
        ('{"a": Infinity}', None, "invalid JSON"),
        ('{"a": 1e999}', None, "too large a number"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", None, "nested too deeply"),
    ],
)
def test_odd_arguments_are_kept_raw_with_what_is_wrong(
    arguments: str | None, parsed: dict[str, Any] | None, error: str | None
) -> None:
    response, _ = chat(
        _with_calls({"id": "c", "function": {"name": "echo", "arguments": arguments}})
    )
    (call,) = response.tool_calls
    assert call.arguments == parsed
    if error is None:
        assert call.arguments_error is None
    else:
        assert call.arguments_error is not None and error in call.arguments_error
        assert call.raw_arguments == arguments


def test_a_tool_call_without_a_function_is_reported_not_dropped() -> None:
    response, _ = chat(_with_calls({"id": "c", "type": "function"}))
    (call,) = response.tool_calls
    assert call.name == "" and call.arguments is None
    assert call.arguments_error == "no function in tool call"


def test_content_parts_are_joined_into_text() -> None:
    body = completion(None)
    body["choices"][0]["message"]["content"] = [
        {"type": "text", "text": "Hello, "},
        {"type": "text", "text": "world."},
    ]
    response, _ = chat(body)
    assert response.content == "Hello, world." and response.message["content"] == "Hello, world."


@pytest.mark.parametrize("usage", [None, {}, [], {"prompt_tokens": "many"}, {"prompt_tokens": -3}])
def test_missing_or_odd_usage_counts_as_zero(usage: Any) -> None:
    body = completion("x")
    body["usage"] = usage
    response, _ = chat(body)
    assert response.usage == Usage(0, 0)


def test_parse_completion_is_usable_on_its_own() -> None:
    response = parse_completion(completion(None, [("echo", {"text": "a"}), ("echo", "{bad")]))
    assert [c.arguments for c in response.tool_calls] == [{"text": "a"}, None]
    assert response.finish_reason == "tool_calls"


# --- errors -----------------------------------------------------------------------------------

OLLAMA_NO_TOOLS = {
    "error": {
        "message": "registry.ollama.ai/library/gemma:2b does not support tools",
        "type": "api_error",
        "param": None,
        "code": None,
    }
}
OPENAI_CONTEXT = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9001 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "error_type", "hint"),
    [
        (401, {"error": {"message": "Incorrect API key"}}, ModelAuthError, "FABRIC_API_KEY"),
        (403, {"error": {"message": "forbidden"}}, ModelAuthError, "FABRIC_API_KEY"),
        (404, {"error": {"message": "model 'nope' not found"}}, ModelNotFoundError, "ollama pull"),
        (400, OLLAMA_NO_TOOLS, ModelToolsUnsupportedError, "pick a tool-capable model"),
        (400, OPENAI_CONTEXT, ModelContextLengthError, "longer context"),
        (400, {"error": {"message": "temperature too high"}}, ModelError, "fabric.yaml"),
        (429, {"error": {"message": "Rate limit reached"}}, ModelRateLimitError, "try again"),
        (500, {"error": {"message": "internal"}}, ModelServerError, "try again"),
        (503, "<html>Service Unavailable</html>", ModelServerError, "check its logs"),
    ],
)
def test_http_errors_become_fabric_errors_with_status_body_and_hint(
    status: int, body: Any, error_type: type[ModelError], hint: str
) -> None:
    answer = (
        httpx.Response(status, json=body)
        if isinstance(body, dict)
        else httpx.Response(status, text=body)
    )
    error = chat_error(answer, model="gemma:2b")
    assert type(error) is error_type
    assert error.status_code == status
    assert error.body is not None
    assert (json.loads(error.body) if isinstance(body, dict) else error.body) == body
    assert hint in error.hint
    assert f"hint: {error.hint}" in str(error)
    assert str(status) in error.message or issubclass(error_type, ModelCapabilityError)
    assert error.retryable is (status >= 429)


def test_tool_capability_error_names_the_model_and_what_to_do() -> None:
    error = chat_error(httpx.Response(400, json=OLLAMA_NO_TOOLS), model="gemma:2b")
    assert isinstance(error, ModelToolsUnsupportedError)
    assert "gemma:2b" in error.message and "cannot call tools" in error.message
    assert "does not support tools" in error.message
    assert "--model" in error.hint and "tool-capable" in error.hint
    assert error.code == "tools_unsupported" and not error.retryable


def test_rate_limit_keeps_how_long_the_server_asked_to_wait() -> None:
    answer = httpx.Response(
        429, json={"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "7"}
    )
    error = chat_error(answer)
    assert isinstance(error, ModelRateLimitError)
    assert error.retry_after == 7.0 and error.retryable and error.code == "rate_limited"


def test_a_long_error_body_is_kept_but_bounded() -> None:
    error = chat_error(httpx.Response(500, text="e" * 100_000))
    assert error.body is not None and 1000 <= len(error.body) <= 5000
    assert len(error.message) < 1000


def test_connect_error_is_a_connection_error_with_a_hint() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    error = chat_error(refuse)
    assert type(error) is ModelConnectionError
    assert "cannot reach the model server at http://llm.test/v1/chat/completions" in error.message
    assert "ollama serve" in error.hint and "hint:" in str(error)
    assert error.status_code is None


def test_nothing_listening_on_a_real_port_is_a_connection_error() -> None:
    with socket.socket() as probe:  # find a free loopback port, then leave it closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main() -> None:
        client = OpenAIChatClient(base_url=f"http://127.0.0.1:{port}/v1", model="m")
        try:
            await client.chat(ChatRequest(MESSAGES, TOOLS))
        finally:
            await client.aclose()

    with pytest.raises(ModelConnectionError, match="cannot reach"):
        asyncio.run(main())


@pytest.mark.parametrize("timeout", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.WriteTimeout])
def test_timeouts_are_timeout_errors_that_say_so(timeout: type[httpx.TimeoutException]) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise timeout("timed out", request=request)

    error = chat_error(slow)
    assert type(error) is ModelTimeoutError
    assert isinstance(error, ModelConnectionError) and error.retryable
    assert error.code == "timeout"
    assert "did not answer in time" in error.message and timeout.__name__ in error.message
    assert "timeouts" in error.hint


def test_a_non_json_reply_is_a_response_error() -> None:
    error = chat_error(httpx.Response(200, text="<html>Welcome to nginx</html>"))
    assert type(error) is ModelResponseError
    assert "not JSON" in error.message and "nginx" in error.message
    assert "/v1" in error.hint and error.status_code == 200
    assert error.body == "<html>Welcome to nginx</html>"


def test_a_reply_nested_too_deeply_to_read_is_a_response_error() -> None:
    """A hostile server's reply that no JSON reader takes ends the call as a bad reply (the
    run says what is wrong), never as a RecursionError."""
    error = chat_error(httpx.Response(200, text='{"choices": ' + "[" * 100_000 + "]" * 100_000))
    assert type(error) is ModelResponseError
    assert "not JSON" in error.message and "/v1" in error.hint


@pytest.mark.parametrize(
    "body",
    [
        {"object": "list", "data": []},
        {"choices": []},
        {"choices": [{}]},
        {"choices": [{"message": "hello"}]},
        {"choices": "nope"},
        [1, 2, 3],
        "just a string",
    ],
)
def test_a_reply_without_a_message_is_a_response_error(body: Any) -> None:
    error = chat_error(httpx.Response(200, json=body))
    assert type(error) is ModelResponseError
    assert "no choices[0].message" in error.message and "hint:" in str(error)


def test_respx_route_sees_the_same_request() -> None:
    """The same checks with respx routing, as a second transport-level witness."""
    with respx.mock(base_url="http://llm.test/v1", assert_all_called=True) as router:
        route = router.post("/chat/completions").mock(
            return_value=httpx.Response(200, json=completion("hi"))
        )

        async def main() -> ChatResponse:
            client = OpenAIChatClient(base_url="http://llm.test/v1", model="m", api_key="k")
            try:
                return await client.chat(ChatRequest(MESSAGES, TOOLS))
            finally:
                await client.aclose()

        response = asyncio.run(main())
    assert response.content == "hi"
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer k"
    assert json.loads(sent.content)["tools"] == TOOLS


def test_nan_inside_object_arguments_is_refused_as_invalid_json() -> None:
    """Python's json reads NaN; no strict JSON reader of the runlog would."""
    raw = json.dumps(_with_calls({"id": "c", "function": {"name": "echo", "arguments": {}}}))
    raw = raw.replace('"arguments": {}', '"arguments": {"a": NaN}')
    response, _ = chat(httpx.Response(200, content=raw.encode()))
    (call,) = response.tool_calls
    assert call.arguments is None
    assert call.arguments_error is not None and "invalid JSON" in call.arguments_error


def test_a_body_orjson_refuses_still_goes_out_whole() -> None:
    """The fast encoder refuses integers wider than 64 bits; the body then goes through the
    standard one, the number intact (a model option or tool schema can hold one)."""
    from fabric.infrastructure.llm.http import encode_json

    body = {"model": "m", "seed": 2**70, "messages": [{"role": "user", "content": "ü 日本"}]}
    sent = encode_json(body)
    assert json.loads(sent) == body
    assert "ü 日本".encode() in sent  # UTF-8 as it is, not \\u escapes


def test_a_plain_http_client_never_trusts_a_certificate() -> None:
    """A client for an http:// server holds a TLS context all the same (httpx makes one); it
    trusts no certificate, so a request that somehow reached an https URL would fail its
    handshake rather than go out unverified."""
    import ssl

    from fabric.infrastructure.llm.http import ModelHttp

    async def contexts() -> list[ssl.SSLContext]:
        made = []
        for _ in range(2):
            use = ModelHttp("http://127.0.0.1:9/v1", timeout=1.0)
            pool = use.client._transport._pool  # type: ignore[attr-defined]
            made.append(pool._ssl_context)
            await use.aclose()
        return made

    first, second = asyncio.run(contexts())
    assert first is second  # made once per process
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] == 0
