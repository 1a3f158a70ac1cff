"""A pack's MCP tools through a run's whole life, for real: a streamable HTTP server (the test
SDK server on 127.0.0.1, its header taken from the environment), a run cancelled during a slow
MCP call, a run resumed (the server started again for the new steps), and a replay with
``--live-tools`` (the server started again, the same answers)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import assert_valid_runlog, free_port, read_events
from typer.testing import CliRunner

from fabric.application.job import Control, RunRequest
from fabric.config.loader import load_config
from fabric.domain.models import ChatDelta
from fabric.interfaces.cli.app import app
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

SHOP = str(Path(__file__).parents[1] / "mcp_servers" / "toolshop.py")
GUARD = 60.0  # seconds: hang guards only
CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    runs_dir: runs
    mcp_servers:
      shop: {command: "%s", args: ["%s"], start_timeout: 120, call_timeout: 300, protocol: legacy}
      web: {url: "%s", headers: {X-Shop-Key: SHOP_KEY}, start_timeout: 60}
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        mcp: [{server: shop, include: [facts, slow]}]
      grower:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        mcp: [{server: shop, include: [grow, added, echo]}]
      webby:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        mcp: [{server: web, include: [facts]}]
"""
FINISH = tool_call("finish_task", {"answer": "42"})


@pytest.fixture
def web_shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test server over streamable HTTP on a free loopback port; yields its URL."""
    monkeypatch.setenv("SHOP_KEY", "k3y-for-the-shop")
    port = free_port()
    log = (tmp_path / "web-shop.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, SHOP, "--http", str(port)], stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + GUARD
        while True:
            assert proc.poll() is None, (tmp_path / "web-shop.log").read_text()
            assert time.monotonic() < deadline, "the HTTP test server never answered"
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait(GUARD)
        log.close()


def _config(folder: Path, url: str = "http://127.0.0.1:9/mcp") -> Path:
    config = folder / "fabric.yaml"
    config.write_text(textwrap.dedent(CONFIG % (sys.executable, SHOP, url)))
    (folder / "ws").mkdir(exist_ok=True)
    return config


def _runner(config: Path, script: list[Any]) -> Any:
    return build_runner(load_config(config), chat_factory=lambda m: ScriptedChatClient(script))


def _outputs(events: list[dict[str, Any]]) -> list[str]:
    return [str(e.get("output") or e.get("error")) for e in events if e["kind"] == "tool_result"]


def test_a_pack_uses_a_streamable_http_server(tmp_path: Path, web_shop: str) -> None:
    config = _config(tmp_path, web_shop)
    runner = _runner(config, [tool_call("web__facts", {}), FINISH])
    request = RunRequest("webby", "facts please", workspace=tmp_path / "ws")
    result = asyncio.run(runner.run(request))
    assert result.status.value == "completed", result.error
    events = assert_valid_runlog(read_events(result.runlog_path or ""))
    assert events[0]["mcp"]["servers"]["web"]["protocol"]
    assert _outputs(events) == ['structured content: {"answer": 42}']
    # without the header's variable the server cannot be reached, and the run says why
    os.environ.pop("SHOP_KEY")
    broken = asyncio.run(_runner(config, [FINISH]).run(request))
    assert broken.status.value == "failed" and broken.error is not None
    assert "SHOP_KEY" in broken.error["message"]


class _CancelOnCall:
    """Cancels the run once the model's call of ``tool`` is under way."""

    def __init__(self, tool: str) -> None:
        self.tool, self.cancel = tool, asyncio.Event()

    def event(self, event: Mapping[str, Any]) -> None:
        if event.get("kind") == "tool_call" and event.get("name") == self.tool:
            asyncio.get_running_loop().call_later(0.5, self.cancel.set)

    def delta(self, delta: ChatDelta) -> None:
        return None


def test_cancelling_a_run_during_a_slow_mcp_call_cuts_the_call(tmp_path: Path) -> None:
    runner = _runner(_config(tmp_path), [tool_call("shop__slow", {}), FINISH])
    watch = _CancelOnCall("shop__slow")
    request = RunRequest("helper", "be slow", workspace=tmp_path / "ws")

    async def go() -> Any:
        return await asyncio.wait_for(
            runner.run(request, Control(cancel=watch.cancel, observers=(watch,))), 250
        )  # a hang guard only: uncut, the call would end after a minute, saying "finally"

    result = asyncio.run(go())
    assert result.status.value == "cancelled"
    events = assert_valid_runlog(read_events(result.runlog_path or ""))
    [said] = _outputs(events)
    assert "cancelled during this shop__slow call" in said and "finally" not in said


def test_a_run_that_used_an_mcp_tool_resumes_and_replays_with_live_tools(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    request = RunRequest("helper", "facts", workspace=tmp_path / "ws", max_steps=1)
    first = asyncio.run(_runner(config, [tool_call("shop__facts", {})]).run(request))
    assert first.status.value == "max_steps", first.error
    path = Path(first.runlog_path or "")
    # resumed: step 1 answered from the runlog, the server started again for step 2
    resumer = _runner(config, [tool_call("shop__facts", {}), FINISH])
    events = resumer.read_runlog(path)
    result = asyncio.run(resumer.resume(events, path, max_steps=3))
    assert result.status.value == "completed", result.error
    events = assert_valid_runlog(read_events(path))
    kinds = [e["kind"] for e in events]
    assert "run_resumed" in kinds
    after = events[kinds.index("run_resumed") :]
    [again] = _outputs(after)  # a live call (with the loop's note on a repeated call)
    assert again.startswith('structured content: {"answer": 42}')
    assert len(_outputs(events)) == 2
    # replayed with the real tools: the server is started again and answers the same
    out = CliRunner().invoke(
        app, ["replay", str(path), "--live-tools", "--config", str(config), "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.output[out.output.index("{") :])
    assert report["status"] == "identical", report
    assert_valid_runlog(read_events(report["runlog"]))
    # it did start the server: with the server gone, --live-tools cannot replay and says why
    config.write_text(config.read_text().replace(sys.executable, "/nonexistent/python"))
    gone = CliRunner().invoke(app, ["replay", str(path), "--live-tools", "--config", str(config)])
    assert gone.exit_code == 2 and "--live-tools" in gone.output, gone.output


def _offered(request: Mapping[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["tools"]]


def test_a_tool_a_server_adds_mid_run_is_offered_logged_replayed_and_resumed(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    grow, added = tool_call("shop__grow", {}), tool_call("shop__added", {"text": "hi"})
    request = RunRequest("grower", "grow", workspace=tmp_path / "ws", max_steps=3)
    first = asyncio.run(_runner(config, [grow, tool_call("shop__echo", {}), added]).run(request))
    assert first.status.value == "max_steps", first.error
    path = Path(first.runlog_path or "")
    events = assert_valid_runlog(read_events(path))
    requests = [e for e in events if e["kind"] == "llm_request"]
    assert _offered(requests[0]) == ["shop__echo", "shop__grow", "finish_task"]
    # the server said its list changed: the next request offers the new tool, and says so
    assert _offered(requests[1]) == ["shop__echo", "shop__grow", "shop__added", "finish_task"]
    assert requests[1]["tools_changed"]["added"] == [
        {"name": "shop__added", "server": "shop", "tool": "added"}
    ]
    assert "tools" not in requests[2]  # unchanged since
    assert _outputs(events)[-1].startswith("echo: hi")  # the model could call it
    # replayed with the server gone: the tool comes and answers at the same step
    gone = config.read_text().replace(sys.executable, "/nonexistent/python")
    config.write_text(gone)
    report = asyncio.run(_runner(config, []).replay(path))
    assert report.identical, report.divergence
    # resumed: steps 1-3 offer what they offered then; the server, started afresh, no longer
    # has the tool, and step 4 says so
    config.write_text(gone.replace("/nonexistent/python", sys.executable))
    resumer = _runner(config, [FINISH])
    result = asyncio.run(resumer.resume(resumer.read_runlog(path), path, max_steps=4))
    assert result.status.value == "completed", result.error
    events = assert_valid_runlog(read_events(path))
    [resumed] = [e for e in events if e["kind"] == "run_resumed"]
    assert [t["name"] for t in resumed["mcp"]["tools"]] == ["shop__echo", "shop__grow"]
    last = [e for e in events if e["kind"] == "llm_request"][-1]
    assert last["step"] == 4 and _offered(last) == ["shop__echo", "shop__grow", "finish_task"]
    assert last["tools_changed"]["removed"] == ["shop__added"]
    shown = CliRunner().invoke(app, ["show", str(path)])
    assert "step  2  tools changed: + shop__added" in shown.output, shown.output
    assert "step  4  tools changed (resumed): - shop__added" in shown.output
    # and the resumed run replays as it went
    report = asyncio.run(_runner(config, []).replay(path))
    assert report.identical, report.divergence
