"""`POST /tasks/{id}/resume` on a real `fabric serve`: a task cut off by a crash (SIGKILL) goes
on after the restart with the same task id, runlog and workspace, without asking the model
again for the steps it had completed; a task that stopped at max_steps goes on with more; the
tasks that cannot be resumed get 404 or 409 with what to do. A resumed task's runlog has one end,
and its event stream carries the resumed events, also to a client that opened it before the
resumed run began or that reconnects with the id of the end the resume replaced."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from support import assert_valid_runlog, kinds, mock_llm, read_events
from test_service import GUARD, Service, error_shape, sse, step_of, task_of, wait_until

from fabric.testing import MockOpenAIServer, completion


def project(folder: Path, model_url: str) -> Path:
    """A service project with one pack that writes notes (no processes, no policy asks)."""
    (folder / "ws").mkdir(exist_ok=True)
    config = {
        "version": 1,
        "llm": mock_llm(model_url),
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


def test_a_task_killed_with_the_server_goes_on_at_the_restart(tmp_path: Path) -> None:
    """Every task is durable (ADR 0020): the next start continues it from its last recorded
    step, in the same runlog, without being asked; only the step that was cut off is asked
    of the model again."""
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
    assert mark["from_step"] == 3 and mark["reason"] == "recovered"
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


def stopped_after_one_step(service: Service, folder: Path) -> tuple[str, Path]:
    """A task that stopped at its step limit after one step, and its runlog."""
    task_id = service.submit(pack="notes", task="write two notes", max_steps=1)
    assert service.wait_final(task_id)["status"] == "max_steps"
    return task_id, folder / "runs" / task_id / "runlog.jsonl"


def streaming(
    service: Service, task_id: str, headers: dict[str, str] | None = None
) -> tuple[threading.Thread, list[dict[str, Any]], threading.Event]:
    """A client following the task's event stream in a thread: the thread (started), the
    events it gets, and an Event set once the stream sent its first line (a comment too)."""
    heard: list[dict[str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        with (
            httpx.Client(base_url=service.url, headers=service.client.headers) as client,
            client.stream(
                "GET", f"/tasks/{task_id}/events", headers=headers, timeout=GUARD
            ) as response,
        ):
            lines = response.iter_lines

            def noticed() -> Iterator[str]:
                for line in lines():
                    opened.set()
                    yield line

            response.iter_lines = noticed  # type: ignore[method-assign]
            heard.extend(message["data"] for message in sse(response))

    thread = threading.Thread(target=follow)
    thread.start()
    return thread, heard, opened


def test_a_task_resumed_twice_after_max_steps_has_one_end_and_streams_on(tmp_path: Path) -> None:
    model = HeldModel()
    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        task_id, runlog = stopped_after_one_step(service, tmp_path)
        first = read_events(runlog)
        once = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 2})
        assert once.status_code == 202, once.text
        assert service.wait_final(task_id)["status"] == "max_steps"
        second = read_events(runlog)
        stream = [m["data"] for m in sse(service.client.get(f"/tasks/{task_id}/events"))]
        twice = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 5})
        assert twice.status_code == 202, twice.text
        wait_until(model.held.is_set, "the third model call")
        follower, streamed, following = streaming(service, task_id)  # while the run goes on
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


class Blocker:
    """The task "block" waits at its model call until ``release``, then finishes; any other
    task writes a.txt, then b.txt, then finishes (``Model`` without its hold)."""

    def __init__(self) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        self.notes = Model()
        self.notes.hold.clear()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        if task_of(body) != "block":
            return self.notes(body)
        self.held.set()
        self.release.wait(GUARD)
        return 200, completion(None, [("finish_task", {"summary": "let the others go"})])


def test_the_event_stream_carries_a_resume_that_has_not_begun_yet(tmp_path: Path) -> None:
    """Between ``POST /resume`` and the resumed run's first line (here: the task waits for
    another one that uses its workspace), the runlog still ends with the old ``run_finished``.
    A client that opens the stream then reads on into the resumed run, with or without a
    ``Last-Event-ID``; one that saw the old end and reconnects with its id gets the
    ``run_resumed`` that took the end's place (and its seq) too."""
    model = Blocker()

    def replayed(last_id: int) -> list[dict[str, Any]]:
        url, headers = f"/tasks/{task_id}/events", {"Last-Event-ID": str(last_id)}
        return [m["data"] for m in sse(service.client.get(url, headers=headers))]

    with (
        MockOpenAIServer(model, models=["m"]) as server,
        Service(project(tmp_path, server.base_url)) as service,
    ):
        task_id, runlog = stopped_after_one_step(service, tmp_path)
        old = read_events(runlog)
        seen = list(sse(service.client.get(f"/tasks/{task_id}/events")))  # ends at the end
        assert [m["data"] for m in seen] == old and seen[-1]["event"] == "run_finished"
        blocker = service.submit(pack="notes", task="block")
        wait_until(model.held.is_set, "the blocking task's model call")
        answer = service.client.post(f"/tasks/{task_id}/resume", json={"max_steps": 5})
        assert answer.status_code == 202, answer.text
        assert service.task(task_id)["status"] == "queued"  # waits for the workspace
        fresh, heard, fresh_opened = streaming(service, task_id)
        back, heard_back, back_opened = streaming(
            service, task_id, {"Last-Event-ID": seen[-1]["id"]}
        )
        wait_until(fresh_opened.is_set, "the fresh event stream")  # its "queued" comment
        wait_until(back_opened.is_set, "the reconnected event stream")
        assert read_events(runlog) == old  # the resumed run has not begun
        model.release.set()
        done = service.wait_final(task_id)
        fresh.join(GUARD)
        back.join(GUARD)
        assert service.wait_final(blocker)["status"] == "completed"
        last_id = int(seen[-1]["id"])
        later, past_it = replayed(last_id), replayed(last_id + 1)

    assert done["status"] == "completed" and done["steps"] == 3
    events = assert_valid_runlog(runlog)
    end = len(old) - 1  # the seq the old end had, and run_resumed has now
    assert events[end]["kind"] == "run_resumed" and events[end]["ended"]["status"] == "max_steps"
    assert heard == old + events[end:]  # on past the old end
    assert heard_back == events[end:]
    assert later == events[end:]  # the run_resumed, not only what follows it
    assert past_it == events[end + 2 :]
