"""MCP servers as a tool source, for real: the small SDK server in tests/mcp_servers started as
a confined subprocess, listed page by page, called; a pack using it end to end with the
scripted model; a replay with the server gone; ``fabric mcp list``."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, read_events
from typer.testing import CliRunner

from fabric.application.context import ToolContext
from fabric.application.job import Control, RunRequest
from fabric.config.loader import load_config
from fabric.config.schema import McpServerSettings, McpUse, SandboxSettings
from fabric.domain.errors import McpError, ToolError
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.infrastructure.mcp.names import fabric_name
from fabric.infrastructure.mcp.results import render
from fabric.infrastructure.mcp.toolbox import McpToolbox
from fabric.infrastructure.mcp.transports import Place
from fabric.infrastructure.tools.library import library_tools
from fabric.interfaces.cli.app import app
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

SHOP = str(Path(__file__).parents[1] / "mcp_servers" / "toolshop.py")


def test_names_fit_provider_limits_and_stay_the_same() -> None:
    assert fabric_name("shop", "echo") == "shop__echo"
    odd = fabric_name("shop", "weird.name/" + "x" * 90)
    assert len(odd) <= 64 and odd.startswith("shop__weird_name_")
    assert odd == fabric_name("shop", "weird.name/" + "x" * 90)
    assert fabric_name("shop", "a.b") != fabric_name("shop", "a_b")


def test_results_keep_images_as_artifacts_and_show_structured_content() -> None:
    saved: dict[str, str] = {}

    def save(name: str, content: str) -> str:
        saved[name] = content
        return f"artifacts/{name}"

    result = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "mystery\x00"},
        ],
        "structuredContent": {"n": 1},
    }
    text = render(result, stem="t-1", save=save)
    assert text.startswith("hi\n[image image/png")
    assert "artifacts/t-1-2.image.base64.txt" in text and saved["t-1-2.image.base64.txt"]
    assert 'structured content: {"n": 1}' in text and "\x00" not in text


def _shop(**given: Any) -> McpServerSettings:
    fields = {"command": sys.executable, "args": [SHOP], "start_timeout": 120, **given}
    return McpServerSettings(**fields)


def test_a_server_listed_to_the_end_called_timed_out_restarted_and_changed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SHOP_API_TOKEN", "s3cret")
    monkeypatch.setenv("SHOP_COLOUR", "blue")
    servers = {
        "shop": _shop(protocol="legacy", call_timeout=3, env=["SHOP_COLOUR"]),
        "other": _shop(),
    }
    uses = [
        McpUse(server="shop", exclude=["weird*"]),
        McpUse(server="other", include=["echo", "read_file"]),
    ]
    place = Place(tmp_path, SandboxSettings(), tmp_path)
    own = library_tools("read_file")
    box = McpToolbox(servers, uses, place, base=own)
    ctx = ToolContext("r", tmp_path, SandboxSettings(), save_artifact=lambda n, c: f"a/{n}")

    async def go() -> None:
        try:
            tools = {t.spec.name: t for t in await box.open()}
            # two to a page, followed to the end; filters; the same tool of two servers
            assert set(tools) == {
                "shop__echo", "shop__read_file", "shop__picture", "shop__facts", "shop__slow",
                "shop__crash", "shop__fail", "shop__env", "shop__grow",
                "other__echo", "other__read_file",
            }  # fmt: skip
            assert box.left_out == [
                {"server": "shop", "tool": "bad_schema", "why": box.left_out[0]["why"]}
            ]
            assert "not a valid JSON Schema" in box.left_out[0]["why"]
            meta = box.meta()
            assert {"name": "other__echo", "server": "other", "tool": "echo"} in meta["tools"]
            assert meta["servers"]["shop"]["protocol"].startswith("2025")
            assert (await tools["other__echo"]({"text": "hi"}, ctx)).startswith("echo: hi")
            env = await tools["shop__env"]({}, ctx)
            assert "SHOP_COLOUR" in env and "SHOP_API_TOKEN" not in env
            assert "kept base64-encoded in a/" in await tools["shop__picture"]({}, ctx)
            assert await tools["shop__facts"]({}, ctx) == 'structured content: {"answer": 42}'
            for name, said in [("shop__fail", "no luck"), ("shop__slow", "within 3 s")]:
                try:
                    await tools[name]({}, ctx)
                except ToolError as exc:
                    assert said in str(exc)
                else:
                    raise AssertionError(f"{name} did not fail")
            try:
                await tools["shop__crash"]({}, ctx)
            except McpError as exc:
                assert "crashing on purpose" in exc.message and "started it again" in exc.message
            assert (await tools["shop__echo"]({"text": "again"}, ctx)).startswith("echo: again")
            assert await box.changed(1) is None  # nothing changed yet
            assert await tools["shop__grow"]({}, ctx) == "grown"  # says its list changed
            await asyncio.sleep(0.5)
            change = await box.changed(2)
            assert change is not None and change.tools[0] is own[0]  # the pack's own first
            offered = {t.spec.name: t for t in change.tools}
            assert offered["shop__echo"] is tools["shop__echo"]  # listed as before: the same
            assert change.note["added"] == [
                {"name": "shop__added", "server": "shop", "tool": "added"}
            ]
            assert change.note["servers"] == ["shop"] and not change.note["removed"]
            assert (await offered["shop__added"]({}, ctx)).startswith("echo")
            assert await box.changed(3) is None
            try:
                await tools["shop__crash"]({}, ctx)
            except McpError as exc:
                assert "second time" in exc.message
        finally:
            await box.aclose()

    asyncio.run(go())


CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    mcp_servers:
      shop: {command: "%s", args: ["%s"], start_timeout: 120}
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        mcp: [{server: shop, include: [echo]}]
        sandbox:
          policy:
            rules: [{tool: shop__echo, verdict: ask}]
"""


class _Yes:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request.tool)
        return ApprovalAnswer(True, "cli")


def test_a_pack_uses_an_mcp_tool_end_to_end_and_replays_without_the_server(
    tmp_path: Path,
) -> None:
    config = tmp_path / "fabric.yaml"
    config.write_text(textwrap.dedent(CONFIG % (sys.executable, SHOP)))
    script = [
        tool_call("shop__echo", {"text": "ping"}),
        tool_call("finish_task", {"answer": "pong"}),
    ]
    runner = build_runner(load_config(config), chat_factory=lambda m: ScriptedChatClient(script))
    approver = _Yes()
    request = RunRequest("helper", "say ping", workspace=tmp_path)
    result = asyncio.run(runner.run(request, Control(approver=approver)))
    assert result.status.value == "completed", result.error
    assert approver.asked == ["shop__echo"]  # the policy asked, like for any tool
    events = assert_valid_runlog(read_events(result.runlog_path or ""))
    started = events[0]
    assert started["mcp"]["tools"] == [{"name": "shop__echo", "server": "shop", "tool": "echo"}]
    [output] = [e["output"] for e in events if e["kind"] == "tool_result"]
    assert output.startswith("echo: ping")
    # the server is gone: a replay answers from the runlog and starts nothing
    config.write_text(config.read_text().replace(sys.executable, "/nonexistent/python"))
    replayer = build_runner(load_config(config), chat_factory=lambda m: ScriptedChatClient([]))
    report = asyncio.run(replayer.replay(Path(result.runlog_path or "")))
    assert report.identical, report.divergence
    # and a run now fails at its start, saying why and what to do
    broken = asyncio.run(replayer.run(request, Control(approver=approver)))
    assert broken.status.value == "failed" and broken.error is not None
    assert "not installed" in broken.error["message"] and "mcp_servers.shop" in broken.error["hint"]


def test_fabric_mcp_list_shows_each_server_and_its_tools(tmp_path: Path) -> None:
    config = tmp_path / "fabric.yaml"
    body = textwrap.dedent(CONFIG % (sys.executable, SHOP))
    gone = 'start_timeout: 120}\n  gone: {command: "/nonexistent/server"}\n'
    config.write_text(body.replace("start_timeout: 120}\n", gone))
    out = CliRunner().invoke(app, ["mcp", "list", "--config", str(config)])
    assert out.exit_code == 1, out.output
    assert "shop (stdio: " in out.output and "starts, 10 tools" in out.output
    assert "shop__weird_name_" in out.output and "left out: bad_schema" in out.output
    assert "gone (stdio: /nonexistent/server): does not start" in out.output


def test_a_tool_is_safe_to_repeat_only_when_its_server_says_so() -> None:
    from fabric.infrastructure.mcp.toolbox import spec_of

    def safe(annotations: Any) -> bool:
        listed = {"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations}
        spec = spec_of("s__t", listed)
        assert not isinstance(spec, str)
        return spec.repeat_safe

    assert safe({"readOnlyHint": True}) and safe({"idempotentHint": True})
    assert not safe(None) and not safe({}) and not safe({"destructiveHint": False})
    assert not safe({"readOnlyHint": "yes"})  # only a JSON true counts
