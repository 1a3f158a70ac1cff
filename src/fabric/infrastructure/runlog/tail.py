"""Reading a runlog while its run may still write it.

``follow_runlog`` tails ``runlog.jsonl`` by byte offset (each poll reads only what was appended),
yields every complete line as an event, and stops after ``run_finished`` or, for a run that
ended without one (interrupted, crashed), once the caller says the run is over and a last read
found nothing more (the service, where a finished task may be resumed, stops only then). A
partial last line is kept until its newline arrives; a torn last line of a crashed run is never
yielded. A resume replaces the file once (``JsonlRunLog.reopen``: the same lines, its end
replaced by ``run_resumed`` with the end's seq, the new ones after): the follower notices the
new file and reads it from the start, by ``seq``, so nothing is lost or sent twice; the
``run_resumed`` comes after the end it replaced. ``runlog_snapshot`` gives the
complete lines as they are now. Used by ``fabric show --follow`` and the HTTP service's event
stream and runlog download.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .encoding import read_line

_CHUNK = 1 << 20  # bytes read per step: a large runlog is streamed, never loaded at once
FileId = tuple[int, int]
"""Which file a path named when it was read: (device, inode)."""


async def follow_runlog(
    path: Path,
    *,
    after: int = -1,
    is_over: Callable[[], bool],
    resumable: bool = False,
    saw_end: bool = False,
    poll: float = 0.1,
    wake: asyncio.Event | None = None,
    heartbeat: float | None = 15.0,
) -> AsyncIterator[dict[str, Any] | None]:
    """Yield each event of the runlog at ``path`` with ``seq > after``, in order, live.

    - Waits for the file to appear and for new lines, checking its size every ``poll`` seconds
      or as soon as ``wake`` is set (it is cleared on waking; setting it after appending a line
      makes the line go out at once).
    - Ends after the ``run_finished`` that is the last complete line (also when ``after`` is
      past it), or when ``is_over()`` is true and a read made after asking it found no new
      complete line: the run ended without ``run_finished`` (interrupted or crashed) or never
      started. A ``run_finished`` followed by more lines (a log resumed by an earlier fabric,
      which kept the first end) is passed like any event. With ``resumable`` (the service: a
      task may be resumed while it is followed, and ``is_over`` knows whether it was), a
      ``run_finished`` ends nothing: only ``is_over`` does, so a follower that opened the log
      between a resume request and the resumed run's first line reads on into the resumed run.
    - When the file at ``path`` is replaced (a resume rewrote the log) or gets shorter, it is
      read again from its start; ``seq`` says what was yielded already, except that the
      ``run_resumed`` a resume wrote in place of an end (its seq, with ``ended``) comes after
      that end: it is yielded when the line read at its seq before was the end. ``saw_end``:
      the caller may have seen the line at ``after`` as such an end (an SSE client's
      ``Last-Event-ID`` is only a seq); a ``run_resumed`` found there is yielded too, a second
      time if the caller had seen that one.
    - Heartbeat: when nothing new arrived for ``heartbeat`` seconds, yields ``None`` so the
      caller can send a keep-alive (e.g. ``sse_comment("ping")``) and refresh what ``is_over``
      reads. ``heartbeat=None`` never yields ``None``; ``0`` yields it after every idle poll.
    - Lines that are not a JSON object with an integer ``seq`` are skipped; a line without its
      newline is held back until the newline arrives, and never yielded if it never does.
    """
    if poll <= 0:
        raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
    loop = asyncio.get_running_loop()
    offset, pending, file_id, ended = 0, b"", None, False
    at_end = saw_end  # the line at seq ``after``, as last read, was (or may have been) an end
    last_yield = loop.time()
    while True:
        # Asked before reading: if the task was already over, this read saw its last line.
        over = is_over()
        chunk, file_id, again = _read(path, offset, file_id)
        if again:  # another file now: read it whole, skipping the seqs already yielded
            offset, pending = 0, b""
        offset += len(chunk)
        lines: list[bytes] = []
        if chunk:
            *lines, pending = (pending + chunk).split(b"\n")
        yielded = False
        for line in lines:
            event = _parse(line)
            if event is None:
                continue
            seq, kind = event["seq"], event.get("kind")
            if seq > after or (seq == after and at_end and _replaced_an_end(event)):
                after = seq
                yield event
                yielded = True
                last_yield = loop.time()
            if seq == after:
                at_end = kind == "run_finished"
            ended = kind == "run_finished"
        if len(chunk) == _CHUNK:  # more is waiting: read on before any wait or verdict
            await asyncio.sleep(0)
            continue
        if over or (ended and not resumable):
            return
        if not yielded and heartbeat is not None and loop.time() - last_yield >= heartbeat:
            yield None
            last_yield = loop.time()
        await _wait(poll, wake)


def runlog_snapshot(path: Path) -> tuple[int, Iterator[bytes]]:
    """The runlog's complete lines as they are now, for a download while the run may still be
    writing: their length in bytes and an iterator over them in chunks. A torn last line and
    whatever is appended after this call are left out, so the length stays true (a response
    with Content-Length must not grow while it is sent). Should a resume replace the log before
    the lines are read, they come from the new log if its first bytes are as many whole lines,
    and the iterator raises ``OSError`` otherwise (never half a line). FileNotFoundError if
    there is none."""
    with path.open("rb") as file:
        stat = os.fstat(file.fileno())
        end = _after_last_newline(file, stat.st_size)
    measured = (stat.st_dev, stat.st_ino)

    def chunks() -> Iterator[bytes]:
        with path.open("rb") as file:
            now = os.fstat(file.fileno())
            if (now.st_dev, now.st_ino) != measured and (
                now.st_size < end or _after_last_newline(file, end) != end
            ):
                raise OSError(f"{path} was replaced (the run was resumed) while being sent")
            file.seek(0)
            left = end
            while left > 0 and (data := file.read(min(_CHUNK, left))):
                left -= len(data)
                yield data

    return end, chunks()


def _after_last_newline(file: BinaryIO, size: int) -> int:
    """The offset just after the last newline in the first ``size`` bytes of ``file`` (0:
    none)."""
    stop = size
    while stop > 0:
        start = max(0, stop - _CHUNK)
        file.seek(start)
        found = file.read(stop - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        stop = start
    return 0


def _read(path: Path, offset: int, known: FileId | None) -> tuple[bytes, FileId | None, bool]:
    """The bytes appended after ``offset`` (at most ``_CHUNK``) to the file ``known`` (None:
    none read yet), which file they come from, and whether it is another file (or a shorter
    one) than ``known``: then the bytes are read from its start. Nothing while the file is
    missing. Checks the file first, so an idle poll costs one stat."""
    try:
        stat = path.stat()
        if (stat.st_dev, stat.st_ino) == known and stat.st_size <= offset:
            return b"", known, False
        with path.open("rb") as file:
            stat = os.fstat(file.fileno())  # the file opened, even if replaced since the stat
            now = (stat.st_dev, stat.st_ino)
            again = known is not None and (now != known or stat.st_size < offset)
            file.seek(0 if again else offset)
            return file.read(_CHUNK), now, again
    except FileNotFoundError:
        return b"", known, False


def _parse(line: bytes) -> dict[str, Any] | None:
    """The event on one complete line, or None for a line that is not a runlog event."""
    try:
        # NaN/Infinity (not JSON, never written by fabric) are kept as text, as the writer does.
        event = read_line(line, constants_as_text=True)
    except ValueError:  # includes invalid UTF-8
        return None
    if not isinstance(event, dict):
        return None
    seq = event.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    return event


def _replaced_an_end(event: dict[str, Any]) -> bool:
    """Whether the event is the ``run_resumed`` a resume wrote in place of an end (ADR 0010)."""
    return event.get("kind") == "run_resumed" and "ended" in event


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
