"""The HTTP task service as an integrator meets it: a real `fabric serve` process on a loopback
port, a real scripted model server, real HTTP. Submit, follow live, fetch results and runlogs,
cancel, and the guards (token, Host, body size, validation, secrets).

The helpers at the top (``Service``, ``project``, ``sse``, ...) are shared with the restart and
load tests of the service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import assert_valid_runlog, free_port, kinds, mock_llm

from fabric.testing import MockOpenAIServer, completion

TOKEN = "e2e-service-token-5f1c2a9b7d3e"
API_KEY = "sk-mock-model-key-never-shown-8842"
GUARD = 30.0  # seconds: hang guards only, never an assertion about speed
FINAL = {
    "completed", "completed_unconfirmed", "completed_from_text", "invalid_output", "unverified",
    "max_steps", "budget_exceeded", "cancelled", "failed", "interrupted",
}  # fmt: skip
Handler = Callable[[dict[str, Any]], tuple[int, Any]]


# --- helpers shared by the service tests ----------------------------------------------------


def project(folder: Path, model_url: str, **serve: Any) -> Path:
    """A project folder with fabric.yaml (two packs), a workspace root ``ws``; returns the
    config path. ``serve`` settings override the test defaults."""
    (folder / "ws").mkdir(exist_ok=True)
    config = {
        "version": 1,
        "llm": mock_llm(model_url),
        "runs_dir": "runs",
        "serve": {"workspace_roots": ["ws"], "concurrency": 4, **serve},
        "packs": {
            "engineering": {"builder": "packs.engineering:build"},
            "reviewer": {
                "builder": "declarative",
                "description": "Reads code and reports problems.",
                "system_prompt": "You review code.",
                "tools": ["read_file"],
                "finish_schema": {
                    "type": "object",
                    "properties": {"verdict": {"type": "string"}},
                    "required": ["verdict"],
                },
            },
        },
    }
    path = folder / "fabric.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


class Service:
    """``fabric serve`` in a child process on a free loopback port, with the token in its
    environment and its stderr kept in a file. Killed on exit, whatever happened."""

    def __init__(
        self, config: Path, *, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
    ) -> None:
        self.config = config
        self.args = args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        secrets = {"FABRIC_API_TOKEN": TOKEN, "FABRIC_API_KEY": API_KEY}
        self.env = {**os.environ, **secrets, **(env or {})}
        self.log_path = config.parent / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=GUARD
        )

    def __enter__(self) -> Service:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fabric", "serve",
                 "--config", str(self.config), "--port", str(self.port), *self.args],
                env=self.env, cwd=self.config.parent, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + GUARD
        while True:
            assert self.proc.poll() is None, f"fabric serve exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"fabric serve never answered:\n{self.log()}"
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.kill()

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(GUARD)

    def stop(self) -> int:
        """SIGTERM, then wait for the process to exit; returns its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(GUARD)

    def submit(self, pack: str = "engineering", task: str = "do it", **fields: Any) -> str:
        answer = self.client.post("/tasks", json={"pack": pack, "task": task, **fields})
        assert answer.status_code == 202, answer.text
        task_id: str = answer.json()["id"]
        return task_id

    def task(self, task_id: str) -> dict[str, Any]:
        answer = self.client.get(f"/tasks/{task_id}")
        assert answer.status_code == 200, answer.text
        record: dict[str, Any] = answer.json()
        return record

    def wait_status(self, task_id: str, wanted: Callable[[str], bool] | str) -> dict[str, Any]:
        check = (lambda s: s == wanted) if isinstance(wanted, str) else wanted
        deadline = time.monotonic() + GUARD
        while True:
            record = self.task(task_id)
            if check(record["status"]):
                return record
            assert time.monotonic() < deadline, f"task {task_id} stuck: {record}"
            time.sleep(0.02)

    def wait_final(self, task_id: str) -> dict[str, Any]:
        return self.wait_status(task_id, lambda s: s in FINAL)


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The messages of a Server-Sent Events response as {id, event, data}; comments skipped."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in fields:
                yield {"id": fields.get("id"), "event": fields.get("event"),
                       "data": json.loads(fields["data"])}  # fmt: skip
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def step_of(body: dict[str, Any]) -> int:
    """Which model call of its run a request is (0-based): the tool results so far."""
    return sum(1 for m in body["messages"] if m["role"] == "tool")


def task_of(body: dict[str, Any]) -> str:
    """The task as submitted (without the engineering pack's look at the workspace)."""
    text: str = body["messages"][1]["content"]
    return text.split("\n\nBefore you start, fabric looked at the workspace.")[0]


def is_engineering(body: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == "write_file" for t in body["tools"])


def writer_then_finish(body: dict[str, Any]) -> tuple[int, Any]:
    """Engineering: write ``<task>.txt`` then finish. Reviewer: finish at once."""
    if not is_engineering(body):
        return 200, completion(None, [("finish_task", {"verdict": "fine"})])
    if step_of(body) == 0:
        name = task_of(body).replace(" ", "-") + ".txt"
        return 200, completion(None, [("write_file", {"path": name, "content": task_of(body)})])
    return 200, completion(None, [("finish_task", {"summary": f"wrote {task_of(body)}"})])


def gated(gate: threading.Event, at_step: int, inner: Handler = writer_then_finish) -> Handler:
    """``inner``, but the model call ``at_step`` of an engineering run whose task contains
    "slow" blocks until ``gate`` is set."""

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        if is_engineering(body) and "slow" in task_of(body) and step_of(body) == at_step:
            assert gate.wait(GUARD), "the test never released the model"
        return inner(body)

    return handler


def error_shape(answer: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The service's one error shape, with this status (and code)."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


# --- submit, follow, fetch -------------------------------------------------------------------


def test_submit_follow_live_and_fetch_the_result(tmp_path: Path) -> None:
    gate = threading.Event()
    with (
        MockOpenAIServer(gated(gate, at_step=1), models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        answer = service.client.post("/tasks", json={"pack": "engineering", "task": "slow hello"})
        assert answer.status_code == 202
        submitted = answer.json()
        task_id = submitted["id"]
        assert submitted["status"] == "queued"
        assert submitted["urls"]["events"] == f"/tasks/{task_id}/events"

        seen: list[dict[str, Any]] = []
        with service.client.stream("GET", f"/tasks/{task_id}/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            messages = sse(stream)
            for message in messages:  # live: the model is held at its second call
                seen.append(message)
                if message["event"] == "llm_request" and message["data"]["step"] == 2:
                    break
            running = service.task(task_id)
            assert running["status"] == "running"
            assert running["steps"] == 2
            assert running["payload"] is None
            gate.set()
            seen += list(messages)

        done = service.task(task_id)
        runlog = service.client.get(f"/tasks/{task_id}/runlog")
    assert done["status"] == "completed_unconfirmed"
    assert done["payload"] == {"summary": "wrote slow hello"}
    assert done["steps"] == 2
    assert done["error"]["code"] == "unconfirmed"  # no check could confirm it: said, to read
    assert done["created_at"] <= done["started_at"] <= done["finished_at"]

    # the runlog endpoint is the JSONL file, and the stream was that file, line by line
    path = tmp_path / "runs" / task_id / "runlog.jsonl"
    assert runlog.status_code == 200
    assert runlog.headers["content-type"].startswith("application/x-ndjson")
    assert runlog.content == path.read_bytes()
    events = assert_valid_runlog(path)
    assert [m["data"] for m in seen] == events
    assert [m["event"] for m in seen] == kinds(events)
    assert [m["id"] for m in seen] == [str(e["seq"]) for e in events]
    assert events[-1]["status"] == "completed_unconfirmed"
    assert events[-1]["payload"] == done["payload"]

    # the model's write_file changed the workspace
    assert (tmp_path / "ws" / "slow-hello.txt").read_text() == "slow hello"


def test_a_task_with_a_budget_ends_when_it_is_spent_and_shows_what_it_used(
    tmp_path: Path,
) -> None:
    def reads(body: dict[str, Any]) -> tuple[int, Any]:  # never finishes: the budget ends it
        return 200, completion(None, [("read_file", {"path": "notes.txt"})])

    with (
        MockOpenAIServer(reads, models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        (tmp_path / "ws" / "notes.txt").write_text("notes")
        budget = {"tool_calls": 2, "tokens": 1_000_000}
        task_id = service.submit("reviewer", "read forever", budget=budget)
        done = service.wait_final(task_id)
        with service.client.stream("GET", f"/tasks/{task_id}/events") as stream:
            events = [m["data"] for m in sse(stream)]
    assert done["status"] == "budget_exceeded", done
    assert done["budget"] == budget
    assert done["spent"]["tool_calls"] == 2 and done["spent"]["model_calls"] == 3
    assert done["error"]["code"] == "budget_exceeded"
    assert "allows 2 tool calls; 2 tool calls used" in done["error"]["message"]
    # live: every reply's event says what was spent so far
    spent = [e["spent"]["tool_calls"] for e in events if e["kind"] == "llm_response"]
    assert spent == [0, 1, 2]
    assert events[-1]["budget"]["limits"] == budget


def test_the_runlog_of_a_running_task_downloads_as_whole_lines(tmp_path: Path) -> None:
    def busy(body: dict[str, Any]) -> tuple[int, Any]:  # many quick steps: the log keeps growing
        if step_of(body) < 150:
            return 200, completion(None, [("list_files", {})])
        return 200, completion(None, [("finish_task", {"summary": "listed"})])

    snapshots: list[bytes] = []
    with (
        MockOpenAIServer(busy, models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit(task="busy", max_steps=200)
        runlog = tmp_path / "runs" / task_id / "runlog.jsonl"
        wait_until(runlog.exists, "the runlog")  # (a task is running before its log begins)
        while service.task(task_id)["status"] == "running":
            answer = service.client.get(f"/tasks/{task_id}/runlog")  # raises if cut short
            assert answer.status_code == 200, answer.text
            snapshots.append(answer.content)
        assert service.task(task_id)["status"] == "completed_unconfirmed"
    final = runlog.read_bytes()
    assert_valid_runlog(runlog)
    assert snapshots
    for snapshot in snapshots:  # complete lines, each snapshot the start of the final log
        # (none at all when the download came between the log's creation and its first line,
        # while the run was still being set up)
        assert snapshot == b"" or snapshot.endswith(b"\n")
        assert final.startswith(snapshot)
    assert any(snapshots), "no download held a line"


def test_list_tasks_newest_first_with_filters_and_pages(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(writer_then_finish, models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        ids = [
            service.submit("engineering", "one"),
            service.submit("reviewer", "two"),
            service.submit("engineering", "three", max_steps=1),  # stops at max_steps
            service.submit("reviewer", "four"),
            service.submit("engineering", "five"),
        ]
        statuses = [service.wait_final(i)["status"] for i in ids]

        def listed(**params: Any) -> tuple[list[str], str | None]:
            answer = service.client.get("/tasks", params=params)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            return [t["id"] for t in body["tasks"]], body["next"]

        everything, _ = listed()
        pages: list[list[str]] = []
        cursor: dict[str, Any] = {"limit": 2}
        while True:
            page, nxt = listed(**cursor)
            pages.append(page)
            if nxt is None:
                break
            cursor = {"limit": 2, "before": nxt}
        reviewers, _ = listed(pack="reviewer")
        stopped, _ = listed(status="max_steps")
        completed_eng, _ = listed(status="completed_unconfirmed", pack="engineering")
        none_queued, _ = listed(status="queued")
    # the reviewer pack has no checks: a valid claim completes; the engineering pack's checks
    # had nothing to confirm a note by
    assert statuses == [
        "completed_unconfirmed",
        "completed",
        "max_steps",
        "completed",
        "completed_unconfirmed",
    ]
    newest_first = ids[::-1]
    assert everything == newest_first
    assert [i for page in pages for i in page] == newest_first
    assert [len(page) for page in pages[:3]] == [2, 2, 1]
    assert reviewers == [ids[3], ids[1]]
    assert stopped == [ids[2]]
    assert completed_eng == [ids[4], ids[0]]
    assert none_queued == []


# --- SSE resume --------------------------------------------------------------------------------


def test_events_resume_after_last_event_id_without_gaps_or_duplicates(tmp_path: Path) -> None:
    gate = threading.Event()
    with (
        MockOpenAIServer(gated(gate, at_step=1), models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit(task="slow resume")
        url = f"/tasks/{task_id}/events"
        first: list[dict[str, Any]] = []
        with service.client.stream("GET", url) as stream:  # disconnect part-way
            for message in sse(stream):
                first.append(message)
                if message["event"] == "tool_call":
                    break
        last_id = first[-1]["id"]
        with service.client.stream("GET", url, headers={"Last-Event-ID": last_id}) as stream:
            resumed = sse(stream)
            second = [next(resumed)]  # what was logged while no one listened
            while second[-1]["event"] != "llm_request":
                second.append(next(resumed))
            gate.set()  # the rest arrives live, on the resumed stream
            second += list(resumed)
        replay = [m["data"] for m in sse(service.client.get(url))]
        tail = [m["data"] for m in sse(service.client.get(url, headers={"Last-Event-ID": "4"}))]
        past_end = list(sse(service.client.get(url, headers={"Last-Event-ID": "999"})))
        assert service.task(task_id)["status"] == "completed_unconfirmed"
    events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
    assert int(second[0]["id"]) == int(last_id) + 1
    assert [m["data"] for m in first + second] == events
    assert replay == events  # a finished task replays its whole log
    assert tail == events[5:]
    assert past_end == []


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_a_running_task_stops_it_at_the_next_safe_point(tmp_path: Path) -> None:
    gate = threading.Event()
    with (
        MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit(task="slow cancel me")
        wait_until(lambda: len(model.requests) == 1, "the model call")
        answer = service.client.post(f"/tasks/{task_id}/cancel")
        assert answer.status_code == 202, answer.text
        assert answer.json()["status"] in {"running", "cancelled"}
        gate.set()  # the model answers (with a write_file) after the cancel
        record = service.wait_final(task_id)
        again = service.client.post(f"/tasks/{task_id}/cancel")  # already over: no change
    assert record["status"] == "cancelled"
    assert again.status_code == 202 and again.json()["status"] == "cancelled"
    events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
    assert events[-1]["status"] == "cancelled"
    assert "tool_call" not in kinds(events)  # stopped before acting on the answer
    assert not (tmp_path / "ws" / "slow-cancel-me.txt").exists()
    assert len(model.requests) == 1


def test_cancel_a_queued_task_before_it_starts(tmp_path: Path) -> None:
    gate = threading.Event()
    with (
        MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model,
        Service(project(tmp_path, model.base_url, concurrency=1)) as service,
    ):
        first = service.submit(task="slow first")
        wait_until(lambda: len(model.requests) == 1, "the first task's model call")
        second = service.submit(task="second")
        assert service.task(second)["status"] == "queued"
        answer = service.client.post(f"/tasks/{second}/cancel")
        gate.set()
        assert service.wait_final(first)["status"] == "completed_unconfirmed"
        record = service.task(second)
        runlog = service.client.get(f"/tasks/{second}/runlog")
        events = list(sse(service.client.get(f"/tasks/{second}/events")))
        third = service.submit(task="third")  # the slot it would have taken is free
        assert service.wait_final(third)["status"] == "completed_unconfirmed"
    assert answer.status_code == 202
    assert answer.json()["status"] == "cancelled"
    assert record["status"] == "cancelled"
    assert record["started_at"] is None and record["finished_at"] is not None
    error_shape(runlog, 404, "not_found")
    assert events == []
    assert not (tmp_path / "runs" / second).exists()
    assert all(task_of(body) != "second" for body in model.requests)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([first, third])


# --- guards ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Any]]:
    """One service for the read-only guard tests, with a small body limit."""
    folder = tmp_path_factory.mktemp("guarded")
    (folder / "outside").mkdir()
    with (
        MockOpenAIServer(writer_then_finish, models=["m"]) as model,
        Service(project(folder, model.base_url, max_body_bytes=2048)) as service,
    ):
        yield service, model


def _endpoints(service: Service, task_id: str) -> list[tuple[str, str]]:
    """Every (method, path) the OpenAPI document lists, with a real task id filled in."""
    spec = service.client.get("/openapi.json").json()
    return [
        (method.upper(), path.replace("{task_id}", task_id).replace("{run_id}", task_id))
        for path, operations in spec["paths"].items()
        for method in operations
    ]


def test_openapi_lists_every_endpoint(guarded: tuple[Service, Any]) -> None:
    service, _ = guarded
    answer = service.client.get("/openapi.json")
    assert answer.status_code == 200
    paths = answer.json()["paths"]
    assert {m.upper() for m in paths["/tasks"]} == {"GET", "POST"}
    for path in ("/tasks/{task_id}", "/tasks/{task_id}/events", "/tasks/{task_id}/runlog",
                 "/packs", "/models", "/healthz", "/readyz"):  # fmt: skip
        assert "get" in paths[path], path
    assert "post" in paths["/tasks/{task_id}/cancel"]


def test_every_endpoint_but_healthz_needs_the_token(guarded: tuple[Service, Any]) -> None:
    service, _ = guarded
    task_id = service.submit(task="auth probe")
    service.wait_final(task_id)
    stored = service.client.get("/tasks").json()["tasks"]
    endpoints = [*_endpoints(service, task_id), ("GET", "/openapi.json"), ("GET", "/docs")]
    assert len(endpoints) >= 11
    wrong = {"Authorization": "Bearer not-the-token-0123456789"}
    with httpx.Client(base_url=service.url, timeout=GUARD) as anonymous:
        for method, path in endpoints:
            body = {"pack": "engineering", "task": "x"} if method == "POST" else None
            if path == "/healthz":
                assert anonymous.request(method, path).status_code == 200
                continue
            if path.startswith("/console/"):  # the console's session: the token or cookie
                continue  # is what it checks (test_console_api.py)
            for headers in ({}, wrong, {"Authorization": TOKEN}):  # none, wrong, no scheme
                answer = anonymous.request(method, path, json=body, headers=headers)
                error_shape(answer, 401, "unauthorized")
                assert answer.headers["www-authenticate"].startswith("Bearer")
    assert (
        service.task(task_id)["status"] == "completed_unconfirmed"
    )  # refused requests changed nothing
    assert service.client.get("/tasks").json()["tasks"] == stored  # no task was added


def test_a_foreign_host_header_is_refused(guarded: tuple[Service, Any]) -> None:
    service, _ = guarded
    for path in ("/healthz", "/tasks"):
        answer = service.client.get(path, headers={"Host": "attacker.example"})
        error = error_shape(answer, 400, "host_not_allowed")
        assert "attacker.example" in error["message"]
    assert service.client.get("/tasks", headers={"Host": f"localhost:{service.port}"}).is_success


def test_a_body_over_the_limit_is_refused(guarded: tuple[Service, Any]) -> None:
    service, _ = guarded
    big = {"pack": "engineering", "task": "x" * 5000}
    error = error_shape(service.client.post("/tasks", json=big), 413, "body_too_large")
    assert error["details"] == {"max_bytes": 2048}
    chunks = (b'{"pack": "engineering", "task": "' + b"y" * 1000 for _ in range(5))
    error_shape(service.client.post("/tasks", content=chunks), 413, "body_too_large")
    assert all("y" * 1000 not in t["task"] for t in service.client.get("/tasks").json()["tasks"])


@pytest.mark.parametrize(
    ("body", "code", "where"),
    [
        ({"pack": "nope", "task": "x"}, None, "nope"),
        ({"pack": "engineering", "task": ""}, "invalid_request", "task"),
        ({"pack": "engineering", "task": "   "}, None, "empty"),
        ({"pack": "engineering", "task": "x", "colour": "red"}, "invalid_request", "colour"),
        ({"pack": "engineering", "task": "x", "workspace": "../outside"}, None, "not under"),
        ({"pack": "engineering", "task": "x", "workspace": "/etc"}, None, "not under"),
        ({"pack": "engineering", "task": "x", "max_steps": 0}, "invalid_request", "max_steps"),
        (
            {"pack": "engineering", "task": "x", "budget": {"tokens": 0}},
            "invalid_request",
            "tokens",
        ),
        ({"pack": "engineering", "task": "x", "budget": {"cows": 3}}, "invalid_request", "cows"),
        ({"task": "x"}, "invalid_request", "pack"),
    ],
)
def test_invalid_submissions_get_422_in_the_error_shape(
    guarded: tuple[Service, Any], body: dict[str, Any], code: str | None, where: str
) -> None:
    service, _ = guarded
    before = len(service.client.get("/tasks").json()["tasks"])
    error = error_shape(service.client.post("/tasks", json=body), 422, code)
    assert where in json.dumps(error)  # says what was wrong
    assert len(service.client.get("/tasks").json()["tasks"]) == before  # nothing stored


def test_not_json_and_unknown_tasks(guarded: tuple[Service, Any]) -> None:
    service, _ = guarded
    headers = {"Content-Type": "application/json"}
    error_shape(service.client.post("/tasks", content=b"{not json", headers=headers), 422)
    for method, path in (
        ("GET", "/tasks/20990101T000000.000Z-000000"),
        ("GET", "/tasks/nope/events"),
        ("GET", "/tasks/nope/runlog"),
        ("POST", "/tasks/nope/cancel"),
        ("GET", "/no/such/endpoint"),
    ):
        error_shape(service.client.request(method, path), 404, "not_found")


def test_secrets_never_leave_the_service(guarded: tuple[Service, Any]) -> None:
    service, model = guarded
    task_id = service.submit(task="secrets")
    service.wait_final(task_id)
    answers = [
        service.client.request(method, path, json={"pack": "engineering", "task": "again"})
        for method, path in _endpoints(service, task_id)
        if path not in (f"/tasks/{task_id}/cancel", "/runs/stream")  # the stream never ends
    ]
    answers.append(service.client.get("/tasks", headers={"Authorization": f"Bearer {API_KEY}"}))
    for answer in answers:
        seen = answer.text + json.dumps(dict(answer.headers))
        assert API_KEY not in seen, answer.url
        assert TOKEN not in seen, answer.url
    for runlog in (service.config.parent / "runs").glob("*/runlog.jsonl"):
        assert API_KEY not in runlog.read_text()
    log = service.log()
    assert f"web console: {service.url}/console" in log  # where to open the page
    assert '"event": "request"' in log  # it does log requests (and task lifecycle)
    assert '"task.finished"' in log
    assert TOKEN not in log
    assert API_KEY not in log
    # the key did reach the model server (so the checks above are not vacuous)
    assert model.requests
    assert all(body["_authorization"] == f"Bearer {API_KEY}" for body in model.requests)


def test_health_needs_no_token_and_readiness_reaches_the_model(
    guarded: tuple[Service, Any],
) -> None:
    service, _ = guarded
    assert httpx.get(f"{service.url}/healthz", timeout=GUARD).json() == {"status": "ok"}
    ready = service.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["model"] == "m"
    packs = service.client.get("/packs").json()["packs"]
    assert [p["name"] for p in packs] == ["engineering", "reviewer"]


def test_an_unknown_backend_is_refused_at_submission(tmp_path: Path) -> None:
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        config = project(tmp_path, model.base_url)
        with Service(config) as service:
            answer = service.client.post(
                "/tasks", json={"pack": "engineering", "task": "x", "backend": "olama"}
            )
            error = error_shape(answer, 422)
            assert "olama" in error["message"]
            assert service.client.get("/tasks").json()["tasks"] == []
