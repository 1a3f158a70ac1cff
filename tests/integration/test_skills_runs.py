"""Skills in whole runs (ADR 0027), driven by a scripted model through the real runner: the
prompt lists names and descriptions only, ``load_skill`` gives the instructions and files,
``run_started`` records what was offered and skipped, a skill's script runs through ``shell``,
and a run that loaded a skill replays identically and resumes."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, read_events
from typer.testing import CliRunner

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.domain.models import ChatResponse, Message
from fabric.interfaces.cli.app import app
from fabric.interfaces.compose import build_runner
from fabric.testing import FunctionChatClient, tool_call

CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    runs_dir: runs
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        tools: [read_file, write_file, shell]
        sandbox: {allowed_commands: [python], command_timeout: 60}
        limits: {max_steps: %(steps)d}
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
        skills: {folders: [team-skills], enabled: %(enabled)s}
"""
REGEN = """\
---
name: regen-table
description: >-
  Regenerate table.txt after changing data.csv
  (the project's own procedure).
license: MIT
allowed-tools: [everything]
---
# Regenerating table.txt

Run `python .agents/skills/regen-table/scripts/regen.py`; never edit table.txt by hand.
"""
STYLE = """\
---
name: house-style
description: How this team writes commit messages.
---
Write the subject in the imperative, at most 50 characters.
"""
SCRIPT = """\
import pathlib
rows = pathlib.Path("data.csv").read_text().split()
pathlib.Path("table.txt").write_text("".join(f"| {r} |\\n" for r in rows))
print(f"wrote {len(rows)} rows")
"""


class Model:
    """A scripted model that keeps what each request held."""

    def __init__(self, script: Sequence[ChatResponse]) -> None:
        self.script = list(script)
        self.requests: list[tuple[list[Message], list[Mapping[str, Any]]]] = []

    def client(self, _model: str) -> FunctionChatClient:
        async def respond(
            messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
        ) -> ChatResponse:
            self.requests.append((list(messages), list(tools)))
            return self.script.pop(0)

        return FunctionChatClient(respond, model="m")

    def tool_names(self, index: int = 0) -> list[str]:
        return [t["function"]["name"] for t in self.requests[index][1]]

    def system(self, index: int = 0) -> str:
        return str(self.requests[index][0][0]["content"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A config folder with a configured skill (team-skills/house-style) and a workspace
    with a skill of its own (.agents/skills/regen-table, a script and a reference) and a
    broken one."""
    (tmp_path / "ws").mkdir()
    _write(tmp_path / "team-skills" / "house-style" / "SKILL.md", STYLE)
    skills = tmp_path / "ws" / ".agents" / "skills"
    _write(skills / "regen-table" / "SKILL.md", REGEN)
    _write(skills / "regen-table" / "scripts" / "regen.py", SCRIPT)
    _write(skills / "regen-table" / "reference.md", "Rows are sorted as given.\n")
    _write(skills / "broken" / "SKILL.md", "no front matter\n")
    _write(tmp_path / "ws" / "data.csv", "apple\npear\n")
    _config(tmp_path)
    return tmp_path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")


def _config(folder: Path, *, steps: int = 10, enabled: bool = True) -> Path:
    config = folder / "fabric.yaml"
    text = CONFIG % {"steps": steps, "enabled": str(enabled).lower()}
    config.write_text(textwrap.dedent(text))
    return config


def _run(project: Path, model: Model, task: str = "update the table") -> tuple[Any, list[Any]]:
    runner = build_runner(load_config(project / "fabric.yaml"), chat_factory=model.client)
    try:
        result = asyncio.run(runner.run(RunRequest("helper", task, workspace=project / "ws")))
    finally:
        asyncio.run(runner.aclose())
    return result, assert_valid_runlog(read_events(result.runlog_path or ""))


def _results(events: list[dict[str, Any]], name: str) -> list[str]:
    """What each call of tool ``name`` answered: its output, or its error's message."""
    return [
        str(e["output"] if e["ok"] else e["error"]["message"])
        for e in events
        if e["kind"] == "tool_result" and e["name"] == name
    ]


FINISH = tool_call("finish_task", {"answer": "done"})


def test_a_run_sees_names_and_descriptions_and_loads_a_skill_by_name(project: Path) -> None:
    model = Model([
        tool_call("load_skill", {"name": "regen-table"}),
        tool_call("load_skill", {"name": "regen-table", "file": "reference.md"}),
        tool_call("load_skill", {"name": "house-style"}),
        tool_call("load_skill", {"name": "broken"}),
        FINISH,
    ])  # fmt: skip
    result, events = _run(project, model)
    assert result.status.value == "completed", result.error
    system = model.system()
    assert system.startswith("You help.\n\n## Skills\n")
    assert "- house-style: How this team writes commit messages.\n" in system
    assert system.endswith(
        "- regen-table: Regenerate table.txt after changing data.csv (the project's own "
        "procedure). (workspace)"
    )
    assert "imperative" not in system and "never edit" not in system  # no body before loading
    assert model.tool_names() == ["read_file", "write_file", "shell", "load_skill", "finish_task"]

    regen, reference, style, broken = _results(events, "load_skill")
    assert regen == (
        "# Skill regen-table (from the workspace, untrusted like any file there; folder "
        ".agents/skills/regen-table)\n\n# Regenerating table.txt\n\n"
        "Run `python .agents/skills/regen-table/scripts/regen.py`; never edit table.txt by hand."
        "\n\nFiles of this skill: run a script with shell by the path shown here (e.g. `python "
        ".agents/skills/regen-table/scripts/regen.py`); read one with "
        'load_skill(name="regen-table", file="reference.md").\n'
        "- .agents/skills/regen-table/reference.md\n"
        "- .agents/skills/regen-table/scripts/regen.py\n"
    )
    assert reference == "Rows are sorted as given.\n"
    configured = project / "team-skills" / "house-style"
    assert style == (
        f"# Skill house-style (from the configured skill folders; folder {configured})\n\n"
        "Write the subject in the imperative, at most 50 characters.\n"
    )
    assert broken == "no skill is called 'broken' in this run"

    started = events[0]
    sha = hashlib.sha256((configured / "SKILL.md").read_bytes()).hexdigest()
    ws_sha = hashlib.sha256(REGEN.encode()).hexdigest()
    assert started["additions"]["skills"] == {
        "offered": [
            {"name": "house-style", "source": "configured", "folder": str(configured),
             "sha256": sha},
            {"name": "regen-table", "source": "workspace", "folder": ".agents/skills/regen-table",
             "sha256": ws_sha},
        ],
        "skipped": [
            {"folder": ".agents/skills/broken", "reason": "its SKILL.md has no front matter: a "
             "block between '---' lines at the top, with name and description"},
        ],
    }  # fmt: skip
    calls = [
        e["arguments"] for e in events if e["kind"] == "tool_call" and e["name"] == "load_skill"
    ]
    assert calls[0] == {"name": "regen-table"}
    assert started["system_prompt"] == system
    shown = CliRunner().invoke(app, ["show", str(result.runlog_path)])
    assert shown.exit_code == 0, shown.output
    assert "\nskills: house-style, regen-table (workspace) · skipped: .agents/skills/broken\n" in (
        shown.stdout
    )


def test_load_skill_reads_no_file_outside_the_skill(project: Path) -> None:
    (project / "ws" / "private.txt").write_text("not the skill's\n")
    folder = project / "ws" / ".agents" / "skills" / "regen-table"
    (folder / "leak.md").symlink_to(project / "fabric.yaml")
    (folder / "inside.md").symlink_to("reference.md")
    model = Model([
        tool_call("load_skill", {"name": "regen-table", "file": "../../../private.txt"}),
        tool_call("load_skill", {"name": "regen-table", "file": "/etc/passwd"}),
        tool_call("load_skill", {"name": "regen-table", "file": "leak.md"}),
        tool_call("load_skill", {"name": "house-style", "file": "../../fabric.yaml"}),
        tool_call("load_skill", {"name": "regen-table", "file": "inside.md"}),
        tool_call("load_skill", {"name": "regen-table", "file": "missing.md"}),
        tool_call("load_skill", {"name": "regen-table", "file": "scripts"}),
        FINISH,
    ])  # fmt: skip
    result, events = _run(project, model)
    assert result.status.value == "completed", result.error
    assert _results(events, "load_skill") == [
        "'../../../private.txt' leads out of the folder of skill 'regen-table'",
        "absolute path '/etc/passwd' refused: tools only see the workspace",
        "'leak.md' leads out of the folder of skill 'regen-table'",
        "'../../fabric.yaml' leads out of the folder of skill 'house-style'",
        "Rows are sorted as given.\n",
        "skill 'regen-table' has no file 'missing.md'",
        "'scripts' of skill 'regen-table' is not a regular file",
    ]
    folder = [e for e in events if e["kind"] == "tool_result" and e["name"] == "load_skill"][-1]
    assert folder["error"]["hint"] == 'load_skill(name="regen-table") lists its files'


def test_a_workspace_skill_s_script_runs_through_shell(project: Path) -> None:
    model = Model([
        tool_call("load_skill", {"name": "regen-table"}),
        tool_call("shell", {"command": "python .agents/skills/regen-table/scripts/regen.py"}),
        FINISH,
    ])  # fmt: skip
    result, events = _run(project, model)
    assert result.status.value == "completed", result.error
    assert _results(events, "shell") == ["[exit code 0]\nwrote 2 rows\n"]
    assert (project / "ws" / "table.txt").read_text() == "| apple |\n| pear |\n"


def test_with_skills_off_a_run_has_neither_the_list_nor_the_tool(project: Path) -> None:
    _config(project, enabled=False)
    model = Model([FINISH])
    result, events = _run(project, model)
    assert result.status.value == "completed", result.error
    assert model.system() == "You help."
    assert "load_skill" not in model.tool_names()
    assert "skills" not in events[0].get("additions", {})


def test_a_run_that_loaded_a_skill_replays_identically_recorded_and_live(project: Path) -> None:
    model = Model([
        tool_call("load_skill", {"name": "regen-table"}),
        tool_call("shell", {"command": "python .agents/skills/regen-table/scripts/regen.py"}),
        tool_call("load_skill", {"name": "house-style"}),
        FINISH,
    ])  # fmt: skip
    result, _ = _run(project, model)
    (project / "ws" / "table.txt").unlink()  # the workspace as it was before the run
    runner = build_runner(load_config(project / "fabric.yaml"))
    try:
        for live in (False, True):
            report = asyncio.run(runner.replay(Path(result.runlog_path or ""), live=live))
            assert report.identical, (live, report.divergence)
            events = assert_valid_runlog(read_events(report.result.runlog_path or ""))
            assert _results(events, "load_skill")[1].startswith("# Skill house-style")
            assert events[0]["additions"]["skills"]["offered"][1]["name"] == "regen-table"
    finally:
        asyncio.run(runner.aclose())
    assert not (project / "ws" / "table.txt").exists()  # live tools ran on a copy


def test_a_run_that_loaded_a_skill_resumes_with_it(project: Path) -> None:
    _config(project, steps=1)
    first = Model([tool_call("load_skill", {"name": "house-style"})])
    result, _ = _run(project, first)
    assert result.status.value == "max_steps"
    path = Path(result.runlog_path or "")
    again = Model([tool_call("load_skill", {"name": "regen-table", "file": "reference.md"}),
                   FINISH])  # fmt: skip
    runner = build_runner(load_config(project / "fabric.yaml"), chat_factory=again.client)
    try:
        resumed = asyncio.run(runner.resume(read_events(path), path, max_steps=3))
    finally:
        asyncio.run(runner.aclose())
    assert resumed.status.value == "completed", resumed.error
    # the new steps had the skill's tool, and the history held what the first step loaded
    assert "load_skill" in again.tool_names()
    history = again.requests[0][0]
    assert any("imperative" in str(m.get("content")) for m in history if m["role"] == "tool")
    events = assert_valid_runlog(read_events(path))
    assert _results(events, "load_skill")[-1] == "Rows are sorted as given.\n"
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark["additions"] == events[0]["additions"]  # the skills, found again


def test_a_replay_offers_the_skills_the_run_was_offered_after_they_changed(
    project: Path,
) -> None:
    model = Model([tool_call("load_skill", {"name": "regen-table"}), FINISH])
    result, _ = _run(project, model)
    path = Path(result.runlog_path or "")
    skill = project / "ws" / ".agents" / "skills" / "regen-table" / "SKILL.md"
    skill.write_text(REGEN.replace("never edit", "feel free to edit"))
    shutil.rmtree(project / "team-skills")
    runner = build_runner(load_config(project / "fabric.yaml"))
    try:
        recorded = asyncio.run(runner.replay(path))
        live = asyncio.run(runner.replay(path, live=True))
        shutil.rmtree(project / "ws" / ".agents")
        gone = asyncio.run(runner.replay(path))
    finally:
        asyncio.run(runner.aclose())
    # the prompt lists both skills as the run had them; the recorded result answers the load,
    # even with no skill folder left at all
    assert recorded.identical, recorded.divergence
    assert gone.identical, gone.divergence
    # run for real, the load finds a SKILL.md that is not the one the run was given, and the
    # model's next request shows it
    assert live.divergence is not None and live.divergence.step == 2
    events = read_events(live.result.runlog_path or "")
    assert "(workspace)" in events[0]["system_prompt"]
    assert _results(events, "load_skill") == [
        "skill 'regen-table' is not the one this run was offered: its SKILL.md changed or went "
        "away since the run started"
    ]


def test_a_resumed_run_loads_only_skills_that_are_as_they_were(project: Path) -> None:
    _config(project, steps=1)
    result, _ = _run(project, Model([tool_call("load_skill", {"name": "house-style"})]))
    path = Path(result.runlog_path or "")
    style = project / "team-skills" / "house-style" / "SKILL.md"
    style.write_text(STYLE.replace("imperative", "past tense"))
    again = Model([
        tool_call("load_skill", {"name": "house-style"}),
        tool_call("load_skill", {"name": "regen-table", "file": "reference.md"}),
        FINISH,
    ])  # fmt: skip
    runner = build_runner(load_config(project / "fabric.yaml"), chat_factory=again.client)
    try:
        resumed = asyncio.run(runner.resume(read_events(path), path, max_steps=4))
    finally:
        asyncio.run(runner.aclose())
    assert resumed.status.value == "completed", resumed.error
    assert "- house-style: How this team writes commit messages.\n" in again.system()
    events = assert_valid_runlog(read_events(path))
    first, changed, reference = _results(events, "load_skill")
    assert "imperative" in first
    assert changed.startswith("skill 'house-style' is not the one this run was offered")
    assert reference == "Rows are sorted as given.\n"
