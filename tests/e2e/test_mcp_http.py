"""``/mcp`` under a real ``fabric serve`` on a free loopback port, driven by the SDK's
streamable-HTTP client: a pack called end to end with progress and an asking policy, a call
cancelled mid-run (its run ends cancelled), the runs as resources; and the API's guards in
front of it (token, Host, Origin)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from support import assert_valid_runlog, read_events
from test_mcp_server import Model, approve, setup, text_of
from test_service import GUARD, TOKEN, Service, wait_until

from fabric.testing import MockOpenAIServer

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def over_http(url: str, **client: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(GUARD * 4):
        async with create_mcp_http_client(headers=headers) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport, **client) as session:
                yield session


def test_the_mcp_endpoint_runs_packs_behind_the_api_guards(tmp_path: Path) -> None:
    model = Model()
    with MockOpenAIServer(model) as llm:
        config = setup(tmp_path, llm.base_url)
        with Service(config) as service:
            # the guards: no token, a bad Host, a foreign page's Origin
            bare = httpx.post(f"{service.url}/mcp", json=INIT, headers=MCP_HEADERS, timeout=GUARD)
            assert bare.status_code == 401
            assert bare.json()["error"]["code"] == "unauthorized"
            assert "Authorization: Bearer" in bare.json()["error"]["message"]
            host = service.client.post(
                "/mcp", json=INIT, headers={**MCP_HEADERS, "Host": "evil.example"}
            )
            assert host.status_code == 400
            assert host.json()["error"]["code"] == "host_not_allowed"
            page = service.client.post(
                "/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": "http://evil.example"}
            )
            assert page.status_code == 403
            assert page.json()["error"]["code"] == "origin_not_allowed"
            assert "serve.cors_origins" in page.json()["error"]["message"]
            own = service.client.post(
                "/mcp", json=INIT, headers={**MCP_HEADERS, "Origin": service.url}
            )
            assert own.status_code == 200, own.text

            async def go() -> None:
                async with over_http(service.url, elicitation_callback=approve) as client:
                    tools = {t.name: t for t in (await client.list_tools()).tools}
                    assert {"engineering", "reviewer", "asker"} <= set(tools)
                    steps: list[float] = []

                    async def progress(done: float, total: float | None, said: Any) -> None:
                        steps.append(done)

                    result = await client.call_tool(
                        "reviewer", {"task": "review"}, progress_callback=progress
                    )
                    assert not result.is_error, text_of(result)
                    schema = tools["reviewer"].output_schema
                    assert schema is not None and result.structured_content == {"verdict": "fine"}
                    Draft202012Validator(schema).validate(result.structured_content)
                    assert steps == [1.0]
                    run_id = text_of(result).split("; run ")[1].split(",")[0]
                    asked = await client.call_tool("asker", {"task": "read the notes"})
                    assert "the notes say hello" in (asked.structured_content or {})["verdict"]
                    outside = await client.call_tool("reviewer", {"task": "x", "workspace": "/"})
                    assert outside.is_error and "workspace" in text_of(outside)
                    one = await client.read_resource(f"fabric://runs/{run_id}")
                    summary = json.loads(one.contents[0].text)  # type: ignore[union-attr]
                    assert summary["status"] == "completed"
                async with (
                    over_http(service.url, mode="legacy") as client,
                    anyio.create_task_group() as group,  # the call is cancelled mid-run
                ):

                    async def call() -> None:
                        await client.call_tool("reviewer", {"task": "hold on"})

                    group.start_soon(call)
                    await anyio.to_thread.run_sync(model.held.wait, GUARD)
                    group.cancel_scope.cancel()

            def cancelled() -> bool:
                listed = service.client.get("/runs", params={"status": "cancelled"}).json()
                return len(listed["runs"]) == 1

            try:
                asyncio.run(go())
                wait_until(cancelled, "the cancelled run")
            finally:
                model.release.set()
            # a call's run is a run like any other: its runlog, and GET /runs lists it
            listed = service.client.get("/runs").json()["runs"]
            assert {r["pack"] for r in listed} >= {"reviewer", "asker"}
            for runlog in (tmp_path / "runs").glob("*/runlog.jsonl"):
                assert_valid_runlog(read_events(runlog))
