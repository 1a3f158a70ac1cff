"""Nothing is lost or run twice across a restart of `fabric serve` (every task is a durable
workflow, ADR 0020): after a crash (SIGKILL) the running task goes on from its last recorded
step in the same runlog and the queued one runs exactly once; after SIGTERM the service stops
taking work and leaves the running task, cut off after its grace period, to the next start; a
second service on the same database serves the same tasks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from postgres import throwaway_postgres
from support import assert_valid_runlog, kinds, read_events
from test_service import (
    GUARD,
    TOKEN,
    Service,
    free_port,
    gated,
    project,
    sse,
    step_of,
    task_of,
    wait_until,
    writer_then_finish,
)

from fabric.testing import MockOpenAIServer


def log_events(log: str) -> list[dict[str, Any]]:
    """The JSON lines of the server's log."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def runs(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "runs").iterdir())


def calls_for(model: MockOpenAIServer, task: str) -> int:
    return sum(1 for body in model.requests if task_of(body) == task)


class Watcher(threading.Thread):
    """Follows a task's events in the background until the stream ends; keeps what it saw
    and how the stream ended."""

    def __init__(self, service: Service, task_id: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{service.url}/tasks/{task_id}/events"
        self.headers = {"Authorization": service.client.headers["Authorization"]}
        self.seen: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self.started_streaming = threading.Event()
        self.start()
        assert self.started_streaming.wait(GUARD), "the event stream never started"

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=GUARD) as client,
                client.stream("GET", self.url, headers=self.headers) as stream,
            ):
                for message in sse(stream):
                    self.seen.append(message)
                    if message["event"] == "llm_request":
                        self.started_streaming.set()
        except Exception as exc:
            self.error = exc


def test_after_a_crash_the_running_task_goes_on_and_the_queued_one_runs_once(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    with MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model:
        config = project(tmp_path, model.base_url, concurrency=1)
        with Service(config) as first_life:
            running = first_life.submit(task="slow first")
            wait_until(lambda: len(model.requests) == 1, "the first task's model call")
            queued = first_life.submit(task="second")
            assert first_life.task(running)["status"] == "running"
            assert first_life.task(queued)["status"] == "queued"
            before = read_events(tmp_path / "runs" / running / "runlog.jsonl")
            first_life.kill()  # SIGKILL: no shutdown code runs
        gate.set()  # the held model call may answer now; no one is listening for it
        assert kinds(before) == ["run_started", "brief", "llm_request"]

        with Service(config) as second_life:
            finished = {t: second_life.wait_final(t) for t in (running, queued)}
            replay = [m["data"] for m in sse(second_life.client.get(f"/tasks/{running}/events"))]
            still_running = second_life.client.get("/tasks", params={"status": "running"})
            log = second_life.log()
    assert {r["status"] for r in finished.values()} == {"completed_unconfirmed"}
    events = assert_valid_runlog(tmp_path / "runs" / running / "runlog.jsonl")
    assert events[: len(before)] == before  # every line written before the crash, kept
    assert replay == events
    [resumed] = [e for e in events if e["kind"] == "run_resumed"]
    assert resumed["reason"] == "recovered"
    assert kinds(events).count("run_started") == 1
    queued_events = assert_valid_runlog(tmp_path / "runs" / queued / "runlog.jsonl")
    assert kinds(queued_events).count("run_started") == 1
    assert calls_for(model, "second") == 2  # its two model calls, once
    assert calls_for(model, "slow first") == 1 + 2  # the cut call asked again, then the rest
    assert runs(tmp_path) == sorted([running, queued])
    assert still_running.json()["tasks"] == []
    [recovered] = [e for e in log_events(log) if e.get("event") == "task.recovered"]
    assert recovered["task_id"] == running


def test_sigterm_stops_taking_work_and_leaves_the_running_task_to_the_next_start(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    with MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model:
        config = project(tmp_path, model.base_url, concurrency=1, shutdown_grace=0.5)
        accepted: list[str] = []
        with Service(config) as service:
            running = service.submit(task="slow first")
            wait_until(lambda: len(model.requests) == 1, "the first task's model call")
            queued = service.submit(task="second")
            watcher = Watcher(service, running)  # someone follows the running task live
            assert service.proc is not None
            service.proc.send_signal(signal.SIGTERM)
            while service.proc.poll() is None:  # submit during the shutdown
                try:
                    with httpx.Client(timeout=GUARD) as fresh:  # a new connection each time
                        answer = fresh.post(
                            f"{service.url}/tasks",
                            json={"pack": "engineering", "task": "late"},
                            headers={"Authorization": service.client.headers["Authorization"]},
                        )
                except httpx.TransportError:
                    break  # refused (or closed): fine, nothing was taken
                assert answer.status_code in {202, 503}, answer.text
                if answer.status_code == 202:
                    accepted.append(answer.json()["id"])
            # uvicorn re-raises the signal once it has shut down: "ended by SIGTERM"
            assert service.proc.wait(GUARD) in {0, -signal.SIGTERM}, service.log()
            log = service.log()
        # the live stream ended cleanly when the service stopped
        watcher.join(GUARD)
        assert watcher.error is None, watcher.error
        [stopped] = [e for e in log_events(log) if e.get("event") == "service.stopped"]
        assert stopped["interrupted"] == [running]  # the operator's log names the cut task
        cut = read_events(tmp_path / "runs" / running / "runlog.jsonl")
        assert kinds(cut) == ["run_started", "brief", "llm_request"]  # left open, to go on

        gate.set()
        with Service(config) as again:
            finished = [again.wait_final(i) for i in [running, queued, *accepted]]
    assert {r["status"] for r in finished} == {"completed_unconfirmed"}
    assert calls_for(model, "second") == 2
    assert calls_for(model, "slow first") == 1 + 2
    assert runs(tmp_path) == sorted([running, queued, *accepted])
    for task_id in [running, queued, *accepted]:
        events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
        assert kinds(events).count("run_started") == 1


def test_a_second_server_on_the_same_database_serves_the_same_tasks(tmp_path: Path) -> None:
    """Two API nodes on one database (here SQLite on one machine): each lists, shows,
    follows and cancels the other's tasks, and neither takes over a task the other, alive,
    is running."""
    gate = threading.Event()
    with MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model:
        config = project(tmp_path, model.base_url, concurrency=1)
        try:
            with Service(config) as first, Service(config) as second:
                running = first.submit(task="slow")
                wait_until(lambda: len(model.requests) == 1, "the model call")
                seen = second.task(running)
                assert seen["status"] == "running"
                listed = second.client.get("/tasks").json()["tasks"]
                assert [t["id"] for t in listed] == [running]
                # a task submitted to the second waits on the same queue (one at a time)
                later = second.submit(task="slow too")
                assert first.task(later)["status"] == "queued"
                cancelled = first.client.post(f"/tasks/{later}/cancel").json()
                assert cancelled["status"] == "cancelled"
                assert second.task(later)["status"] == "cancelled"
                stopped = second.client.post(f"/tasks/{running}/cancel")
                assert stopped.status_code == 202, stopped.text
                # the first node hears of it and stops the run, its model call still held
                done = second.wait_final(running)
                gate.set()
                follow = [m["data"] for m in sse(second.client.get(f"/tasks/{running}/events"))]
        finally:
            gate.set()
    assert done["status"] == "cancelled"
    assert follow == read_events(tmp_path / "runs" / running / "runlog.jsonl")
    assert follow[-1]["kind"] == "run_finished" and follow[-1]["status"] == "cancelled"
    assert calls_for(model, "slow") == 1  # never taken over, never run twice
    assert not (tmp_path / "runs" / later).exists()


@pytest.mark.parametrize("on", ["sqlite", "postgres"])
def test_with_durable_tasks_a_crash_loses_and_repeats_nothing(tmp_path: Path, on: str) -> None:
    """ADR 0020: the task a SIGKILLed service was running is continued at the next start
    from its last recorded step; the model is not asked again for the step that
    had finished, and the runlog says where the run was recovered. On SQLite and Postgres."""
    with contextlib.ExitStack() as stack:
        env = {}
        if on == "postgres":
            env["FABRIC_DATABASE_URL"] = stack.enter_context(throwaway_postgres())
        _durable_service_crash(tmp_path, env)


def _durable_service_crash(tmp_path: Path, env: dict[str, str]) -> None:
    gate = threading.Event()
    with MockOpenAIServer(gated(gate, at_step=1), models=["m"]) as model:
        config = project(tmp_path, model.base_url, concurrency=1)
        with Service(config, env=env) as first_life:
            running = first_life.submit(task="slow but durable")
            wait_until(lambda: len(model.requests) == 2, "the second model call")
            first_life.kill()  # SIGKILL: no shutdown code runs
            kind = "postgresql://127.0.0.1:" if env else "SQLite"
            assert f"durable tasks: every step recorded in {kind}" in first_life.log()
        gate.set()
        assert [step_of(b) for b in model.requests] == [0, 1]

        with Service(config, env=env) as second_life:
            done = second_life.wait_final(running)
            log = second_life.log()
    assert done["status"] == "completed_unconfirmed", done
    # step 0 (write the file) had finished: never asked again; step 1 had not: asked again
    assert [step_of(b) for b in model.requests] == [0, 1, 1]
    events = assert_valid_runlog(tmp_path / "runs" / running / "runlog.jsonl")
    assert kinds(events).count("run_started") == 1
    [resumed] = [e for e in events if e["kind"] == "run_resumed"]
    assert resumed["reason"] == "recovered" and resumed["from_step"] == 2
    assert [e["step"] for e in events if e["kind"] == "tool_result"] == [1]  # written once
    [recovered] = [e for e in log_events(log) if e.get("event") == "task.recovered"]
    assert recovered["task_id"] == running
    with Service(config, env=env) as third_life:  # the task's state lives in the database
        assert third_life.client.get(f"/tasks/{running}").json()["status"] == done["status"]


def test_an_older_fabrics_task_database_is_refused_with_what_it_holds(tmp_path: Path) -> None:
    """Tasks now live in the durable database: `fabric serve` (and `fabric worker`) will not
    start beside the task database of an earlier fabric as if it had no tasks; it says what
    the file holds and what to do, and starts once the file is moved away."""
    with MockOpenAIServer(writer_then_finish, models=["m"]) as model:
        config = project(tmp_path, model.base_url)
        old = tmp_path / "tasks.sqlite3"
        with contextlib.closing(sqlite3.connect(old)) as db, db:
            db.execute("CREATE TABLE tasks (id TEXT, status TEXT)")
            db.executemany(
                "INSERT INTO tasks VALUES (?, ?)",
                [("a", "completed"), ("b", "queued"), ("c", "running")],
            )
        for command in ("serve", "worker"):
            refused = subprocess.run(
                [sys.executable, "-m", "fabric", command, "--config", str(config),
                 *(["--port", str(free_port())] if command == "serve" else ["--once"])],
                env={**os.environ, "FABRIC_API_TOKEN": TOKEN}, capture_output=True,
                text=True, timeout=GUARD, check=False,
            )  # fmt: skip
            assert refused.returncode == 2, refused.stderr
            assert f"{old.resolve()} is the task database of an earlier fabric" in refused.stderr
            assert "holds 3 task(s), 2 of them queued or running" in refused.stderr
            assert f"mv {old.resolve()} {old.resolve()}.old" in refused.stderr
        old.rename(tmp_path / "tasks.sqlite3.old")
        with Service(config) as service:
            task_id = service.submit()
            assert service.wait_final(task_id)["status"] == "completed_unconfirmed"
