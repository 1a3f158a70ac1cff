"""Retries and the fallback chain, with a fake clock: no test sleeps. The errors are the ones the
HTTP adapters raise (built by the shared status/transport mapping from real status codes and
headers), so what is retried here is what a real server's answer would make fabric retry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import pytest

from fabric.application.resilience import (
    FallbackChatClient,
    RetryingChatClient,
    retries_exhausted,
)
from fabric.config.schema import FallbackStep, RetrySettings
from fabric.domain.errors import (
    ConfigError,
    ModelCapabilityError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimitError,
    ModelServerError,
    ModelToolsUnsupportedError,
)
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, Message
from fabric.infrastructure.llm.http_errors import status_error, transport_error
from fabric.testing import ScriptedChatClient, reply, tool_call

URL = "http://127.0.0.1:11434/api/chat"
HISTORY: list[Message] = [{"role": "user", "content": "hi"}]


def http(status: int, body: str = "{}", **headers: str) -> ModelError:
    return status_error(status, body, headers, model="m", server="the server")


def rate_limited(after: str | None = None) -> ModelError:
    return http(429, '{"error": "slow down"}', **({"retry-after": after} if after else {}))


def unreachable() -> ModelError:
    return transport_error(httpx.ConnectError("connection refused"), URL)


def timed_out() -> ModelError:
    return transport_error(httpx.ReadTimeout("timed out"), URL)


class Clock:
    """A fake ``sleep`` that records how long it was asked to wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, data: Mapping[str, Any]) -> None:
        self.seen.append((kind, dict(data)))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [d for k, d in self.seen if k == kind]


def retrying(
    script: Sequence[ChatResponse | BaseException],
    *,
    jitter: float = 1.0,
    **retry: Any,
) -> tuple[RetryingChatClient, ScriptedChatClient, Clock, Events]:
    inner = ScriptedChatClient(script, model="local")
    clock, events = Clock(), Events()
    settings = RetrySettings(**{"attempts": 4, "initial_delay": 1.0, "max_delay": 30.0, **retry})
    client = RetryingChatClient(inner, settings, on_event=events, sleep=clock, rng=lambda: jitter)
    return client, inner, clock, events


def chat(client: RetryingChatClient | FallbackChatClient) -> ChatResponse:
    return asyncio.run(client.chat(ChatRequest(HISTORY, [])))


# --- retries ------------------------------------------------------------------------------------


def test_rate_limits_and_server_errors_are_retried_with_doubling_waits() -> None:
    client, inner, clock, events = retrying([rate_limited(), http(503), reply("ok")])
    assert chat(client).content == "ok"
    assert len(inner.requests) == 3
    assert clock.waits == [1.0, 2.0]
    first, second = events.of("llm_retry")
    assert first == {
        "attempt": 2,
        "of": 4,
        "wait_s": 1.0,
        "error": {"code": "rate_limited", "message": first["error"]["message"]},
        "status_code": 429,
    }
    assert "429" in first["error"]["message"]
    assert second["attempt"] == 3 and second["error"]["code"] == "server_error"
    assert second["status_code"] == 503


def test_equal_jitter_waits_at_least_half_the_backoff() -> None:
    client, _, clock, _ = retrying([http(500), http(500), reply("ok")], jitter=0.0)
    chat(client)
    assert clock.waits == [0.5, 1.0]
    client, _, clock, _ = retrying([http(500), http(500), reply("ok")], jitter=0.5)
    chat(client)
    assert clock.waits == [0.75, 1.5]


def test_waits_are_capped_at_max_delay() -> None:
    script = [http(502) for _ in range(5)] + [reply("ok")]
    client, _, clock, _ = retrying(script, attempts=6, max_delay=3.0)
    chat(client)
    assert clock.waits == [1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("make", [unreachable, timed_out], ids=["connect", "timeout"])
def test_network_failures_and_timeouts_are_retried(make: Any) -> None:
    client, _, clock, events = retrying([make(), reply("ok")])
    assert chat(client).content == "ok"
    assert clock.waits == [1.0]
    event = events.of("llm_retry")[0]
    assert "status_code" not in event and event["error"]["code"] in ("network", "timeout")


@pytest.mark.parametrize("after", ["7", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_retry_after_is_honoured_even_beyond_max_delay(after: str) -> None:
    error = rate_limited(after)
    assert error.retry_after is not None
    client, _, clock, events = retrying([error, reply("ok")], max_delay=2.0, total_time=10**10)
    chat(client)
    assert clock.waits == [error.retry_after]
    assert events.of("llm_retry")[0]["wait_s"] == round(error.retry_after, 3)


def test_a_retry_after_past_the_total_time_gives_up_at_once() -> None:
    client, inner, clock, events = retrying([rate_limited("600"), reply("ok")], total_time=60)
    with pytest.raises(ModelRateLimitError) as caught:
        chat(client)
    assert len(inner.requests) == 1 and clock.waits == [] and events.seen == []
    assert retries_exhausted(caught.value)
    assert "gave up after 1 try" in caught.value.message


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_never_retried(status: int) -> None:
    client, inner, clock, events = retrying([http(status, '{"error": "bad"}'), reply("ok")])
    with pytest.raises(ModelError) as caught:
        chat(client)
    assert caught.value.status_code == status
    assert len(inner.requests) == 1 and clock.waits == [] and events.seen == []
    assert not retries_exhausted(caught.value)
    assert "gave up" not in caught.value.message


def test_a_model_that_cannot_call_tools_is_not_retried() -> None:
    error = http(400, '{"error": "registry.ollama.ai/library/gemma:2b does not support tools"}')
    assert isinstance(error, ModelToolsUnsupportedError)
    client, inner, _, _ = retrying([error, reply("ok")])
    with pytest.raises(ModelToolsUnsupportedError):
        chat(client)
    assert len(inner.requests) == 1


def test_attempts_bound_the_tries_and_the_last_error_says_it_gave_up() -> None:
    client, inner, clock, events = retrying([http(500) for _ in range(5)], attempts=3)
    with pytest.raises(ModelServerError) as caught:
        chat(client)
    assert len(inner.requests) == 3 and clock.waits == [1.0, 2.0]
    assert [e["attempt"] for e in events.of("llm_retry")] == [2, 3]
    error = caught.value
    assert retries_exhausted(error) and error.code == "server_error"
    assert error.message.endswith("(gave up after 3 tries, 3.0 s of waiting)")
    assert error.hint  # the original advice stays


def test_total_time_bounds_the_waiting() -> None:
    client, inner, clock, _ = retrying(
        [http(503) for _ in range(5)], initial_delay=10.0, max_delay=100.0, total_time=25.0
    )
    with pytest.raises(ModelServerError) as caught:
        chat(client)
    assert clock.waits == [10.0]  # the next wait (20 s) would pass 25 s in all
    assert len(inner.requests) == 2 and retries_exhausted(caught.value)


def test_the_wrapper_passes_model_deltas_and_close_through() -> None:
    client, inner, _, _ = retrying([http(503), reply("hello")])
    deltas: list[ChatDelta] = []
    asyncio.run(client.chat(ChatRequest(HISTORY, [], on_delta=deltas.append)))
    assert client.model == "local"
    assert [d.text for d in deltas] == ["hello"]
    asyncio.run(client.aclose())
    assert inner.closed


# --- fallback -----------------------------------------------------------------------------------


class Factory:
    """Builds a fallback client on demand and remembers whether it was asked to."""

    def __init__(self, client: ScriptedChatClient) -> None:
        self.client = client
        self.built = 0

    def __call__(self) -> ScriptedChatClient:
        self.built += 1
        return self.client


def step(model: str, *on: str, backend: str = "anthropic") -> FallbackStep:
    return FallbackStep.model_validate({"backend": backend, "model": model, "on": list(on)})


def fallback(
    primary: Any, *steps: tuple[FallbackStep, Callable[[], Any]]
) -> tuple[FallbackChatClient, Events]:
    events = Events()
    return FallbackChatClient(primary, list(steps), on_event=events, backend="ollama"), events


@pytest.mark.parametrize(
    "failure",
    [
        ModelToolsUnsupportedError("gemma:2b does not support tools", status_code=400),
        ModelContextLengthError("the prompt is too long", status_code=400),
    ],
    ids=["tools", "context"],
)
def test_a_capability_failure_switches_to_the_next_model(failure: ModelCapabilityError) -> None:
    primary = ScriptedChatClient([failure], model="gemma:2b")
    cloud = ScriptedChatClient([reply("from the cloud"), reply("again")], model="claude-sonnet-4")
    factory = Factory(cloud)
    client, events = fallback(primary, (step("claude-sonnet-4", "capability"), factory))
    assert chat(client).content == "from the cloud"
    assert cloud.requests[0][0] == HISTORY  # the same request went to the new model
    assert client.model == "claude-sonnet-4" and client.backend == "anthropic"
    assert events.of("llm_fallback") == [
        {
            "from": {"model": "gemma:2b", "backend": "ollama"},
            "to": {"backend": "anthropic", "model": "claude-sonnet-4"},
            "reason": failure.code,
            "message": failure.message,
        }
    ]
    assert chat(client).content == "again"  # the run stays on the new model
    assert len(primary.requests) == 1 and factory.built == 1


def test_exhausted_retries_switch_when_a_step_says_so() -> None:
    primary, _, clock, _ = retrying([http(503) for _ in range(3)], attempts=3)
    factory = Factory(ScriptedChatClient([reply("ok")], model="gpt-4o-mini"))
    client, events = fallback(
        primary,
        (step("claude", "capability"), Factory(ScriptedChatClient([]))),
        (step("gpt-4o-mini", "retries_exhausted", backend="openai"), factory),
    )
    assert chat(client).content == "ok"
    assert clock.waits == [1.0, 2.0]  # retried first, switched after
    (event,) = events.of("llm_fallback")
    assert event["reason"] == "server_error" and "gave up after 3 tries" in event["message"]
    assert event["to"] == {"backend": "openai", "model": "gpt-4o-mini"}


def test_exhausted_retries_do_not_switch_when_no_step_lists_them() -> None:
    primary, _, _, _ = retrying([http(503) for _ in range(2)], attempts=2)
    factory = Factory(ScriptedChatClient([reply("ok")]))
    client, events = fallback(primary, (step("claude", "capability"), factory))
    with pytest.raises(ModelServerError):
        chat(client)
    assert factory.built == 0 and events.seen == []


@pytest.mark.parametrize("status", [401, 403, 404, 400])
def test_other_failures_never_switch(status: int) -> None:
    primary = ScriptedChatClient([http(status)], model="local")
    factory = Factory(ScriptedChatClient([reply("ok")]))
    client, events = fallback(primary, (step("claude", "capability", "retries_exhausted"), factory))
    with pytest.raises(ModelError) as caught:
        chat(client)
    assert caught.value.status_code == status
    assert factory.built == 0 and events.seen == [] and client.model == "local"


def test_a_capability_failure_without_a_capability_step_is_raised() -> None:
    primary = ScriptedChatClient([ModelToolsUnsupportedError("no tools")], model="local")
    factory = Factory(ScriptedChatClient([reply("ok")]))
    client, _ = fallback(primary, (step("claude", "retries_exhausted"), factory))
    with pytest.raises(ModelToolsUnsupportedError):
        chat(client)
    assert factory.built == 0


def test_the_chain_goes_on_when_the_fallback_fails_too_then_ends() -> None:
    primary = ScriptedChatClient([ModelToolsUnsupportedError("no tools")], model="local")
    second = ScriptedChatClient([ModelContextLengthError("too long")], model="mid")
    third = ScriptedChatClient([ModelContextLengthError("still too long")], model="big")
    client, events = fallback(
        primary,
        (step("mid", "capability", backend="openai"), Factory(second)),
        (step("big", "capability"), Factory(third)),
    )
    with pytest.raises(ModelContextLengthError, match="still too long"):
        chat(client)
    moves = [(e["from"]["model"], e["to"]["model"]) for e in events.of("llm_fallback")]
    assert moves == [("local", "mid"), ("mid", "big")]
    assert events.of("llm_fallback")[1]["from"] == {"model": "mid", "backend": "openai"}


def test_close_closes_every_client_that_was_used() -> None:
    primary = ScriptedChatClient([ModelToolsUnsupportedError("no tools")], model="local")
    cloud = ScriptedChatClient([reply("ok")], model="cloud")
    unused = ScriptedChatClient([], model="unused")
    client, _ = fallback(
        primary,
        (step("cloud", "capability"), Factory(cloud)),
        (step("x", "capability"), Factory(unused)),
    )
    chat(client)
    asyncio.run(client.aclose())
    assert primary.closed and cloud.closed and not unused.closed


def test_the_new_models_tool_calls_come_back_as_they_are() -> None:
    primary = ScriptedChatClient([ModelToolsUnsupportedError("no tools")])
    cloud = ScriptedChatClient([tool_call("echo", text="x")], model="cloud")
    client, _ = fallback(primary, (step("cloud", "capability"), Factory(cloud)))
    response = chat(client)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("echo", {"text": "x"})]


def test_a_step_may_be_built_by_a_coroutine_function() -> None:
    """Backends that start a server (the embedded one) build their client asynchronously."""
    cloud = ScriptedChatClient([reply("ok")], model="cloud")
    built: list[str] = []

    async def build() -> ScriptedChatClient:
        built.append("cloud")
        return cloud

    primary = ScriptedChatClient([ModelToolsUnsupportedError("no tools")], model="local")
    events = Events()
    client = FallbackChatClient(primary, [(step("cloud", "capability"), build)], on_event=events)
    assert chat(client).content == "ok"
    assert built == ["cloud"] and client.model == "cloud"
    assert events.of("llm_fallback")[0]["from"] == {"model": "local"}


def test_a_step_that_cannot_be_built_says_why_and_keeps_the_cause() -> None:
    failure = ModelToolsUnsupportedError("no tools")
    primary = ScriptedChatClient([failure], model="local")

    def build() -> ScriptedChatClient:
        raise ConfigError("ANTHROPIC_API_KEY is not set", hint="set it")

    client, events = fallback(primary, (step("cloud", "capability"), build))
    with pytest.raises(ConfigError) as caught:
        chat(client)
    assert caught.value.__context__ is failure and events.seen == []
