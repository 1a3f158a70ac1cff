"""Delegation end to end (ADR 0021): `fabric run` of a pack that hands part of its task to
another whose tool starts a real, confined subprocess; then `fabric show` of the first run
shows the delegated run under the call that started it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, read_events

from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: openai
  backends:
    openai: {{kind: openai, base_url: "{url}"}}
  models: {{default: mock}}
runs_dir: runs
packs:
  lead:
    builder: declarative
    description: Leads.
    system_prompt: You lead.
    tools: [read_file]
    delegates: [builder]
    sandbox: {{allowed_commands: [python]}}
    finish_schema: {{type: object, properties: {{answer: {{type: string}}}}, required: [answer]}}
  builder:
    builder: declarative
    description: Builds files with python.
    system_prompt: You build.
    tools: [shell]
    sandbox: {{allowed_commands: [python, git]}}
    finish_schema: {{type: object, properties: {{built: {{type: string}}}}, required: [built]}}
"""
BUILD = "python -c \"open('built.txt', 'w').write('built by a sub-run')\""


def model(body: dict[str, Any]) -> tuple[int, Any]:
    messages = body["messages"]
    lead = str(messages[0]["content"]).startswith("You lead")
    step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
    if lead and step == 1:
        return 200, completion(None, [("delegate_builder", {"task": "write built.txt"})])
    if lead and step == 2:
        return 200, completion(None, [("read_file", {"path": "built.txt"})])
    if lead:
        return 200, completion(None, [("finish_task", {"answer": "built and read"})])
    if step == 1:
        return 200, completion(None, [("shell", {"command": BUILD})])
    return 200, completion(None, [("finish_task", {"built": "built.txt"})])


def _fabric(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fabric", *argv, "--config", str(folder / "fabric.yaml")],
        cwd=folder / "ws", capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, env={**os.environ},
    )  # fmt: skip


def test_a_run_delegates_to_a_pack_whose_command_really_runs(tmp_path: Path) -> None:
    with MockOpenAIServer(model) as server:
        (tmp_path / "fabric.yaml").write_text(CONFIG.format(url=server.base_url))
        (tmp_path / "ws").mkdir()
        ran = _fabric(tmp_path, "run", "--pack", "lead", "--json", "build it")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout[ran.stdout.index("{") :])
    assert result["status"] == "completed" and result["payload"] == {"answer": "built and read"}
    assert (tmp_path / "ws" / "built.txt").read_text() == "built by a sub-run"

    lead = assert_valid_runlog(read_events(tmp_path / "runs" / result["run_id"] / "runlog.jsonl"))
    [delegated] = [e for e in lead if e["kind"] == "tool_result" and e["step"] == 1]
    [child_id] = delegated["child_run_ids"]
    child = assert_valid_runlog(read_events(tmp_path / "runs" / child_id / "runlog.jsonl"))
    assert child[0]["parent"]["run_id"] == result["run_id"]
    assert child[0]["sandbox"]["allowed_commands"] == ["python"]  # no git: the lead has none
    [command] = [e for e in child if e["kind"] == "tool_result"]
    assert command["ok"] and command["name"] == "shell"

    shown = _fabric(tmp_path, "show", result["run_id"])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    under = [line for line in lines if line.startswith("    │ ")]
    assert any(f"run {child_id} · pack builder" in line for line in under)
    assert any(f"delegated by run {result['run_id']}" in line for line in under)
    assert any("shell" in line for line in under)
    # the delegated run is shown right under the call that started it
    call = next(i for i, line in enumerate(lines) if "delegate_builder" in line)
    assert lines[call + 1].startswith("    │ ")
