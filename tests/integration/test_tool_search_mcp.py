"""Tool search with a real MCP server of 120 tools (the eval's toolshed, started confined):
the pack's own tools offered from the start, the server's found and loaded, a run resumed
(the server started again, the loaded tools offered on) and replayed without the server."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
from support import assert_valid_runlog, read_events
from typer.testing import CliRunner

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.cli.app import app
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

SHED = str(Path(__file__).parents[2] / "evals" / "servers" / "toolshed.py")
CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    runs_dir: runs
    mcp_servers:
      shed: {command: "%s", args: ["%s"], protocol: legacy, start_timeout: 120}
    packs:
      office:
        builder: declarative
        system_prompt: You answer questions about freight.
        tools: [read_file, list_files]
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        mcp: [{server: shed}]
"""
FUEL = "shed__rates_fuel_surcharge"
OWN = ["read_file", "list_files", "finish_task", "search_tools", "load_tools"]
FINISH = tool_call("finish_task", {"answer": "17.5 %"})


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "fabric.yaml"
    config.write_text(textwrap.dedent(CONFIG % (sys.executable, SHED)))
    (tmp_path / "ws").mkdir(exist_ok=True)
    return config


def _names(definitions: Any) -> list[str]:
    return [d["function"]["name"] for d in definitions]


def test_a_run_finds_loads_and_calls_one_of_120_server_tools(tmp_path: Path) -> None:
    config = _config(tmp_path)
    search = tool_call("search_tools", {"query": "fuel surcharge for a country"})
    load = tool_call("load_tools", {"names": [FUEL]})
    call = tool_call(FUEL, {"country": "NO"})
    first = ScriptedChatClient([search, load])
    runner = build_runner(load_config(config), chat_factory=lambda m: first)
    request = RunRequest("office", "Norway's fuel surcharge?", workspace=tmp_path / "ws")
    stopped = asyncio.run(runner.run(msgspec.structs.replace(request, max_steps=2)))
    assert stopped.status.value == "max_steps", stopped.error
    path = Path(str(stopped.runlog_path))
    events = read_events(path)
    started = events[0]
    assert started["tool_search"]["tools"] == 122 and len(started["mcp"]["tools"]) == 120
    assert started["tool_search"]["always"] == ["read_file", "list_files"]
    assert [_names(t) for _, t in first.requests] == [OWN, OWN]
    found = next(e for e in events if e["kind"] == "tool_result")["output"]
    assert found.splitlines()[1].startswith(f"- {FUEL}: The fuel surcharge in force")
    # resumed: the server starts again, the tool loaded before the stop is offered
    then = ScriptedChatClient([call, FINISH])
    runner = build_runner(load_config(config), chat_factory=lambda m: then)
    result = asyncio.run(runner.resume(events, path, max_steps=6))
    assert result.status.value == "completed", result.error
    assert [_names(t) for _, t in then.requests] == [[*OWN[:2], FUEL, *OWN[2:]]] * 2
    after = assert_valid_runlog(path)
    output = [e for e in after if e["kind"] == "tool_result"][-1]["output"]
    assert output == "Fuel surcharge for NO: 17.5 % of the base tariff, in force since " + (
        "2026-11-01 (it was 12 % before)."
    )
    # replayed with no server: the same catalog searched, the same tools offered
    replayed = CliRunner().invoke(app, ["replay", str(path), "--config", str(config), "--json"])
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.output)["status"] == "identical"


def test_with_search_off_every_schema_is_sent(tmp_path: Path, monkeypatch: Any) -> None:
    config = _config(tmp_path)
    monkeypatch.setenv("FABRIC_PACKS__OFFICE__TOOL_SEARCH__THRESHOLD", "0")
    chat = ScriptedChatClient([FINISH])
    runner = build_runner(load_config(config), chat_factory=lambda m: chat)
    request = RunRequest("office", "Norway's fuel surcharge?", workspace=tmp_path / "ws")
    result = asyncio.run(runner.run(request))
    assert result.status.value == "completed", result.error
    sent = _names(chat.requests[0][1])
    assert len(sent) == 123 and FUEL in sent and "search_tools" not in sent
    assert "tool_search" not in read_events(Path(str(result.runlog_path)))[0]
