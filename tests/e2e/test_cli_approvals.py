"""Approvals at the terminal, as a user meets them: the real `fabric run` in a child process
against a loopback model server, with a pack whose policy asks before every file write.
`--yes` approves; with no terminal the call is refused (and says how to approve); at a real
terminal (a pty) the exact call is shown and y / a answer it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog

from fabric.testing import MockOpenAIServer, completion

GUARD = 60.0  # seconds: hang guard only
CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  models: {default: m}
  retry: {attempts: 1}
runs_dir: runs
default_pack: writer
packs:
  writer:
    builder: declarative
    system_prompt: You write files.
    tools: [write_file, read_file]
    sandbox:
      policy:
        approval_timeout: 60
        rules:
          - {tool: write_file, path: "notes/**", verdict: ask}
    finish_schema:
      type: object
      properties: {said: {type: string}}
      required: [said]
"""
Handler = Callable[[dict[str, Any]], tuple[int, Any]]


def writes(*paths: str) -> Handler:
    """One write_file call per step, then finish_task quoting the last tool result."""

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        done = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if len(done) < len(paths):
            call = ("write_file", {"path": paths[len(done)], "content": "x"})
            return 200, completion(None, [call])
        return 200, completion(None, [("finish_task", {"said": done[-1][:300]})])

    return handler


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    (tmp_path / "ws" / "notes").mkdir(parents=True)
    return tmp_path


def command(project: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "fabric", "run", "--config",
        str(project / "fabric.yaml"), "--workspace", str(project / "ws"), *extra, "take notes",
    ]  # fmt: skip


def the_runlog(project: Path) -> list[dict[str, Any]]:
    [path] = (project / "runs").glob("*/runlog.jsonl")
    return assert_valid_runlog(path)


def approvals(events: list[dict[str, Any]]) -> list[tuple[bool, str, str]]:
    return [(e["approved"], e["by"], e["scope"]) for e in events if e["kind"] == "approval"]


def test_yes_approves_every_call_the_policy_asks_about(project: Path) -> None:
    with MockOpenAIServer(writes("notes/a.md", "notes/b.md"), models=["m"]) as server:
        proc = subprocess.run(
            command(project, "--yes"),
            env={**os.environ, "FABRIC_BASE_URL": server.base_url},
            cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=GUARD, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (project / "ws" / "notes" / "a.md").read_text() == "x"
    assert (project / "ws" / "notes" / "b.md").read_text() == "x"
    assert "approved by cli --yes" in proc.stderr
    assert approvals(the_runlog(project)) == [(True, "cli --yes", "once")] * 2

    [run_folder] = (project / "runs").iterdir()
    show = subprocess.run(
        [sys.executable, "-m", "fabric", "show", str(run_folder)],
        cwd=project, capture_output=True, text=True, timeout=GUARD, check=False,
    )  # fmt: skip
    assert show.returncode == 0, show.stderr
    timeline = show.stdout
    assert "waiting for approval of write_file path=notes/a.md content=x (rules[0]: {tool: " in (
        timeline
    )
    assert "approved by cli --yes: write_file path=notes/b.md" in timeline


def test_without_a_terminal_an_ask_is_refused_with_a_way_out(project: Path) -> None:
    with MockOpenAIServer(writes("notes/a.md"), models=["m"]) as server:
        proc = subprocess.run(
            command(project, "--json"),
            env={**os.environ, "FABRIC_BASE_URL": server.base_url},
            cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=GUARD, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # the model was told and finished
    assert not (project / "ws" / "notes" / "a.md").exists()
    assert "refused by no terminal" in proc.stderr
    assert "--yes" in proc.stderr and "sandbox.policy" in proc.stderr
    events = the_runlog(project)
    assert approvals(events) == [(False, "no terminal", "once")]
    [refused] = [e for e in events if e["kind"] == "tool_result"]
    assert refused["error"]["code"] == "approval_denied"
    assert "no one could be asked" in refused["output"]


class Terminal:
    """`fabric run` with a pseudo-terminal for stdin, stdout and stderr."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, close_fds=True
        )
        os.close(slave)
        self.seen = b""
        self._mark = 0

    def expect(self, text: str) -> str:
        """Read until ``text`` appears after the previous match; return the output up to it."""
        start = self._mark
        deadline = time.monotonic() + GUARD
        while text.encode() not in self.seen[start:]:
            assert time.monotonic() < deadline, f"never saw {text!r}:\n{self.text()}"
            if not self._read():
                raise AssertionError(f"fabric ended before {text!r}:\n{self.text()}")
        self._mark = self.seen.index(text.encode(), start) + len(text)
        return self.seen[start : self._mark].decode(errors="replace")

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> int:
        while self._read():
            pass
        os.close(self.master)
        return self.proc.wait(GUARD)

    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def _read(self) -> bool:
        ready, _, _ = select.select([self.master], [], [], GUARD)
        assert ready, f"no output for {GUARD} s:\n{self.text()}"
        try:
            data = os.read(self.master, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.seen += data
        return bool(data)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(GUARD)


def test_at_a_terminal_the_exact_call_is_shown_and_y_approves_once(project: Path) -> None:
    with MockOpenAIServer(writes("notes/a.md", "notes/b.md"), models=["m"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        term = Terminal(command(project), env, project)
        try:
            prompt = term.expect("run it?")
            assert "approval needed · step 1 · write_file" in prompt
            assert '"path": "notes/a.md"' in prompt
            assert 'rules[0]: {tool: write_file, path: "notes/**", verdict: ask}' in prompt
            assert "no answer within 60 s refuses the call" in prompt
            term.type("maybe")
            term.expect("please answer y, n or a")
            term.expect("run it?")  # asked again
            term.type("y")
            assert "notes/b.md" in term.expect("run it?")  # once: the next write asks again
            term.type("n")
            code = term.finish()
        finally:
            term.kill()
    assert code == 0, term.text()
    assert (project / "ws" / "notes" / "a.md").exists()
    assert not (project / "ws" / "notes" / "b.md").exists()
    assert approvals(the_runlog(project)) == [(True, "cli", "once"), (False, "cli", "once")]


def test_at_a_terminal_a_approves_the_rest_of_the_run(project: Path) -> None:
    paths = ("notes/a.md", "notes/b.md", "notes/c.md")
    with MockOpenAIServer(writes(*paths), models=["m"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        term = Terminal(command(project), env, project)
        try:
            term.expect("run it?")
            term.type("a")
            code = term.finish()
        finally:
            term.kill()
    assert code == 0, term.text()
    assert term.text().count("run it?") == 1
    assert all((project / "ws" / p).exists() for p in paths)
    assert approvals(the_runlog(project)) == [
        (True, "cli", "run"),
        (True, "policy memory", "run"),
        (True, "policy memory", "run"),
    ]


def test_resume_yes_approves_the_new_steps_and_keeps_the_recorded_answers(project: Path) -> None:
    with MockOpenAIServer(writes("notes/a.md", "notes/b.md"), models=["m"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        first = subprocess.run(
            command(project, "--max-steps", "1"), env=env, cwd=project,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD, check=False,
        )  # fmt: skip
        assert first.returncode == 1, first.stderr  # stopped at its step limit
        [run_folder] = (project / "runs").iterdir()
        resumed = subprocess.run(
            [sys.executable, "-m", "fabric", "resume", str(run_folder),
             "--config", str(project / "fabric.yaml"), "--max-steps", "3", "--yes"],
            env=env, cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=GUARD, check=False,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert not (project / "ws" / "notes" / "a.md").exists()  # refused then, not redone now
    assert (project / "ws" / "notes" / "b.md").exists()
    assert approvals(the_runlog(project)) == [
        (False, "no terminal", "once"),
        (True, "cli --yes", "once"),
    ]
