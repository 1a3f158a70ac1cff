"""A model server that trickles its reply, a byte at a time, for ever: a real server on
127.0.0.1 and real HTTP.

- With a small ``llm.timeouts.request`` the run retries, then fails with an error that says
  which limit ran out and what to do, recorded as the run's error in the runlog; httpx's read
  timeout alone would wait for ever, since a byte keeps coming.
- ``POST /tasks/{id}/cancel`` on a task whose model reply is trickling in ends it cancelled at
  once (a real ``fabric serve``), and the model server sees the connection go.
- A reply that comes whole and at once is read as ever.

Timing values are deadlines under test and hang guards, never assertions about speed.
"""

from __future__ import annotations

import asyncio
import json
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import assert_valid_runlog, kinds
from test_service import GUARD, Service, project, wait_until

from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.resilience import RetryingChatClient
from fabric.config.schema import RetrySettings
from fabric.domain.models import RunResult, RunStatus
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.testing import completion, stream_chunks
from packs.engineering import EngineeringSettings, build

FINISH = completion(None, [("finish_task", {"summary": "said hi"})], model="m")
_DOT = json.dumps({"object": "chat.completion.chunk", "model": "m",
                   "choices": [{"index": 0, "delta": {"content": "."}}]})  # fmt: skip


class TricklingServer:
    """Just enough of an OpenAI-compatible server: ``GET .../models`` lists model "m"; each
    chat request is answered by ``answer(n)`` (n counts requests from 0): ``"fast"`` sends a
    whole ``finish_task`` reply at once (streamed or not, as asked), ``"trickle"`` sends the
    headers and then one byte every ``every`` seconds until the client hangs up.
    ``hangups`` counts the trickling replies the client hung up on."""

    def __init__(
        self, answer: Callable[[int], str] = lambda n: "trickle", every: float = 0.05
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        self.trickling = threading.Event()
        self.hangups = 0
        self._answer, self._every = answer, every
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> TricklingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[socketserver.StreamRequestHandler]:
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                method = self.rfile.readline().split(b" ")[0]
                length = 0
                while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if method != b"POST":
                    models = {"object": "list", "data": [{"id": "m", "object": "model"}]}
                    self._send("application/json", json.dumps(models).encode())
                    return
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    server.requests.append(body)
                    number = len(server.requests) - 1
                stream = bool(body.get("stream"))
                if server._answer(number) == "fast":
                    if stream:
                        events = [f"data: {json.dumps(c)}\n\n" for c in stream_chunks(FINISH)]
                        content = ("".join(events) + "data: [DONE]\n\n").encode()
                        self._send("text/event-stream", content)
                    else:
                        self._send("application/json", json.dumps(FINISH).encode())
                    return
                if stream:
                    self._head("text/event-stream")
                    self._trickle(f"data: {_DOT}\n\n".encode())
                else:  # a JSON reply said to be a megabyte long, coming a space at a time
                    self._head("application/json", 1_000_000)
                    self._trickle(b" ")

            def _head(self, kind: str, length: int | None = None) -> None:
                size = "" if length is None else f"Content-Length: {length}\r\n"
                head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n{size}Connection: close\r\n\r\n"
                self.wfile.write(head.encode())

            def _send(self, kind: str, content: bytes) -> None:
                self._head(kind, len(content))
                self.wfile.write(content)

            def _trickle(self, pattern: bytes) -> None:
                while not server._stop.is_set():
                    for byte in pattern:
                        try:
                            self.wfile.write(bytes([byte]))
                        except OSError:  # the client hung up
                            with server._lock:
                                server.hangups += 1
                            return
                        server.trickling.set()
                        if server._stop.wait(server._every):
                            return

        return Handler


def run_in_process(server: TricklingServer, runs: Path, workspace: Path, *, stream: bool,
                   request_timeout: float) -> tuple[RunResult, list[dict[str, Any]]]:  # fmt: skip
    """One engineering run against ``server``, as `fabric run` would build it: the OpenAI
    adapter with a read timeout a trickle never trips, retried twice in all."""

    async def main() -> RunResult:
        log = JsonlRunLog(runs, "run-1")
        inner = OpenAIChatClient(
            base_url=server.base_url,
            model="m",
            stream=stream,
            timeout=httpx.Timeout(5.0),
            request_timeout=request_timeout,
        )
        retry = RetrySettings(attempts=2, initial_delay=0.05)
        chat = RetryingChatClient(inner, retry, on_event=log.emit)
        try:
            pack = build(EngineeringSettings(builder="packs.engineering:build"))
            return await execute_task(Job("say hi", pack, "run-1", workspace), Kit(chat, log))
        finally:
            await chat.aclose()

    result = asyncio.run(asyncio.wait_for(main(), GUARD))
    return result, assert_valid_runlog(runs / "run-1" / "runlog.jsonl")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_trickling_reply_fails_the_run_at_the_deadline_with_what_to_do(
    tmp_path: Path, workspace: Path, stream: bool
) -> None:
    with TricklingServer() as server:
        result, events = run_in_process(
            server, tmp_path / "runs", workspace, stream=stream, request_timeout=1.5
        )
        wait_until(lambda: server.hangups == 2, "the server to see both requests hang up")

    assert result.status is RunStatus.FAILED
    assert len(server.requests) == 2  # tried, then retried once, as configured
    [retry] = [e for e in events if e["kind"] == "llm_retry"]
    assert retry["error"]["code"] == "timeout"
    end = events[-1]
    assert end["kind"] == "run_finished" and end["status"] == "failed"
    error = end["error"]
    assert error == result.error
    assert error["code"] == "timeout"
    assert "did not finish its reply within 1.5 s (llm.timeouts.request" in error["message"]
    assert "gave up after 2 tries" in error["message"]
    assert "raise llm.timeouts.request" in error["hint"]
    assert "check the model server" in error["hint"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_reply_that_comes_at_once_is_unaffected(
    tmp_path: Path, workspace: Path, stream: bool
) -> None:
    with TricklingServer(answer=lambda n: "fast") as server:
        result, events = run_in_process(
            server, tmp_path / "runs", workspace, stream=stream, request_timeout=5.0
        )
    # the reply came whole and the run ended as the claim left it (no check could confirm it)
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED, result.error
    assert result.payload == {"summary": "said hi"}
    assert "llm_retry" not in kinds(events) and len(server.requests) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_cancel_over_http_stops_a_task_whose_reply_trickles(tmp_path: Path, stream: bool) -> None:
    with TricklingServer() as model:
        config = project(tmp_path, model.base_url)
        settings = json.loads(config.read_text())
        settings["llm"]["backends"]["openai"]["stream"] = stream
        config.write_text(json.dumps(settings))
        with Service(config) as service:
            task_id = service.submit(task="say hi")
            assert model.trickling.wait(GUARD), "the model request never came"
            answer = service.client.post(f"/tasks/{task_id}/cancel")
            assert answer.status_code == 202, answer.text
            record = service.wait_final(task_id)
            wait_until(lambda: model.hangups == 1, "the model server to see the hang-up")
    assert record["status"] == "cancelled"
    events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
    assert kinds(events)[-2:] == ["llm_request", "run_finished"]
    assert events[-1]["status"] == "cancelled"
    assert len(model.requests) == 1
