"""Tasks sharing a workspace on a real `fabric serve`: two tasks whose workspaces are the same
folder, or one inside the other, never run at once. The later one stays `queued` (GET
/tasks/{id} names what it waits for; its event stream says so) until the earlier one ends, then
runs; tasks on one workspace start in the order they came, also after a restart; a queued task
can be cancelled, and its place is given up at once; a resumed task waits like a new one; and
`serve.share_workspaces: true` lets them run together."""

from __future__ import annotations

import itertools
import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, kinds, mock_llm
from test_service import GUARD, Service, step_of, task_of, wait_until

from fabric.testing import MockOpenAIServer, completion


def project(folder: Path, model_url: str, **serve: Any) -> Path:
    """A service project: workspace root ``ws`` with folders ``a`` (and ``a/sub``) and ``b``;
    pack ``notes`` writes a file then finishes, pack ``reader`` finishes at once."""
    for sub in ("ws/a/sub", "ws/b"):
        (folder / sub).mkdir(parents=True)
    finish = {
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
    }
    config = {
        "version": 1,
        "llm": mock_llm(model_url),
        "runs_dir": "runs",
        "serve": {"workspace_roots": ["ws"], "concurrency": 4, **serve},
        "packs": {
            "notes": {
                "builder": "declarative",
                "system_prompt": "You write notes.",
                "tools": ["write_file", "read_file"],
                "finish_schema": finish,
            },
            "reader": {
                "builder": "declarative",
                "system_prompt": "You read.",
                "tools": ["read_file"],
                "finish_schema": finish,
            },
        },
    }
    path = folder / "fabric.yaml"
    path.write_text(json.dumps(config, indent=1))
    return path


class Model:
    """``notes`` tasks write ``<task>.txt``, then finish; ``reader`` tasks finish at once. The
    first call of a task whose text contains "slow" waits until ``gate`` is set. ``started``
    lists the tasks in the order their first model call came."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        task, step = task_of(body), step_of(body)
        if step == 0:
            with self._lock:
                self.started.append(task)
            if "slow" in task:
                assert self.gate.wait(GUARD), "the test never released the model"
        writes = any(t["function"]["name"] == "write_file" for t in body["tools"])
        if writes and step == 0:
            name = task.replace(" ", "-") + ".txt"
            return 200, completion(None, [("write_file", {"path": name, "content": task})])
        return 200, completion(None, [("finish_task", {"summary": f"did {task}"})])


def first_comment(service: Service, task_id: str) -> str:
    """The first line of the task's event stream."""
    with service.client.stream("GET", f"/tasks/{task_id}/events") as stream:
        for line in stream.iter_lines():
            return line
    raise AssertionError("the event stream ended at once")


def test_a_task_waits_while_another_works_in_its_workspace(tmp_path: Path) -> None:
    model = Model()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        first = service.submit("notes", "slow first", workspace="a")
        wait_until(lambda: model.started == ["slow first"], "the first task's model call")
        inside = service.submit("notes", "inside", workspace="a/sub")  # inside the first's
        same = service.submit("notes", "same", workspace=str(tmp_path / "ws" / "a"))
        other = service.submit("notes", "other", workspace="b")
        assert service.wait_final(other)["status"] == "completed"  # another folder: not held

        waiting = service.task(inside)
        assert waiting["status"] == "queued"
        assert waiting["waiting_for"] == [first]
        assert service.task(same)["waiting_for"] == [first, inside]  # in the order they came
        assert service.task(first)["status"] == "running"
        assert first_comment(service, inside) == (
            f": queued: the task starts after {first}, which uses its workspace"
        )
        assert model.started == ["slow first", "other"]  # the waiting ones never started

        model.gate.set()
        done = {t: service.wait_final(t) for t in (first, inside, same)}
    assert {r["status"] for r in done.values()} == {"completed"}
    assert model.started == ["slow first", "other", "inside", "same"]
    assert done[first]["finished_at"] <= done[inside]["started_at"]
    assert done[inside]["finished_at"] <= done[same]["started_at"]
    assert all(r["waiting_for"] == [] for r in done.values())
    assert (tmp_path / "ws" / "a" / "sub" / "inside.txt").read_text() == "inside"
    for task_id in done:
        assert kinds(assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl"))


def test_a_waiting_task_can_be_cancelled_and_gives_up_its_place(tmp_path: Path) -> None:
    model = Model()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url, pack_concurrency={"notes": 1})) as service,
    ):
        busy = service.submit("notes", "slow busy", workspace="a")
        wait_until(lambda: model.started == ["slow busy"], "the first task's model call")
        # waits for the notes slot; the reader after it waits for b, which it will use
        blocked = service.submit("notes", "blocked", workspace="b")
        behind = service.submit("reader", "behind", workspace="b")
        assert service.task(behind)["waiting_for"] == [blocked]

        answer = service.client.post(f"/tasks/{blocked}/cancel")
        assert answer.status_code == 202, answer.text
        assert answer.json()["status"] == "cancelled"
        # b is free: the reader starts now, while the busy task still holds the model
        assert service.wait_final(behind)["status"] == "completed"
        assert service.task(busy)["status"] == "running"
        model.gate.set()
        assert service.wait_final(busy)["status"] == "completed"
        cancelled = service.task(blocked)
    assert cancelled["status"] == "cancelled"
    assert cancelled["started_at"] is None
    assert "blocked" not in model.started
    assert not (tmp_path / "runs" / blocked).exists()


def test_sharing_allowed_by_config_runs_them_together(tmp_path: Path) -> None:
    model = Model()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url, share_workspaces=True)) as service,
    ):
        first = service.submit("notes", "slow one", workspace="a")
        second = service.submit("notes", "slow two", workspace="a/sub")
        wait_until(lambda: len(model.started) == 2, "both tasks' model calls")
        both = [service.task(first), service.task(second)]
        model.gate.set()
        done = [service.wait_final(first), service.wait_final(second)]
    assert [r["status"] for r in both] == ["running", "running"]
    assert [r["waiting_for"] for r in both] == [[], []]
    assert [r["status"] for r in done] == ["completed", "completed"]


def test_a_resumed_task_waits_for_the_workspace_too(tmp_path: Path) -> None:
    model = Model()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        short = service.submit("notes", "short", workspace="a", max_steps=1)
        assert service.wait_final(short)["status"] == "max_steps"
        holder = service.submit("notes", "slow holder", workspace="a")
        wait_until(lambda: "slow holder" in model.started, "the holder's model call")

        answer = service.client.post(f"/tasks/{short}/resume", json={"max_steps": 3})
        assert answer.status_code == 202, answer.text
        assert answer.json()["waiting_for"] == [holder]
        assert service.task(short)["status"] == "queued"
        calls = sum(1 for body in server.requests if task_of(body) == "short")

        model.gate.set()
        held = service.wait_final(holder)
        resumed = service.wait_final(short)
        assert calls == 1  # nothing of the resumed run happened while the holder ran
    assert (held["status"], resumed["status"]) == ("completed", "completed")
    events = assert_valid_runlog(tmp_path / "runs" / short / "runlog.jsonl")
    [went_on] = [e for e in events if e["kind"] == "run_resumed"]
    assert _time(held["finished_at"]) <= _time(went_on["ts"])


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def test_after_a_crash_waiting_tasks_still_start_one_by_one_in_order(tmp_path: Path) -> None:
    model = Model()
    with MockOpenAIServer(model, models=["m"]) as server:
        config = project(tmp_path, server.base_url)
        with Service(config) as first_life:
            cut = first_life.submit("notes", "slow cut", workspace="a")
            wait_until(lambda: model.started == ["slow cut"], "the first task's model call")
            later = [first_life.submit("notes", f"later {n}", workspace="a") for n in range(3)]
            assert all(first_life.task(t)["status"] == "queued" for t in later)
            first_life.kill()  # SIGKILL
        model.gate.set()
        with Service(config) as second_life:
            done = [second_life.wait_final(t) for t in [cut, *later]]
    assert [r["status"] for r in done] == ["completed"] * 4
    # the cut task goes on first (its cut model call asked again), then the others in order
    assert model.started == ["slow cut", "slow cut", "later 0", "later 1", "later 2"]
    for before, after in itertools.pairwise(done):
        assert before["finished_at"] <= after["started_at"]  # one at a time
