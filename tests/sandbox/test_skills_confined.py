"""A skill's scripts run through the pack's own ``shell`` tool, confined like every command
(ADR 0027), under each confining backend this machine offers, judged on the host: a
configured skill folder outside the workspace (here under /tmp, which bubblewrap otherwise
replaces with an empty one) can be read and its script run, but not changed; fabric's runs
folder stays hidden; a configured skill folder inside the workspace is read-only for file
tools and commands alike."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

from support import read_events

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    runs_dir: runs
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        tools: [write_file, shell]
        sandbox: {allowed_commands: [python], confinement: %s, command_timeout: 60}
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        skills: {folders: [%s]}
"""
SKILL = "---\nname: probe\ndescription: Looks around.\n---\nRun scripts/probe.py.\n"
PROBE = """\
import pathlib, sys
here = pathlib.Path(__file__).resolve().parent.parent
print("ran from", here)
for target in (here / "SKILL.md", here / "new.txt"):
    try:
        with open(target, "a") as f:
            f.write("changed by the script")
        print("WROTE", target.name)
    except OSError as exc:
        print("refused", target.name, exc.errno)
try:
    print("runs folder lists", sorted(p.name for p in pathlib.Path(sys.argv[1]).iterdir()))
except OSError as exc:
    print("runs folder unreadable", exc.errno)
pathlib.Path("out.txt").write_text("the workspace is writable")
"""


def _project(root: Path, backend: str, folder: str) -> tuple[Path, Path]:
    """A config folder ``root`` and the skill folder ``folder`` (relative to it) with the
    ``probe`` skill; returns the workspace and the skill's folder."""
    skill = root / folder / "probe"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL)
    (skill / "scripts" / "probe.py").write_text(PROBE)
    (root / "fabric.yaml").write_text(textwrap.dedent(CONFIG % (backend, folder)))
    (root / "ws").mkdir(exist_ok=True)
    return root / "ws", skill


def _run(root: Path, workspace: Path, script: list[Any]) -> list[dict[str, Any]]:
    loaded = load_config(root / "fabric.yaml")
    runner = build_runner(loaded, chat_factory=lambda m: ScriptedChatClient(script))
    try:
        result = asyncio.run(runner.run(RunRequest("helper", "look", workspace=workspace)))
    finally:
        asyncio.run(runner.aclose())
    assert result.status.value == "completed", result.error
    return read_events(result.runlog_path or "")


def _outputs(events: list[dict[str, Any]], name: str) -> list[str]:
    return [
        str(e["output"] if e["ok"] else e["error"]["message"])
        for e in events
        if e["kind"] == "tool_result" and e["name"] == name
    ]


def test_a_configured_skill_s_script_runs_confined(tmp_path: Path, backend: str) -> None:
    workspace, skill = _project(tmp_path, backend, "team-skills")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "other-run").mkdir()
    script = [
        tool_call("load_skill", {"name": "probe"}),
        tool_call("shell", {"command": f"python {skill}/scripts/probe.py {tmp_path / 'runs'}"}),
        tool_call("finish_task", {"answer": "looked"}),
    ]
    events = _run(tmp_path, workspace, script)
    assert events[0]["confinement"]["backend"] == backend
    [loaded] = _outputs(events, "load_skill")
    assert f"- {skill}/scripts/probe.py\n" in loaded
    [ran] = _outputs(events, "shell")
    assert ran.startswith(f"[exit code 0]\nran from {skill}\nrefused SKILL.md 30\n"), ran
    assert "refused new.txt" in ran and "WROTE" not in ran
    assert "other-run" not in ran  # the runs folder stays hidden
    # judged on the host: the skill is as it was, the workspace got the script's output
    assert (skill / "SKILL.md").read_text() == SKILL
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md", "scripts"]
    assert (workspace / "out.txt").read_text() == "the workspace is writable"


def test_a_configured_skill_folder_inside_the_workspace_is_read_only(
    tmp_path: Path, backend: str
) -> None:
    workspace, skill = _project(tmp_path, backend, "ws/team-skills")
    script = [
        tool_call("write_file", {"path": "team-skills/probe/SKILL.md", "content": "x"}),
        tool_call("write_file", {"path": "team-skills/planted/SKILL.md", "content": "x"}),
        tool_call("shell", {"command": "python team-skills/probe/scripts/probe.py runs"}),
        tool_call("finish_task", {"answer": "looked"}),
    ]
    events = _run(tmp_path, workspace, script)
    assert events[0]["additions"]["skills"]["offered"][0]["source"] == "configured"
    refused, planted = _outputs(events, "write_file")
    assert refused.startswith("'team-skills/probe/SKILL.md' is read-only for tools")
    assert planted.startswith("'team-skills/planted/SKILL.md' is read-only for tools")
    [ran] = _outputs(events, "shell")
    assert "refused SKILL.md 30" in ran and "WROTE" not in ran, ran
    assert (skill / "SKILL.md").read_text() == SKILL
    assert sorted(p.name for p in (workspace / "team-skills").iterdir()) == ["probe"]
