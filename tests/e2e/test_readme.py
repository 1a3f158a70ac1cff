"""The README's examples work as written: the Python pack example, run through fabric."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import assert_valid_runlog

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)
    [block] = [b for b in blocks if marker in b]
    return block


@pytest.fixture
def user_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name == "packs" or name.startswith("packs."):
            del sys.modules[name]


def test_readme_python_pack_example_runs(user_project: Path, workspace: Path) -> None:
    code = _python_block("# packs/triage.py")
    yaml_line = re.search(r"fabric\.yaml:\s+(packs: .*)$", code, re.M)
    assert yaml_line, "the example names its fabric.yaml line"
    (user_project / "packs").mkdir()
    (user_project / "packs" / "triage.py").write_text(code)
    (user_project / "fabric.yaml").write_text(
        "llm: {models: {default: m}}\n" + yaml_line.group(1) + "\n"
    )
    (workspace / "a.txt").write_text("one\ntwo\nthree\n")
    client = ScriptedChatClient(
        [tool_call("count_lines", path="a.txt"), tool_call("finish_task", label="bug")]
    )
    runner = build_runner(
        load_config(user_project / "fabric.yaml"),
        chat_factory=lambda model: client,
        runs_dir=user_project / "runs",
    )
    result = asyncio.run(runner.run(RunRequest("triage", "label this", workspace=workspace)))
    assert result.succeeded, result
    assert result.payload == {"label": "bug"}
    tool_message = next(m for m in client.requests[1][0] if m["role"] == "tool")
    assert tool_message["content"] == "3"
    assert_valid_runlog(result.runlog_path or "")


def test_readme_pack_example_stays_in_the_workspace(user_project: Path, workspace: Path) -> None:
    """The example shows pack authors the safe way to open files: it must refuse '..'."""
    code = _python_block("# packs/triage.py")
    (user_project / "packs").mkdir()
    (user_project / "packs" / "triage.py").write_text(code)
    yaml_line = re.search(r"fabric\.yaml:\s+(packs: .*)$", code, re.M)
    assert yaml_line
    (user_project / "fabric.yaml").write_text("llm: {models: {default: m}}\n" + yaml_line.group(1))
    client = ScriptedChatClient(
        [tool_call("count_lines", path="../secret.txt"), tool_call("finish_task", label="docs")]
    )
    (workspace.parent / "secret.txt").write_text("s\n")
    runner = build_runner(
        load_config(user_project / "fabric.yaml"),
        chat_factory=lambda model: client,
        runs_dir=user_project / "runs",
    )
    asyncio.run(runner.run(RunRequest("triage", "label this", workspace=workspace)))
    tool_message = next(m for m in client.requests[1][0] if m["role"] == "tool")
    assert "outside the workspace" in tool_message["content"]
