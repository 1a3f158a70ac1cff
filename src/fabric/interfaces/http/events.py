"""A task's runlog as Server-Sent Events: follow the JSONL file live, format SSE messages.

``follow_runlog`` tails ``runlog.jsonl`` by byte offset (each poll reads only what was appended),
yields every complete line as an event, and stops after ``run_finished`` or, for a run that
ended without one (interrupted, crashed), once the caller says the task is over and a last read
found nothing more. A partial last line is kept until its newline arrives; a torn last line of
a crashed run is never yielded.

SSE wire format (one message per runlog line)::

    id: <seq>
    event: <kind>
    data: <the whole event as compact JSON, one line>

A client that reconnects sends the last ``id`` it saw as ``Last-Event-ID``; ``last_event_id``
turns it into ``after`` so the stream resumes with the next line: no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fabric.infrastructure.runlog.writer import strict_json

_CHUNK = 1 << 20  # bytes read per step: a large runlog is streamed, never loaded at once
_DIGITS = re.compile(r"[0-9]{1,18}")
# Characters JSON leaves raw that some line readers (e.g. Python's str.splitlines) split on.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


async def follow_runlog(
    path: Path,
    *,
    after: int = -1,
    is_over: Callable[[], bool],
    poll: float = 0.1,
    wake: asyncio.Event | None = None,
    heartbeat: float | None = 15.0,
) -> AsyncIterator[dict[str, Any] | None]:
    """Yield each event of the runlog at ``path`` with ``seq > after``, in order, live.

    - Waits for the file to appear and for new lines, checking its size every ``poll`` seconds
      or as soon as ``wake`` is set (it is cleared on waking; setting it after appending a line
      makes the line go out at once).
    - Ends right after yielding ``run_finished`` (also when resuming past it), or when
      ``is_over()`` is true and a read made after asking it found no new complete line: the
      run ended without ``run_finished`` (interrupted or crashed) or never started.
    - Heartbeat: when nothing new arrived for ``heartbeat`` seconds, yields ``None`` so the
      caller can send a keep-alive (e.g. ``sse_comment("ping")``) and refresh what ``is_over``
      reads. ``heartbeat=None`` never yields ``None``; ``0`` yields it after every idle poll.
    - Lines that are not a JSON object with an integer ``seq`` are skipped; a line without its
      newline is held back until the newline arrives, and never yielded if it never does.
    """
    if poll <= 0:
        raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
    loop = asyncio.get_running_loop()
    offset, pending = 0, b""
    last_yield = loop.time()
    while True:
        # Asked before reading: if the task was already over, this read saw its last line.
        over = is_over()
        chunk = _read(path, offset)
        offset += len(chunk)
        lines: list[bytes] = []
        if chunk:
            *lines, pending = (pending + chunk).split(b"\n")
        yielded = False
        for line in lines:
            event = _parse(line)
            if event is None:
                continue
            if event["seq"] > after:
                after = event["seq"]
                yield event
                yielded = True
                last_yield = loop.time()
            if event.get("kind") == "run_finished":
                return
        if len(chunk) == _CHUNK:  # more is waiting: read on before any wait or verdict
            await asyncio.sleep(0)
            continue
        if over:
            return
        if not yielded and heartbeat is not None and loop.time() - last_yield >= heartbeat:
            yield None
            last_yield = loop.time()
        await _wait(poll, wake)


def sse_event(event: Mapping[str, Any]) -> bytes:
    """One SSE message for a runlog event: ``id`` = seq, ``event`` = kind, ``data`` = the whole
    event as one line of compact JSON (UTF-8)."""
    data = _one_line_json(event)
    head = ""
    if "seq" in event:
        head += f"id: {_field(str(event['seq']))}\n"
    if isinstance(event.get("kind"), str):
        head += f"event: {_field(event['kind'])}\n"
    return f"{head}data: {data}\n\n".encode()


def sse_comment(text: str = "") -> bytes:
    """An SSE comment (clients ignore it), e.g. ``sse_comment("ping")`` -> ``b": ping\\n\\n"``,
    sent to keep an idle stream open through proxies; ``sse_comment()`` is ``b":\\n\\n"``."""
    if not text:
        return b":\n\n"
    return "".join(f": {line}\n" for line in text.splitlines()).encode() + b"\n"


def last_event_id(header: str | None) -> int:
    """The ``after`` value for a ``Last-Event-ID`` header: its seq when the header is a whole
    number >= 0 (ASCII digits, surrounding spaces allowed), else -1 (replay from the start)."""
    if header is None:
        return -1
    value = header.strip()
    return int(value) if _DIGITS.fullmatch(value) else -1


def runlog_snapshot(path: Path) -> tuple[int, Iterator[bytes]]:
    """The runlog's complete lines as they are now, for a download while the run may still be
    writing: their length in bytes and an iterator over them in chunks. A torn last line and
    whatever is appended after this call are left out, so the length stays true (a response
    with Content-Length must not grow while it is sent). FileNotFoundError if there is none."""
    end = _after_last_newline(path, path.stat().st_size)

    def chunks() -> Iterator[bytes]:
        with path.open("rb") as file:
            left = end
            while left > 0 and (data := file.read(min(_CHUNK, left))):
                left -= len(data)
                yield data

    return end, chunks()


def _after_last_newline(path: Path, size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes (0: none)."""
    with path.open("rb") as file:
        stop = size
        while stop > 0:
            start = max(0, stop - _CHUNK)
            file.seek(start)
            found = file.read(stop - start).rfind(b"\n")
            if found >= 0:
                return start + found + 1
            stop = start
    return 0


def _read(path: Path, offset: int) -> bytes:
    """The bytes appended after ``offset`` (at most ``_CHUNK``); nothing while the file is
    missing. Checks the size first, so an idle poll costs one stat."""
    try:
        if path.stat().st_size <= offset:
            return b""
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(_CHUNK)
    except FileNotFoundError:
        return b""


def _parse(line: bytes) -> dict[str, Any] | None:
    """The event on one complete line, or None for a line that is not a runlog event."""
    try:
        # NaN/Infinity (not JSON, never written by fabric) are kept as text, as the writer does.
        event = json.loads(line, parse_constant=str)
    except ValueError:  # includes invalid UTF-8
        return None
    if not isinstance(event, dict):
        return None
    seq = event.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    return event


async def _wait(poll: float, wake: asyncio.Event | None) -> None:
    if wake is None:
        await asyncio.sleep(poll)
        return
    try:
        async with asyncio.timeout(poll):
            await wake.wait()
    except TimeoutError:
        return
    wake.clear()


def _one_line_json(event: Mapping[str, Any]) -> str:
    options: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":")}
    text = strict_json(event, **options)  # NaN or Infinity as text, as in the runlog
    # json.dumps escapes CR and LF inside strings; these three it leaves raw.
    return text.translate(_LINE_BREAKS)


def _field(value: str) -> str:
    """An SSE field value cannot hold a line break; replace any with a space."""
    return value.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
