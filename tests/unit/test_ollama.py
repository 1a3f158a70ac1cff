"""The Ollama chat client, tested at the HTTP transport with payloads shaped as Ollama documents
them (docs/api.md, the streaming-tools post): what goes out (num_ctx, stream, tool calls with
object arguments, tool results with tool_name), how replies and NDJSON streams come back in
OpenAI wire form, and what a user is told when something is off. Also where the server is:
``OLLAMA_HOST`` read the way Ollama's own clients read it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fabric.domain.errors import (
    ModelConnectionError,
    ModelNotFoundError,
    ModelServerError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, Usage
from fabric.infrastructure.llm.ollama import OllamaChatClient, ollama_base_url

FIXTURES = Path(__file__).parent.parent / "fixtures" / "ollama"
BASE = "http://127.0.0.1:11434"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {key: {"type": "string"}}},
        },
    }
    for name, key in (("read_file", "path"), ("run_command", "command"))
]
MESSAGES = [
    {"role": "system", "content": "You are a careful engineer."},
    {"role": "user", "content": "add a test for parse_date"},
]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


Answer = Callable[[httpx.Request], httpx.Response]


def ndjson(text: str, *, split: int | None = None) -> Answer:
    """A streamed reply; ``split`` cuts the bytes into pieces of that size, so lines arrive
    torn across network reads."""

    async def pieces() -> AsyncIterator[bytes]:
        data = text.encode("utf-8")
        size = split or len(data)
        for start in range(0, len(data), size):
            yield data[start : start + size]

    return lambda request: httpx.Response(
        200, headers={"Content-Type": "application/x-ndjson"}, content=pieces()
    )


def run_chat(
    answer: Answer | httpx.Response,
    *,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> tuple[ChatResponse, list[dict[str, Any]], list[ChatDelta]]:
    """One chat call; returns the response, the request bodies sent and the deltas seen."""
    bodies: list[dict[str, Any]] = []
    deltas: list[ChatDelta] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url == f"{BASE}/api/chat"
        bodies.append(json.loads(request.content))
        return answer if isinstance(answer, httpx.Response) else answer(request)

    options.setdefault("model", "qwen2.5-coder:7b")

    async def main() -> ChatResponse:
        client = OllamaChatClient(
            base_url=BASE + "/", transport=httpx.MockTransport(handler), **options
        )
        try:
            return await client.chat(
                ChatRequest(
                    MESSAGES if messages is None else messages,
                    TOOLS if tools is None else tools,
                    on_delta=deltas.append,
                )
            )
        finally:
            await client.aclose()

    return asyncio.run(main()), bodies, deltas


def whole(name: str) -> httpx.Response:
    return httpx.Response(200, json=json.loads(fixture_text(name)))


# --- where the server is -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ollama_host", "expected"),
    [
        # the cases ollama-python's _parse_host documents, which the Go CLI agrees with
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("1.2.3.4", "http://1.2.3.4:11434"),
        (":56789", "http://127.0.0.1:56789"),
        ("1.2.3.4:56789", "http://1.2.3.4:56789"),
        ("http://1.2.3.4", "http://1.2.3.4:80"),
        ("https://1.2.3.4", "https://1.2.3.4:443"),
        ("https://example.com:56789", "https://example.com:56789"),
        ("example.com:56789/", "http://example.com:56789"),
        ("example.com/path", "http://example.com:11434/path"),
        ("https://example.com:56789/path/", "https://example.com:56789/path"),
        ("[0001:002:003:0004::1]", "http://[0001:002:003:0004::1]:11434"),
        ("[::1]:56789", "http://[::1]:56789"),
        ("https://[::1]", "https://[::1]:443"),
        # the Go CLI strips quotes and spaces, and falls back to the default on a bad port
        ('"127.0.0.1:9999"', "http://127.0.0.1:9999"),
        (" gpu-box:8080 ", "http://gpu-box:8080"),
        ("gpu-box:99999", "http://gpu-box:11434"),
        # the server's listen-everywhere address is reached through loopback
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("[::]:11434", "http://[::1]:11434"),
    ],
)
def test_ollama_host_is_read_like_ollamas_own_clients(
    ollama_host: str | None, expected: str
) -> None:
    env = {} if ollama_host is None else {"OLLAMA_HOST": ollama_host}
    assert ollama_base_url(None, env) == expected


def test_a_configured_base_url_wins_and_loses_trailing_slash_and_v1() -> None:
    env = {"OLLAMA_HOST": "elsewhere:1"}
    assert ollama_base_url("http://gpu-box:11434/", env) == "http://gpu-box:11434"
    assert ollama_base_url("http://gpu-box:11434/v1/", env) == "http://gpu-box:11434"
    assert ollama_base_url("  ", env) == "http://elsewhere:1"


def test_the_process_environment_is_read_when_no_env_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:12345")
    assert ollama_base_url(None) == "http://127.0.0.1:12345"


# --- what goes out -------------------------------------------------------------------------


def test_request_carries_num_ctx_temperature_stream_flag_and_tools() -> None:
    _, bodies, _ = run_chat(whole("chat_text.json"), num_ctx=16384, temperature=0.2, stream=False)
    body = bodies[0]
    assert body["model"] == "qwen2.5-coder:7b"
    assert body["stream"] is False
    assert body["options"] == {"num_ctx": 16384, "temperature": 0.2}
    assert body["tools"] == TOOLS
    assert body["messages"] == MESSAGES


def test_max_tokens_goes_out_as_num_predict() -> None:
    _, bodies, _ = run_chat(whole("chat_text.json"), max_tokens=700, stream=False)
    assert bodies[0]["options"] == {"num_predict": 700}


def test_unset_options_are_left_to_the_server_and_streaming_is_the_default() -> None:
    _, bodies, _ = run_chat(ndjson(fixture_text("chat_stream_text.ndjson")), tools=[])
    assert bodies[0]["stream"] is True
    assert "options" not in bodies[0]
    assert "tools" not in bodies[0]


def test_history_is_translated_tool_calls_as_objects_and_results_named() -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "src/dates.py"}'},
                },
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "run_command", "arguments": "{not json"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "def parse_date(s): ..."},
        {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not JSON"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "go "}, {"type": "text", "text": "on"}],
        },
    ]
    _, bodies, _ = run_chat(whole("chat_text.json"), messages=history, stream=False)
    sent = bodies[0]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"function": {"name": "read_file", "arguments": {"path": "src/dates.py"}}},
            {"function": {"name": "run_command", "arguments": {}}},
        ],
    }
    assert sent[3] == {
        "role": "tool",
        "content": "def parse_date(s): ...",
        "tool_name": "read_file",
    }
    assert sent[4]["tool_name"] == "run_command"
    assert sent[5] == {"role": "user", "content": "go on"}


def test_a_reply_goes_back_into_history_and_out_again_in_ollamas_form() -> None:
    first, _, _ = run_chat(whole("chat_tool_calls.json"), stream=False)
    history = [
        *MESSAGES,
        first.message,
        {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": "1 passed"},
    ]
    _, bodies, _ = run_chat(whole("chat_text.json"), messages=history, stream=False)
    assert bodies[0]["messages"][2]["tool_calls"][1] == {
        "function": {"name": "run_command", "arguments": {"command": "pytest -q", "timeout": 60}}
    }
    assert bodies[0]["messages"][3]["tool_name"] == "run_command"


# --- what comes back -----------------------------------------------------------------------


def test_a_whole_text_reply() -> None:
    response, _, deltas = run_chat(whole("chat_text.json"), model="llama3.1:8b", stream=False)
    assert response.content == "The test file is tests/test_dates.py."
    assert response.message == {"role": "assistant", "content": response.content}
    assert response.tool_calls == ()
    assert response.usage == Usage(prompt_tokens=26, completion_tokens=12)
    assert response.finish_reason == "stop"
    assert response.model == "llama3.1:8b"
    assert response.warnings == ()
    assert deltas == []


def test_whole_tool_calls_get_ids_and_json_string_arguments() -> None:
    response, _, _ = run_chat(whole("chat_tool_calls.json"), stream=False)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_0", "read_file", {"path": "src/dates.py"}),
        ("call_1", "run_command", {"command": "pytest -q", "timeout": 60}),
    ]
    wire = response.message["tool_calls"]
    assert wire[1] == {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "run_command",
            "arguments": '{"command": "pytest -q", "timeout": 60}',
        },
    }
    assert json.loads(wire[0]["function"]["arguments"]) == {"path": "src/dates.py"}
    assert response.content is None
    assert response.finish_reason == "tool_calls"


def test_a_streamed_reply_shows_each_fragment_and_ends_with_the_counts() -> None:
    response, _, deltas = run_chat(
        ndjson(fixture_text("chat_stream_text.ndjson")), model="llama3.1:8b"
    )
    assert [d.text for d in deltas] == ["The", " tests", " pass."]
    assert response.content == "The tests pass."
    assert response.usage == Usage(prompt_tokens=26, completion_tokens=4)
    assert response.finish_reason == "stop"
    assert response.warnings == ()


def test_streamed_tool_calls_arrive_whole_with_ids() -> None:
    response, _, deltas = run_chat(ndjson(fixture_text("chat_stream_tool_calls.ndjson")))
    assert deltas == [
        ChatDelta(text="Let me"),
        ChatDelta(text=" look."),
        ChatDelta(tool_index=0, tool_name="read_file", arguments='{"path": "src/dates.py"}'),
    ]
    assert response.content == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_0", "read_file", {"path": "src/dates.py"})
    ]
    assert response.message["tool_calls"][0]["id"] == "call_0"
    assert response.usage == Usage(prompt_tokens=412, completion_tokens=21)
    assert response.finish_reason == "tool_calls"


@pytest.mark.parametrize("split", [1, 7, 50])
def test_lines_torn_across_network_reads_are_put_back_together(split: int) -> None:
    whole_reply, _, _ = run_chat(ndjson(fixture_text("chat_stream_tool_calls.ndjson")))
    torn, _, _ = run_chat(ndjson(fixture_text("chat_stream_tool_calls.ndjson"), split=split))
    assert torn == whole_reply


def test_unreadable_stream_lines_are_skipped_and_reported() -> None:
    lines = fixture_text("chat_stream_text.ndjson").splitlines()
    lines.insert(1, '{"model":"llama3.1:8b","message":{"role":"assis')
    lines.insert(2, "[1, 2]")
    lines.insert(3, '{"model":"llama3.1:8b","message":"oops","done":false}')
    lines.insert(4, '{"model":"llama3.1:8b","created_at":"2025-05-27T22:54:57Z","done":false}')
    lines.insert(5, '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}")  # too deep to read
    response, _, _ = run_chat(ndjson("\n".join(lines) + "\n"), model="llama3.1:8b")
    assert response.content == "The tests pass."
    assert response.usage == Usage(prompt_tokens=26, completion_tokens=4)
    assert len(response.warnings) == 4 and "not JSON" in response.warnings[3]
    assert "not JSON" in response.warnings[0]
    assert "assis" in response.warnings[0]


def test_a_stream_cut_before_its_last_line_says_so() -> None:
    lines = fixture_text("chat_stream_text.ndjson").splitlines()[:-1]
    response, _, _ = run_chat(ndjson("\n".join(lines)), model="llama3.1:8b")
    assert response.content == "The tests pass."
    assert response.usage == Usage()
    assert any("ended before" in w for w in response.warnings)


def test_an_error_in_the_middle_of_a_stream_is_a_server_error() -> None:
    lines = fixture_text("chat_stream_text.ndjson").splitlines()[:1]
    lines.append('{"error":"an error was encountered while running the model: unexpected EOF"}')
    with pytest.raises(ModelServerError, match=r"failed while answering.*unexpected EOF") as caught:
        run_chat(ndjson("\n".join(lines) + "\n"), model="llama3.1:8b")
    assert caught.value.retryable


# --- truncation ----------------------------------------------------------------------------


def long_history(chars: int) -> list[dict[str, Any]]:
    return [*MESSAGES, {"role": "tool", "tool_call_id": "x", "content": "x" * chars}]


def counted(prompt_tokens: int) -> httpx.Response:
    data = json.loads(fixture_text("chat_text.json"))
    data["prompt_eval_count"] = prompt_tokens
    return httpx.Response(200, json=data)


def test_a_prompt_the_server_cut_to_its_window_is_reported_with_the_fix() -> None:
    # ~10,000 tokens sent with num_ctx 4096: Ollama kept only what fits
    response, _, _ = run_chat(
        counted(4096), messages=long_history(40_000), num_ctx=4096, stream=False
    )
    (warning,) = response.warnings
    assert "truncated" in warning
    assert "4096" in warning
    assert 'llm.model_options."qwen2.5-coder:7b".num_ctx' in warning


def test_without_num_ctx_the_warning_names_the_server_default() -> None:
    response, _, _ = run_chat(counted(2048), messages=long_history(20_000), stream=False)
    (warning,) = response.warnings
    assert "server's default" in warning


@pytest.mark.parametrize(
    ("chars", "prompt_tokens", "num_ctx"),
    [
        (40_000, 10_500, 32768),  # all of it was read
        (40_000, 1_200, 32768),  # counted low (a cached prefix?), but it fits the window
        (4_000, 300, None),  # small prompts are never suspected
        (40_000, 0, 4096),  # no count sent: nothing to compare
    ],
)
def test_no_truncation_warning_when_the_prompt_fits(
    chars: int, prompt_tokens: int, num_ctx: int | None
) -> None:
    response, _, _ = run_chat(
        counted(prompt_tokens), messages=long_history(chars), num_ctx=num_ctx, stream=False
    )
    assert response.warnings == ()


# --- errors --------------------------------------------------------------------------------


def test_a_model_that_cannot_call_tools_is_a_capability_error() -> None:
    reply = httpx.Response(
        400, json={"error": "registry.ollama.ai/library/gemma:2b does not support tools"}
    )
    with pytest.raises(ModelToolsUnsupportedError) as caught:
        run_chat(reply, model="gemma:2b")
    assert caught.value.status_code == 400
    assert "gemma:2b" in caught.value.message
    assert "fabric models" in caught.value.hint


def test_a_missing_model_says_how_to_pull_it() -> None:
    reply = httpx.Response(404, json={"error": "model 'qwen2.5-coder:14b' not found"})
    with pytest.raises(ModelNotFoundError) as caught:
        run_chat(reply, model="qwen2.5-coder:14b", stream=False)
    assert "ollama pull qwen2.5-coder:14b" in caught.value.hint
    assert "not found" in caught.value.message


def test_a_server_that_is_not_there_is_a_network_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(ModelConnectionError, match="Connection refused") as caught:
        run_chat(refuse)
    assert "ollama serve" in caught.value.hint


# --- tool calls written as text (the per-model text_tool_calls option) ---------------------


def text_reply(content: str) -> httpx.Response:
    data = json.loads(fixture_text("chat_text.json"))
    data["message"]["content"] = content
    return httpx.Response(200, json=data)


TEXT_CALL = (
    'I will read it.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n'
    "</tool_call>"
)


def test_text_tool_calls_become_native_calls_when_switched_on() -> None:
    response, _, _ = run_chat(text_reply(TEXT_CALL), stream=False, text_tool_calls=True)
    assert response.tool_calls_from_text
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("read_file", {"path": "a.py"})]
    assert response.content == "I will read it."
    call = response.message["tool_calls"][0]
    assert call["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}


def test_text_tool_calls_stay_text_when_switched_off() -> None:
    response, _, _ = run_chat(text_reply(TEXT_CALL), stream=False)
    assert not response.tool_calls_from_text
    assert response.tool_calls == ()
    assert response.content == TEXT_CALL
