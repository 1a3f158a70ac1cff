"""The OpenAI-compatible adapter against the documented shapes of vLLM, llama.cpp's server,
LM Studio, OpenAI and OpenRouter (``tests/fixtures/providers``, see its README): each reply,
stream, model list and error body becomes the right ChatResponse, deltas, ModelInfo or error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fabric.domain.errors import (
    ModelAuthError,
    ModelContextLengthError,
    ModelError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, ModelInfo, Usage
from fabric.infrastructure.llm.openai_catalog import OpenAICatalog
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient

FIXTURES = Path(__file__).parent.parent / "fixtures" / "providers"
PROVIDERS = ["openai", "vllm", "llamacpp", "lmstudio", "openrouter"]
MESSAGES = [{"role": "user", "content": "read src/app.py and run the tests"}]
TOOLS = [
    {"type": "function", "function": {"name": name, "description": "d", "parameters": {}}}
    for name in ("read_file", "run_command")
]
READ = {"path": "src/app.py"}
PYTEST = {"command": "pytest -q"}
ECHO = {"command": 'echo "héllo" > out.txt\nls'}


@dataclass(frozen=True)
class Reply:
    calls: list[tuple[str, str, dict[str, Any]]]
    usage: Usage
    model: str
    content: str | None = None


OPENAI_MODEL = "gpt-4o-mini-2024-07-18"
VLLM_MODEL = "Qwen/Qwen2.5-7B-Instruct"
LLAMACPP_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
VLLM_READ = ("chatcmpl-tool-4f3b0c7a9d2e4e1b8c6a5d4e3f2a1b0c", "read_file", READ)
LLAMACPP_ECHO = ("Nzs1hTT8KHXX4ao5vCUDBxxNs0HDdVzK", "run_command", ECHO)
LMSTUDIO = Reply([("365174485", "read_file", READ)], Usage(175, 23), "qwen2.5-7b-instruct")
OPENROUTER_READ = ("call_a1b2c3d4e5f6", "read_file", READ)

COMPLETIONS = {
    "openai": Reply(
        [
            ("call_Dk8TjQ1mJ2pB0vXh5t7W3uYz", "read_file", READ),
            ("call_Zr4Lm9NqP2sT6vW8xY1aB3cD", "run_command", PYTEST),
        ],
        Usage(82, 37),
        OPENAI_MODEL,
    ),
    "vllm": Reply([VLLM_READ], Usage(312, 24), VLLM_MODEL),
    "llamacpp": Reply([LLAMACPP_ECHO], Usage(290, 31), LLAMACPP_MODEL),
    "lmstudio": LMSTUDIO,
    "openrouter": Reply([OPENROUTER_READ], Usage(310, 25), "qwen/qwen-2.5-72b-instruct", ""),
}
STREAMS = {
    "openai": Reply(
        [
            ("call_DdmO9pD3xa9XTPNJ32zg2hcA", "read_file", READ),
            ("call_8Qw2Er4Ty6Ui8Op0As2Df4Gh", "run_command", PYTEST),
        ],
        Usage(82, 37),
        OPENAI_MODEL,
    ),
    "vllm": Reply(
        [VLLM_READ, ("chatcmpl-tool-9a8b7c6d5e4f40312a1b2c3d4e5f6a7b", "run_command", PYTEST)],
        Usage(312, 59),
        VLLM_MODEL,
        "I'll read the file and run the tests.",
    ),
    "llamacpp": Reply([LLAMACPP_ECHO], Usage(290, 31), LLAMACPP_MODEL),
    "lmstudio": LMSTUDIO,
    "openrouter": Reply([OPENROUTER_READ], Usage(310, 25), "qwen/qwen-2.5-72b-instruct"),
}


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse_response(body: bytes, piece: int | None = None) -> httpx.Response:
    """A text/event-stream reply, sent in ``piece``-byte network chunks when given."""
    headers = {"content-type": "text/event-stream"}
    if piece is None:
        return httpx.Response(200, headers=headers, content=body)

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), piece):
            yield body[start : start + piece]

    return httpx.Response(200, headers=headers, content=pieces())


def run_chat(
    answer: httpx.Response,
    *,
    stream: bool,
    text_tool_calls: bool = False,
    constrained: bool = False,
) -> tuple[ChatResponse, list[ChatDelta], list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    deltas: list[ChatDelta] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return answer

    async def main() -> ChatResponse:
        client = OpenAIChatClient(
            base_url="http://llm.test/v1",
            model="served-model",
            stream=stream,
            text_tool_calls=text_tool_calls,
            constrained_tool_calls=constrained,
            transport=httpx.MockTransport(handler),
        )
        try:
            return await client.chat(ChatRequest(MESSAGES, TOOLS, on_delta=deltas.append))
        finally:
            await client.aclose()

    return asyncio.run(main()), deltas, sent


def assert_reply(response: ChatResponse, expected: Reply) -> None:
    got = [(c.id, c.name, c.arguments) for c in response.tool_calls]
    assert got == expected.calls
    assert all(c.arguments_error is None for c in response.tool_calls)
    assert response.usage == expected.usage
    assert response.model == expected.model
    assert response.finish_reason == "tool_calls"
    assert response.content == expected.content
    assert response.warnings == ()
    assert response.message == {
        "role": "assistant",
        "content": expected.content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": c.raw_arguments}}
            for (i, n, _), c in zip(expected.calls, response.tool_calls, strict=True)
        ],
    }
    for call in response.tool_calls:
        assert json.loads(call.raw_arguments) == call.arguments


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_completion_with_tool_calls(provider: str) -> None:
    body = fixture(f"{provider}_chat_tool_calls.json")
    response, deltas, sent = run_chat(httpx.Response(200, content=body), stream=False)
    assert_reply(response, COMPLETIONS[provider])
    assert deltas == [] and "stream" not in sent[0]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("piece", [None, 1, 7, 64])
def test_a_streamed_reply_with_tool_calls(provider: str, piece: int | None) -> None:
    """Also when the network splits the stream anywhere: inside lines, JSON, UTF-8 bytes."""
    body = fixture(f"{provider}_stream_tool_calls.sse")
    response, deltas, sent = run_chat(sse_response(body, piece), stream=True)
    expected = STREAMS[provider]
    assert_reply(response, expected)
    assert sent[0]["stream"] is True and sent[0]["stream_options"] == {"include_usage": True}
    assert "".join(d.text for d in deltas) == (expected.content or "")
    for index, (_, name, _) in enumerate(expected.calls):
        mine = [d for d in deltas if d.tool_index == index]
        assert mine[0].tool_name == name
        assert [d.tool_name for d in mine[1:]] == [None] * (len(mine) - 1)
        assert "".join(d.arguments for d in mine) == response.tool_calls[index].raw_arguments


def test_llamacpp_arguments_split_inside_json_escapes_come_out_whole() -> None:
    body = fixture("llamacpp_stream_tool_calls.sse")
    response, deltas, _ = run_chat(sse_response(body), stream=True)
    pieces = [d.arguments for d in deltas if d.arguments]
    assert pieces[2].endswith("\\") and pieces[3].endswith("\\u00")  # cut inside escapes
    (call,) = response.tool_calls
    assert call.arguments == ECHO
    assert call.raw_arguments == '{"command":"echo \\"h\\u00e9llo\\" > out.txt\\nls"}'


def test_openai_text_stream_with_usage_in_a_last_chunk_without_choices() -> None:
    response, deltas, _ = run_chat(sse_response(fixture("openai_stream_text.sse"), 3), stream=True)
    assert response.content == "Hello, wörld 👋" and response.tool_calls == ()
    assert [d.text for d in deltas] == ["Hello", ", wörld", " 👋"]
    assert response.usage == Usage(9, 4) and response.finish_reason == "stop"
    assert response.message == {"role": "assistant", "content": "Hello, wörld 👋"}


@pytest.mark.parametrize(
    ("name", "error_type", "words"),
    [
        ("vllm_stream_error.sse", ModelContextLengthError, "maximum model length"),
        ("openrouter_stream_error.sse", ModelServerError, "Provider disconnected"),
    ],
)
def test_an_error_event_in_the_stream_is_raised(
    name: str, error_type: type[ModelError], words: str
) -> None:
    with pytest.raises(ModelError) as info:
        run_chat(sse_response(fixture(name)), stream=True)
    assert type(info.value) is error_type
    assert words in info.value.message and info.value.hint
    assert "{" not in info.value.message  # what the server said, not its JSON


# --- recorded from a real llama.cpp server ----------------------------------------------------

RECORDED_MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


@pytest.mark.parametrize(
    ("name", "stream"),
    [
        ("llamacpp_chat_text_call_recorded.json", False),
        ("llamacpp_stream_text_call_recorded.sse", True),
    ],
)
def test_a_small_model_writing_its_call_as_fenced_json(name: str, stream: bool) -> None:
    """Qwen2.5-Coder-0.5B on llama.cpp answers a tool request with the call as JSON text."""
    body = fixture(name)
    answer = sse_response(body) if stream else httpx.Response(200, content=body)
    plain, _, _ = run_chat(answer, stream=stream)
    assert plain.tool_calls == () and plain.content is not None
    assert plain.content.startswith("```json\n{") and plain.finish_reason == "stop"
    answer = sse_response(body) if stream else httpx.Response(200, content=body)
    parsed, _, _ = run_chat(answer, stream=stream, text_tool_calls=True)
    assert parsed.tool_calls_from_text and parsed.content is None
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [
        ("text_call_0", "read_file", READ)
    ]
    assert parsed.message["tool_calls"][0]["function"]["name"] == "read_file"
    assert parsed.usage == Usage(173, 31) and parsed.model == RECORDED_MODEL
    assert parsed.warnings == ()


def test_constrained_tool_calls_ask_llamacpp_for_one_call_and_read_it() -> None:
    """Recorded: with a JSON-schema ``response_format`` llama.cpp's grammar makes the reply a
    bare ``{"name", "arguments"}`` object (no fence, no prose)."""
    body = fixture("llamacpp_chat_constrained_recorded.json")
    response, _, (sent,) = run_chat(
        httpx.Response(200, content=body), stream=False, constrained=True
    )
    assert sent["tools"] == TOOLS
    assert sent["response_format"]["type"] == "json_schema"
    schema = sent["response_format"]["json_schema"]["schema"]
    assert [c["properties"]["name"] for c in schema["anyOf"]] == [
        {"const": "read_file"},
        {"const": "run_command"},
    ]
    assert response.tool_calls_from_text and response.content is None
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("read_file", READ)]
    assert response.usage == Usage(216, 31)


def test_without_constraints_no_response_format_is_sent() -> None:
    body = fixture("llamacpp_chat_tool_calls.json")
    _, _, (sent,) = run_chat(httpx.Response(200, content=body), stream=False)
    assert "response_format" not in sent


# --- model lists ------------------------------------------------------------------------------

MODELS = {
    "openai": [
        ModelInfo("gpt-4o-mini", "b"),
        ModelInfo("text-embedding-3-small", "b", embedding_only=True),
        ModelInfo("ft:gpt-4o-mini-2024-07-18:acme::9abcDEF0", "b"),
    ],
    "vllm": [
        ModelInfo(VLLM_MODEL, "b", context_length=32768),
        ModelInfo("sql-lora", "b"),
    ],
    "llamacpp": [
        ModelInfo(
            LLAMACPP_MODEL,
            "b",
            context_length=32768,
            parameters_b=1.54,
        )
    ],
    "lmstudio": [
        ModelInfo("qwen2.5-7b-instruct", "b"),
        ModelInfo("text-embedding-nomic-embed-text-v1.5", "b", embedding_only=True),
    ],
    "openrouter": [
        ModelInfo("qwen/qwen-2.5-72b-instruct", "b", tools=True, context_length=32768),
        ModelInfo("mistralai/mistral-7b-instruct-v0.1", "b", tools=False, context_length=2824),
        ModelInfo(
            "qwen/qwen3-embedding-8b", "b", tools=False, embedding_only=True, context_length=32000
        ),
    ],
}


def list_models(answer: httpx.Response, api_key: str | None = None) -> list[ModelInfo]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    catalog = OpenAICatalog(
        name="b",
        base_url="http://llm.test/v1/",
        api_key=api_key,
        timeout=5.0,
        transport=httpx.MockTransport(handler),
    )
    assert catalog.backend == "b"
    models = asyncio.run(catalog.list_models())
    assert [(r.method, str(r.url)) for r in seen] == [("GET", "http://llm.test/v1/models")]
    assert seen[0].headers.get("authorization") == (f"Bearer {api_key}" if api_key else None)
    return models


@pytest.mark.parametrize("provider", PROVIDERS)
def test_model_lists(provider: str) -> None:
    body = fixture(f"{provider}_models.json")
    assert list_models(httpx.Response(200, content=body), api_key="k") == MODELS[provider]


def test_a_current_llamacpp_model_list_gives_the_served_context_not_the_trained_one() -> None:
    body = fixture("llamacpp_models_recorded.json")
    assert list_models(httpx.Response(200, content=body)) == [
        ModelInfo(
            RECORDED_MODEL,
            "b",
            context_length=2048,
            parameters_b=0.63,
            quantization="Q4_K - Medium",
        )
    ]


# --- errors -----------------------------------------------------------------------------------

ERRORS = [
    ("openai", "invalid_api_key", ModelAuthError, "API key"),
    ("openai", "model_not_found", ModelNotFoundError, "--model"),
    ("openai", "context_length_exceeded", ModelContextLengthError, "longer context"),
    ("openai", "rate_limit_exceeded", ModelRateLimitError, "try again"),
    ("openai", "server_error", ModelServerError, "try again"),
    ("openai", "overloaded", ModelServerError, "try again"),
    ("vllm", "auto_tool_choice_not_enabled", ModelToolsUnsupportedError, "--tool-call-parser"),
    ("vllm", "context_length_exceeded", ModelContextLengthError, "longer context"),
    ("vllm", "model_not_found", ModelNotFoundError, "--model"),
    ("llamacpp", "context_size_exceeded", ModelContextLengthError, "longer context"),
    ("llamacpp", "tools_need_jinja", ModelToolsUnsupportedError, "--jinja"),
    ("llamacpp", "loading_model", ModelServerError, "try again"),
    ("llamacpp", "invalid_api_key", ModelAuthError, "API key"),
    ("lmstudio", "no_models_loaded", ModelNotFoundError, "--model"),
    ("lmstudio", "string_error", ModelError, "fabric.yaml"),
    ("openrouter", "insufficient_credits", ModelError, "credits"),
    ("openrouter", "no_tool_endpoints", ModelToolsUnsupportedError, "tool-capable"),
    ("openrouter", "rate_limited", ModelRateLimitError, "try again"),
    ("openrouter", "invalid_key", ModelAuthError, "API key"),
    ("openrouter", "timeout", ModelTimeoutError, "try again"),
    ("openrouter", "provider_down", ModelServerError, "try again"),
]
RETRY_AFTER = {("openai", "rate_limit_exceeded"): 20.0, ("openrouter", "rate_limited"): 60.0}


@pytest.mark.parametrize(("provider", "name", "error_type", "hint"), ERRORS)
@pytest.mark.parametrize("stream", [False, True])
def test_error_replies(
    provider: str, name: str, error_type: type[ModelError], hint: str, stream: bool
) -> None:
    case = json.loads(fixture(f"{provider}_errors.json"))[name]
    answer = httpx.Response(case["status"], json=case["body"], headers=case.get("headers", {}))
    with pytest.raises(ModelError) as info:
        run_chat(answer, stream=stream)
    error = info.value
    assert type(error) is error_type
    assert error.status_code == case["status"]
    assert error.body is not None and json.loads(error.body) == case["body"]
    assert hint in error.hint
    assert error.retry_after == RETRY_AFTER.get((provider, name))
    assert error.retryable is (
        error_type in (ModelRateLimitError, ModelServerError, ModelTimeoutError)
    )


@pytest.mark.parametrize(("provider", "name", "error_type", "hint"), ERRORS[:3])
def test_model_list_errors_map_the_same_way(
    provider: str, name: str, error_type: type[ModelError], hint: str
) -> None:
    case = json.loads(fixture(f"{provider}_errors.json"))[name]
    if case["status"] == 404:
        error_type, hint = ModelError, "/v1"  # no /models there: the base_url is wrong
    with pytest.raises(ModelError) as info:
        list_models(httpx.Response(case["status"], json=case["body"]))
    assert isinstance(info.value, error_type) and hint in info.value.hint
