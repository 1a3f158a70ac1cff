"""Test helpers that ship with fabric, so pack authors can test packs the way fabric does.

- ``ScriptedChatClient`` / ``FunctionChatClient``: chat clients without a model server.
- ``reply``, ``tool_call``, ``tool_calls``: build scripted model turns.
- ``MemoryRunLog``: a runlog kept in memory.
- ``MockOpenAIServer``: a real HTTP server on 127.0.0.1 that speaks the OpenAI chat
  completions API, answers from a script, and records every request body it received.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fabric.infrastructure.llm.scripted import (
    FunctionChatClient,
    ScriptedChatClient,
    check_history,
    reply,
    tool_call,
    tool_calls,
)
from fabric.infrastructure.runlog import MemoryRunLog

__all__ = [
    "FunctionChatClient",
    "MemoryRunLog",
    "MockOpenAIServer",
    "ScriptedChatClient",
    "check_history",
    "completion",
    "reply",
    "stream_chunks",
    "tool_call",
    "tool_calls",
]

Handler = Callable[[dict[str, Any]], tuple[int, Any]]
"""Given a request body, return (HTTP status, JSON body)."""


def completion(
    content: str | None = None,
    calls: Iterable[tuple[str, Mapping[str, Any] | str]] = (),
    *,
    model: str = "mock",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> dict[str, Any]:
    """A chat completion body as an OpenAI-compatible server returns it."""
    tool_calls_ = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
            },
        }
        for i, (name, args) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls_:
        message["tool_calls"] = tool_calls_
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls_ else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_chunks(answer: dict[str, Any], piece: int = 7) -> list[dict[str, Any]]:
    """The chunks an OpenAI-compatible server streams for ``answer``: the text and each tool
    call's arguments in ``piece``-character fragments, then the finish reason, then usage."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {"id": answer.get("id", "chatcmpl-mock"), "object": "chat.completion.chunk",
            "model": answer.get("model", "mock")}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    chunks += [chunk({"content": text[i : i + piece]}) for i in range(0, len(text), piece)]
    for index, call in enumerate(message.get("tool_calls") or []):
        args = call["function"]["arguments"]
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [
            chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + piece]}}]}
            )
            for i in range(0, len(args), piece)
        ]
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if answer.get("usage"):
        chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return chunks


class MockOpenAIServer:
    """``with MockOpenAIServer([completion(...), ...]) as server: server.base_url``.

    The script is a list of completion bodies (answered in order; then 500s) or a handler
    function. ``requests`` holds every JSON body received, with two keys added: ``_path``
    (the request path) and ``_authorization`` (the Authorization header, or None);
    ``connections`` the number of the TCP connection each came on (1, 2, ...), ``listed_on``
    that of each model listing, and ``open_connections`` how many are open now. Like a real
    OpenAI server it answers 400 to a malformed history (see ``check_history``).
    """

    def __init__(
        self, script: Iterable[dict[str, Any]] | Handler, *, models: Iterable[str] = ("mock",)
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        self.connections: list[int] = []
        self.listed_on: list[int] = []
        self.open_connections = 0
        self._accepted = 0
        self._counting = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.models = list(models)
        """What ``GET /v1/models`` lists (fabric picks among them when the configured model
        is not one of them)."""
        if callable(script):
            self._handler: Handler = script
        else:
            answers = iter(list(script))

            def scripted(body: dict[str, Any]) -> tuple[int, Any]:
                answer = next(answers, None)
                if answer is not None:
                    return 200, answer
                return 500, {"error": {"message": "the mock server's script ran out"}}

            self._handler = scripted
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._request_handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> MockOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def drop_connections(self) -> None:
        """End every open connection from the server's side, as a server does that restarts
        or drops idle connections; return once they are all gone."""
        with self._counting:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 10
        while self.open_connections and time.monotonic() < deadline:
            time.sleep(0.01)

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            number = 0

            def setup(self) -> None:  # one handler serves one connection, request by request
                super().setup()
                with server._counting:
                    server._accepted += 1
                    server.open_connections += 1
                    server._sockets.add(self.connection)
                    self.number = server._accepted

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._counting:
                        server.open_connections -= 1
                        server._sockets.discard(self.connection)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self._send(400, {"error": {"message": "body is not a JSON object"}})
                    return
                body["_path"] = self.path
                body["_authorization"] = self.headers.get("Authorization")
                with server._counting:
                    server.requests.append(body)
                    server.connections.append(self.number)
                messages = body.get("messages")
                problem = check_history(messages) if isinstance(messages, list) else None
                if problem:  # what a real OpenAI server does with a malformed history
                    self._send(400, {"error": {"message": problem, "type": "invalid_request"}})
                    return
                status, answer = server._handler(body)
                if body.get("stream") and status == 200 and isinstance(answer, dict):
                    self._send_stream(answer)
                else:
                    self._send(status, answer)

            def _send_stream(self, answer: dict[str, Any]) -> None:
                """A completion as an OpenAI-style event stream, split into small pieces."""
                data = b"".join(
                    f"data: {json.dumps(chunk)}\n\n".encode() for chunk in stream_chunks(answer)
                )
                data += b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if not self.path.rstrip("/").endswith("/models"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with server._counting:
                    server.listed_on.append(self.number)
                data = [{"id": m, "object": "model", "owned_by": "mock"} for m in server.models]
                self._send(200, {"object": "list", "data": data})

            def _send(self, status: int, answer: Any) -> None:
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return _Handler
