"""``fabric resume``: a run killed mid-way goes on in the same runlog and workspace, and the
steps it had completed are neither sent to the model again nor re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from support import assert_valid_runlog, kinds, read_events

from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: openai
  backends: {{openai: {{kind: openai, base_url: "{url}"}}}}
  models: {{default: m}}
  retry: {{attempts: 1}}
runs_dir: runs
packs:
  engineering: {{builder: packs.engineering:build}}
"""


def _wait_for(predicate: Any, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _step(body: dict[str, Any]) -> int:
    return 1 + sum(1 for m in body.get("messages") or () if m.get("role") == "assistant")


def _fabric(*args: str) -> list[str]:
    return [sys.executable, "-m", "fabric.interfaces.cli.app", *args]


def test_a_killed_run_resumes_without_redoing_completed_steps(
    tmp_path: Path, workspace: Path
) -> None:
    blocked, release = threading.Event(), threading.Event()
    live = threading.Event()  # set: the model answers step 3 instead of hanging

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        step = _step(body)
        if step in (1, 2):
            args = {"path": "log.txt", "content": f"step {step}\n", "append": True}
            return 200, completion(None, [("write_file", args)], model="m")
        if step == 3 and not live.is_set():
            blocked.set()
            release.wait(60)
            return 500, {"error": {"message": "too late"}}
        done = {"summary": "wrote log.txt", "artifacts": ["log.txt"]}
        return 200, completion(None, [("finish_task", done)], model="m")

    with MockOpenAIServer(model, models=["m"]) as server:
        config = tmp_path / "fabric.yaml"
        config.write_text(CONFIG.format(url=server.base_url))
        proc = subprocess.Popen(
            _fabric("run", "--pack", "engineering", "--config", str(config), "--workspace",
                    str(workspace), "log two steps",),
            cwd=tmp_path, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_for(blocked.is_set, "the model call of step 3")
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        finally:
            live.set()
            release.set()
            if proc.poll() is None:
                proc.kill()
        [run_dir] = list((tmp_path / "runs").iterdir())
        before = read_events(run_dir / "runlog.jsonl")
        assert "run_finished" not in kinds(before)
        assert (workspace / "log.txt").read_text() == "step 1\nstep 2\n"
        seen_before = len(server.requests)

        done = subprocess.run(
            _fabric("resume", run_dir.name, "--config", str(config), "--json"),
            cwd=tmp_path, env=os.environ, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        resumed = server.requests[seen_before:]

    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert result["run_id"] == run_dir.name
    events = assert_valid_runlog(run_dir / "runlog.jsonl")
    assert events[: len(before)] == before  # appended to, never rewritten
    assert kinds(events).count("run_started") == 1
    [mark] = [e for e in events if e["kind"] == "run_resumed"]
    assert mark == {**mark, "from_step": 3, "reason": "interrupted"}
    assert mark["seq"] == before[-1]["seq"] + 1
    assert events[-1]["steps"] == 3
    posts = [r for r in server.requests if r["_path"].endswith("/chat/completions")]
    assert [_step(r) for r in posts] == [1, 2, 3, 3]
    assert [_step(r) for r in resumed if r["_path"].endswith("/chat/completions")] == [3]
    # the resumed call carries the same history the killed one did
    assert posts[3]["messages"] == posts[2]["messages"]
    assert (workspace / "log.txt").read_text() == "step 1\nstep 2\n"
