"""fabric as an MCP server, for real: ``fabric mcp serve`` started as a subprocess and driven by
the SDK's client over stdio, with a scripted model server. Packs listed as tools, a call end to
end (structured content against the output schema, progress per step, a normal runlog), bad
arguments and workspaces, the policy asking through elicitation (both protocol revisions) or
refusing when the client cannot be asked, cancellation mid-run, runs as resources."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from support import assert_valid_runlog, read_events
from test_service import API_KEY, GUARD, project, wait_until

from fabric.testing import MockOpenAIServer, completion

ASKER = {
    "builder": "declarative",
    "description": "Reads a file, asking first.",
    "system_prompt": "You read.",
    "tools": ["read_file"],
    "finish_schema": {
        "type": "object",
        "properties": {"verdict": {"type": "string"}},
        "required": ["verdict"],
    },
    "sandbox": {"policy": {"rules": [{"tool": "read_file", "verdict": "ask"}]}},
}


class Model:
    """The scripted model: a task that says "read" reads notes.txt first; "hold" waits for
    ``release`` before answering; the final answer's verdict is the last tool result."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Event()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        messages = body["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if "hold" in task:
            self.held.set()
            self.release.wait(GUARD)
        if "read" in task and not results:
            return 200, completion(calls=[("read_file", {"path": "notes.txt"})])
        verdict = results[-1][:200] if results else "fine"
        return 200, completion(calls=[("finish_task", {"verdict": verdict})])


def setup(tmp_path: Path, model_url: str, concurrency: int = 4) -> Path:
    config = project(tmp_path, model_url, concurrency=concurrency)
    data = json.loads(config.read_text())
    data["packs"]["asker"] = ASKER
    config.write_text(json.dumps(data))
    (tmp_path / "ws" / "notes.txt").write_text("the notes say hello\n")
    return config


@asynccontextmanager
async def stdio(config: Path, **client: Any) -> AsyncIterator[Client]:
    env = {**os.environ, "FABRIC_API_KEY": API_KEY}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fabric", "mcp", "serve", "--config", str(config)],
        env=env,
        cwd=str(config.parent),
    )
    with anyio.fail_after(GUARD * 4):
        async with Client(params, **client) as session:
            yield session


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def approve(ctx: Any, params: Any) -> types.ElicitResult:
    assert "read_file" in params.message
    return types.ElicitResult(action="accept", content={"approve": True})


def test_packs_are_tools_called_end_to_end_with_progress_and_runs_as_resources(
    tmp_path: Path,
) -> None:
    with MockOpenAIServer(Model()) as llm:
        config = setup(tmp_path, llm.base_url)

        async def go() -> None:
            async with stdio(config) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert {"engineering", "reviewer", "asker"} <= set(tools)
                reviewer = tools["reviewer"]
                assert reviewer.input_schema["required"] == ["task"]
                assert reviewer.output_schema is not None
                steps: list[tuple[float, str | None]] = []

                async def progress(done: float, total: float | None, said: str | None) -> None:
                    steps.append((done, said))

                task = f"review it; key {API_KEY}"
                result = await client.call_tool(
                    "reviewer", {"task": task}, progress_callback=progress
                )
                said = text_of(result)
                assert not result.is_error, said
                assert result.structured_content == {"verdict": "fine"}
                Draft202012Validator(reviewer.output_schema).validate(result.structured_content)
                assert "status: completed" in said and "runlog: " in said
                assert steps and steps[0][0] == 1 and "step 1" in (steps[0][1] or "")
                run_id = said.split("; run ")[1].split(",")[0]
                runlog = tmp_path / "runs" / run_id / "runlog.jsonl"
                events = assert_valid_runlog(read_events(runlog))
                assert events[-1]["status"] == "completed"

                # hostile or wrong input: a tool error that says what to do
                for args, why in [
                    ({"task": "x", "shell": "rm -rf /"}, "extra"),
                    ({"task": 7}, "task"),
                    ({"task": "x", "workspace": "/etc"}, "workspace"),
                    ({"task": "x", "workspace": "../.."}, "workspace"),
                ]:
                    bad = await client.call_tool("reviewer", args)
                    assert bad.is_error and "What to do:" in text_of(bad), args
                    assert why in text_of(bad).lower(), text_of(bad)
                unknown = await client.call_tool("nope", {"task": "x"})
                assert unknown.is_error and "no tool 'nope'" in text_of(unknown)
                forged = await client.session.call_tool(
                    "reviewer", {"task": "x"}, request_state="forged", allow_input_required=True
                )  # an answer for no waiting run
                assert isinstance(forged, types.CallToolResult) and forged.is_error
                assert "not waiting for one" in text_of(forged)

                # runs and runlogs as resources, redacted
                listed = [str(r.uri) for r in (await client.list_resources()).resources]
                assert "fabric://runs" in listed and f"fabric://runs/{run_id}" in listed
                templates = (await client.list_resource_templates()).resource_templates
                assert {t.uri_template for t in templates} == {
                    "fabric://runs/{run_id}",
                    "fabric://runs/{run_id}/runlog",
                }
                runs = await client.read_resource("fabric://runs")
                body = json.loads(runs.contents[0].text)  # type: ignore[union-attr]
                assert run_id in [r["run_id"] for r in body["runs"]]
                one = await client.read_resource(f"fabric://runs/{run_id}")
                summary = json.loads(one.contents[0].text)  # type: ignore[union-attr]
                assert summary["status"] == "completed" and summary["pack"] == "reviewer"
                assert API_KEY not in json.dumps(summary)
                log = await client.read_resource(f"fabric://runs/{run_id}/runlog")
                lines = log.contents[0].text.splitlines()  # type: ignore[union-attr]
                assert json.loads(lines[-1])["kind"] == "run_finished"
                assert API_KEY not in "".join(lines)
                for uri in ["fabric://runs/../../etc", "fabric://runs/nope", "file:///etc"]:
                    try:
                        await client.read_resource(uri)
                    except MCPError as exc:
                        assert "no such resource" in str(exc)
                    else:
                        raise AssertionError(f"{uri} was read")

        asyncio.run(go())


def test_an_asking_policy_elicits_or_refuses_with_a_clear_message(tmp_path: Path) -> None:
    with MockOpenAIServer(Model()) as llm:
        config = setup(tmp_path, llm.base_url)

        async def go() -> None:
            for mode in ("auto", "legacy"):  # 2026-07-28: InputRequiredResult; else elicit
                async with stdio(config, elicitation_callback=approve, mode=mode) as client:
                    result = await client.call_tool("asker", {"task": "read the notes"})
                    assert not result.is_error, text_of(result)
                    verdict = (result.structured_content or {})["verdict"]
                    assert "the notes say hello" in verdict, mode
            async with stdio(config) as client:  # cannot be asked: refused, and said why
                result = await client.call_tool("asker", {"task": "read the notes"})
                said = text_of(result)
                assert "does not support elicitation" in said and "sandbox.policy" in said
                verdict = (result.structured_content or {}).get("verdict", "")
                assert "no one could be asked (no elicitation)" in verdict
            for runlog in (tmp_path / "runs").glob("*/runlog.jsonl"):
                events = assert_valid_runlog(read_events(runlog))
                answers = [e["by"] for e in events if e["kind"] == "approval"]
                assert answers in (["mcp"], ["no elicitation"]), answers

        asyncio.run(go())


def test_a_client_that_cancels_the_call_cancels_the_run(tmp_path: Path) -> None:
    model = Model()
    with MockOpenAIServer(model) as llm:
        config = setup(tmp_path, llm.base_url, concurrency=1)

        async def go() -> None:
            async with stdio(config) as client:
                async with anyio.create_task_group() as group:

                    async def call() -> None:
                        await client.call_tool("reviewer", {"task": "hold on"})

                    group.start_soon(call)
                    await anyio.to_thread.run_sync(model.held.wait, GUARD)
                    busy = await client.call_tool("reviewer", {"task": "more"})  # 1 at once
                    assert busy.is_error and "serve.concurrency" in text_of(busy)
                    group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
                runs = tmp_path / "runs"

                def ended() -> bool:
                    logs = list(runs.glob("*/runlog.jsonl"))
                    return bool(logs) and read_events(logs[0])[-1]["kind"] == "run_finished"

                await anyio.to_thread.run_sync(wait_until, ended, "the run's end")
                model.release.set()
                [runlog] = runs.glob("*/runlog.jsonl")
                assert read_events(runlog)[-1]["status"] == "cancelled"

        try:
            asyncio.run(go())
        finally:
            model.release.set()


def _sdk_modules(argv: list[str], cwd: Path) -> set[str]:
    """The SDK's modules a fabric command imported (``-X importtime``); it must succeed."""
    env = {**os.environ, "FABRIC_API_KEY": API_KEY}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=GUARD * 4,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return {n for n in names if n.split(".")[0] in ("mcp", "mcp_types")}


def test_the_sdk_stays_off_the_startup_path(tmp_path: Path) -> None:
    with MockOpenAIServer(Model()) as llm:
        config = setup(tmp_path, llm.base_url)
        ws = tmp_path / "ws"
        assert _sdk_modules(["-m", "fabric", "--help"], ws) == set()
        run = ["-m", "fabric", "run", "-p", "reviewer", "--config", str(config), "-q", "check"]
        assert _sdk_modules(run, ws) == set()
        app = "from fabric.interfaces.http.app import create_app; from fabric.config.loader "
        app += "import load_config; create_app(load_config(%r), token='t' * 32)"
        data = json.loads(config.read_text())
        data["serve"]["mcp"] = False
        off = tmp_path / "off.yaml"
        off.write_text(json.dumps(data))
        assert _sdk_modules(["-c", app % str(off)], ws) == set()
        assert "mcp.server.lowlevel" in _sdk_modules(["-c", app % str(config)], ws)


def test_only_an_accepted_yes_approves() -> None:
    from fabric.interfaces.mcp.calls import _answer_of

    yes = types.ElicitResult(action="accept", content={"approve": True})
    assert _answer_of(yes).approved and _answer_of(yes).by == "mcp"
    for reply in [
        types.ElicitResult(action="accept", content={"approve": "true"}),
        types.ElicitResult(action="decline"),
        types.ElicitResult(action="cancel", content={"approve": True}),
        {"action": "accept", "content": [True]},
        None,
        "yes",
    ]:
        assert not _answer_of(reply).approved, reply
