"""Many processes on one database (ADR 0020), as an operator runs them: two `fabric serve` API
nodes that run no tasks themselves and two `fabric worker` processes, on a real PostgreSQL
server (and on SQLite, the one-machine case). Any API node serves any task; a worker killed
with SIGKILL in the middle of a run has its task taken over by the other worker from its last
recorded step: the scripted model server shows no request repeated for a step that finished,
the runlog stays one valid log, and the result is the one the task would have had."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import throwaway_postgres
from support import assert_valid_runlog, kinds
from test_http_approvals import config as approvals_config
from test_http_approvals import write_then_finish
from test_service import (
    GUARD,
    TOKEN,
    Service,
    gated,
    project,
    sse,
    step_of,
    task_of,
    wait_until,
)

from fabric.testing import MockOpenAIServer


class Worker:
    """``fabric worker`` in a child process, its output kept in a file; killed on exit."""

    def __init__(self, config: Path, env: dict[str, str], name: str) -> None:
        self.log_path = config.parent / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fabric", "worker", "--config", str(config)],
                env={**os.environ, "FABRIC_API_TOKEN": TOKEN, **env},
                cwd=config.parent, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_until(lambda: "fabric worker: tasks from queue" in self.log(), f"{name} to start")

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def started(self) -> list[str]:
        """The tasks this worker started (its log's ``task.started`` lines)."""
        lines = [json.loads(x) for x in self.log().splitlines() if x.startswith("{")]
        return [e["task_id"] for e in lines if e.get("event") == "task.started"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(GUARD)


@contextlib.contextmanager
def database(on: str) -> Iterator[dict[str, str]]:
    if on == "postgres":
        with throwaway_postgres() as url:
            yield {"FABRIC_DATABASE_URL": url}
    else:
        yield {}


@pytest.mark.parametrize("on", ["postgres", "sqlite"])
def test_two_api_nodes_and_two_workers_share_the_tasks_and_take_over_a_killed_one(
    tmp_path: Path, on: str
) -> None:
    gate, never = threading.Event(), threading.Event()
    slow_at_step_1 = gated(gate, at_step=1)

    def model_answer(body: dict[str, Any]) -> tuple[int, Any]:
        if task_of(body) == "held":  # answered only once the test is over
            never.wait(GUARD)
        return slow_at_step_1(body)

    with (
        database(on) as env,
        MockOpenAIServer(model_answer, models=["m"]) as model,
        contextlib.ExitStack() as stack,
    ):
        stack.callback(never.set)
        config = project(tmp_path, model.base_url, concurrency=2, share_workspaces=True)
        api = [stack.enter_context(Service(config, env=env, args=("--api-only",))) for _ in "ab"]
        workers = [Worker(config, env, f"worker-{n}") for n in (1, 2)]
        stack.callback(lambda: [w.kill() for w in workers])

        slow = api[0].submit(task="slow one")
        quick = [api[1].submit(task=f"quick {n}") for n in range(3)]
        for task_id in quick:  # run by the workers, seen the same from both API nodes
            assert api[0].wait_final(task_id)["status"] == "completed_unconfirmed"
            assert api[1].task(task_id)["status"] == "completed_unconfirmed"
        listed = {t["id"] for t in api[1].client.get("/tasks").json()["tasks"]}
        assert listed == {slow, *quick}

        wait_until(
            lambda: any(task_of(b) == "slow one" and step_of(b) == 1 for b in model.requests),
            "the slow task's second model call",
        )  # its first step (a file written) is recorded; its second is in flight
        [holder] = [w for w in workers if slow in w.started()]
        [other] = [w for w in workers if w is not holder]
        assert api[1].task(slow)["status"] == "running"
        holder.kill()  # SIGKILL in the middle of the run
        gate.set()  # the cut call's answer goes nowhere; the next one goes through
        done = api[1].wait_final(slow)
        events = [m["data"] for m in sse(api[0].client.get(f"/tasks/{slow}/events"))]
        assert slow in other.started()
        # a live process (a worker or an API node) saw the holder was gone and said so
        assert any('"task.recovered"' in p.log() for p in (*api, other))

        cancelled = api[0].submit(task="held")  # its model call never answers
        wait_until(lambda: any(task_of(b) == "held" for b in model.requests), "the held call")
        answer = api[1].client.post(f"/tasks/{cancelled}/cancel")
        assert answer.status_code == 202, answer.text
        assert api[0].wait_final(cancelled)["status"] == "cancelled"

    assert done["status"] == "completed_unconfirmed", done
    asked = [step_of(b) for b in model.requests if task_of(b) == "slow one"]
    assert asked == [0, 1, 1]  # step 0's reply was recorded: never asked again
    runlog = assert_valid_runlog(tmp_path / "runs" / slow / "runlog.jsonl")
    assert events == runlog  # the other API node serves the same log
    assert kinds(runlog).count("run_started") == 1
    [resumed] = [e for e in runlog if e["kind"] == "run_resumed"]
    assert resumed["reason"] == "recovered"
    assert [e["step"] for e in runlog if e["kind"] == "tool_result"] == [1]  # written once
    assert (tmp_path / "ws" / "slow-one.txt").read_text() == "slow one"


def test_a_call_a_workers_task_asks_about_is_answered_through_an_api_node(
    tmp_path: Path,
) -> None:
    """The worker has no API: the call its task waits on is listed by the API node (from the
    database) and answered there; the worker hears the answer and the call runs once."""
    with MockOpenAIServer(write_then_finish(), models=["m"]) as model:
        path = approvals_config(tmp_path, model.base_url)
        with Service(path, args=("--api-only",)) as api:
            worker = Worker(path, {}, "worker")
            try:
                task_id = api.submit(pack="writer", task="guarded")
                api.wait_status(task_id, "awaiting_approval")
                wait_until(lambda: api.task(task_id)["approvals"], "the call listed")
                [waiting] = api.task(task_id)["approvals"]
                assert waiting["tool"] == "write_file"
                answer = api.client.post(waiting["url"], json={"approve": True})
                assert answer.status_code == 200, answer.text
                again = api.client.post(waiting["url"], json={"approve": False})
                done = api.wait_final(task_id)
            finally:
                worker.kill()
    assert again.status_code == 409, again.text  # one answer per call
    assert done["status"] == "completed", done
    assert (tmp_path / "ws" / "guarded.txt").read_text() == "hi"
    events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
    [approval] = [e for e in events if e["kind"] == "approval"]
    assert (approval["approved"], approval["by"]) == (True, "http")
    assert task_id in worker.started()


def test_the_queue_starts_lower_priority_numbers_first(tmp_path: Path) -> None:
    """One task at a time: while one runs, three wait; the one sent last with priority 0
    starts before the two sent earlier with 5 (which keep their order)."""
    gate = threading.Event()
    with MockOpenAIServer(gated(gate, at_step=0), models=["m"]) as model:
        config = project(tmp_path, model.base_url, concurrency=1, share_workspaces=True)
        with Service(config) as service:
            first = service.submit(task="slow first")
            wait_until(lambda: len(model.requests) == 1, "the first task's model call")
            later = [service.submit(task=f"later {n}", priority=5) for n in range(2)]
            urgent = service.submit(task="urgent")
            assert service.task(later[0])["priority"] == 5
            assert service.task(urgent)["priority"] == 0
            gate.set()
            done = {t: service.wait_final(t) for t in (first, urgent, *later)}
            bad = service.client.post(
                "/tasks", json={"pack": "engineering", "task": "x", "priority": -1}
            )
    assert {r["status"] for r in done.values()} == {"completed_unconfirmed"}
    started = [task_of(b) for b in model.requests if step_of(b) == 0]
    assert started == ["slow first", "urgent", "later 0", "later 1"]
    assert bad.status_code == 422
