"""Live runlog events for SSE: a follower of a real runlog file being written while it reads,
resumable by seq, and the SSE wire format a client parses back."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import read_events

from fabric.infrastructure.runlog import JsonlRunLog
from fabric.infrastructure.runlog.tail import follow_runlog
from fabric.interfaces.http.events import last_event_id, sse_comment, sse_event

GUARD = 10.0  # seconds: only a hang guard, never an assertion about speed


def event(seq: int, kind: str = "tool_result", **extra: Any) -> dict[str, Any]:
    envelope = {"v": 1, "seq": seq, "ts": "2026-11-22T03:15:00.000000Z", "run_id": "r"}
    return {**envelope, "kind": kind, **extra}


def line(seq: int, kind: str = "tool_result", **extra: Any) -> bytes:
    return json.dumps(event(seq, kind, **extra), ensure_ascii=False).encode() + b"\n"


def finished_log(n: int) -> list[dict[str, Any]]:
    """n events: run_started, tool results, run_finished."""
    return (
        [event(0, "run_started")]
        + [event(i) for i in range(1, n - 1)]
        + [event(n - 1, "run_finished", status="completed")]
    )


def jsonl(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)


def write(path: Path, events: list[dict[str, Any]]) -> None:
    path.write_bytes(jsonl(events))


def never() -> bool:
    return False


def always() -> bool:
    return True


async def collect(stream: AsyncIterator[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    async with asyncio.timeout(GUARD):
        return [item async for item in stream]


def follow(path: Path, **options: Any) -> list[dict[str, Any] | None]:
    options.setdefault("is_over", never)
    options.setdefault("poll", 0.005)
    options.setdefault("heartbeat", None)
    return asyncio.run(collect(follow_runlog(path, **options)))


def seqs(items: list[dict[str, Any] | None]) -> list[int]:
    return [e["seq"] for e in items if e is not None]


@pytest.fixture
def writer() -> Iterator[Callable[[Callable[[], None]], None]]:
    """Runs a function in a background thread; joins it when the test ends."""
    threads: list[threading.Thread] = []

    def start(target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        threads.append(thread)
        thread.start()

    yield start
    for thread in threads:
        thread.join(GUARD)


def test_follows_a_run_appended_in_small_pieces_by_another_thread(
    tmp_path: Path, writer: Callable[[Callable[[], None]], None]
) -> None:
    path = tmp_path / "runlog.jsonl"
    events = [event(0, "run_started")] + [
        event(i, "tool_result", output="é → ✓\n" * i) for i in range(1, 30)
    ] + [event(30, "run_finished", status="completed")]  # fmt: skip
    data = jsonl(events)

    def append_in_pieces() -> None:  # 7-byte pieces: lines and UTF-8 characters cut anywhere
        with path.open("wb") as file:
            for start in range(0, len(data), 7):
                file.write(data[start : start + 7])
                file.flush()
                if start % 70 == 0:
                    time.sleep(0.001)

    writer(append_in_pieces)
    got = follow(path)  # the task never reports "over": run_finished alone ends the stream
    assert got == events


def test_follows_the_real_runlog_writer_and_ends_with_run_finished(
    tmp_path: Path, writer: Callable[[Callable[[], None]], None]
) -> None:
    log = JsonlRunLog(tmp_path, "20261122T031500Z-9f3a1c")

    def run() -> None:
        log.emit("run_started", {"pack": "p", "task": "t"})
        for step in range(1, 20):
            log.emit("llm_request", {"step": step})
            time.sleep(0.001)
        log.emit("run_finished", {"status": "completed", "steps": 19})
        log.close()

    writer(run)
    got = follow(log.path)
    assert got == read_events(log.path)
    assert [e["kind"] for e in got if e][-1] == "run_finished"
    assert seqs(got) == list(range(21))


def test_a_half_written_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    second = line(1, note="two halves")
    path.write_bytes(line(0, "run_started") + second[:20])

    async def scenario() -> None:
        stream = follow_runlog(path, is_over=never, poll=0.005, heartbeat=0)
        async with asyncio.timeout(GUARD):
            assert (await anext(stream))["seq"] == 0  # type: ignore[index]
            assert await anext(stream) is None  # idle: the half line is not an event yet
            with path.open("ab") as file:
                file.write(second[20:] + line(2, "run_finished"))
            assert await anext(stream) == event(1, note="two halves")
            assert (await anext(stream))["kind"] == "run_finished"  # type: ignore[index]
            with pytest.raises(StopAsyncIteration):
                await anext(stream)

    asyncio.run(scenario())


@pytest.mark.parametrize("after", [-1, 0, 4, 8, 9, 25])
def test_a_finished_log_replays_everything_after_the_given_seq_once(
    tmp_path: Path, after: int
) -> None:
    path = tmp_path / "runlog.jsonl"
    events = finished_log(10)
    write(path, events)
    assert follow(path, after=after) == events[after + 1 :]


def test_reconnecting_with_last_event_id_continues_without_gap_or_duplicate(
    tmp_path: Path, writer: Callable[[Callable[[], None]], None]
) -> None:
    path = tmp_path / "runlog.jsonl"
    events = finished_log(40)
    write(path, events[:6])

    async def first_connection() -> bytes:
        received = b""
        stream = follow_runlog(path, is_over=never, poll=0.005)
        async with asyncio.timeout(GUARD):
            async for item in stream:
                assert item is not None
                received += sse_event(item)
                if len(parse_sse(received)) == 4:
                    break  # the client drops the connection
        await stream.aclose()
        return received

    received = asyncio.run(first_connection())

    def the_run_goes_on() -> None:
        with path.open("ab") as file:
            for e in events[6:]:
                file.write(jsonl([e]))
                file.flush()
                time.sleep(0.001)

    writer(the_run_goes_on)
    header = parse_sse(received)[-1]["id"]
    for item in follow(path, after=last_event_id(header)):
        assert item is not None
        received += sse_event(item)
    assert [json.loads(m["data"]) for m in parse_sse(received)] == events


def test_an_interrupted_run_without_run_finished_ends_when_the_task_is_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runlog.jsonl"
    write(path, finished_log(5)[:4])
    assert seqs(follow(path, is_over=always)) == [0, 1, 2, 3]


def test_the_line_written_just_before_the_task_ends_is_still_delivered(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started"))
    over = False

    async def scenario() -> None:
        nonlocal over
        stream = follow_runlog(path, is_over=lambda: over, poll=0.005, heartbeat=0)
        async with asyncio.timeout(GUARD):
            assert (await anext(stream))["seq"] == 0  # type: ignore[index]
            assert await anext(stream) is None
            with path.open("ab") as file:
                file.write(line(1, "llm_response"))
            over = True  # e.g. the server stopped right after this line
            assert (await anext(stream))["seq"] == 1  # type: ignore[index]
            with pytest.raises(StopAsyncIteration):
                await anext(stream)

    asyncio.run(scenario())


def test_a_line_that_lands_as_the_task_ends_is_not_lost(tmp_path: Path) -> None:
    """The race the final re-read closes: the last line is written, then the task is marked
    over, between the follower's read and its question "is the task over?"."""
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started"))

    def writes_a_last_line_then_is_over() -> bool:
        with path.open("ab") as file:
            file.write(line(1, "llm_response"))
        return True

    assert seqs(follow(path, is_over=writes_a_last_line_then_is_over)) == [0, 1]


def test_waits_for_a_runlog_that_appears_late(tmp_path: Path) -> None:
    path = tmp_path / "20261122T031500Z-9f3a1c" / "runlog.jsonl"  # not even the folder yet

    async def scenario() -> list[dict[str, Any] | None]:
        stream = follow_runlog(path, is_over=never, poll=0.005, heartbeat=0)
        async with asyncio.timeout(GUARD):
            assert await anext(stream) is None  # queued: nothing to read, still waiting
            path.parent.mkdir()
            write(path, finished_log(3))
            return [item async for item in stream if item is not None]

    assert seqs(asyncio.run(scenario())) == [0, 1, 2]


def test_a_runlog_that_never_appears_ends_when_the_task_is_over(tmp_path: Path) -> None:
    assert follow(tmp_path / "missing" / "runlog.jsonl", is_over=always) == []


def test_lines_that_are_not_events_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(
        line(0, "run_started")
        + b"not json at all\n\n[1, 2]\n"
        + b'{"seq": "3", "kind": "x"}\n{"seq": true, "kind": "x"}\n\xff\xfe{"seq": 9}\n'
        + b'{"seq": 4, "kind": "x", "deep": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n"
        + line(1, "llm_request")
        + line(2, "run_finished")
    )
    assert [e["kind"] for e in follow(path) if e] == ["run_started", "llm_request", "run_finished"]


def test_a_torn_last_line_of_a_crashed_run_is_never_yielded(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started") + line(1) + b'{"v":1,"seq":2,"kind":"llm_resp')
    assert seqs(follow(path, is_over=always)) == [0, 1]
    # Even a last line that happens to parse is not complete without its newline.
    path.write_bytes(line(0, "run_started") + line(1).rstrip(b"\n"))
    assert seqs(follow(path, is_over=always)) == [0]


def test_an_idle_run_yields_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started"))

    async def scenario() -> list[dict[str, Any] | None]:
        stream = follow_runlog(path, is_over=never, poll=0.005, heartbeat=0.01)
        async with asyncio.timeout(GUARD):
            return [await anext(stream), await anext(stream), await anext(stream)]

    first, *rest = asyncio.run(scenario())
    assert first is not None and first["seq"] == 0
    assert rest == [None, None]


def test_no_heartbeats_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started"))
    polls = 0

    def over_after_twenty_polls() -> bool:
        nonlocal polls
        polls += 1
        return polls > 20

    got = follow(path, is_over=over_after_twenty_polls, heartbeat=None)
    assert got == [event(0, "run_started")]


def test_wake_delivers_a_new_line_without_waiting_for_the_poll(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(line(0, "run_started"))

    async def scenario() -> None:
        wake = asyncio.Event()
        stream = follow_runlog(path, is_over=never, poll=3600, wake=wake)
        async with asyncio.timeout(GUARD):  # a one-hour poll: only the wake can get us through
            assert (await anext(stream))["seq"] == 0  # type: ignore[index]
            next_event = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0)
            with path.open("ab") as file:
                file.write(line(1, "run_finished"))
            wake.set()
            assert (await next_event)["seq"] == 1  # type: ignore[index]
            assert not wake.is_set()

    asyncio.run(scenario())


def test_a_line_larger_than_one_read_is_delivered_whole(tmp_path: Path) -> None:
    path = tmp_path / "runlog.jsonl"
    big = "x" * (3 * 1024 * 1024 + 17)
    path.write_bytes(line(0, "run_started") + line(1, output=big) + line(2, "run_finished"))
    got = follow(path)
    assert seqs(got) == [0, 1, 2]
    assert got[1] is not None and got[1]["output"] == big


def test_poll_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="poll must be a positive"):
        follow(tmp_path / "runlog.jsonl", poll=0)


def parse_sse(raw: bytes) -> list[dict[str, str]]:
    """A client's reading of an SSE stream (HTML spec): lines end in CRLF, LF or CR."""
    messages: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for text in re.split(r"\r\n|\r|\n", raw.decode("utf-8")):
        if not text:
            if current:
                messages.append(current)
            current = {}
        elif not text.startswith(":"):
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            current[name] = f"{current[name]}\n{value}" if name in current else value
    return messages


def test_sse_event_carries_id_kind_and_the_whole_event_on_one_line() -> None:
    tricky = "line\nbreak\r\ncarriage\rreturn \u2028 \u2029 \x85 é → ✓ \x00"
    e = event(7, "tool_result", output=tricky, nested={"a": [1, 2.5, None, True]})
    raw = sse_event(e)
    assert raw.endswith(b"\n\n")
    (message,) = parse_sse(raw)
    assert message["id"] == "7"
    assert message["event"] == "tool_result"
    assert json.loads(message["data"]) == e
    # Even Python's str.splitlines (which also splits on U+2028, U+0085...) sees three fields.
    fields = [t.split(":")[0] for t in raw.decode().splitlines()]
    assert fields == ["id", "event", "data", ""]


def test_sse_event_keeps_its_data_valid_json_and_its_fields_unbreakable() -> None:
    (message,) = parse_sse(sse_event({"seq": 1, "kind": "x\ndata: forged", "n": float("nan")}))
    assert message["event"] == "x data: forged"
    data = json.loads(message["data"], parse_constant=lambda c: pytest.fail(f"raw {c} in JSON"))
    assert data["n"] == "nan"


@pytest.mark.parametrize(
    ("header", "after"),
    [
        (None, -1), ("", -1), ("0", 0), ("41", 41), (" 7 ", 7), ("-1", -1), ("-5", -1),
        ("+3", -1), ("1.5", -1), ("1e3", -1), ("abc", -1), ("1_000", -1), ("٣", -1),
        ("9" * 19, -1), ("9" * 5000, -1),
    ],
)  # fmt: skip
def test_last_event_id_header_becomes_the_resume_point(header: str | None, after: int) -> None:
    assert last_event_id(header) == after


def test_sse_comment_is_a_keep_alive_clients_ignore() -> None:
    assert sse_comment("ping") == b": ping\n\n"
    assert sse_comment() == b":\n\n"
    assert sse_comment("two\nlines") == b": two\n: lines\n\n"
    assert parse_sse(sse_comment("ping") + sse_event(event(0)) + sse_comment()) == [
        {"id": "0", "event": "tool_result", "data": json.dumps(event(0), separators=(",", ":"))}
    ]
