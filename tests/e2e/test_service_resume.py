"""`POST /tasks/{id}/resume` on a real `fabric serve`: a task cut off by a crash (SIGKILL) goes
on after the restart with the same task id, runlog and workspace, without asking the model
again for the steps it had completed; a task that stopped at max_steps goes on with more; the
tasks that cannot be resumed get 404 or 409 with what to do. A resumed task's runlog has one end,
and its event stream carries the resumed events."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
from support import assert_valid_runlog, kinds, read_events
from test_service import GUARD, Service, error_shape, sse, step_of, wait_until

from fabric.testing import MockOpenAIServer, completion


def project(folder: Path, model_url: str) -> Path:
    """A service project with one pack that writes notes (no processes, no policy asks)."""
    (folder / "ws").mkdir(exist_ok=True)
    config = {
        "version": 1,
        "llm": {
            "backend": "openai",
            "backends": {"openai": {"kind": "openai", "base_url": model_url}},
            "models": {"default": "m"},
            "retry": {"attempts": 1},
        },
        "runs_dir": "runs",
        "serve": {"workspace_roots": ["ws"], "concurrency": 2},
        "packs": {
            "notes": {
                "builder": "declarative",
                "system_prompt": "You write notes.",
                "tools": ["write_file", "read_file"],
                "finish_schema": {
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"],
                },
            }
        },
    }
    path = folder / "fabric.yaml"
    path.write_text(json.dumps(config, indent=1))
    return path


class Model:
    """Writes a.txt, then b.txt, then finishes; while ``hold`` is set, the third call waits
    (until ``release``) instead, so the server can be killed in the middle of the run."""

    def __init__(self) -> None:
        self.hold, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        self.hold.set()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        step = step_of(body)
        if step < 2:
            name = "ab"[step] + ".txt"
            return 200, completion(None, [("write_file", {"path": name, "content": name})])
        if self.hold.is_set():
            self.held.set()
            self.release.wait(GUARD)
            return 500, {"error": {"message": "nobody is listening any more"}}
        return 200, completion(None, [("finish_task", {"summary": "wrote a.txt and b.txt"})])


def test_a_task_killed_with_the_server_resumes_after_the_restart(tmp_path: Path) -> None:
    model = Model()
    with MockOpenAIServer(model, models=["m"]) as server:
        config = project(tmp_path, server.base_url)
        with Service(config) as first_life:
            task_id = first_life.submit(pack="notes", task="write two notes")
            wait_until(model.held.is_set, "the task's third model call")
            first_life.kill()  # SIGKILL: the run is cut off in the middle of step 3
        model.hold.clear()
        model.release.set()
        runlog = tmp_path / "runs" / task_id / "runlog.jsonl"
        before = read_events(runlog)
        assert "run_finished" not in kinds(before)
        calls_before = len(server.requests)

        with Service(config) as second_life:
            cut = second_life.task(task_id)
            assert cut["status"] == "interrupted"
            assert "/resume" in cut["error"]["hint"]
            assert cut["urls"]["resume"] == f"/tasks/{task_id}/resume"
            answer = second_life.client.post(f"/tasks/{task_id}/resume")
            assert answer.status_code == 202, answer.text
            resumed = answer.json()
            assert resumed["id"] == task_id
            assert resumed["status"] in {"queued", "running", "completed"}
            assert resumed["error"] is None
            done = second_life.wait_final(task_id)
            stream = [m["data"] for m in sse(second_life.client.get(f"/tasks/{task_id}/events"))]
            again = second_life.client.post(f"/tasks/{task_id}/resume")
            unknown = second_life.client.post("/tasks/no-such-task/resume")
        after = server.requests[calls_before:]

    assert done["status"] == "completed", done
    assert done["payload"] == {"summary": "wrote a.txt and b.txt"}
    assert done["steps"] == 3
    events = assert_valid_runlog(runlog)
    assert events[: len(before)] == before  # the same runlog, appended to
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark["from_step"] == 3 and mark["reason"] == "interrupted"
    assert [step_of(body) for body in after] == [2]  # only the step that never completed
    assert stream == events  # the event stream goes on in the same log
    assert (tmp_path / "ws" / "a.txt").read_text() == "a.txt"
    assert (tmp_path / "ws" / "b.txt").read_text() == "b.txt"
    error = error_shape(again, 409, "not_resumable")
    assert "already ended (completed)" in error["message"]
    assert "POST /tasks" in error["details"]["hint"]
    error_shape(unknown, 404, "not_found")


def test_a_task_that_hit_max_steps_resumes_with_more(tmp_path: Path) -> None:
    model = Model()
    model.hold.clear()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        task_id = service.submit(pack="notes", task="write two notes", max_steps=2)
        assert service.wait_final(task_id)["status"] == "max_steps"
        calls_before = len(server.requests)
        same = service.client.post(f"/tasks/{task_id}/resume")
        error = error_shape(same, 409, "not_resumable")
        assert '{"max_steps": n} with n above 2' in error["details"]["hint"]
        bad = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 0})
        error_shape(bad, 422, "invalid_request")
        more = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 5})
        assert more.status_code == 202, more.text
        assert more.json()["max_steps"] == 5
        done = service.wait_final(task_id)
        after = server.requests[calls_before:]
    assert done["status"] == "completed" and done["steps"] == 3
    assert [step_of(body) for body in after] == [2]
    events = assert_valid_runlog(tmp_path / "runs" / task_id / "runlog.jsonl")
    assert kinds(events).count("run_finished") == 1
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark["reason"] == "max_steps" and mark["limits"]["max_steps"] == 5
    assert mark["ended"]["status"] == "max_steps" and mark["ended"]["steps"] == 2


class HeldModel:
    """Writes a.txt, then b.txt, then finishes; the finishing call waits for ``release``."""

    def __init__(self) -> None:
        self.held, self.release = threading.Event(), threading.Event()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        step = step_of(body)
        if step < 2:
            name = "ab"[step] + ".txt"
            return 200, completion(None, [("write_file", {"path": name, "content": name})])
        self.held.set()
        self.release.wait(GUARD)
        return 200, completion(None, [("finish_task", {"summary": "wrote a.txt and b.txt"})])


def test_a_task_resumed_twice_after_max_steps_has_one_end_and_streams_on(tmp_path: Path) -> None:
    model = HeldModel()
    streamed: list[dict[str, Any]] = []
    following = threading.Event()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        task_id = service.submit(pack="notes", task="write two notes", max_steps=1)
        assert service.wait_final(task_id)["status"] == "max_steps"
        runlog = tmp_path / "runs" / task_id / "runlog.jsonl"
        first = read_events(runlog)
        once = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 2})
        assert once.status_code == 202, once.text
        assert service.wait_final(task_id)["status"] == "max_steps"
        second = read_events(runlog)
        stream = [m["data"] for m in sse(service.client.get(f"/tasks/{task_id}/events"))]

        def follow() -> None:  # a client following the task while its resumed run goes on
            with (
                httpx.Client(base_url=service.url, headers=service.client.headers) as client,
                client.stream("GET", f"/tasks/{task_id}/events", timeout=GUARD) as response,
            ):
                for message in sse(response):
                    streamed.append(message["data"])
                    following.set()

        twice = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 5})
        assert twice.status_code == 202, twice.text
        wait_until(model.held.is_set, "the third model call")
        follower = threading.Thread(target=follow)
        follower.start()
        wait_until(following.is_set, "the event stream")
        model.release.set()
        done = service.wait_final(task_id)
        follower.join(GUARD)
        requests = [step_of(body) for body in server.requests if "messages" in body]
    assert done["status"] == "completed" and done["steps"] == 3
    assert requests == [0, 1, 2]  # no step asked twice
    assert kinds(second).count("run_finished") == 1 and stream == second
    events = assert_valid_runlog(runlog)
    assert kinds(events).count("run_finished") == 1 and events[-1]["kind"] == "run_finished"
    assert events[-1]["status"] == "completed"
    assert events[: len(first) - 1] == first[:-1] and events[: len(second) - 1] == second[:-1]
    marks = [e for e in events if e["kind"] == "run_resumed"]
    assert [(m["ended"]["status"], m["ended"]["steps"]) for m in marks] == [
        ("max_steps", 1),
        ("max_steps", 2),
    ]
    assert streamed == events  # the follower saw the whole log, resumed events and end
