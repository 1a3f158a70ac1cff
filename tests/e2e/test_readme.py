"""The README's examples work as written: the Python pack example, run through fabric."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import assert_valid_runlog, run_fabric

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.compose import build_runner
from fabric.testing import MockOpenAIServer, ScriptedChatClient, completion, tool_call

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


# --- the walk from `fabric init` to a YAML pack -----------------------------------------------

ISSUE = (
    '# parse_date fails on 2024-05-01\n\nparse_date("2024-05-01") raises ValueError: not enough '
    "values to unpack.\n"
)
DATES = (
    'def parse_date(text):\n    day, month, year = text.split("/")\n'
    "    return int(year), int(month), int(day)\n"
)
"""The folder's files when the README's run was made."""


def _walkthrough() -> str:
    text = README.read_text("utf-8")
    return text[text.index("### Writing your own") : text.index("In Python, beside your")]


def _blocks(section: str, kind: str) -> list[str]:
    """The code blocks of ``section`` fenced as ```kind (``""``: no kind, output)."""
    found, current, inside = [], [], None
    for line in section.splitlines(keepends=True):
        if inside is None and line.startswith("```"):
            inside, current = line[3:].strip(), []
        elif inside is not None and line.rstrip() == "```":
            if inside == kind:
                found.append("".join(current))
            inside = None
        elif inside is not None:
            current.append(line)
    return found


def _shown(section: str, start: str) -> str:
    [block] = [b for b in _blocks(section, "") if b.startswith(start)]
    return block


def _same(text: str) -> str:
    """Output without what differs from run to run: run ids, durations, the folder."""
    text = re.sub(r"\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{6}", "RUN", text)
    text = re.sub(r"\d+ ms\b", "N ms", text)
    return re.sub(r"[\d.]+ s$", "N s", text, flags=re.M)


def test_readme_walk_from_init_to_a_yaml_pack_works_as_shown(tmp_path: Path) -> None:
    section = _walkthrough()
    commands = [
        shlex.split(line.split("  #")[0])
        for block in _blocks(section, "sh")
        for line in block.splitlines()
        if line.startswith("fabric ")
    ]
    assert [c[:2] for c in commands] == [
        ["fabric", "init"], ["fabric", "pack"], ["fabric", "packs"], ["fabric", "run"]
    ]  # fmt: skip
    [pack] = _blocks(section, "yaml")
    folder = tmp_path / "triage-demo"
    folder.mkdir()
    init, new, check, run = commands

    done = run_fabric(*init[1:], cwd=folder)
    assert done.returncode == 0, done.stderr
    shown = _shown(section, "wrote fabric.yaml").splitlines()
    assert done.stdout.splitlines()[:5] == shown[:5]

    done = run_fabric(*new[1:], cwd=folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _shown(section, "added pack")
    config = folder / "fabric.yaml"
    text = config.read_text()
    before = text[: text.index("  triage:\n")]
    config.write_text(before + pack.replace("search_files]", "serch_files]"))  # a typo first
    done = run_fabric(*check[1:], cwd=folder)
    assert done.returncode == 1
    assert _shown(section, "PROBLEM") in done.stdout
    config.write_text(before + pack)  # "make it yours"
    done = run_fabric(*check[1:], cwd=folder)
    assert done.returncode == 0
    assert done.stdout == _shown(section, "ok       engineering")

    (folder / "issue.md").write_text(ISSUE)
    (folder / "src").mkdir()
    (folder / "src" / "dates.py").write_text(DATES)
    result_shown = _shown(section, "run ")
    payload = json.loads(result_shown[result_shown.index("{") : result_shown.rindex("}") + 1])
    script = [
        completion(None, [("read_file", {"path": "issue.md"})]),
        completion(None, [("search_files", {"pattern": "def parse_date"})]),
        completion(None, [("read_file", {"path": "src/dates.py"})]),
        completion(None, [("finish_task", payload)]),
    ]
    with MockOpenAIServer(script, models=["qwen2.5-coder:7b"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        done = run_fabric(*run[1:], cwd=folder, env=env)
    assert done.returncode == 0, done.stderr
    seen = _same(done.stderr + done.stdout).replace(str(folder), "FOLDER")
    expected = _same(result_shown).replace("/tmp/scratch/rd/triage-demo", "FOLDER")
    assert seen == expected
