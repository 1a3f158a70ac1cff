"""Ctrl-C during a run: the process exits 1, says where the runlog is, and the runlog ends
with run_finished status cancelled. Ctrl-C during a command: what the command planted in .git
is still removed as the run ends (the git audit, ADR 0013)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, planted_repository

from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: openai
  backends: {openai: {kind: openai, base_url: "http://127.0.0.1:9/v1"}}
  models: {default: mock-model}
runs_dir: runs
packs:
  engineering: {builder: packs.engineering:build}
"""


def _wait_for(predicate: Any, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_sigint_cancels_the_run_and_closes_the_runlog(tmp_path: Path, workspace: Path) -> None:
    release = threading.Event()

    def slow_model(body: dict[str, Any]) -> tuple[int, Any]:
        release.wait(60)  # the model "thinks" until the test ends
        return 200, completion("too late")

    (tmp_path / "fabric.yaml").write_text(CONFIG)
    with MockOpenAIServer(slow_model) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fabric",
                "run",
                "--pack",
                "engineering",
                "--config",
                str(tmp_path / "fabric.yaml"),
                "--workspace",
                str(workspace),
                "say hello",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for(lambda: len(server.requests) == 1, "the first model request")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "cancelled" in err
    [run_dir] = list((tmp_path / "runs").iterdir())
    assert str(run_dir / "runlog.jsonl") in err
    events = assert_valid_runlog(run_dir / "runlog.jsonl")
    assert events[-1]["status"] == "cancelled"
    assert events[-1]["steps"] == 1


def test_sigint_during_a_command_still_audits_git(tmp_path: Path, workspace: Path) -> None:
    mark, planted = tmp_path / "mark", planted_repository(workspace)
    answers = iter([completion(None, [("shell", {"command": f"python plant.py {mark}"})])])
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    with MockOpenAIServer(lambda body: (200, next(answers))) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url, "HOME": str(tmp_path)}
        argv = [sys.executable, "-m", "fabric", "run", "--pack", "engineering"]
        argv += ["--config", str(tmp_path / "fabric.yaml"), "--workspace", str(workspace), "go"]
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            _wait_for(lambda: planted.exists() or proc.poll() is not None, "the planting")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "fabric removed .git/commondir" in err, err
    assert not os.path.lexists(planted)
    subprocess.run(["git", "-C", str(workspace), "status"], capture_output=True, check=False)
    assert not mark.exists(), "git on the host ran the program the command planted"
