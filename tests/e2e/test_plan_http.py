"""The plan (ADR 0029) over HTTP: a task's ``plan`` events reach ``GET /tasks/{id}/events``
while the run goes on, and ``GET /runs/{id}/events`` sends the same. A real server on loopback
(``console_app.LiveApp``), the model scripted."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from console_app import LiveApp, project, sse
from support import assert_valid_runlog, read_events
from test_service import GUARD

from fabric.domain.models import ChatResponse
from fabric.testing import tool_call

FIRST = [
    {"step": "read the notes", "status": "in_progress"},
    {"step": "write the summary", "status": "pending"},
]
SECOND = [
    {"step": "read the notes", "status": "done"},
    {"step": "write the summary", "status": "in_progress"},
]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The console tests' project with one more pack, ``planner``: ``writer`` with a plan."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the run ledger of these runs
    path = project(tmp_path)
    config = json.loads(path.read_text())
    config["packs"]["planner"] = {**config["packs"]["writer"], "plan": {"enabled": True}}
    path.write_text(json.dumps(config, indent=1))
    return path


def test_plan_events_stream_live_to_the_tasks_and_the_runs_events(config: Path) -> None:
    seen_first = threading.Event()

    async def planner(task: str, step: int) -> ChatResponse:
        if step == 1:
            return tool_call("update_plan", items=FIRST)
        if step == 2:  # goes on only once the stream has carried the first plan
            assert await asyncio.to_thread(seen_first.wait, GUARD), "no plan event came"
            return tool_call("update_plan", items=SECOND, explanation="read them")
        return tool_call("finish_task", summary="planned and done")

    with LiveApp(config, planner) as live:
        task_id = live.submit(pack="planner", task="plan it")
        seen: list[dict[str, Any]] = []
        with live.client.stream("GET", f"/tasks/{task_id}/events") as stream:
            assert stream.status_code == 200
            for message in sse(stream):
                seen.append(message)
                if message["event"] == "plan":
                    seen_first.set()
        plans = [m for m in seen if m["event"] == "plan"]
        assert [p["data"]["items"] for p in plans] == [FIRST, SECOND]
        assert plans[1]["data"]["explanation"] == "read them"
        assert plans[1]["data"]["counts"] == {"pending": 0, "in_progress": 1, "done": 1}
        assert all(p["id"] == str(p["data"]["seq"]) for p in plans)
        # the first plan was sent while the model still waited to answer step 2
        before = [m["data"].get("step") for m in seen[: seen.index(plans[0])]]
        assert seen[: seen.index(plans[0])][-1]["event"] == "policy_decision"
        assert all(step in (None, 1) for step in before)
        assert live.wait_final(task_id)["status"] == "completed"

        with live.client.stream("GET", f"/runs/{task_id}/events") as stream:
            again = list(sse(stream))
        assert [m["data"] for m in again if m["event"] == "plan"] == [p["data"] for p in plans]
        events = assert_valid_runlog(read_events(live.runs / task_id / "runlog.jsonl"))
        assert [m["data"] for m in again] == events
