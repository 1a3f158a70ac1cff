"""A task's runlog as Server-Sent Events (the lines come from
``fabric.infrastructure.runlog.tail.follow_runlog``).

SSE wire format (one message per runlog line)::

    id: <seq>
    event: <kind>
    data: <the whole event as compact JSON, one line>

A client that reconnects sends the last ``id`` it saw as ``Last-Event-ID``; ``last_event_id``
turns it into ``after`` so the stream resumes with the next line: no gap, no duplicate. One
exception (ADR 0010): a resume puts ``run_resumed`` in place of the run's end, with its seq;
at that id the stream resumes with the ``run_resumed``, which a client that had got it gets
twice, with the same id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fabric.infrastructure.runlog.encoding import strict_json

_DIGITS = re.compile(r"[0-9]{1,18}")
# Characters JSON leaves raw that some line readers (e.g. Python's str.splitlines) split on.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


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


def sse_message(event: str, data: Mapping[str, Any]) -> bytes:
    """An SSE message without an ``id`` (it is no runlog line, so no place to resume from):
    ``event: <event>`` and the data as one line of compact JSON. The run console's
    ``run`` summaries and ``delta`` pieces of streamed model text."""
    return f"event: {_field(event)}\ndata: {_one_line_json(data)}\n\n".encode()


def sse_comment(text: str = "") -> bytes:
    """An SSE comment (clients ignore it), e.g. ``sse_comment("ping")`` -> ``b": ping\\n\\n"``,
    sent to keep an idle stream open through proxies; ``sse_comment()`` is ``b":\\n\\n"``."""
    if not text:
        return b":\n\n"
    return "".join(f": {line}\n" for line in text.splitlines()).encode() + b"\n"


def queued_note(waiting_for: list[str]) -> str:
    """The comment that opens the event stream of a task that has not started yet."""
    if not waiting_for:
        return "queued: the task starts when a slot is free"
    verb = "uses" if len(waiting_for) == 1 else "use"
    return f"queued: the task starts after {', '.join(waiting_for)}, which {verb} its workspace"


def last_event_id(header: str | None) -> int:
    """The ``after`` value for a ``Last-Event-ID`` header: its seq when the header is a whole
    number >= 0 (ASCII digits, surrounding spaces allowed), else -1 (replay from the start)."""
    if header is None:
        return -1
    value = header.strip()
    return int(value) if _DIGITS.fullmatch(value) else -1


def _one_line_json(event: Mapping[str, Any]) -> str:
    options: dict[str, Any] = {"ensure_ascii": False, "separators": (",", ":")}
    text = strict_json(event, **options)  # NaN or Infinity as text, as in the runlog
    # json.dumps escapes CR and LF inside strings; these three it leaves raw.
    return text.translate(_LINE_BREAKS)


def _field(value: str) -> str:
    """An SSE field value cannot hold a line break; replace any with a space."""
    return value.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
