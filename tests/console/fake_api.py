"""A stand-in for the service's console API, as ``/work/console-contract.md`` describes it, on
127.0.0.1: the page's own behaviour (login, CSRF, the list, live events, the actions, the
forms) is tested against it until the API branch brings the real endpoints. It serves the real
static files with the contract's Content-Security-Policy header, keeps runs and their events in
memory, streams them as Server-Sent Events while a test adds more, and records every request.

It is deliberately small: no persistence, one user. The live-server tests replace it with
``fabric serve`` and the scripted model.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

STATIC = Path(__file__).parents[2] / "src/fabric/interfaces/http/console/static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
TOKEN = "console-test-token-0123456789"
CSRF = "csrf-0123456789abcdef"
COOKIE = "fabric_console=signed-session"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    """The runs, packs and models the fake service answers with, and what it was asked."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    packs: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _watchers: list[queue.Queue[dict[str, Any]]] = field(default_factory=list)
    _closed: bool = False

    # ------------------------------------------------------------ what a test does

    def add_run(self, summary: dict[str, Any], events: list[dict[str, Any]] | None = None) -> None:
        with self._changed:
            self.runs[summary["run_id"]] = summary
            self.events.setdefault(summary["run_id"], []).extend(events or [])
            self._changed.notify_all()
        for watcher in list(self._watchers):
            watcher.put(summary)

    def append(self, run_id: str, *events: dict[str, Any]) -> None:
        """More events of a run (``{"kind": "delta", "step", "text"}``: streamed model text)."""
        with self._changed:
            self.events[run_id].extend(events)
            self._changed.notify_all()

    def posts(self, path_start: str) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST" and s.path.startswith(path_start)]

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    # ------------------------------------------------------------ the endpoints

    def answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if method == "GET" and path == "/runs":
            return 200, self._list(query)
        if method == "GET" and parts[0] == "runs" and len(parts) == 2:
            if parts[1] not in self.runs:
                return _error(404, "not_found", f"no run {parts[1]!r}")
            started = next((e for e in self.events[parts[1]] if e["kind"] == "run_started"), None)
            return 200, {"summary": self.runs[parts[1]], "started": started, "task": None}
        if method == "POST" and parts[0] == "runs" and parts[2:] == ["replay"]:
            return 200, self.replay
        if method == "POST" and path == "/tasks":
            run_id = f"20261126T000000.000Z-new{len(self.runs):03}"
            self.add_run(
                summary(run_id, body.get("pack"), body.get("task"), "queued", task_id=run_id)
            )
            self.live.add(run_id)
            return 202, {"id": run_id, "status": "queued", "pack": body.get("pack")}
        if method == "POST" and parts[0] == "tasks" and parts[2:3] == ["approvals"]:
            return 200, {"call_id": parts[3], "approved": body.get("approve")}
        if method == "POST" and parts[0] == "tasks" and parts[2:] in (["cancel"], ["resume"]):
            return 202, {"id": parts[1], "status": "queued" if parts[2] == "resume" else "running"}
        if method == "GET" and path == "/packs":
            return 200, {"packs": self.packs}
        if method == "GET" and path == "/models":
            return 200, self.models
        return _error(404, "not_found", f"no route {method} {path}")

    def _list(self, query: dict[str, str]) -> dict[str, Any]:
        found = sorted(self.runs.values(), key=lambda s: s["started_at"] or "", reverse=True)
        if query.get("status"):
            found = [s for s in found if s["status"] == query["status"]]
        if query.get("pack"):
            found = [s for s in found if s["pack"] == query["pack"]]
        if query.get("q"):
            found = [s for s in found if query["q"].lower() in (s["task"] or "").lower()]
        if query.get("before"):
            ids = [s["run_id"] for s in found]
            found = found[ids.index(query["before"]) + 1 :] if query["before"] in ids else []
        limit = int(query.get("limit", "50"))
        page = found[:limit]
        return {"runs": page, "next": page[-1]["run_id"] if len(found) > limit else None}

    def replace(self, run_id: str, event: dict[str, Any]) -> None:
        """Put ``event`` in place of the run's line of the same seq (a resume's run_resumed
        takes the place of the end it resumed from, ADR 0010); a stream that sent the old line
        sends this one."""
        with self._changed:
            events = self.events[run_id]
            events[next(i for i, e in enumerate(events) if e["seq"] == event["seq"])] = event
            self._changed.notify_all()

    def event_stream(self, run_id: str, after: int) -> Any:
        """The run's events after ``after``, then more as a test appends them while the run is
        live; a line replaced after it was sent is sent again; a comment now and then (how a
        closed page is noticed)."""
        sent: list[dict[str, Any]] = []
        skip = after + 1
        while True:
            with self._changed:
                events = self.events.get(run_id, [])
                if len(sent) + skip >= len(events) and all(
                    a is b for a, b in zip(sent, events[skip:], strict=False)
                ):
                    if run_id not in self.live or self._closed:
                        return
                    self._changed.wait(0.5)
                    events = self.events.get(run_id, [])
                fresh = events[skip:]
            batch = [e for e, was in zip(fresh, sent, strict=False) if e is not was]
            batch += fresh[len(sent) :]
            if not batch:
                yield ": ping\n\n"
            for event in batch:
                if event["kind"] == "delta":  # streamed model text: no id, not in the runlog
                    text = json.dumps({"step": event["step"], "text": event["text"]})
                    yield f"event: delta\ndata: {text}\n\n"
                else:
                    head = f"id: {event['seq']}\nevent: {event['kind']}"
                    yield f"{head}\ndata: {json.dumps(event)}\n\n"
            sent = list(fresh)

    def run_stream(self) -> Any:
        watcher: queue.Queue[dict[str, Any]] = queue.Queue()
        self._watchers.append(watcher)
        try:
            while not self._closed:
                try:
                    yield f"event: run\ndata: {json.dumps(watcher.get(timeout=0.5))}\n\n"
                except queue.Empty:
                    yield ": ping\n\n"
        finally:
            self._watchers.remove(watcher)


def summary(
    run_id: str, pack: str | None, task: str | None, status: str, **more: Any
) -> dict[str, Any]:
    """A run summary as GET /runs lists it."""
    base = {
        "run_id": run_id, "status": status, "pack": pack, "model": "m", "backend": "openai",
        "task": task, "workspace": "/tmp/ws", "steps": 2,
        "tokens": {"prompt": 100, "completion": 20, "total": 120}, "cost_usd": None,
        "duration_s": 3.5, "started_at": f"2026-11-25T{run_id[9:11]}:{run_id[11:13]}:00Z",
        "ended_at": None, "task_id": None, "replay_of": None, "resumed": False, "error": None,
    }  # fmt: skip
    return {**base, **more}


def _error(status: int, code: str, message: str, hint: str | None = None) -> tuple[int, Any]:
    return status, {"error": {"code": code, "message": message, "details": {"hint": hint}}}


@contextmanager
def served(api: FakeApi) -> Iterator[FakeApi]:
    """``api`` on 127.0.0.1 for the length of the block, then closed and stopped."""
    server = serve(api)
    try:
        yield api
    finally:
        api.close()
        server.shutdown()
        server.server_close()


def serve(api: FakeApi) -> ThreadingHTTPServer:
    """Start ``api`` on 127.0.0.1 (a free port) in a thread; ``api.url`` is its address."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def _handle(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            api.seen.append(Seen(method, self.path, dict(self.headers.items()), body))
            if url.path in ("/console", "/console/") or url.path.startswith("/console/static/"):
                name = (
                    "index.html" if not url.path.startswith("/console/static/") else url.path[16:]
                )
                self._file(STATIC / name)
                return
            if url.path == "/console/login" and method == "POST":
                if (body or {}).get("token") != TOKEN:
                    self._json(*_error(401, "unauthorized", "wrong token"))
                    return
                self._json(
                    200, {"csrf": CSRF}, cookie=f"{COOKIE}; HttpOnly; SameSite=Strict; Path=/"
                )
                return
            if COOKIE not in (self.headers.get("Cookie") or ""):
                self._json(*_error(401, "unauthorized", "log in"))
                return
            if method == "POST" and self.headers.get("X-Fabric-CSRF") != CSRF:
                self._json(*_error(403, "csrf_failed", "no CSRF token"))
                return
            if url.path == "/console/session":
                self._json(200, {"csrf": CSRF})
            elif url.path == "/console/logout":
                self._json(200, {}, cookie="fabric_console=; Max-Age=0; Path=/")
            elif url.path == "/runs/stream":
                self._stream(api.run_stream())
            elif url.path.startswith("/runs/") and url.path.endswith("/events"):
                after = int(self.headers.get("Last-Event-ID") or -1)
                self._stream(api.event_stream(unquote(url.path.split("/")[2]), after))
            else:
                self._json(*api.answer(method, url.path, query, body))

        def _file(self, path: Path) -> None:
            if path.parent != STATIC or not path.is_file():
                self._json(*_error(404, "not_found", "no such file"))
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", f"{TYPES[path.suffix]}; charset=utf-8")
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, value: Any, cookie: str | None = None) -> None:
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if cookie:
                self.send_header("Set-Cookie", cookie)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, chunks: Any) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                self.wfile.write(b"retry: 200\n\n")
                for chunk in chunks:
                    self.wfile.write(chunk.encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server
