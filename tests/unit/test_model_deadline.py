"""A model request has a deadline for the whole of it, and a run's cancel stops it at once.

httpx's read timeout bounds each wait for data only: a server that keeps sending a little
(stuck, or behind a proxy that trickles) never trips it. Each adapter (OpenAI-compatible,
Ollama native, Anthropic; streamed or not) is tested at the transport with a reply body that
sends a piece every few hundredths of a second, for ever: the request ends at its deadline with
an error that says what to raise, and the body is closed. Retries treat a deadline like any
timeout. The loop races each model call against the cancel event: mid-stream and during a
retry's backoff. Timing values here are deadlines under test and hang guards, never
assertions about speed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from support import OnDelta, assert_valid_runlog, kinds

from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.ports import ChatClient
from fabric.application.resilience import RetryingChatClient, retries_exhausted
from fabric.config.schema import RetrySettings, Timeouts
from fabric.domain.errors import ModelServerError, ModelTimeoutError
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, Message, RunResult, RunStatus
from fabric.infrastructure.llm.anthropic import AnthropicChatClient
from fabric.infrastructure.llm.http import DEFAULT_REQUEST_TIMEOUT
from fabric.infrastructure.llm.ollama_chat import OllamaChatClient
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.testing import FunctionChatClient, MemoryRunLog, completion, stream_chunks, tool_call
from packs.engineering import EngineeringSettings, build

GUARD = 30.0  # seconds: a hang guard, never an assertion about speed
DEADLINE = 0.3
T = TypeVar("T")
Client = Callable[..., ChatClient]
"""Builds an adapter on a transport; keyword options (``request_timeout``) go to it."""


def guarded(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a hang fails the test after GUARD seconds instead of stalling it."""
    return asyncio.run(asyncio.wait_for(work, GUARD))


class Trickle(httpx.AsyncByteStream):
    """A reply body: ``head``, then ``piece`` every ``every`` seconds, for ever."""

    def __init__(self, head: bytes, piece: bytes, every: float = 0.02) -> None:
        self.head, self.piece, self.every = head, piece, every
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        while True:
            await asyncio.sleep(self.every)
            self.sent += 1
            yield self.piece

    async def aclose(self) -> None:
        self.closed = True


def sse(*events: Any) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)


def named_sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def openai(stream: bool) -> Client:
    def make(transport: httpx.AsyncBaseTransport, **options: Any) -> ChatClient:
        return OpenAIChatClient(
            base_url="http://llm.test/v1",
            model="m",
            stream=stream,
            transport=transport,
            **options,
        )

    return make


def ollama(stream: bool) -> Client:
    def make(transport: httpx.AsyncBaseTransport, **options: Any) -> ChatClient:
        return OllamaChatClient(
            base_url="http://ollama.test",
            model="m",
            stream=stream,
            transport=transport,
            **options,
        )

    return make


def anthropic(stream: bool) -> Client:
    def make(transport: httpx.AsyncBaseTransport, **options: Any) -> ChatClient:
        return AnthropicChatClient(
            base_url="https://api.anthropic.test",
            model="m",
            api_key="k",
            max_tokens=100,
            timeout=60,
            stream=stream,
            transport=transport,
            **options,
        )

    return make


_OPENAI_DOT = {"choices": [{"index": 0, "delta": {"content": "."}}]}
_OLLAMA_DOT = {"model": "m", "message": {"role": "assistant", "content": "."}, "done": False}
_ANTHROPIC_START: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 3}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
]
_ANTHROPIC_DOT = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}
_ANTHROPIC_END: list[dict[str, Any]] = [
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
]


@dataclass(frozen=True)
class Case:
    """One adapter in one mode: how a trickling reply looks, and a whole reply saying "hi"."""

    client: Client
    kind: str
    head: bytes
    piece: bytes
    whole: bytes

    def trickle(self) -> Trickle:
        return Trickle(self.head, self.piece)

    def fast(self) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": self.kind}, content=self.whole)


CASES = {
    "openai-stream": Case(
        openai(stream=True),
        "text/event-stream",
        sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        sse(_OPENAI_DOT),
        sse(*stream_chunks(completion("hi"))) + b"data: [DONE]\n\n",
    ),
    "openai-whole": Case(
        openai(stream=False),
        "application/json",
        b'{"choices": [',
        b" ",
        json.dumps(completion("hi")).encode(),
    ),
    "ollama-stream": Case(
        ollama(stream=True),
        "application/x-ndjson",
        b"",
        json.dumps(_OLLAMA_DOT).encode() + b"\n",
        b"\n".join(
            json.dumps(line).encode()
            for line in (
                {"model": "m", "message": {"role": "assistant", "content": "hi"}, "done": False},
                {
                    "model": "m",
                    "message": {"role": "assistant", "content": ""},
                    "done": True,
                    "done_reason": "stop",
                    "prompt_eval_count": 3,
                    "eval_count": 1,
                },
            )
        ),
    ),
    "ollama-whole": Case(
        ollama(stream=False),
        "application/json",
        b'{"message": ',
        b" ",
        json.dumps(
            {"model": "m", "message": {"role": "assistant", "content": "hi"}, "done": True}
        ).encode(),
    ),
    "anthropic-stream": Case(
        anthropic(stream=True),
        "text/event-stream",
        named_sse(*_ANTHROPIC_START),
        named_sse({**_ANTHROPIC_DOT, "delta": {"type": "text_delta", "text": "."}}),
        named_sse(
            *_ANTHROPIC_START,
            {**_ANTHROPIC_DOT, "delta": {"type": "text_delta", "text": "hi"}},
            *_ANTHROPIC_END,
        ),
    ),
    "anthropic-whole": Case(
        anthropic(stream=False),
        "application/json",
        b'{"content": [',
        b" ",
        json.dumps(
            {
                "type": "message",
                "model": "m",
                "content": [{"type": "text", "text": "hi"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        ).encode(),
    ),
}
MESSAGES: list[Message] = [{"role": "user", "content": "hi"}]


def transport(*answers: Trickle | httpx.Response, kind: str) -> httpx.MockTransport:
    """Answers each request with the next answer (a trickling body, or a whole reply)."""
    queue = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        answer = queue.pop(0)
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, headers={"content-type": kind}, stream=answer)

    return httpx.MockTransport(handler)


async def ask(client: ChatClient) -> ChatResponse:
    try:
        return await client.chat(ChatRequest(MESSAGES, []))
    finally:
        await client.aclose()


# --- the deadline, per adapter ----------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_a_reply_that_never_ends_fails_at_the_deadline_saying_what_to_raise(name: str) -> None:
    case = CASES[name]
    body = case.trickle()
    client = case.client(transport(body, kind=case.kind), request_timeout=DEADLINE)

    with pytest.raises(ModelTimeoutError) as caught:
        guarded(ask(client))

    error = caught.value
    assert error.code == "timeout" and error.retryable
    assert f"within {DEADLINE:g} s" in error.message and "llm.timeouts.request" in error.message
    assert "raise llm.timeouts.request" in error.hint and "check the model server" in error.hint
    assert body.sent > 0  # the server was sending all along: no read ever timed out
    assert body.closed  # the reply was closed, so a real server sees the connection go


@pytest.mark.parametrize("name", CASES)
def test_a_whole_reply_within_the_deadline_is_read_as_ever(name: str) -> None:
    case = CASES[name]
    client = case.client(transport(case.fast(), kind=case.kind))  # the default deadline
    response = guarded(ask(client))
    assert response.content == "hi"


def test_the_adapters_default_deadline_is_the_configs() -> None:
    assert Timeouts().request == DEFAULT_REQUEST_TIMEOUT == 900.0


# --- retries ----------------------------------------------------------------------------------


def retrying(inner: ChatClient, attempts: int, events: list[tuple[str, Any]]) -> ChatClient:
    async def no_wait(seconds: float) -> None:
        return None

    settings = RetrySettings(attempts=attempts, initial_delay=0.5)
    return RetryingChatClient(
        inner, settings, on_event=lambda k, d: events.append((k, d)), sleep=no_wait
    )


def test_a_deadline_is_retried_like_a_timeout_and_the_next_try_can_answer() -> None:
    case = CASES["openai-stream"]
    first = case.trickle()
    events: list[tuple[str, Any]] = []
    inner = case.client(transport(first, case.fast(), kind=case.kind), request_timeout=DEADLINE)

    response = guarded(ask(retrying(inner, 3, events)))

    assert response.content == "hi"
    assert first.closed
    [(kind, retry)] = events
    assert kind == "llm_retry" and retry["attempt"] == 2
    assert retry["error"]["code"] == "timeout"
    assert "llm.timeouts.request" in retry["error"]["message"]


def test_deadlines_on_every_try_give_up_with_the_advice_kept() -> None:
    case = CASES["ollama-stream"]
    bodies = [case.trickle(), case.trickle()]
    events: list[tuple[str, Any]] = []
    inner = case.client(transport(*bodies, kind=case.kind), request_timeout=DEADLINE)

    with pytest.raises(ModelTimeoutError) as caught:
        guarded(ask(retrying(inner, 2, events)))

    assert retries_exhausted(caught.value)
    assert "gave up after 2 tries" in caught.value.message
    assert "raise llm.timeouts.request" in caught.value.hint
    assert [kind for kind, _ in events] == ["llm_retry"]
    assert all(body.closed for body in bodies)


# --- cancel, through the loop -----------------------------------------------------------------


def run_task(
    chat: ChatClient,
    workspace: Path,
    cancel: asyncio.Event,
    log: MemoryRunLog,
    on_delta: Callable[[ChatDelta], None] | None = None,
) -> RunResult:
    pack = build(EngineeringSettings(builder="packs.engineering:build"))
    observers = (OnDelta(on_delta),) if on_delta is not None else ()
    work = execute_task(
        Job("say hi", pack, "run-1", workspace),
        Kit(chat, log),
        Control(cancel=cancel, observers=observers),
    )
    return guarded(work)


@pytest.mark.parametrize("name", ["openai-stream", "ollama-stream", "anthropic-stream"])
def test_cancel_stops_a_trickling_stream_at_once(name: str, workspace: Path) -> None:
    case = CASES[name]
    body = case.trickle()
    cancel = asyncio.Event()
    log = MemoryRunLog("run-1")
    client = case.client(transport(body, kind=case.kind))  # the default deadline: 900 s

    def first_piece(delta: ChatDelta) -> None:
        cancel.set()  # the user cancels while the reply is coming in

    result = run_task(client, workspace, cancel, log, on_delta=first_piece)

    assert result.status is RunStatus.CANCELLED
    events = assert_valid_runlog(log.events)
    assert kinds(events)[-2:] == ["llm_request", "run_finished"]
    assert events[-1]["status"] == "cancelled" and "error" not in events[-1]
    assert body.closed


def test_cancel_stops_a_retry_that_waits_out_its_backoff(workspace: Path) -> None:
    cancel = asyncio.Event()
    log = MemoryRunLog("run-1")

    async def overloaded(messages: Sequence[Message], _: Sequence[Mapping[str, Any]]) -> Any:
        raise ModelServerError("the model server answered 503", status_code=503)

    def on_event(kind: str, data: Mapping[str, Any]) -> None:
        log.emit(kind, data)
        if kind == "llm_retry":
            cancel.set()  # the user cancels during the (hour-long) wait before the retry

    settings = RetrySettings(attempts=5, initial_delay=3600, max_delay=3600, total_time=10**6)
    chat = RetryingChatClient(FunctionChatClient(overloaded), settings, on_event=on_event)

    result = run_task(chat, workspace, cancel, log)

    assert result.status is RunStatus.CANCELLED
    events = assert_valid_runlog(log.events)
    assert kinds(events)[-3:] == ["llm_request", "llm_retry", "run_finished"]
    assert events[-1]["status"] == "cancelled"


def test_a_reply_that_came_before_the_cancel_is_still_logged(workspace: Path) -> None:
    cancel = asyncio.Event()
    log = MemoryRunLog("run-1")

    async def answers_then_cancel(messages: Sequence[Message], _: Any) -> ChatResponse:
        cancel.set()  # a final answer that comes with the cancel is kept (test_user_fixes_*)
        return tool_call("read_file", path="notes.txt")

    result = run_task(FunctionChatClient(answers_then_cancel), workspace, cancel, log)

    assert result.status is RunStatus.CANCELLED and result.usage.total_tokens > 0
    assert kinds(assert_valid_runlog(log.events))[-2:] == ["llm_response", "run_finished"]


def test_cancelling_the_task_during_a_model_call_cancels_the_call_too(workspace: Path) -> None:
    log = MemoryRunLog("run-1")
    calling = asyncio.Event()
    outcome: list[str] = []

    async def never(messages: Sequence[Message], _: Any) -> ChatResponse:
        calling.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        raise AssertionError("unreachable")

    async def main() -> None:
        pack = build(EngineeringSettings(builder="packs.engineering:build"))
        task = asyncio.create_task(
            execute_task(Job("t", pack, "run-1", workspace), Kit(FunctionChatClient(never), log))
        )
        await calling.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    guarded(main())
    assert outcome == ["cancelled"]  # no model call left running behind the run
    events = assert_valid_runlog(log.events)
    assert events[-1]["status"] == "cancelled"
