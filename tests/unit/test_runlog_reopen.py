"""A resumed runlog keeps one end: ``JsonlRunLog.reopen`` leaves out a trailing run_finished
(and a torn last line) by replacing the file atomically when the first new line is written;
a kill at any moment leaves the old log or the new one; a follower of the log (``fabric show
--follow``, the HTTP event stream) reads on in the new file without losing or repeating a line,
and passes the first end of a log an earlier fabric resumed."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import kinds, read_events

from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.runlog.tail import follow_runlog, runlog_snapshot

GUARD = 10.0  # seconds: only a hang guard, never an assertion about speed
USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
END = {"payload": None, "steps": 1, "usage": USAGE, "duration_s": 0.1}


def _started(log: JsonlRunLog) -> None:
    log.emit(
        "run_started",
        {"pack": "p", "task": "t", "model": "m", "workspace": "/w", "limits": {}, "sandbox": {},
         "system_prompt": "s", "finish_schema": {"type": "object"}, "confinement": None},
    )  # fmt: skip


def _step(log: JsonlRunLog, step: int, size: int = 10) -> None:
    log.emit("llm_request", {"step": step, "messages": [{"role": "user", "content": "x" * size}]})


def _run(runs: Path, *, steps: int = 1, size: int = 10, status: str | None = "max_steps") -> Path:
    """A runlog of ``steps`` steps, ended with ``status`` (None: no end, a killed run)."""
    log = JsonlRunLog(runs, "r")
    _started(log)
    for step in range(1, steps + 1):
        _step(log, step, size)
    if status is not None:
        log.emit("run_finished", {"status": status, **END})
    log.close()
    return log.path


def _inode(path: Path) -> int:
    return path.stat().st_ino


def test_the_first_line_written_takes_the_place_of_the_end(tmp_path: Path) -> None:
    path = _run(tmp_path)
    before, inode = path.read_bytes(), _inode(path)
    old = read_events(path)
    log = JsonlRunLog.reopen(path)
    assert path.read_bytes() == before  # nothing changes until a line is written
    log.emit("run_resumed", {"from_step": 2, "reason": "max_steps"})
    assert path.read_bytes().startswith(before[: before.rindex(b"\n", 0, -1) + 1])
    new = read_events(path)
    assert new[:-1] == old[:-1] and kinds(new)[-1] == "run_resumed"
    assert new[-1]["seq"] == old[-1]["seq"]  # the seqs stay 0..n-1
    assert _inode(path) != inode  # a new file, renamed over the old one
    _step(log, 2)
    log.emit("run_finished", {"status": "completed", **END})
    log.close()
    after = read_events(path)
    assert [e["seq"] for e in after] == list(range(len(after)))
    assert kinds(after).count("run_finished") == 1 and kinds(after)[-1] == "run_finished"
    assert sorted(p.name for p in tmp_path.joinpath("r").iterdir()) == ["runlog.jsonl"]


def test_a_resume_that_writes_nothing_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    path = _run(tmp_path)
    before, inode = path.read_bytes(), _inode(path)
    JsonlRunLog.reopen(path).close()
    assert path.read_bytes() == before and _inode(path) == inode


def test_a_torn_last_line_is_left_out_and_a_log_without_end_is_appended_to(
    tmp_path: Path,
) -> None:
    path = _run(tmp_path, status=None)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"v":2,"seq":')
    log = JsonlRunLog.reopen(path)
    log.emit("run_resumed", {"from_step": 2, "reason": "interrupted"})
    log.close()
    assert path.read_bytes().startswith(whole)
    assert kinds(read_events(path)) == ["run_started", "llm_request", "run_resumed"]
    inode = _inode(path)
    log = JsonlRunLog.reopen(path)  # nothing to leave out: appended to in place
    log.emit("run_finished", {"status": "completed", **END})
    log.close()
    assert _inode(path) == inode
    assert [e["seq"] for e in read_events(path)] == [0, 1, 2, 3]


# The resume a child process runs, killed at some moment of it: the replacement of a log of a
# few megabytes (copy, fsync, rename) takes long enough to be hit mid-way.
_CHILD = """
import sys
from pathlib import Path
from fabric.infrastructure.runlog import JsonlRunLog
log = JsonlRunLog.reopen(Path(sys.argv[1]))
print("reopened", flush=True)
log.emit("run_resumed", {"from_step": 9, "reason": "max_steps", "ended": {"status": "max_steps"}})
print("resumed", flush=True)
for step in range(9, 200):
    log.emit("llm_request", {"step": step, "messages": []})
log.close()
"""


def test_a_resume_killed_at_any_moment_leaves_one_whole_log(tmp_path: Path) -> None:
    outcomes = []
    for attempt in range(10):
        path = _run(tmp_path / str(attempt), steps=8, size=500_000)
        before = path.read_bytes()
        head = before[: before.rindex(b"\n", 0, -1) + 1]  # all but the end
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline() == "reopened\n"
        if attempt == 9:
            assert child.stdout.readline() == "resumed\n"  # surely after the replacement
        time.sleep(attempt * 0.0008)  # the kills land at different moments of the resume
        child.send_signal(signal.SIGKILL)
        child.wait(GUARD)
        child.stdout.close()
        data = path.read_bytes()
        if data == before:  # killed before the rename: the old log, untouched
            outcomes.append("old")
            continue
        assert data.startswith(head)  # never a line of the old log lost
        new = data[len(head) :].split(b"\n")
        resumed = json.loads(new[0])  # the line the end gave way to is always whole
        assert resumed["kind"] == "run_resumed" and resumed["ended"] == {"status": "max_steps"}
        for line in new[1:-1]:
            assert json.loads(line)["kind"] == "llm_request"
        outcomes.append("new")
    assert outcomes[0] == "old" and outcomes[-1] == "new", outcomes
    # a later resume of a log whose resume was killed goes through, leaving nothing beside it
    log = JsonlRunLog.reopen(tmp_path / "0" / "r" / "runlog.jsonl")
    log.emit("run_resumed", {"from_step": 9, "reason": "max_steps"})
    log.close()
    assert [p.name for p in (tmp_path / "0" / "r").iterdir()] == ["runlog.jsonl"]


async def _follow(path: Path, **options: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(GUARD):
        async for event in follow_runlog(path, is_over=lambda: False, poll=0.01, **options):
            if event is not None:
                got.append(event)
    return got


def test_a_follower_reads_on_in_the_replaced_log(tmp_path: Path) -> None:
    """`fabric show --follow` of a killed run (its last line torn), resumed meanwhile."""
    path = _run(tmp_path, steps=2, status=None)
    path.write_bytes(path.read_bytes() + b'{"v":2,"seq":3,"kind":"llm_')  # held back, never sent
    inode = _inode(path)

    def resume() -> None:
        time.sleep(0.1)  # the follower has read the log and waits for the torn line to end
        log = JsonlRunLog.reopen(path)
        log.emit("run_resumed", {"from_step": 3, "reason": "interrupted"})
        for step in (3, 4):
            time.sleep(0.02)
            _step(log, step)
        log.emit("run_finished", {"status": "completed", **END})
        log.close()

    writer = threading.Thread(target=resume)
    writer.start()
    got = asyncio.run(_follow(path, after=0))
    writer.join(GUARD)
    assert _inode(path) != inode
    assert [e["seq"] for e in got] == list(range(1, 7))  # none lost, none twice
    assert kinds(got) == ["llm_request"] * 2 + ["run_resumed"] + ["llm_request"] * 2 + [
        "run_finished"
    ]


def test_a_follower_passes_the_first_end_of_a_log_an_earlier_fabric_resumed(
    tmp_path: Path,
) -> None:
    path = _run(tmp_path)
    log = JsonlRunLog.reopen(path)
    log.emit("run_resumed", {"from_step": 2, "reason": "max_steps"})
    _step(log, 2)
    log.emit("run_finished", {"status": "completed", **END})
    log.close()
    events = read_events(path)
    first_end = {**events[-1], "status": "max_steps", "steps": 1}
    older = [*events[:-3], first_end, *events[-3:]]  # an earlier fabric kept the first end
    path.write_text("".join(json.dumps({**e, "seq": i}) + "\n" for i, e in enumerate(older)))
    got = asyncio.run(_follow(path))
    assert kinds(got) == kinds(older) and kinds(got).count("run_finished") == 2
    assert asyncio.run(_follow(path, after=len(older) - 2)) == [got[-1]]


@pytest.mark.parametrize("after", [-1, 1])
def test_a_follower_of_a_finished_log_ends_with_its_run_finished(
    tmp_path: Path, after: int
) -> None:
    path = _run(tmp_path)
    got = asyncio.run(_follow(path, after=after))
    assert kinds(got)[-1] == "run_finished" and got[0]["seq"] == after + 1


def test_a_download_never_mixes_the_old_log_and_the_new(tmp_path: Path) -> None:
    """``GET /tasks/{id}/runlog`` measures the log, then sends it: a resume in between."""
    killed = _run(tmp_path / "killed", status=None)
    whole = killed.read_bytes()
    killed.write_bytes(whole + b'{"v":2,"seq":')
    size, chunks = runlog_snapshot(killed)
    log = JsonlRunLog.reopen(killed)
    log.emit("run_resumed", {"from_step": 2, "reason": "interrupted"})
    log.close()
    assert size == len(whole) and b"".join(chunks) == whole  # the same lines in the new file

    ended = _run(tmp_path / "ended")
    size, chunks = runlog_snapshot(ended)
    log = JsonlRunLog.reopen(ended)
    log.emit("run_resumed", {"from_step": 2, "reason": "max_steps", "ended": {"x": "y" * 200}})
    log.close()
    with pytest.raises(OSError, match="resumed"):
        b"".join(chunks)  # the old end is gone: refused rather than cut mid-line
