"""The service as the web console meets it, in this process: ``create_app`` served by uvicorn
on a free loopback port in a thread (real HTTP, real streaming, the app's lifespan), with the
model replaced through the composition root (``chat_factory``). Shared by the console API
tests."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec
import uvicorn
from support import mock_llm
from test_service import FINAL, GUARD, free_port

from fabric.config.loader import load_config
from fabric.domain.models import ChatResponse, Message
from fabric.interfaces.http.app import create_app
from fabric.testing import FunctionChatClient, tool_call

TOKEN = "console-test-token-7c1d9e2f4a6b"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SUMMARY = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
Responder = Callable[[str, int], Awaitable[ChatResponse]]
"""Answers the model call ``step`` (1-based) of a run of the task ``task``."""


def project(folder: Path) -> Path:
    """fabric.yaml with two packs: ``writer`` (file tools; tool output cut at 256 characters)
    and ``asker`` (every write_file waits for a person's approval)."""
    (folder / "ws").mkdir(exist_ok=True)
    config = {
        "version": 1,
        "llm": mock_llm("http://127.0.0.1:9/v1"),  # never asked: the tests bring the model
        "runs_dir": "runs",
        "serve": {
            "workspace_roots": ["ws"],
            "allowed_hosts": ["127.0.0.1", "localhost"],
            "token_file": str(folder / "token"),
            "shutdown_grace": 2,
        },
        "packs": {
            "writer": {
                "builder": "declarative",
                "description": "Writes files.",
                "system_prompt": "You write files.",
                "tools": ["read_file", "write_file", "edit_file"],
                "finish_schema": SUMMARY,
                "limits": {"tool_output_chars": 256},
            },
            "asker": {
                "builder": "declarative",
                "description": "Asks before it writes.",
                "system_prompt": "You ask first.",
                "tools": ["write_file"],
                "finish_schema": SUMMARY,
                "sandbox": {"policy": {"rules": [{"tool": "write_file", "verdict": "ask"}]}},
            },
        },
    }
    path = folder / "fabric.yaml"
    path.write_text(json.dumps(config, indent=1))
    return path


def said(text: str, response: ChatResponse) -> ChatResponse:
    """``response`` with ``text`` as the model's words before its tool calls."""
    message = {**response.message, "content": text}
    return msgspec.structs.replace(response, message=message, content=text)


async def writer(task: str, step: int) -> ChatResponse:
    """Step 1: says what it does and writes ``<first word>.txt``; step 2: finishes."""
    name = task.split()[0] + ".txt"
    if step == 1:
        return said(f"Writing {name} now.", tool_call("write_file", path=name, content=task))
    return said("Done.", tool_call("finish_task", summary=f"wrote {name}"))


def chat_factory(respond: Responder) -> Callable[[str], FunctionChatClient]:
    def make(model: str) -> FunctionChatClient:
        async def answer(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
            task = str(messages[1]["content"])
            step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
            return await respond(task, step)

        return FunctionChatClient(answer, model="scripted-model")

    return make


def gate_at(gate: threading.Event, step: int, inner: Responder = writer) -> Responder:
    """``inner``, but a task with "slow" in it waits for ``gate`` at model call ``step``
    (in a thread: the service's event loop goes on)."""

    async def respond(task: str, at: int) -> ChatResponse:
        if "slow" in task and at == step:
            assert await asyncio.to_thread(gate.wait, GUARD), "the test never let the model go"
        return await inner(task, at)

    return respond


class LiveApp:
    """``with LiveApp(config, respond) as live: live.client.get("/runs")``."""

    def __init__(self, config: Path, respond: Responder = writer, **overrides: Any) -> None:
        self.folder = config.parent
        self.app = create_app(
            load_config(config),
            token=TOKEN,
            runs_poll=0.05,
            chat_factory=chat_factory(respond),
            **overrides,
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning",
            access_log=False, lifespan="on", timeout_graceful_shutdown=3,
        )  # fmt: skip
        self.server = uvicorn.Server(settings)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.client = httpx.Client(base_url=self.url, headers=AUTH, timeout=GUARD)
        self.anonymous = httpx.Client(base_url=self.url, timeout=GUARD)

    def __enter__(self) -> LiveApp:
        self.thread.start()
        deadline = time.monotonic() + GUARD
        while not self.server.started:
            assert self.thread.is_alive(), "the server stopped while starting"
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.anonymous.close()
        self.server.should_exit = True
        self.thread.join(GUARD)

    @property
    def runs(self) -> Path:
        return self.folder / "runs"

    def submit(self, pack: str = "writer", task: str = "hello world", **fields: Any) -> str:
        answer = self.client.post("/tasks", json={"pack": pack, "task": task, **fields})
        assert answer.status_code == 202, answer.text
        task_id: str = answer.json()["id"]
        return task_id

    def wait_status(self, run_id: str, wanted: Callable[[str], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + GUARD
        while True:
            answer = self.client.get(f"/runs/{run_id}")
            if answer.status_code == 200 and wanted(answer.json()["summary"]["status"]):
                summary: dict[str, Any] = answer.json()["summary"]
                return summary
            assert time.monotonic() < deadline, f"run {run_id} stuck: {answer.text}"
            time.sleep(0.02)

    def wait_final(self, run_id: str) -> dict[str, Any]:
        return self.wait_status(run_id, lambda status: status in FINAL)


def sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The messages of a Server-Sent Events response as {id, event, data}; comments skipped."""
    fields: dict[str, str] = {}
    for text in response.iter_lines():
        if not text:
            if "data" in fields:
                yield {"id": fields.get("id"), "event": fields.get("event"),
                       "data": json.loads(fields["data"])}  # fmt: skip
            fields = {}
        elif not text.startswith(":"):
            name, _, value = text.partition(":")
            fields[name] = value.removeprefix(" ")
