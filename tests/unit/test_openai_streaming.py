"""Streaming in the OpenAI-compatible client, at the HTTP transport: what is asked for, how
server-sent events are read, how tool-call fragments are joined whatever the server's habits,
and how odd, broken or failing streams end (kept and reported, or raised as the right error)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from fabric.domain.errors import (
    ModelConnectionError,
    ModelError,
    ModelRateLimitError,
    ModelServerError,
    ModelTimeoutError,
)
from fabric.domain.models import ChatDelta, ChatRequest, ChatResponse, Usage
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.testing import completion

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": n, "description": "d", "parameters": {}}}
    for n in ("read_file", "run_command")
]


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> Any:
    body: dict[str, Any] = {"object": "chat.completion.chunk", "model": "m"}
    if delta is not None or finish is not None:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return body | extra


def text(content: str) -> Any:
    return chunk({"content": content})


def call(index: int | None = None, **fields: Any) -> Any:
    fragment: dict[str, Any] = {} if index is None else {"index": index}
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    return chunk({"tool_calls": [fragment | fields | {"function": function}]})


def sse(*events: Any, done: bool = True) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


def stream_reply(body: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def run(
    answer: httpx.Response | Any, *, text_tool_calls: bool = False, sink: bool = True
) -> tuple[ChatResponse, list[ChatDelta], list[httpx.Request]]:
    requests: list[httpx.Request] = []
    deltas: list[ChatDelta] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return answer(request) if callable(answer) else answer

    async def main() -> ChatResponse:
        client = OpenAIChatClient(
            base_url="http://llm.test/v1",
            model="m",
            stream=True,
            temperature=0.2,
            text_tool_calls=text_tool_calls,
            transport=httpx.MockTransport(handler),
        )
        try:
            return await client.chat(
                ChatRequest(MESSAGES, TOOLS, on_delta=deltas.append if sink else None)
            )
        finally:
            await client.aclose()

    return asyncio.run(main()), deltas, requests


def calls_of(response: ChatResponse) -> list[tuple[str, str, Any]]:
    return [(c.id, c.name, c.arguments) for c in response.tool_calls]


# --- the request ------------------------------------------------------------------------------


def test_a_streamed_request_asks_for_events_and_usage() -> None:
    _, _, (request,) = run(stream_reply(sse(text("hi"), chunk({}, "stop"))))
    assert json.loads(request.content) == {
        "model": "m",
        "messages": MESSAGES,
        "tools": TOOLS,
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# --- reading events ---------------------------------------------------------------------------


def test_comments_other_fields_crlf_and_multi_line_data_are_read_per_the_sse_rules() -> None:
    first = json.dumps(text("Hel"), indent=1).splitlines()  # one event in several data lines
    body = (
        ": keep-alive\r\n\r\n"
        + "".join(f"data:{line}\r\n" for line in first)
        + "\r\n"
        + "event: message\nid: 7\nretry: 1000\n"
        + f"data: {json.dumps(text('lo'))}\n\n"
        + ": OPENROUTER PROCESSING\n\n"
        + f"data: {json.dumps(chunk({}, 'stop'))}\n\ndata: [DONE]\n\n"
    ).encode()
    response, deltas, _ = run(stream_reply(body))
    assert response.content == "Hello" and [d.text for d in deltas] == ["Hel", "lo"]
    assert response.finish_reason == "stop" and response.warnings == ()


def test_events_without_blank_lines_between_them_still_count() -> None:
    body = (
        f"data: {json.dumps(text('a'))}\ndata: {json.dumps(text('b'))}\ndata: [DONE]\n"
    ).encode()
    response, _, _ = run(stream_reply(body))
    assert response.content == "ab" and response.warnings == ()


def test_nothing_after_done_is_read() -> None:
    body = sse(text("kept")) + sse(text("ignored"), done=False)
    response, _, _ = run(stream_reply(body))
    assert response.content == "kept"


def test_malformed_chunks_are_skipped_and_reported_not_fatal() -> None:
    body = sse(
        text("a"),
        "{not json",
        "[1, 2]",
        {"choices": "nope"},
        chunk({"content": 5}),
        {"choices": [7]},
        {"choices": [{"index": 0, "delta": "x"}]},
        chunk({"tool_calls": {"index": 0}}),
        chunk({"tool_calls": ["x"]}),
        text("b"),
        chunk({}, "stop"),
    )
    response, deltas, _ = run(stream_reply(body))
    assert response.content == "ab" and [d.text for d in deltas] == ["a", "b"]
    assert len(response.warnings) == 8
    assert all(w.startswith("skipped ") for w in response.warnings)
    assert "'{not json'" in response.warnings[0]


def test_warnings_are_bounded_when_a_stream_is_mostly_garbage() -> None:
    response, _, _ = run(stream_reply(sse(*["{bad"] * 50, text("ok"))))
    assert response.content == "ok"
    assert len(response.warnings) == 11 and response.warnings[-1] == "40 more chunks skipped"


def test_a_stream_that_ends_without_done_returns_what_came_with_a_warning() -> None:
    body = sse(
        text("partial "), call(0, id="c1", name="read_file", arguments='{"path"'), done=False
    )
    response, _, _ = run(stream_reply(body))
    assert response.content == "partial "
    (tool,) = response.tool_calls
    assert tool.name == "read_file" and tool.arguments is None
    assert tool.raw_arguments == '{"path"' and tool.arguments_error is not None
    assert any("without [DONE]" in w for w in response.warnings)


def test_an_empty_stream_is_an_empty_reply_with_a_warning() -> None:
    response, deltas, _ = run(stream_reply(b""))
    assert response.content is None and response.tool_calls == () and deltas == []
    assert response.usage == Usage(0, 0) and response.warnings


def test_only_the_first_choice_is_read() -> None:
    other = {"choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}]}
    response, _, _ = run(stream_reply(sse(text("mine"), other, chunk({}, "stop"))))
    assert response.content == "mine"


def test_usage_on_the_finishing_chunk_or_in_a_last_chunk_without_choices() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
    on_finish, _, _ = run(stream_reply(sse(text("x"), chunk({}, "stop", usage=usage))))
    last = stream_reply(sse(text("x"), chunk({}, "stop"), {"choices": [], "usage": usage}))
    alone = stream_reply(sse(text("x"), chunk({}, "stop"), {"usage": usage}))
    assert on_finish.usage == run(last)[0].usage == run(alone)[0].usage == Usage(11, 2)


def test_no_sink_is_fine() -> None:
    response, _, _ = run(
        stream_reply(sse(text("x"), call(0, id="a", name="read_file"))), sink=False
    )
    assert response.content == "x" and response.tool_calls[0].name == "read_file"


# --- tool-call fragments ----------------------------------------------------------------------


def test_fragments_split_mid_json_inside_strings_and_escapes_are_joined_by_index() -> None:
    wanted = {"path": 'a "quoted" \\ name\n', "note": "ü日本"}
    raw = json.dumps(wanted)
    cuts = [raw[i : i + 3] for i in range(0, len(raw), 3)]  # cuts through \" \\ \n and \u
    events = [call(0, id="call_1", type="function", name="read_file", arguments="")]
    events += [call(0, arguments=piece) for piece in cuts]
    response, deltas, _ = run(stream_reply(sse(*events, chunk({}, "tool_calls"))))
    (tool,) = response.tool_calls
    assert tool.arguments == wanted and tool.raw_arguments == raw
    assert deltas[0] == ChatDelta(tool_index=0, tool_name="read_file", arguments="")
    assert [d.arguments for d in deltas[1:]] == cuts
    assert response.finish_reason == "tool_calls"


def test_the_whole_call_in_one_chunk_as_ollama_sends_it() -> None:
    whole = call(0, id="call_x", type="function", name="run_command", arguments='{"command":"ls"}')
    response, deltas, _ = run(stream_reply(sse(whole, chunk({}, "tool_calls"))))
    assert calls_of(response) == [("call_x", "run_command", {"command": "ls"})]
    assert deltas == [
        ChatDelta(tool_index=0, tool_name="run_command", arguments='{"command":"ls"}')
    ]


def test_an_id_and_name_repeated_on_every_fragment_stay_one_call() -> None:
    events = [
        call(0, id="c", type="function", name="read_file", arguments=piece)
        for piece in ('{"pa', 'th": ', '"x"}')
    ]
    response, deltas, _ = run(stream_reply(sse(*events)))
    assert calls_of(response) == [("c", "read_file", {"path": "x"})]
    assert [d.tool_name for d in deltas] == ["read_file", None, None]


def test_two_calls_interleaved_by_index() -> None:
    events = [
        call(0, id="a", name="read_file", arguments='{"path":'),
        call(1, id="b", name="run_command", arguments='{"command":'),
        call(0, arguments=' "x"}'),
        call(1, arguments=' "ls"}'),
    ]
    response, deltas, _ = run(stream_reply(sse(*events)))
    assert calls_of(response) == [
        ("a", "read_file", {"path": "x"}),
        ("b", "run_command", {"command": "ls"}),
    ]
    assert [d.tool_index for d in deltas] == [0, 1, 0, 1]


def test_servers_that_number_every_call_zero_still_give_separate_calls() -> None:
    events = [
        call(0, id="a", name="read_file", arguments='{"path": "x"}'),
        call(0, id="b", name="read_file", arguments='{"path": "y"}'),
    ]
    response, _, _ = run(stream_reply(sse(*events)))
    assert calls_of(response) == [
        ("a", "read_file", {"path": "x"}),
        ("b", "read_file", {"path": "y"}),
    ]


def test_fragments_without_an_index_follow_their_id_or_the_last_call() -> None:
    events = [
        call(id="a", name="read_file", arguments='{"path": '),
        call(id="b", name="run_command", arguments='{"command": "ls"}'),
        call(id="a", arguments='"x"'),
        call(arguments="}"),  # no index, no id: the last call named
    ]
    response, _, _ = run(stream_reply(sse(*events)))
    assert [(c.id, c.name) for c in response.tool_calls] == [
        ("a", "read_file"),
        ("b", "run_command"),
    ]
    assert response.tool_calls[0].raw_arguments == '{"path": "x"'
    assert response.tool_calls[1].raw_arguments == '{"command": "ls"}}'


def test_an_id_that_comes_after_the_first_fragment_is_kept() -> None:
    events = [call(0, name="read_file", arguments="{}"), call(0, id="late")]
    response, _, _ = run(stream_reply(sse(*events)))
    assert calls_of(response) == [("late", "read_file", {})]


def test_missing_and_repeated_ids_are_made_unique_like_the_non_streamed_path() -> None:
    events = [
        call(0, name="read_file", arguments="{}"),
        call(1, id="x", name="read_file", arguments="{}"),
        call(2, id="x", name="run_command", arguments="{}"),
    ]
    response, _, _ = run(stream_reply(sse(*events)))
    ids = [c.id for c in response.tool_calls]
    assert len(set(ids)) == 3 and ids[1] == "x" and all(ids)
    assert [c["id"] for c in response.message["tool_calls"]] == ids


def test_arguments_sent_as_an_object_in_a_chunk() -> None:
    response, _, _ = run(stream_reply(sse(call(0, id="a", name="read_file", arguments={"p": 1}))))
    assert response.tool_calls[0].arguments == {"p": 1}
    assert json.loads(response.message["tool_calls"][0]["function"]["arguments"]) == {"p": 1}


def test_a_reply_cut_by_the_token_limit_keeps_the_broken_arguments_for_the_model() -> None:
    events = [call(0, id="a", name="read_file", arguments='{"path": "very/lo'), chunk({}, "length")]
    response, _, _ = run(stream_reply(sse(*events)))
    (tool,) = response.tool_calls
    assert response.finish_reason == "length" and tool.arguments is None
    assert tool.raw_arguments == '{"path": "very/lo' and "invalid JSON" in str(tool.arguments_error)


def test_a_fragment_with_neither_name_nor_arguments_is_dropped_with_a_warning() -> None:
    response, _, _ = run(stream_reply(sse(text("hi"), call(0, id="ghost"))))
    assert response.tool_calls == () and "tool_calls" not in response.message
    assert any("neither a name nor arguments" in w for w in response.warnings)


# --- errors -----------------------------------------------------------------------------------


def test_an_http_error_before_the_stream_reads_the_body_into_the_error() -> None:
    answer = httpx.Response(500, text="<html>upstream crashed</html>")
    with pytest.raises(ModelServerError) as info:
        run(answer)
    assert info.value.body == "<html>upstream crashed</html>" and info.value.status_code == 500


@pytest.mark.parametrize(
    ("event", "error_type"),
    [
        ({"error": {"message": "slow down", "code": 429}}, ModelRateLimitError),
        ({"error": {"message": "boom", "type": "server_error"}}, ModelServerError),
        ({"error": "boom"}, ModelServerError),
        ({"object": "error", "message": "internal", "code": 500}, ModelServerError),
    ],
)
def test_an_error_event_mid_stream_is_the_matching_error(
    event: dict[str, Any], error_type: type[ModelError]
) -> None:
    with pytest.raises(ModelError) as info:
        run(stream_reply(sse(text("Sure, "), event)))
    assert type(info.value) is error_type and info.value.retryable


def test_a_connection_that_breaks_mid_stream_is_a_retryable_connection_error() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield sse(text("par"), done=False)
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    answer = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=broken())
    with pytest.raises(ModelConnectionError) as info:
        run(answer)
    assert type(info.value) is ModelConnectionError and info.value.retryable
    assert "broke during the reply" in info.value.message and "logs" in info.value.hint


def test_a_read_timeout_mid_stream_is_a_timeout_error() -> None:
    async def stalled() -> AsyncIterator[bytes]:
        yield sse(text("par"), done=False)
        raise httpx.ReadTimeout("timed out")

    answer = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stalled())
    with pytest.raises(ModelTimeoutError, match="did not answer in time"):
        run(answer)


def test_a_server_that_ignores_stream_and_sends_json_still_works() -> None:
    body = completion("done", [("read_file", {"path": "a"})], prompt_tokens=3, completion_tokens=2)
    response, deltas, _ = run(httpx.Response(200, json=body))
    assert response.content == "done" and response.usage == Usage(3, 2)
    assert calls_of(response) == [("call_0", "read_file", {"path": "a"})]
    assert deltas == [
        ChatDelta(text="done"),
        ChatDelta(tool_index=0, tool_name="read_file", arguments='{"path": "a"}'),
    ]


# --- a real loopback server -------------------------------------------------------------------


@contextlib.contextmanager
def chunked_server(pieces: Callable[[], Iterable[bytes]]) -> Iterator[str]:
    """An HTTP/1.1 server on 127.0.0.1 that answers each POST with the events ``pieces()``
    gives, in chunked encoding, one flush each, then the closing chunk; a client that hangs up
    ends the answer. Yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for raw in pieces():
                    self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client hung up
                return

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _event(event: Any) -> bytes:
    return f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()


@pytest.fixture
def sse_server() -> Iterator[str]:
    """A loopback server that streams a reply with text and a call split in fragments."""
    events = [
        text("Hi "),
        call(0, id="c", type="function", name="read_file", arguments='{"path":'),
        call(0, arguments=' "ü.txt"}'),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}},
    ]
    with chunked_server(lambda: map(_event, [*events, "[DONE]"])) as url:
        yield url


def test_streaming_from_a_real_loopback_server(sse_server: str) -> None:
    deltas: list[ChatDelta] = []

    async def main() -> ChatResponse:
        client = OpenAIChatClient(base_url=sse_server, model="m", stream=True)
        try:
            return await client.chat(ChatRequest(MESSAGES, TOOLS, on_delta=deltas.append))
        finally:
            await client.aclose()

    response = asyncio.run(main())
    assert response.content == "Hi " and response.usage == Usage(5, 4)
    assert calls_of(response) == [("c", "read_file", {"path": "ü.txt"})]
    assert [d.tool_name for d in deltas if d.tool_index == 0] == ["read_file", None]
    assert response.warnings == ()


REQUEST_TIMEOUT = 60


@pytest.mark.parametrize("after_done", ["trickle", "flood"])
def test_a_server_that_streams_on_after_done_does_not_hold_the_reply(after_done: str) -> None:
    """The client reads what follows ``[DONE]`` so the connection can serve the next request,
    but only so much, for so long: a server that goes on (a comment every few milliseconds,
    or a flood of them) costs its connection, not the reply nor the request's deadline."""

    def endless() -> Iterator[bytes]:
        yield _event(text("all here"))
        yield _event("[DONE]")
        while True:
            if after_done == "trickle":
                threading.Event().wait(0.005)
                yield b": ping\n\n"
            else:
                yield b": " + b"x" * 4096 + b"\n\n"

    async def main(url: str) -> ChatResponse:
        client = OpenAIChatClient(
            base_url=url, model="m", stream=True, request_timeout=REQUEST_TIMEOUT
        )
        try:
            return await client.chat(ChatRequest(MESSAGES, TOOLS))
        finally:
            await client.aclose()

    with chunked_server(endless) as url:
        response = asyncio.run(main(url))
    assert response.content == "all here" and response.warnings == ()
