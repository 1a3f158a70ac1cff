"""The run index (``infrastructure/runlog/index.py``): every run folder listed with what a
person looks for (status, pack, model, task, steps, tokens, cost), finished runlogs read once
per process, running ones read on where they stopped, and hostile runlogs (bad lines, huge
lines, wrong types, symlinks out of the runs folder, a FIFO) neither break the listing nor
leak a file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.pack import Pack
from fabric.domain.models import RunStatus
from fabric.infrastructure.packs import run_ledger
from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.runlog.facts import MAX_LINE_BYTES
from fabric.infrastructure.runlog.index import RunIndex
from fabric.infrastructure.tools.files import write_file
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.testing import ScriptedChatClient, tool_call

SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}


def real_run(runs: Path, workspace: Path, run_id: str, task: str, *, steps: int = 1) -> None:
    """A run as `fabric run` leaves it: ``steps`` writes, then finish_task."""
    pack = Pack("writer", "writes", "You write.", [FunctionTool(write_file)], SCHEMA)
    script = [tool_call("write_file", path=f"f{n}.txt", content="x") for n in range(steps - 1)]
    chat = ScriptedChatClient([*script, tool_call("finish_task", done=True)], model="m1")
    log = JsonlRunLog(runs, run_id)
    result = asyncio.run(
        execute_task(
            Job(task, pack, run_id, workspace, meta={"backend": {"name": "local"}}),
            Kit(chat, log),
        )
    )
    assert result.status is RunStatus.COMPLETED


def line(seq: int, kind: str, **fields: Any) -> str:
    event = {
        "v": 3,
        "seq": seq,
        "ts": f"2026-11-25T01:00:{seq % 60:02d}Z",
        "run_id": "r",
        "kind": kind,
        **fields,
    }
    return json.dumps(event, separators=(",", ":")) + "\n"


def started(**fields: Any) -> str:
    known = {"pack": "p", "task": "a task", "model": "m", "workspace": "/ws"}
    return line(0, "run_started", **{**known, **fields})


def runlog(runs: Path, run_id: str, text: str | bytes) -> Path:
    path = runs / run_id / "runlog.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, "utf-8")
    else:
        path.write_bytes(text)
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    folder = tmp_path / "runs"
    folder.mkdir()
    return folder


def nothing_runs() -> set[str]:
    return set()


def listed(index: RunIndex) -> dict[str, tuple[Any, str]]:
    return {facts.run_id: (facts, status) for facts, status in index.scan()}


def test_real_runs_are_listed_newest_first_with_what_a_person_looks_for(
    runs: Path, workspace: Path
) -> None:
    real_run(runs, workspace, "20261125T010000.000Z-aaaaaa", "first task", steps=1)
    real_run(runs, workspace, "20261125T020000.000Z-bbbbbb", "second task", steps=3)
    index = RunIndex(runs, running=nothing_runs)
    found = index.scan()
    assert [f.run_id for f, _ in found] == [
        "20261125T020000.000Z-bbbbbb",
        "20261125T010000.000Z-aaaaaa",
    ]
    newest, status = found[0]
    assert status == "completed"
    assert (newest.pack, newest.model, newest.backend, newest.task) == (
        "writer",
        "m1",
        "local",
        "second task",
    )
    assert newest.workspace == str(workspace)
    assert newest.end is not None and newest.end["steps"] == 3
    assert newest.end["tokens"] == (30, 15, 45)  # the scripted model's 10 + 5 a call
    assert newest.tokens == (30, 15, 45)
    [(backend, model, tokens, _seconds)] = newest.measured
    assert (backend, model, tokens) == ("local", "m1", 15)
    assert newest.started_at is not None and newest.end["ended_at"] >= newest.started_at
    assert newest.replay_of is None and newest.resumed is False


def test_a_finished_runlog_is_read_once_and_a_growing_one_only_for_what_it_appended(
    runs: Path,
) -> None:
    lines = [started()]
    for seq in range(1, 9_999, 2):
        lines.append(line(seq, "tool_call", step=seq, call_id=f"c{seq}", name="x", arguments={}))
        lines.append(
            line(
                seq + 1,
                "tool_result",
                step=seq,
                call_id=f"c{seq}",
                name="x",
                ok=True,
                output="y" * 50,
                duration_ms=1,
            )
        )
    path = runlog(runs, "run-10k", "".join(lines))
    index = RunIndex(runs, running=lambda: {"run-10k"})
    assert listed(index)["run-10k"][1] == "running"
    size = path.stat().st_size
    assert index.bytes_read == size
    for _ in range(3):
        index.scan()
        index.get("run-10k")
    assert index.bytes_read == size  # listed again and again: not read again

    end = line(
        10_000,
        "run_finished",
        status="completed",
        steps=4999,
        usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    )
    with path.open("a") as file:
        file.write(end)
    facts, status = listed(index)["run-10k"]
    assert status == "completed" and facts.end["tokens"] == (7, 3, 10)
    assert index.bytes_read == size + len(end.encode())


def test_a_run_without_an_end_is_running_while_its_fabric_lives_then_interrupted(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    body = started() + line(1, "llm_request", step=1, messages=[])
    runlog(runs, "alive", body)
    runlog(runs, "dead", body)
    runlog(
        runs,
        "asking",
        body + line(2, "approval_requested", step=1, call_id="c1", tool="shell", arguments={}),
    )
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    run_ledger.opened("alive", str(tmp_path))
    run_ledger.opened("asking", str(tmp_path))
    ledger = Path(run_ledger.ledger_path())
    with ledger.open("a") as file:  # a fabric that died without closing its window
        file.write(
            json.dumps({"run": "dead", "ws": str(tmp_path), "start": 1.0, "pid": int(gone.stdout)})
            + "\n"
        )
    index = RunIndex(runs)
    statuses = {name: status for name, (_, status) in listed(index).items()}
    assert statuses == {"alive": "running", "dead": "interrupted", "asking": "awaiting_approval"}
    assert index.get("alive") is not None and index.get("alive")[0].steps == 1  # type: ignore[index]
    run_ledger.closed("alive")
    assert listed(index)["alive"][1] == "interrupted"  # closed without run_finished


def test_hostile_lines_neither_break_the_listing_nor_hide_the_run(runs: Path) -> None:
    runlog(
        runs,
        "wrong-types",
        line(0, "run_started", pack=["p"], task=42, model={"m": 1}, backend="b", workspace=None)
        + "this is not JSON\n"
        + "[1, 2, 3]\n"
        + '{"kind": "llm_response", "deep": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n"
        + line(1, "llm_response", step="x", usage="lots", model=7, duration_ms="slow")
        + line(2, "llm_response", step=2, usage={"prompt_tokens": True, "completion_tokens": -4})
        + line(
            3,
            "run_finished",
            status=["done"],
            steps="9",
            usage=[],
            cost={"usd": "free"},
            duration_s=float("nan"),
            error="bad",
        )
        + '{"kind": "run_finished", "status": "completed"',  # a torn last line
    )
    runlog(
        runs,
        "huge-line",
        started()
        + "x" * (MAX_LINE_BYTES + 10)
        + "\n"
        + line(1, "run_finished", status="failed", steps=1),
    )
    runlog(runs, "not-a-runlog", "hello\nworld\n")
    runlog(runs, "binary", b"\xff\xfe\x00garbage\n" * 3)
    runlog(runs, "empty", "")
    runlog(runs, "run_started-later", line(0, "llm_request", step=1) + started())
    found = listed(RunIndex(runs, running=nothing_runs))
    assert set(found) == {"wrong-types", "huge-line", "not-a-runlog", "binary", "run_started-later"}
    facts, status = found["wrong-types"]
    assert status == "unknown"  # a status that is no text
    assert (facts.pack, facts.task, facts.model, facts.backend) == (None, None, None, None)
    assert facts.steps == 2 and facts.tokens == (0, 0, 0)
    assert facts.end["steps"] == 0 and facts.end["cost_usd"] is None
    assert facts.end["duration_s"] is None and facts.end["error"] is None
    assert facts.skipped == 3
    huge, status = found["huge-line"]
    assert status == "failed" and huge.skipped == 1
    for name in ("not-a-runlog", "binary", "run_started-later"):
        assert found[name][1] == "unreadable"
        assert found[name][0].problem == "its first line is not a run_started event"


def test_symlinks_out_of_the_runs_folder_are_not_followed(runs: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text(started(task="the secret task"))
    (runs / "linked-log").mkdir()
    (runs / "linked-log" / "runlog.jsonl").symlink_to(secret)
    (runs / "linked-folder").symlink_to(tmp_path)  # tmp_path/runlog.jsonl: the secret again
    (tmp_path / "runlog.jsonl").symlink_to(secret)
    fifo = runs / "fifo" / "runlog.jsonl"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    for odd in (".hidden", "has space"):
        runlog(runs, odd, started())
    index = RunIndex(runs, running=nothing_runs)
    assert index.scan() == []
    for run_id in ("linked-log", "linked-folder", "fifo", ".hidden", "has space", "..", "a/b"):
        assert index.get(run_id) is None
        assert index.runlog(run_id) is None
        assert index.started(run_id) is None
    assert index.bytes_read == 0


def test_artifacts_open_only_beneath_the_runs_own_artifacts_folder(
    runs: Path, tmp_path: Path
) -> None:
    runlog(runs, "r1", started())
    (runs / "r1" / "artifacts").mkdir()
    (runs / "r1" / "artifacts" / "step1-shell.txt").write_text("the whole output")
    (tmp_path / "outside.txt").write_text("not yours")
    (runs / "r1" / "artifacts" / "link.txt").symlink_to(tmp_path / "outside.txt")
    runlog(runs, "r2", started())
    (runs / "r2" / "artifacts").symlink_to(runs / "r1" / "artifacts")
    index = RunIndex(runs, running=nothing_runs)
    with index.open_artifact("r1", "step1-shell.txt") as file:
        assert file.read() == b"the whole output"
    refused = [
        ("r1", n)
        for n in (
            "link.txt",
            "../runlog.jsonl",
            "..",
            "/etc/passwd",
            "a/b",
            "",
            ".hidden",
            "missing.txt",
        )
    ] + [("r2", "step1-shell.txt"), ("../r1", "step1-shell.txt")]
    for run_id, name in refused:
        with pytest.raises(OSError):
            index.open_artifact(run_id, name)


def test_a_replaced_runlog_is_read_again_and_shows_the_resume(runs: Path) -> None:
    path = runlog(runs, "r", started() + line(1, "run_finished", status="max_steps", steps=1))
    index = RunIndex(runs, running=nothing_runs)
    assert listed(index)["r"][1] == "max_steps"
    replaced = runs / "r" / "new.jsonl"
    replaced.write_text(
        started()
        + line(1, "run_resumed", ended={"status": "max_steps"})
        + line(2, "run_finished", status="completed", steps=2)
    )
    replaced.replace(path)
    facts, status = listed(index)["r"]
    assert status == "completed" and facts.resumed and facts.end["steps"] == 2


def test_measured_speed_comes_from_the_model_calls_and_leaves_replays_out(runs: Path) -> None:
    def response(seq: int, tokens: int, ms: float) -> str:
        return line(
            seq,
            "llm_response",
            step=seq,
            model="qwen",
            duration_ms=ms,
            usage={"prompt_tokens": 1, "completion_tokens": tokens},
        )

    runlog(runs, "a", started(backend={"name": "ollama"}) + response(1, 50, 1000))
    runlog(
        runs, "b", started(backend={"name": "ollama"}) + response(1, 30, 500) + response(2, 20, 500)
    )
    runlog(runs, "replay", started(backend={"name": "ollama"}, replay_of="a") + response(1, 50, 1))
    index = RunIndex(runs, running=nothing_runs)
    index.scan()
    assert index.measured() == [
        {
            "backend": "ollama",
            "model": "qwen",
            "runs": 2,
            "completion_tokens": 100,
            "llm_seconds": 2.0,
            "tokens_per_s": 50.0,
        },
    ]
