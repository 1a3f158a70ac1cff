"""Tool search (ADR 0028): a run with more tools than its pack's threshold is offered a few of
them and search_tools/load_tools for the rest; the requests carry only what is offered, the
runlog says what was offered when, and replays and resumes offer exactly what the run did."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support import assert_valid_runlog

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.pack import Pack
from fabric.application.ports import Tool, ToolChange
from fabric.application.replay import replay
from fabric.application.resume import plan_resume, resume_task
from fabric.config.prompts import TOOL_SEARCH
from fabric.config.schema import Limits, ToolSearchSettings
from fabric.domain.models import ToolSpec
from fabric.testing import MemoryRunLog, ScriptedChatClient, tool_call, tool_calls

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city's name."}},
    "required": ["city"],
}
SYSTEMS = ("billing", "crm", "fleet", "hr", "inventory", "payroll", "shipping", "support",
           "wiki", "calendar", "mail", "storage", "metrics", "audit", "legal", "travel",
           "canteen", "parking", "printing", "security")  # fmt: skip
ACTIONS = {
    "lookup": "Look up one record",
    "list": "List the records",
    "create": "Create a record",
    "update": "Change a record",
    "delete": "Delete a record",
    "export": "Export the records as CSV",
    "import": "Import records from CSV",
    "report": "A monthly summary report",
    "history": "The change history of a record",
    "owner": "Who owns a record",
}
FINISH = tool_call("finish_task", {"answer": "rain"})
SEARCHING = ToolSearchSettings()


class Canned:
    """A tool that answers with its name and arguments, and counts its calls."""

    def __init__(self, name: str, description: str) -> None:
        self._spec = ToolSpec(name, description, CITY)
        self.calls: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        self.calls.append(dict(arguments))
        return f"{self._spec.name} for {arguments.get('city')}: rain, 12 C"


def two_hundred() -> list[Canned]:
    """199 tools of made-up office systems and the one a weather question needs... and a
    second weather tool."""
    tools = [
        Canned(f"{system}_{action}", f"{text} in the {system} system.")
        for system in SYSTEMS
        for action, text in ACTIONS.items()
    ][:198]
    tools.append(Canned("weather_forecast", "Tomorrow's weather forecast for a city: rain, wind."))
    tools.append(Canned("weather_alerts", "Storm and flood warnings in force for a city."))
    return tools


def _pack(tools: Sequence[Tool]) -> Pack:
    return Pack("office", "does office things", "You help the office.", tools, SCHEMA)


def _run(
    tmp_path: Path,
    tools: Sequence[Tool],
    script: list[Any],
    settings: ToolSearchSettings | None = SEARCHING,
    **kit: Any,
) -> tuple[list[dict[str, Any]], ScriptedChatClient, Any]:
    log, chat = MemoryRunLog(), ScriptedChatClient(script)
    job = Job("Will it rain in Oslo tomorrow?", _pack(tools), "r1", tmp_path, tool_search=settings)
    result = asyncio.run(execute_task(job, Kit(chat, log, **kit)))
    return assert_valid_runlog(log.events), chat, result


def _names(definitions: Sequence[Mapping[str, Any]]) -> list[str]:
    return [d["function"]["name"] for d in definitions]


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


OWN = ["finish_task", "search_tools", "load_tools"]
LOADED = ["weather_forecast", "weather_alerts"]


def test_a_run_with_200_tools_searches_loads_two_and_calls_one(tmp_path: Path) -> None:
    tools = two_hundred()
    script = [
        tool_call("search_tools", {"query": "weather forecast for a city"}),
        tool_call("load_tools", {"names": LOADED}),
        tool_call("weather_forecast", {"city": "Oslo"}),
        FINISH,
    ]
    events, chat, result = _run(tmp_path, tools, script)
    assert result.status.value == "completed", result.error
    # what the model was sent: only the offered schemas, the loaded ones from the next call
    sent = [_names(t) for _, t in chat.requests]
    assert sent == [OWN, OWN, [*LOADED, *OWN], [*LOADED, *OWN]]
    everything = len(json.dumps([t.spec.as_openai() for t in tools]))
    assert len(json.dumps(chat.requests[0][1])) * 20 < everything
    assert chat.requests[0][0][0]["content"] == "You help the office." + TOOL_SEARCH
    # the right tool ran, once, and no other
    assert tools[-2].calls == [{"city": "Oslo"}]
    assert sum(len(t.calls) for t in tools) == 1
    found, loaded, called = [e["output"] for e in _of(events, "tool_result")][:3]
    assert found.startswith("2 of the run's 200 tools match, best first")
    assert found.splitlines()[1].startswith("- weather_forecast: Tomorrow's weather forecast")
    assert "weather_alerts" in found.splitlines()[2]
    assert loaded.startswith("Loaded weather_forecast, weather_alerts: offered to you")
    assert called == "weather_forecast for Oslo: rain, 12 C"
    # the runlog: search on and the catalog at the start, the offer where it changed
    started = events[0]
    assert started["tool_search"]["tools"] == 200 and started["tool_search"]["threshold"] == 30
    assert _names(started["tool_search"]["catalog"]) == [t.spec.name for t in tools]
    assert started["system_prompt"].endswith(TOOL_SEARCH)
    requests = _of(events, "llm_request")
    assert _names(requests[0]["tools"]) == OWN
    assert "tools" not in requests[1] and "tools" not in requests[3]
    assert requests[2]["tools_loaded"] == LOADED
    assert _names(requests[2]["tools"]) == [*LOADED, *OWN]
    # the search and the load are ordinary tool calls of the log
    assert [e["name"] for e in _of(events, "tool_call")][:2] == ["search_tools", "load_tools"]


def test_below_the_threshold_or_with_it_off_every_tool_is_offered(tmp_path: Path) -> None:
    few = two_hundred()[-10:]
    script = [tool_call("weather_forecast", {"city": "Oslo"}), FINISH]
    searched, chat, _ = _run(tmp_path, few, script)
    _, plain_chat, _ = _run(tmp_path, few, script, settings=None)
    assert chat.requests == plain_chat.requests
    assert _names(chat.requests[0][1]) == [t.spec.name for t in few] + ["finish_task"]
    assert "tool_search" not in searched[0]
    assert searched[0]["system_prompt"] == "You help the office."
    for off in (ToolSearchSettings(threshold=0), ToolSearchSettings(threshold=None)):
        _, chat, _ = _run(tmp_path, two_hundred(), script, settings=off)
        assert len(chat.requests[0][1]) == 201
    # exactly at the threshold: every tool; one more: searched
    _, chat, _ = _run(tmp_path, two_hundred()[:30], script)
    assert len(chat.requests[0][1]) == 31
    _, chat, _ = _run(tmp_path, two_hundred()[:31], [FINISH])
    assert _names(chat.requests[0][1]) == OWN


def test_always_offers_named_tools_from_the_start(tmp_path: Path) -> None:
    settings = ToolSearchSettings(always=["weather_*", "billing_lookup", "no_such_tool"])
    script = [tool_call("load_tools", {"names": ["weather_alerts", "hr_list"]}), FINISH]
    events, chat, _ = _run(tmp_path, two_hundred(), script, settings)
    first = ["weather_alerts", "weather_forecast", "billing_lookup"]
    assert _names(chat.requests[0][1]) == [*first, *OWN]
    assert _names(chat.requests[1][1]) == [*first, "hr_list", *OWN]
    output = _of(events, "tool_result")[0]["output"]
    assert "Loaded hr_list" in output and "Offered already: weather_alerts." in output
    assert events[0]["tool_search"]["always"] == settings.always


def test_unknown_names_and_bad_arguments_say_what_to_do(tmp_path: Path) -> None:
    script = [
        tool_call("load_tools", {"names": ["weather_forcast"]}),
        tool_call("load_tools", {"names": "forecast, weather_alerts"}),  # a small model's way
        tool_call("search_tools", {"query": "  "}),
        tool_call("search_tools", {"query": "zeppelin"}),
        tool_call("load_tools", {"names": [f"t{i}" for i in range(21)]}),
        FINISH,
    ]
    events, chat, _ = _run(tmp_path, two_hundred(), script)
    unknown, mixed, empty, nothing, many = _of(events, "tool_result")[:5]
    assert not unknown["ok"]
    assert (
        "no tool of this run is named 'weather_forcast' (did you mean weather_forecast"
        in (unknown["output"])
    )
    assert mixed["ok"] and mixed["output"].startswith("Loaded weather_alerts")
    assert "'forecast' (did you mean weather_forecast" in mixed["output"]
    assert not empty["ok"] and "a query with words" in empty["output"]
    assert (
        nothing["ok"]
        and "No tool matches 'zeppelin' among the run's 200 tools" in (nothing["output"])
    )
    assert not many["ok"] and "at most 20 names" in many["output"]
    assert _names(chat.requests[2][1]) == ["weather_alerts", *OWN]


def test_a_tool_that_is_not_loaded_is_not_run(tmp_path: Path) -> None:
    tools = two_hundred()
    script = [
        tool_call("weather_forecast", {"city": "Oslo"}),
        tool_call("weather_radar", {"city": "Oslo"}),
        # loaded and called in one reply: the call runs (the schema is sent from the next)
        tool_calls(
            ("load_tools", {"names": ["weather_forecast"]}),
            ("weather_forecast", {"city": "Bergen"}),
        ),
        FINISH,
    ]
    events, _, result = _run(tmp_path, tools, script)
    assert result.status.value == "completed"
    results = _of(events, "tool_result")
    assert not results[0]["ok"]
    assert results[0]["error"]["message"] == "the tool weather_forecast exists but is not loaded"
    assert results[0]["error"]["hint"] == (
        'load it first: call load_tools with {"names": ["weather_forecast"]}'
    )
    assert not results[1]["ok"] and "unknown tool 'weather_radar'" in results[1]["output"]
    assert "search_tools finds the run's other tools" in results[1]["error"]["hint"]
    assert results[3]["ok"] and tools[-2].calls == [{"city": "Bergen"}]


def test_a_person_is_asked_only_about_a_call_that_can_run(tmp_path: Path) -> None:
    from fabric.application.approvals import AutoApprover
    from fabric.application.job import Control
    from fabric.config.schema import SandboxSettings

    tools = two_hundred()
    policy = {"rules": [{"tool": "weather_forecast", "verdict": "ask"}]}
    pack = Pack("office", "", "You help.", tools, SCHEMA, sandbox=SandboxSettings(policy=policy))
    script = [
        tool_call("weather_forecast", {"city": "Oslo"}),  # not loaded: refused, nobody asked
        tool_call("load_tools", {"names": ["weather_forecast"]}),
        tool_call("weather_forecast", {"city": "Oslo"}),
        FINISH,
    ]
    log = MemoryRunLog()
    job = Job("Rain?", pack, "r1", tmp_path, tool_search=SEARCHING)
    control = Control(approver=AutoApprover("cli --yes"))
    result = asyncio.run(execute_task(job, Kit(ScriptedChatClient(script), log), control))
    events = assert_valid_runlog(log.events)
    assert result.status.value == "completed"
    assert [e["step"] for e in _of(events, "approval_requested")] == [3]
    assert tools[-2].calls == [{"city": "Oslo"}]


class Server:
    """Stands for an MCP server whose list changes: before model call 2 it adds a radar
    tool, before call 5 it drops it again."""

    def __init__(self, own: Sequence[Tool]) -> None:
        self.own = tuple(own)
        self.radar = Canned("srv__radar", "Rain radar pictures of a city, every five minutes.")

    async def changed(self, step: int) -> ToolChange | None:
        if step == 2:
            added = {"name": "srv__radar", "server": "srv", "tool": "radar"}
            return ToolChange((*self.own, self.radar), {"servers": ["srv"], "added": [added]})
        if step == 5:
            return ToolChange(self.own, {"servers": ["srv"], "removed": ["srv__radar"]})
        return None


def test_a_server_list_change_joins_the_catalog_and_is_replayed(tmp_path: Path) -> None:
    tools = two_hundred()
    server = Server(tools)
    script = [
        tool_call("search_tools", {"query": "rain radar"}),
        tool_call("search_tools", {"query": "rain radar"}),
        tool_call("load_tools", {"names": ["srv__radar"]}),
        tool_call("srv__radar", {"city": "Oslo"}),
        tool_call("srv__radar", {"city": "Oslo"}),
        FINISH,
    ]
    events, chat, result = _run(tmp_path, tools, script, tool_updates=server)
    assert result.status.value == "completed", result.error
    before, after = [e["output"] for e in _of(events, "tool_result")][:2]
    assert "srv__radar" not in before and after.splitlines()[1].startswith("- srv__radar:")
    requests = _of(events, "llm_request")
    changed = requests[1]["tools_changed"]
    assert _names(changed["definitions"]) == ["srv__radar"]
    assert _names(requests[1]["tools"]) == OWN  # in the catalog, not offered
    assert _names(chat.requests[3][1]) == ["srv__radar", *OWN]
    assert requests[4]["tools_changed"]["removed"] == ["srv__radar"]
    assert _names(requests[4]["tools"]) == OWN  # gone from the server: not offered
    results = _of(events, "tool_result")
    assert results[3]["ok"] and not results[4]["ok"] and server.radar.calls == [{"city": "Oslo"}]
    # a replay without the server: the same catalog searched, the same tools offered
    replayed = MemoryRunLog()
    report = asyncio.run(
        replay(events, pack=_pack(tools), run_id="r2", workspace=tmp_path, kit=Kit(None, replayed))
    )
    assert report.identical, report.divergence
    again = _of(replayed.events, "llm_request")
    assert [r.get("tools") for r in again] == [r.get("tools") for r in requests]
    assert _of(replayed.events, "tool_result")[1]["output"] == after


def test_a_replay_finds_what_the_run_found(tmp_path: Path) -> None:
    script = [
        tool_call("search_tools", {"query": "weather forecast for a city"}),
        tool_call("load_tools", {"names": LOADED}),
        tool_call("weather_forecast", {"city": "Oslo"}),
        FINISH,
    ]
    events, _, _ = _run(tmp_path, two_hundred(), script)
    replayed = MemoryRunLog()
    tools = two_hundred()
    report = asyncio.run(
        replay(events, pack=_pack(tools), run_id="r2", workspace=tmp_path, kit=Kit(None, replayed))
    )
    assert report.identical, report.divergence
    assert sum(len(t.calls) for t in tools) == 0  # the recorded result answered
    assert replayed.events[0]["tool_search"] == events[0]["tool_search"]
    # the pack's tools described otherwise now: the search finds otherwise, and says where
    changed = two_hundred()
    changed[-2] = Canned("weather_forecast", "Sun and clouds.")
    report = asyncio.run(
        replay(
            events,
            pack=_pack(changed),
            run_id="r3",
            workspace=tmp_path,
            kit=Kit(None, MemoryRunLog()),
        )
    )
    assert report.divergence is not None and report.divergence.step == 2


def test_a_resumed_run_offers_what_it_had_loaded(tmp_path: Path) -> None:
    tools = two_hundred()
    script = [
        tool_call("search_tools", {"query": "weather forecast for a city"}),
        tool_call("load_tools", {"names": LOADED}),
    ]
    log = MemoryRunLog()
    job = Job(
        "Rain?", _pack(tools), "r1", tmp_path, Limits(max_steps=2), tool_search=ToolSearchSettings()
    )
    first = asyncio.run(execute_task(job, Kit(ScriptedChatClient(script), log)))
    assert first.status.value == "max_steps"
    plan = plan_resume(log.events, max_steps=4)
    live = ScriptedChatClient([tool_call("weather_alerts", {"city": "Oslo"}), FINISH])
    resumed = MemoryRunLog()
    result = asyncio.run(
        resume_task(plan, pack=_pack(tools), workspace=tmp_path, kit=Kit(live, resumed))
    )
    assert result.status.value == "completed", result.error
    # only the new steps asked the model, with the tools loaded before the run stopped
    assert [_names(t) for _, t in live.requests] == [[*LOADED, *OWN]] * 2
    assert tools[-1].calls == [{"city": "Oslo"}]
    assert resumed.events[0]["kind"] == "run_resumed"
    # the load of the last step before the stop is logged with the first new request
    new = _of(resumed.events, "llm_request")
    assert new[0]["tools_loaded"] == LOADED and _names(new[0]["tools"]) == [*LOADED, *OWN]
    assert "tools" not in new[1]
    # the resumed log replays as one run
    whole = [*log.events[:-1], *resumed.events]
    for seq, event in enumerate(whole):
        event["seq"] = seq
    report = asyncio.run(
        replay(
            whole,
            pack=_pack(two_hundred()),
            run_id="r3",
            workspace=tmp_path,
            kit=Kit(None, MemoryRunLog()),
        )
    )
    assert report.identical, report.divergence


def test_the_packs_own_tools_are_offered_always_unless_searched_too(tmp_path: Path) -> None:
    settings = ToolSearchSettings(always=["weather_alerts"])
    own = settings.for_run(["hr_list", "hr_lookup"])
    assert own.always == ["hr_list", "hr_lookup", "weather_alerts"]
    assert ToolSearchSettings(search_pack_tools=True).for_run(["hr_list"]).always == []
    _, chat, _ = _run(tmp_path, two_hundred(), [FINISH], own)
    assert _names(chat.requests[0][1]) == ["hr_list", "hr_lookup", "weather_alerts", *OWN]
    # every tool offered always: nothing to search, so no search
    _, chat, _ = _run(tmp_path, two_hundred(), [FINISH], ToolSearchSettings(always=["*"]))
    assert len(chat.requests[0][1]) == 201
    # a tool of the pack's own named like fabric's search keeps its name: no search
    taken = [*two_hundred()[1:], Canned("search_tools", "The pack's own.")]
    _, chat, _ = _run(tmp_path, taken, [FINISH])
    assert len(chat.requests[0][1]) == 201


def test_200_schemas_do_not_fit_a_small_window_and_searching_them_does(tmp_path: Path) -> None:
    """The embedded model's 8,192 tokens: every schema at once ends the run at its first
    step, saying why; searched, the run goes on."""
    small = {"context_size": 8192, "reply_tokens": 1536}
    script = [tool_call("weather_forecast", {"city": "Oslo"}), FINISH]
    _, chat, result = _run(tmp_path, two_hundred(), script, None, **small)
    assert result.status.value == "failed" and chat.requests == []
    assert "the model's context window of 8,192 holds 6,656" in result.error["message"]
    script = [tool_call("load_tools", {"names": ["weather_forecast"]}), *script]
    _, _, result = _run(tmp_path, two_hundred(), script, **small)
    assert result.status.value == "completed", result.error
