"""How every model adapter's HTTP failures map to fabric errors (``http_errors``): the class
and code a user sees, the advice, and how long a server asked to wait."""

from __future__ import annotations

import email.utils
import json
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
    ModelServerError,
    ModelTimeoutError,
    ModelToolsUnsupportedError,
)
from fabric.infrastructure.llm.http_errors import (
    BODY_LIMIT,
    retry_after,
    status_error,
    transport_error,
)

NOW = 1_750_000_000.0


def error_for(status: int, body: Any, headers: dict[str, str] | None = None) -> ModelError:
    text = body if isinstance(body, str) else json.dumps(body)
    return status_error(status, text, headers or {}, model="qwen2.5:7b", server="the server")


# --- Retry-After ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("120", 120.0), (" 7 ", 7.0), ("0", 0.0), ("1.5", 1.5), ("-3", 0.0)],
)
def test_retry_after_in_seconds(value: str, seconds: float) -> None:
    assert retry_after({"Retry-After": value}, now=NOW) == seconds


def test_retry_after_as_an_http_date() -> None:
    in_90_s = email.utils.formatdate(NOW + 90, usegmt=True)  # "Sun, 15 Jun 2025 ... GMT"
    assert retry_after({"retry-after": in_90_s}, now=NOW) == pytest.approx(90.0)
    past = email.utils.formatdate(NOW - 3600, usegmt=True)
    assert retry_after({"retry-after": past}, now=NOW) == 0.0


@pytest.mark.parametrize("value", ["", "soon", "nan", "inf", "-inf", "Mon, 99 Foo 2025"])
def test_retry_after_that_says_nothing_usable_is_none(value: str) -> None:
    assert retry_after({"Retry-After": value}, now=NOW) is None


def test_retry_after_missing_and_header_case() -> None:
    assert retry_after({}) is None
    assert retry_after(httpx.Headers({"RETRY-AFTER": "4"})) == 4.0


def test_rate_limit_and_server_errors_carry_retry_after() -> None:
    limited = error_for(429, {"error": {"message": "slow"}}, {"Retry-After": "30"})
    assert isinstance(limited, ModelRateLimitError) and limited.retry_after == 30.0
    busy = error_for(503, "busy", {"Retry-After": "5"})
    assert isinstance(busy, ModelServerError) and busy.retry_after == 5.0
    assert error_for(429, "slow").retry_after is None


# --- each status class ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "code", "retryable", "hint"),
    [
        (401, ModelAuthError, "authentication", False, "api_key_env"),
        (403, ModelAuthError, "authentication", False, "api_key_env"),
        (402, ModelError, "model_error", False, "credits"),
        (404, ModelNotFoundError, "model_not_found", False, "ollama pull qwen2.5:7b"),
        (408, ModelTimeoutError, "timeout", True, "try again"),
        (429, ModelRateLimitError, "rate_limited", True, "wait and try again"),
        (400, ModelError, "model_error", False, "fabric.yaml"),
        (422, ModelError, "model_error", False, "fabric.yaml"),
        (500, ModelServerError, "server_error", True, "logs"),
        (502, ModelServerError, "server_error", True, "logs"),
        (503, ModelServerError, "server_error", True, "logs"),
    ],
)
def test_each_status_class(
    status: int, error_type: type[ModelError], code: str, retryable: bool, hint: str
) -> None:
    error = error_for(status, {"error": {"message": "something went wrong"}})
    assert type(error) is error_type and error.code == code and error.retryable is retryable
    assert hint in error.hint and error.status_code == status
    assert (
        error.message
        == f"the server answered {status} for model 'qwen2.5:7b': something went wrong"
    )


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"error": {"message": "a", "type": "t"}}, "a"),  # OpenAI, vLLM (new), llama.cpp
        ({"error": "b"}, "b"),  # Ollama, LM Studio
        ({"object": "error", "message": "c", "code": 400}, "c"),  # vLLM (old)
        ({"detail": "d"}, "d"),  # FastAPI-based servers
        ({"something": "else"}, '{"something": "else"}'),
        ("<html>bad gateway</html>", "<html>bad gateway</html>"),
    ],
)
def test_the_message_says_what_the_server_said_and_the_body_is_kept(body: Any, said: str) -> None:
    error = error_for(500, body)
    assert error.message.endswith(f": {said}")
    assert error.body == (body if isinstance(body, str) else json.dumps(body))


def test_a_huge_body_is_bounded() -> None:
    error = error_for(500, "x" * 100_000)
    assert error.body is not None and len(error.body) == BODY_LIMIT and len(error.message) < 1000


# --- capability errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "advice"),
    [
        (  # Ollama, native and /v1
            400,
            {"error": "registry.ollama.ai/library/gemma:2b does not support tools"},
            "pick a tool-capable model",
        ),
        (  # vLLM started without tool calling, old and new error shapes
            400,
            {
                "object": "error",
                "message": '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            "--enable-auto-tool-choice --tool-call-parser",
        ),
        (
            400,
            {
                "error": {
                    "message": '"auto" tool choice requires --enable-auto-tool-choice and '
                    "--tool-call-parser to be set",
                    "type": "BadRequestError",
                    "code": 400,
                }
            },
            "start vLLM with",
        ),
        (  # llama-server started without --jinja
            500,
            {"error": {"code": 500, "message": "tools param requires --jinja flag"}},
            "start llama-server with --jinja",
        ),
        (  # OpenRouter: no provider of the model supports tools
            404,
            {"error": {"message": "No endpoints found that support tool use.", "code": 404}},
            "pick a tool-capable model",
        ),
    ],
)
def test_tools_unsupported_messages(status: int, body: Any, advice: str) -> None:
    error = error_for(status, body)
    assert type(error) is ModelToolsUnsupportedError and error.code == "tools_unsupported"
    assert not error.retryable and advice in error.hint and "--model" in error.hint
    assert "qwen2.5:7b" in error.message and "cannot call tools" in error.message


@pytest.mark.parametrize(
    "body",
    [
        {  # OpenAI
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your "
                "messages resulted in 9001 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
        {  # vLLM
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        {  # vLLM, prompt longer than --max-model-len
            "error": {
                "message": "The decoder prompt (length 5000) is longer than the maximum model "
                "length of 4096.",
                "type": "BadRequestError",
                "code": 400,
            }
        },
        {  # llama.cpp server
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 4609,
                "n_ctx": 4096,
            }
        },
        {"error": {"message": "prompt is too long: 210000 tokens > 200000 maximum"}},
    ],
)
def test_context_length_messages(body: Any) -> None:
    error = error_for(400, body)
    assert type(error) is ModelContextLengthError and error.code == "context_length_exceeded"
    assert not error.retryable and "longer context" in error.hint
    assert "no longer fits model 'qwen2.5:7b'" in error.message and "{" not in error.message


@pytest.mark.parametrize(
    "body",
    [
        {"error": 'model "llama9" not found, try pulling it first'},  # Ollama
        {"error": {"message": "The model `x` does not exist.", "code": "model_not_found"}},
        {"error": {"message": "No models loaded.", "code": "model_not_found"}},  # LM Studio
    ],
)
def test_model_not_found_messages_even_on_400(body: Any) -> None:
    assert type(error_for(400, body)) is ModelNotFoundError


# --- no HTTP answer ---------------------------------------------------------------------------


def test_transport_errors() -> None:
    request = httpx.Request("POST", "http://h/v1/chat/completions")
    refused = transport_error(httpx.ConnectError("refused", request=request), "http://h/v1")
    assert type(refused) is ModelConnectionError and refused.code == "network"
    assert "cannot reach the model server at http://h/v1" in refused.message
    assert "--backend" in refused.hint and refused.retryable
    for timeout in (httpx.ConnectTimeout, httpx.ReadTimeout, httpx.PoolTimeout):
        slow = transport_error(timeout("t", request=request), "http://h/v1")
        assert type(slow) is ModelTimeoutError and slow.code == "timeout" and slow.retryable
        assert timeout.__name__ in slow.message and "timeouts" in slow.hint
