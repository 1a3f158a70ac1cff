"""200 tasks submitted at once to `fabric serve` running 20 at a time: every one is accepted,
runs exactly once and ends `completed` with a complete runlog. No timing assertions (the
figures are printed by bench/service_load.py)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from support import assert_valid_runlog, kinds
from test_service import GUARD, TOKEN, Service, project, step_of, task_of

from fabric.testing import MockOpenAIServer, completion

TASKS = 200
CONCURRENCY = 20  # the service's limit
CLIENTS = 50  # submissions in flight at once
STEPS = 3  # model calls per task: write_file, read_file, finish_task


def three_steps(body: dict[str, Any]) -> tuple[int, Any]:
    """An instant model: write ``<task>.txt``, read it back, finish with what it read."""
    name = f"{task_of(body)}.txt"
    step = step_of(body)
    if step == 0:
        return 200, completion(None, [("write_file", {"path": name, "content": task_of(body)})])
    if step == 1:
        return 200, completion(None, [("read_file", {"path": name})])
    read_back = body["messages"][-1]["content"].split("| ", 1)[-1].rstrip("\n")  # "  1| text"
    return 200, completion(None, [("finish_task", {"summary": read_back})])


async def submit_all(url: str, texts: list[str]) -> list[httpx.Response]:
    limit = asyncio.Semaphore(CLIENTS)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    pool = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=GUARD, limits=pool) as c:

        async def one(text: str) -> httpx.Response:
            async with limit:
                return await c.post("/tasks", json={"pack": "engineering", "task": text})

        return await asyncio.gather(*(one(text) for text in texts))


def test_200_concurrent_tasks_each_complete_exactly_once(tmp_path: Path) -> None:
    texts = [f"task-{n:03d}" for n in range(TASKS)]
    with MockOpenAIServer(three_steps, models=["m"]) as model:
        # each task writes its own file in the one workspace: sharing it is intended here
        config = project(tmp_path, model.base_url, concurrency=CONCURRENCY, share_workspaces=True)
        with Service(config) as service:
            answers = asyncio.run(submit_all(service.url, texts))
            assert [a.status_code for a in answers] == [202] * TASKS, answers[0].text
            ids = [a.json()["id"] for a in answers]

            deadline = time.monotonic() + 2 * GUARD  # hang guard only
            while True:
                listed = service.client.get("/tasks", params={"limit": 500}).json()
                records = {r["id"]: r for r in listed["tasks"]}
                if all(r["status"] not in {"queued", "running"} for r in records.values()):
                    break
                assert time.monotonic() < deadline, Counter(r["status"] for r in listed["tasks"])
                time.sleep(0.2)
            still_live = service.client.get("/tasks", params={"status": "running"}).json()

    assert len(set(ids)) == TASKS
    assert set(records) == set(ids)
    assert listed["next"] is None
    assert still_live["tasks"] == []
    by_text = {records[i]["task"]: records[i] for i in ids}
    assert sorted(by_text) == texts
    for text, record in by_text.items():
        assert record["status"] == "completed_unconfirmed", record
        assert record["payload"] == {"summary": text}
        assert record["steps"] == STEPS

    # one runlog per task, each complete and valid; nothing else in the runs folder
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == sorted(ids)
    for task_id in ids:
        events = assert_valid_runlog(runs / task_id / "runlog.jsonl")
        assert kinds(events).count("run_started") == 1
        assert events[-1]["status"] == "completed_unconfirmed"
        assert events[0]["task"] == records[task_id]["task"]

    # the model saw each task's three calls, once; every task wrote its file
    assert len(model.requests) == TASKS * STEPS
    assert Counter(task_of(b) for b in model.requests) == dict.fromkeys(texts, STEPS)
    for text in texts:
        assert (tmp_path / "ws" / f"{text}.txt").read_text() == text
