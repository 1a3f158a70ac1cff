"""`fabric show` filters (one step, some kinds), where a run was resumed, `--follow` on a
run that is still going, and what a run recorded never driving the terminal."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from fabric.infrastructure.runlog import JsonlRunLog
from fabric.interfaces.cli.app import app

USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def _started(log: JsonlRunLog) -> None:
    log.emit(
        "run_started",
        {"pack": "p", "task": "t", "model": "m", "workspace": "/w", "limits": {}, "sandbox": {},
         "system_prompt": "s", "finish_schema": {"type": "object"}, "confinement": None},
    )  # fmt: skip


def _step(log: JsonlRunLog, step: int) -> None:
    log.emit("llm_request", {"step": step, "messages": []})
    call = {"step": step, "call_id": f"c{step}", "name": "list_files"}
    log.emit("tool_call", {**call, "arguments": {"path": f"dir{step}"}})
    log.emit("tool_result", {**call, "ok": True, "output": "x", "duration_ms": 1.0})


def _finished(log: JsonlRunLog) -> None:
    log.emit(
        "run_finished",
        {"status": "completed", "payload": {"done": True}, "steps": 2, "usage": USAGE,
         "duration_s": 0.1},
    )  # fmt: skip


def test_show_one_step_or_some_kinds(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    _started(log)
    _step(log, 1)
    _step(log, 2)
    _finished(log)
    log.close()
    cli = CliRunner()
    only_two = cli.invoke(app, ["show", str(log.path), "--step", "2", "--json"])
    assert only_two.exit_code == 0, only_two.output
    assert {e["step"] for e in json.loads(only_two.stdout)} == {2}
    kinds = cli.invoke(app, ["show", str(log.path), "--kind", "tool_call", "--json"])
    assert [e["arguments"]["path"] for e in json.loads(kinds.stdout)] == ["dir1", "dir2"]
    text = cli.invoke(app, ["show", str(log.path), "--step", "1"])
    assert "list_files" in text.stdout and "dir2" not in text.stdout


def test_show_says_where_a_run_was_resumed_in_a_log_without_ended(tmp_path: Path) -> None:
    """Logs resumed by an earlier fabric: ``run_resumed`` has no ``ended`` (the first end is
    still a line of its own, just above); a run resumed after a kill never had an end."""
    log = JsonlRunLog(tmp_path, "r4")
    _started(log)
    _step(log, 1)
    log.emit(
        "run_finished",
        {"status": "max_steps", "payload": None, "steps": 1, "usage": USAGE, "duration_s": 0.1},
    )
    log.emit("run_resumed", {"from_step": 2, "reason": "max_steps", "limits": {}})
    _step(log, 2)
    log.emit("run_resumed", {"from_step": 3, "reason": "interrupted", "limits": {}})
    _finished(log)
    log.close()
    shown = CliRunner().invoke(app, ["show", str(log.path)])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "resumed at step 2 (after max_steps)" in lines
    assert "resumed at step 3 (it had been interrupted)" in lines
    assert lines.index("resumed at step 2 (after max_steps)") == 1 + next(
        i for i, line in enumerate(lines) if line.startswith("max_steps after 1 step(s)")
    )


def test_follow_shows_events_until_the_run_finishes(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r2")
    _started(log)
    _step(log, 1)

    def go_on() -> None:
        time.sleep(0.3)  # while `show --follow` is already waiting
        _step(log, 2)
        _finished(log)
        log.close()

    writer = threading.Thread(target=go_on)
    writer.start()
    try:
        result = CliRunner().invoke(app, ["show", str(log.path), "--follow", "--json"])
    finally:
        writer.join(30)
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(8))
    assert events[-1]["kind"] == "run_finished"


def test_follow_stops_with_a_clear_error_at_a_line_from_a_newer_fabric(tmp_path: Path) -> None:
    """A run resumed by a newer fabric may append lines of a format this one cannot read."""
    log = JsonlRunLog(tmp_path, "r3")
    _started(log)
    _step(log, 1)

    def go_on() -> None:
        time.sleep(0.3)  # while `show --follow` is already waiting
        newer = {"v": 99, "seq": 4, "ts": "2026-11-22T00:00:00Z", "run_id": "r3", "kind": "x"}
        with log.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(newer) + "\n")

    writer = threading.Thread(target=go_on)
    writer.start()
    try:
        result = CliRunner().invoke(app, ["show", str(log.path), "--follow"])
    finally:
        writer.join(30)
        log.close()
    assert result.exit_code == 2
    assert "newer fabric" in result.stderr and "upgrade fabric" in result.stderr
    assert "list_files" in result.stdout  # what it could read was shown first


def test_nothing_a_run_recorded_drives_the_terminal(tmp_path: Path) -> None:
    """A model's reply, a plan and a fact are hostile text: the timeline writes what a
    terminal would act on (escape sequences, bidirectional controls) as '?'."""
    log = JsonlRunLog(tmp_path, "r1")
    _started(log)
    log.emit("llm_request", {"step": 1, "messages": []})
    escape = "\x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \u202eevil"
    log.emit(
        "llm_response",
        {"step": 1, "message": {"role": "assistant", "content": f"thinking\t{escape}"},
         "usage": USAGE},
    )  # fmt: skip
    plan = [{"step": f"read {escape}", "status": "in_progress"}]
    log.emit("plan", {"step": 1, "call_id": "c1", "items": plan, "counts": {}})
    log.emit("memory", {"step": 1, "action": "remembered", "id": 1, "fact": f"it {escape}"})
    _finished(log)
    log.close()
    shown = CliRunner().invoke(app, ["show", str(log.path)])
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\u202e" not in shown.stdout
    assert "model: thinking ?]8;;http://evil.example?click" in shown.stdout
    assert "[>] read ?]8;;" in shown.stdout and "kept memory 1: it ?]8;;" in shown.stdout


def test_a_reply_streamed_live_cannot_drive_the_terminal_either() -> None:
    import io

    from fabric.domain.models import ChatDelta
    from fabric.interfaces.cli.render import Progress

    out = io.StringIO()
    progress = Progress(out, live=True)
    progress.event({"kind": "llm_request", "step": 1})
    for piece in ("fine \x1b]0;", "owned\x07 \u202ereversed"):
        progress.delta(ChatDelta(text=piece))
    assert out.getvalue().endswith("model: fine ?]0;owned? ?reversed")
    progress.delta(ChatDelta(tool_name="read\x1b[2Jfile", arguments="{}"))
    assert out.getvalue().endswith("step  1  read?[2Jfile ... 2 characters of arguments")
