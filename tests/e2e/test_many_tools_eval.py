"""The eval suite ``evals/many-tools`` as the docs say to run it (the repository's fabric.yaml,
its toolshed MCP server, tool search on and then off by a variable), with a scripted model
behind a loopback server standing in for a real one: the case passes both ways, and the
summary's prompt tokens per request show what search saves (ADR 0028)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support import read_events, run_fabric

from fabric.testing import MockOpenAIServer, completion

REPO = Path(__file__).resolve().parents[2]
FUEL = "toolshed__rates_fuel_surcharge"
TEST = '\n\ndef test_norway():\n    assert quote("NO", 100) == 70.5\n'
SUMMARY = "Charged Norway's fuel surcharge from the rates system, added a test; the tests pass."


def _model(body: dict[str, Any]) -> tuple[int, Any]:
    """Does the case: finds the rates tool when it has to search, else calls it at once; the
    prompt tokens it reports are the request's characters over four."""
    step = sum(m["role"] == "assistant" for m in body["messages"])
    offered = [t["function"]["name"] for t in body.get("tools", [])]
    plan: list[tuple[str, dict[str, Any]]] = [
        (FUEL, {"country": "NO"}),
        ("edit_file", {"path": "freight.py", "old": '"NO": 0.12}', "new": '"NO": 0.175}'}),
        ("write_file", {"path": "tests/test_freight.py", "content": TEST, "append": True}),
        ("finish_task", {"summary": SUMMARY}),
    ]
    if "search_tools" in offered:
        plan[:0] = [
            ("search_tools", {"query": "fuel surcharge for a country"}),
            ("load_tools", {"names": [FUEL]}),
        ]
    call = plan[min(step, len(plan) - 1)]
    return 200, completion(None, [call], prompt_tokens=len(json.dumps(body)) // 4)


def test_the_many_tools_case_with_search_on_and_off(tmp_path: Path) -> None:
    with MockOpenAIServer(_model) as server:
        figures = {}
        for name, threshold in (("on", None), ("off", "0")):
            env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
            if threshold is not None:
                env["FABRIC_PACKS__ENGINEERING__TOOL_SEARCH__THRESHOLD"] = threshold
            out = tmp_path / name
            ran = run_fabric(
                "eval", str(REPO / "evals" / "many-tools"), "--config", str(REPO / "fabric.yaml"),
                "--out", str(out), cwd=tmp_path, env=env, timeout=300,
            )  # fmt: skip
            assert ran.returncode == 0, ran.stderr
            results = json.loads((out / "results.json").read_text())
            overall = results["overall"]
            assert (overall["attempts"], overall["passed"]) == (1, 1), ran.stdout
            figures[name] = overall["prompt_tokens_per_request"]
            assert "prompt tokens / request" in (out / "summary.md").read_text()
            attempt = results["cases"][0]["runs"][0]
            events = read_events(out / attempt["runlog"])
            started = events[0]
            assert len(started["mcp"]["tools"]) == 120
            first = next(e for e in events if e["kind"] == "llm_request")["tools"]
            if name == "on":
                assert started["tool_search"]["tools"] > 120
                assert len(first) < 20 and FUEL not in str(first)
            else:
                assert "tool_search" not in started and len(first) > 120
    assert figures["on"] * 3 < figures["off"], figures
