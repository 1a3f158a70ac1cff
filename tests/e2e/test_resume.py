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
    return [sys.executable, "-m", "fabric", *args]


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

    assert done.returncode == 3, (done.stdout, done.stderr)  # done, unconfirmed
    result = json.loads(done.stdout)
    assert result["status"] == "completed_unconfirmed"  # no tests: nothing confirms the log
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


def _ended(event: dict[str, Any]) -> dict[str, Any]:
    """A run_finished as run_resumed.ended keeps it."""
    return {k: v for k, v in event.items() if k not in {"v", "seq", "run_id", "kind"}}


def test_a_run_resumed_after_max_steps_has_one_end(tmp_path: Path, workspace: Path) -> None:
    """`fabric run` stops at its step limit; `fabric resume` twice (stopping at the limit
    again, then finishing): the log ends with one run_finished, the resumed run's, and keeps
    the earlier ends in run_resumed; show and replay read it."""

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        step = _step(body)
        if step < 4:
            args = {"path": "log.txt", "content": f"step {step}\n", "append": True}
            return 200, completion(None, [("write_file", args)], model="m")
        done = {"summary": "wrote log.txt", "artifacts": ["log.txt"]}
        return 200, completion(None, [("finish_task", done)], model="m")

    def fabric(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _fabric(*args, "--config", str(config)),
            cwd=tmp_path, env=os.environ, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with MockOpenAIServer(model, models=["m"]) as server:
        config = tmp_path / "fabric.yaml"
        config.write_text(CONFIG.format(url=server.base_url))
        first = fabric("run", "--pack", "engineering", "--workspace", str(workspace),
                       "--max-steps", "2", "--json", "log four steps")  # fmt: skip
        assert first.returncode == 1, (first.stdout, first.stderr)
        run_id = json.loads(first.stdout)["run_id"]
        runlog = tmp_path / "runs" / run_id / "runlog.jsonl"
        ran = read_events(runlog)
        again = fabric("resume", run_id, "--max-steps", "3", "--json")
        resumed_once = read_events(runlog)
        done = fabric("resume", run_id, "--max-steps", "5", "--json")
        posts = [_step(r) for r in server.requests if r["_path"].endswith("/chat/completions")]

    assert json.loads(again.stdout)["status"] == "max_steps", again.stderr
    assert done.returncode == 3, (done.stdout, done.stderr)  # done, unconfirmed
    assert json.loads(done.stdout)["status"] == "completed_unconfirmed"
    assert posts == [1, 2, 3, 4]  # no step was asked twice
    assert (workspace / "log.txt").read_text() == "step 1\nstep 2\nstep 3\n"
    events = assert_valid_runlog(runlog)
    assert kinds(events).count("run_finished") == 1
    assert events[-1]["kind"] == "run_finished"
    assert events[-1]["status"] == "completed_unconfirmed" and events[-1]["steps"] == 4
    assert events[-1]["payload"] == {"summary": "wrote log.txt", "artifacts": ["log.txt"]}
    # every line of the earlier runs is still there, but each end became its run_resumed
    assert events[: len(ran) - 1] == ran[:-1]
    assert events[: len(resumed_once) - 1] == resumed_once[:-1]
    marks = [e for e in events if e["kind"] == "run_resumed"]
    assert [(m["seq"], m["from_step"], m["reason"]) for m in marks] == [
        (ran[-1]["seq"], 3, "max_steps"),
        (resumed_once[-1]["seq"], 4, "max_steps"),
    ]
    assert [m["ended"] for m in marks] == [_ended(ran[-1]), _ended(resumed_once[-1])]
    assert [m["ended"]["steps"] for m in marks] == [2, 3]
    assert [m["limits"]["max_steps"] for m in marks] == [3, 5]
    assert not list(runlog.parent.glob(".*"))  # no temporary file left beside the log

    shown = fabric("show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "completed_unconfirmed after 4 step(s)" in shown.stdout
    # the earlier ends are not lines of their own any more: each shows where its run resumed
    resumed = [line for line in shown.stdout.splitlines() if "max_steps after" in line]
    assert [line.split(" · ")[0] for line in resumed] == [
        "resumed at step 3 (it had ended: max_steps after 2 step(s)",
        "resumed at step 4 (it had ended: max_steps after 3 step(s)",
    ]
    assert shown.stdout.index(resumed[0]) < shown.stdout.index("step  3  write_file")
    assert '"summary": "wrote log.txt"' in shown.stdout
    assert json.loads(fabric("show", run_id, "--json").stdout) == events
    replayed = fabric("replay", run_id, "--json")
    assert replayed.returncode == 0, (replayed.stdout, replayed.stderr)
    report = json.loads(replayed.stdout)
    assert report["status"] == "identical" and report["steps_replayed"] == 4
    refused = fabric("resume", run_id, "--max-steps", "9")
    assert refused.returncode == 2 and "already ended (completed_unconfirmed)" in refused.stderr


def test_a_resume_killed_mid_way_loses_nothing_and_resumes_again(
    tmp_path: Path, workspace: Path
) -> None:
    """SIGKILL while the resumed run waits for the model: the log is whole (every earlier line,
    the earlier end in run_resumed) with no end; resumed again, it has one end."""
    blocked, release = threading.Event(), threading.Event()

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        step = _step(body)
        if step == 1:
            args = {"path": "log.txt", "content": "step 1\n", "append": True}
            return 200, completion(None, [("write_file", args)], model="m")
        if not release.is_set():
            blocked.set()
            release.wait(60)
            return 500, {"error": {"message": "too late"}}
        return 200, completion(None, [("finish_task", {"summary": "done"})], model="m")

    with MockOpenAIServer(model, models=["m"]) as server:
        config = tmp_path / "fabric.yaml"
        config.write_text(CONFIG.format(url=server.base_url))
        first = subprocess.run(
            _fabric("run", "--pack", "engineering", "--config", str(config), "--workspace",
                    str(workspace), "--max-steps", "1", "--json", "log a step"),
            cwd=tmp_path, env=os.environ, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        run_id = json.loads(first.stdout)["run_id"]
        runlog = tmp_path / "runs" / run_id / "runlog.jsonl"
        ran = read_events(runlog)
        proc = subprocess.Popen(
            _fabric("resume", run_id, "--config", str(config), "--max-steps", "3"),
            cwd=tmp_path, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _wait_for(blocked.is_set, "the resumed run's model call")
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
        cut = assert_valid_runlog(runlog, finished=False)
        done = subprocess.run(
            _fabric("resume", run_id, "--config", str(config), "--json"),
            cwd=tmp_path, env=os.environ, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert json.loads(first.stdout)["status"] == "max_steps"
    assert cut[: len(ran) - 1] == ran[:-1] and "run_finished" not in kinds(cut)
    assert cut[len(ran) - 1]["kind"] == "run_resumed"
    assert cut[len(ran) - 1]["ended"] == _ended(ran[-1])
    assert done.returncode == 3, (done.stdout, done.stderr)  # done, unconfirmed
    events = assert_valid_runlog(runlog)
    assert events[: len(cut)] == cut  # the second resume appends: nothing to take out
    assert kinds(events).count("run_finished") == 1
    assert events[-1]["status"] == "completed_unconfirmed"
    marks = [e for e in events if e["kind"] == "run_resumed"]
    assert [(m["reason"], "ended" in m) for m in marks] == [
        ("max_steps", True),
        ("interrupted", False),
    ]
    assert marks[1]["limits"]["max_steps"] == 3  # the limit the first resume gave it
