"""What fabric's conventions (ADR 0025) cost a run of a pack that leaves them at their
defaults: the code of those that are off, and of tool search below its threshold, is never
imported (each module a run imports costs every run that starts)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RUN = """
import asyncio, sys
from pathlib import Path
from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

script = [tool_call("list_files", path="."), tool_call("finish_task", answer="done")]
chat = lambda model: ScriptedChatClient(script)
runner = build_runner(load_config(Path("fabric.yaml")), chat_factory=chat)
result = asyncio.run(runner.run(RunRequest("coder", "look", workspace=Path("ws").resolve())))
assert result.status.value == "completed", result.error
print("\\n".join(sorted(sys.modules)))
"""

CONFIG = """
llm:
  backends:
    mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}
runs_dir: runs
packs:
  coder:
    builder: declarative
    description: Reads code.
    system_prompt: You read code.
    tools: [read_file, list_files]
    finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
"""


def test_a_run_at_the_defaults_imports_no_convention_that_is_off(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(textwrap.dedent(CONFIG))
    (tmp_path / "ws").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RUN], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    imported = set(done.stdout.split())
    assert "fabric.infrastructure.additions.instructions" in imported  # on by default
    never = {
        "fabric.application.plan",  # plan: off
        "fabric.infrastructure.additions.memory",  # memory: off
        "fabric.infrastructure.additions.memory_store",
        "sqlite3",
        "fabric.infrastructure.additions.skill_folders",  # no skill folder anywhere
        "fabric.infrastructure.additions.load_skill",
        "fabric.application.loop.ranking",  # two tools: nothing to search
    }
    assert imported.isdisjoint(never), sorted(imported & never)
