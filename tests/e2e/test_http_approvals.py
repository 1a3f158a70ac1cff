"""Approvals over HTTP, as an integrator meets them: a real `fabric serve` process, a scripted
model server, a pack whose policy asks before every file write. The task pauses in
awaiting_approval, the event stream carries the call, POST /tasks/{id}/approvals/{call_id}
answers it; unanswered calls time out into a refusal; cancelling while waiting works."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
from support import assert_valid_runlog
from test_service import (
    GUARD,
    TOKEN,
    Handler,
    Service,
    error_shape,
    project,
    sse,
    step_of,
    task_of,
    wait_until,
)

from fabric.testing import MockOpenAIServer, completion

ASK_WRITES = {"rules": [{"tool": "write_file", "path": "**", "verdict": "ask"}]}


def writer_pack(timeout: float) -> dict[str, Any]:
    return {
        "builder": "declarative",
        "system_prompt": "You write files.",
        "tools": ["write_file", "read_file"],
        "sandbox": {"policy": {**ASK_WRITES, "approval_timeout": timeout}},
        "finish_schema": {
            "type": "object",
            "properties": {"verdict": {"type": "string"}},
            "required": ["verdict"],
        },
    }


def config(folder: Path, model_url: str) -> Path:
    """The shared test project plus two packs that ask before writing: ``writer`` waits a
    minute for an answer, ``hasty`` a fraction of a second."""
    path = project(folder, model_url)
    data = json.loads(path.read_text())
    data["packs"]["writer"] = writer_pack(60)
    data["packs"]["hasty"] = writer_pack(0.3)
    path.write_text(json.dumps(data, indent=1))
    return path


def write_then_finish(release: threading.Event | None = None) -> Handler:
    """Write ``<task>.txt``, then (once ``release`` is set) finish, quoting what the write
    returned."""

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        if step_of(body) == 0:
            name = task_of(body).replace(" ", "-") + ".txt"
            return 200, completion(None, [("write_file", {"path": name, "content": "hi"})])
        if release is not None:
            assert release.wait(GUARD), "the test never released the model"
        told = [m["content"] for m in body["messages"] if m["role"] == "tool"][-1]
        return 200, completion(None, [("finish_task", {"verdict": told[:200]})])

    return handler


def wait_for_request(service: Service, task_id: str) -> dict[str, Any]:
    """Follow the task's events until approval_requested; return that event."""
    with service.client.stream("GET", f"/tasks/{task_id}/events") as stream:
        for message in sse(stream):
            if message["event"] == "approval_requested":
                data: dict[str, Any] = message["data"]
                return data
    raise AssertionError("the event stream ended without approval_requested")


def events_of(folder: Path, task_id: str) -> list[dict[str, Any]]:
    return assert_valid_runlog(folder / "runs" / task_id / "runlog.jsonl")


def test_a_task_waits_for_approval_and_runs_the_call_once_approved(tmp_path: Path) -> None:
    release = threading.Event()
    with (
        MockOpenAIServer(write_then_finish(release), models=["m"]) as model,
        Service(config(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit("writer", "greeting")
        requested = wait_for_request(service, task_id)
        assert requested["tool"] == "write_file"
        assert requested["arguments"] == {"path": "greeting.txt", "content": "hi"}
        assert requested["rule"] == 'rules[0]: {tool: write_file, path: "**", verdict: ask}'
        assert requested["timeout_s"] == 60

        waiting = service.wait_status(task_id, "awaiting_approval")
        [pending] = waiting["approvals"]
        call_id = requested["call_id"]
        assert pending["call_id"] == call_id
        assert pending["tool"] == "write_file"
        assert pending["arguments"] == {"path": "greeting.txt", "content": "hi"}
        assert pending["rule"] == requested["rule"]
        assert pending["expires_at"].endswith("Z")
        assert pending["url"] == f"/tasks/{task_id}/approvals/{call_id}"
        assert not (tmp_path / "ws" / "greeting.txt").exists()  # nothing ran yet
        listed = service.client.get("/tasks", params={"status": "awaiting_approval"}).json()
        assert [t["id"] for t in listed["tasks"]] == [task_id]

        answer = service.client.post(
            f"/tasks/{task_id}/approvals/{call_id}", json={"approve": True}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "task_id": task_id, "call_id": call_id, "approved": True, "scope": "once",
            "by": "http",
        }  # fmt: skip
        again = service.client.post(f"/tasks/{task_id}/approvals/{call_id}", json={"approve": True})
        error_shape(again, 409, "conflict")

        running = service.wait_status(task_id, "running")  # the model is held: still running
        assert running["approvals"] == []
        release.set()
        done = service.wait_final(task_id)
    assert done["status"] == "completed", done
    assert (tmp_path / "ws" / "greeting.txt").read_text() == "hi"
    events = events_of(tmp_path, task_id)
    [approval] = [e for e in events if e["kind"] == "approval"]
    assert (approval["approved"], approval["by"], approval["scope"]) == (True, "http", "once")
    [result] = [e for e in events if e["kind"] == "tool_result"]
    assert result["ok"] is True


def test_a_refused_call_is_not_run_and_the_model_hears_why(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(write_then_finish(), models=["m"]) as model,
        Service(config(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit("writer", "secret")
        call_id = wait_for_request(service, task_id)["call_id"]
        answer = service.client.post(
            f"/tasks/{task_id}/approvals/{call_id}", json={"approve": False, "scope": "run"}
        )
        assert answer.status_code == 200, answer.text
        done = service.wait_final(task_id)
    assert done["status"] == "completed"
    assert done["payload"]["verdict"].startswith("error: a person refused this write_file call")
    assert not (tmp_path / "ws" / "secret.txt").exists()
    events = events_of(tmp_path, task_id)
    [approval] = [e for e in events if e["kind"] == "approval"]
    assert (approval["approved"], approval["by"], approval["scope"]) == (False, "http", "run")
    [result] = [e for e in events if e["kind"] == "tool_result"]
    assert result["error"]["code"] == "approval_denied"


def test_an_unanswered_call_times_out_into_a_refusal(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(write_then_finish(), models=["m"]) as model,
        Service(config(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit("hasty", "late")
        call_id = wait_for_request(service, task_id)["call_id"]
        done = service.wait_final(task_id)
        late = service.client.post(f"/tasks/{task_id}/approvals/{call_id}", json={"approve": True})
        error_shape(late, 409, "conflict")
    assert done["status"] == "completed" and done["approvals"] == []
    assert "no one approved this write_file call within 0.3 s" in done["payload"]["verdict"]
    assert not (tmp_path / "ws" / "late.txt").exists()
    events = events_of(tmp_path, task_id)
    [approval] = [e for e in events if e["kind"] == "approval"]
    assert (approval["approved"], approval["by"]) == (False, "timeout")


def test_cancelling_a_task_that_waits_for_approval(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(write_then_finish(), models=["m"]) as model,
        Service(config(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit("writer", "never")
        wait_for_request(service, task_id)
        service.wait_status(task_id, "awaiting_approval")
        assert service.client.post(f"/tasks/{task_id}/cancel").status_code == 202
        done = service.wait_final(task_id)
    assert done["status"] == "cancelled" and done["approvals"] == []
    assert not (tmp_path / "ws" / "never.txt").exists()
    events = events_of(tmp_path, task_id)
    assert events[-1]["status"] == "cancelled"
    assert not [e for e in events if e["kind"] == "approval"]


def test_approval_requests_that_cannot_be_served(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(write_then_finish(), models=["m"]) as model,
        Service(config(tmp_path, model.base_url)) as service,
    ):
        task_id = service.submit("writer", "guarded")
        call_id = wait_for_request(service, task_id)["call_id"]
        service.wait_status(task_id, "awaiting_approval")
        url = f"/tasks/{task_id}/approvals/{call_id}"

        anonymous = httpx.post(service.url + url, json={"approve": True}, timeout=GUARD)
        assert anonymous.status_code == 401
        wrong = httpx.post(
            service.url + url, json={"approve": True}, timeout=GUARD,
            headers={"Authorization": f"Bearer {TOKEN}x"},
        )  # fmt: skip
        assert wrong.status_code == 401
        error_shape(service.client.post("/tasks/nope/approvals/x", json={"approve": True}), 404)
        missing = service.client.post(
            f"/tasks/{task_id}/approvals/no-such-call", json={"approve": True}
        )
        assert "no tool call" in error_shape(missing, 404, "not_found")["message"]
        for body in ({"approve": "yes"}, {}, {"approve": True, "scope": "forever"}, [True]):
            error_shape(service.client.post(url, json=body), 422, "invalid_request")
        assert service.task(task_id)["status"] == "awaiting_approval"  # nothing was answered

        spec = service.client.get("/openapi.json").json()
        operation = spec["paths"]["/tasks/{task_id}/approvals/{call_id}"]["post"]
        assert {"404", "409", "422"} <= set(operation["responses"])
        assert operation["requestBody"]["required"] is True

        assert service.client.post(url, json={"approve": True}).status_code == 200
        done = service.wait_final(task_id)
    assert done["status"] == "completed"
    assert (tmp_path / "ws" / "guarded.txt").exists()


def test_a_task_a_killed_service_left_waiting_for_approval_asks_again(tmp_path: Path) -> None:
    """A service killed while a task waits for a person: the next start continues the task
    from its recorded steps, and asks again about the call (it never ran); approved, the call
    runs once, and the model is not asked again for the step that had its reply."""
    with MockOpenAIServer(write_then_finish(), models=["m"]) as model:
        path = config(tmp_path, model.base_url)
        with Service(path) as first:
            task_id = first.submit(pack="writer", task="guarded")
            asked = wait_for_request(first, task_id)
            first.kill()  # SIGKILL while the call waits
        with Service(path) as second:
            asked_again = lambda: second.task(task_id)["status"] == "awaiting_approval"  # noqa: E731
            wait_until(asked_again, "the call asked about again")
            [waiting] = second.task(task_id)["approvals"]
            assert waiting["call_id"] == asked["call_id"]
            answer = second.client.post(waiting["url"], json={"approve": True})
            assert answer.status_code == 200, answer.text
            done = second.wait_final(task_id)
    assert done["status"] == "completed", done
    assert (tmp_path / "ws" / "guarded.txt").read_text() == "hi"
    assert [step_of(b) for b in model.requests] == [0, 1]
    events = events_of(tmp_path, task_id)
    assert [e["kind"] for e in events].count("tool_result") == 1
    assert [e["by"] for e in events if e["kind"] == "approval"] == ["http"]


def test_a_delegated_runs_ask_is_answered_through_its_parent_task(tmp_path: Path) -> None:
    """The lead pack hands the write to the writer pack, whose policy asks: the lead's task
    waits for approval, lists the writer's call, and the answer given there reaches it."""
    inner = write_then_finish()

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        if not str(body["messages"][0]["content"]).startswith("You lead"):
            return inner(body)
        if step_of(body) == 0:
            return 200, completion(None, [("delegate_writer", {"task": "note"})])
        told = [m["content"] for m in body["messages"] if m["role"] == "tool"][-1]
        return 200, completion(None, [("finish_task", {"verdict": told[:300]})])

    with MockOpenAIServer(handler, models=["m"]) as model:
        path = config(tmp_path, model.base_url)
        data = json.loads(path.read_text())
        data["packs"]["lead"] = {**writer_pack(60), "system_prompt": "You lead.",
                                 "tools": ["read_file"], "delegates": ["writer"],
                                 "sandbox": {}}  # fmt: skip
        path.write_text(json.dumps(data, indent=1))
        with Service(path) as service:
            task_id = service.submit("lead", "write a note through the writer")
            waiting = service.wait_status(task_id, "awaiting_approval")
            [pending] = waiting["approvals"]
            assert pending["tool"] == "write_file"
            assert pending["arguments"] == {"path": "note.txt", "content": "hi"}
            assert not (tmp_path / "ws" / "note.txt").exists()
            answer = service.client.post(pending["url"], json={"approve": True})
            assert answer.status_code == 200, answer.text
            done = service.wait_final(task_id)
    assert done["status"] == "completed", done
    assert (tmp_path / "ws" / "note.txt").read_text() == "hi"
    [delegated] = [e for e in events_of(tmp_path, task_id) if e["kind"] == "tool_result"]
    [child_id] = delegated["child_run_ids"]
    child = events_of(tmp_path, child_id)
    [approval] = [e for e in child if e["kind"] == "approval"]
    assert approval["approved"] and approval["by"] == "http"
    assert child[0]["parent"]["run_id"] == task_id
