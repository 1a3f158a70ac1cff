"""What the run index (``index.py``) knows of one run, read from its runlog a piece at a time.

A ``FactsReader`` keeps where it stopped in the file: the next read takes only what was
appended (a running run), and a file that was replaced (a resume rewrote it) or shortened is
read again from its start. Only the lines that matter are decoded (``run_started``, the model
calls, approvals, the end); tool calls and results, the bulk of a log, are passed over by the
kind in their first bytes. Whatever a line holds, nothing in it can break the reading: bad
JSON is skipped, fields of the wrong type count as missing, and a line longer than
``MAX_LINE_BYTES`` is skipped without being held in memory. A runlog whose first line is no
``run_started`` is marked unreadable. ``RunFacts`` is a frozen snapshot, safe to share.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from .encoding import read_line

MAX_LINE_BYTES = 8 << 20
"""A longer line is skipped (no runlog line fabric writes comes near it)."""
MAX_TASK_CHARS = 10_000
"""The task text kept for listing and searching; the whole is in ``run_started``."""
_CHUNK = 1 << 20
_HEAD = 400  # the envelope (v, seq, ts, run_id) comes before kind; run ids are <= 128 chars
_KIND = re.compile(rb'"kind"\s*:\s*"([A-Za-z_]{1,40})"')
_STEP = re.compile(rb'"step"\s*:\s*([0-9]{1,9})\b')
_DECODED = {
    "run_started", "llm_response", "approval_requested", "approval", "run_finished",
    "run_resumed",
}  # fmt: skip
Measured = tuple[tuple[str, str, int, float], ...]
"""Per (backend, model): completion tokens and seconds spent in model calls."""


class RunFacts(Struct, frozen=True):
    """One run as its runlog tells it (so far). ``end`` is the ``run_finished`` that ends it
    (None: no end yet, or a resume reopened it)."""

    run_id: str
    version: int = 0
    """Changes whenever the facts do (for watchers that send only what changed)."""
    problem: str | None = None
    """Why the runlog cannot be read as one (then little else is known)."""
    pack: str | None = None
    model: str | None = None
    backend: str | None = None
    task: str | None = None
    workspace: str | None = None
    started_at: str | None = None
    replay_of: str | None = None
    resumed: bool = False
    steps: int = 0
    tokens: tuple[int, int, int] = (0, 0, 0)
    """Prompt, completion and total tokens of the model calls so far."""
    waiting: frozenset[str] = frozenset()
    """Tool calls asked about and not answered yet."""
    end: dict[str, Any] | None = None
    """status, steps, tokens, cost_usd, duration_s, error and ended_at of the end."""
    measured: Measured = ()
    skipped: int = 0
    """Lines that could not be read (bad JSON, too long, not an object)."""

    def status(self, running: bool) -> str:
        """The run's status: how it ended; else ``running`` or ``awaiting_approval`` while
        its fabric runs it (``running``), ``interrupted`` when nothing does; ``unreadable``
        for a runlog that is none."""
        if self.problem is not None:
            return "unreadable"
        if self.end is not None:
            return str(self.end["status"])
        if running:
            return "awaiting_approval" if self.waiting else "running"
        return "interrupted"


class FactsReader(Struct, dict=True):
    """Reads one runlog into ``RunFacts``, going on where the last read stopped."""

    run_id: str
    _file: tuple[int, int] | None = None
    _offset: int = 0
    _pending: bytearray = field(default_factory=bytearray)
    _skipping: bool = False
    _first: bool = True
    _fields: dict[str, Any] = field(default_factory=dict)
    _measured: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    _waiting: set[str] = field(default_factory=set)

    @functools.cached_property
    def facts(self) -> RunFacts:
        return RunFacts(self.run_id)

    def read(self, fd: int) -> int:
        """Read what was appended to the open runlog ``fd`` since the last read (all of it if
        it is another file, or shorter); returns the bytes read."""
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino)
        if identity != self._file or info.st_size < self._offset:
            self._restart(identity)
        done = 0
        while chunk := os.pread(fd, _CHUNK, self._offset):
            self._offset += len(chunk)
            done += len(chunk)
            self._feed(chunk)
        if done:
            self._publish()
        return done

    def _restart(self, identity: tuple[int, int]) -> None:
        """Forget what was read: the file is another one now (or was cut short)."""
        self.facts = RunFacts(self.run_id, version=self.facts.version)
        self._file, self._offset = identity, 0
        self._pending.clear()
        self._skipping, self._first = False, True
        self._fields.clear()
        self._measured.clear()
        self._waiting.clear()

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            start = end + 1
            if self._skipping:
                self._skipping = False
                continue
            if self._pending:
                self._pending += piece
                piece, self._pending = bytes(self._pending), bytearray()
            self._line(piece)
        rest = chunk[start:]
        if self._skipping:
            return
        if len(self._pending) + len(rest) > MAX_LINE_BYTES:
            self._pending.clear()
            self._skipping = True  # until the next newline
            self._skip()
        else:
            self._pending += rest

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        if len(line) > MAX_LINE_BYTES:
            self._skip()
            return
        found = _KIND.search(line, 0, _HEAD)
        kind = found.group(1).decode() if found else None
        if self._first:
            event = _decode(line)
            if event is None or event.get("kind") != "run_started":
                self._skip()
                return
            self._first = False
            self._started(event)
            return
        if "problem" in self._fields:
            return
        if kind == "llm_request":
            step = _STEP.search(line, 0, _HEAD + 64)
            if step is not None:
                self._fields["steps"] = max(self._fields.get("steps", 0), int(step.group(1)))
            return
        if kind is not None and kind not in _DECODED:
            return
        event = _decode(line)
        if event is None:
            self._skip()
            return
        self._event(event)

    def _skip(self) -> None:
        """A line that could not be read; the first one makes the runlog unreadable."""
        self._fields["skipped"] = self._fields.get("skipped", 0) + 1
        if self._first:
            self._first = False
            self._fields["problem"] = "its first line is not a run_started event"

    def _started(self, event: dict[str, Any]) -> None:
        backend = event.get("backend")
        task = _text(event.get("task"))
        self._fields.update(
            pack=_text(event.get("pack")),
            model=_text(event.get("model")),
            backend=_text(backend.get("name")) if isinstance(backend, dict) else None,
            task=task[:MAX_TASK_CHARS] if task is not None else None,
            workspace=_text(event.get("workspace")),
            started_at=_text(event.get("ts")),
            replay_of=_text(event.get("replay_of")),
        )

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "llm_response":
            usage = _usage(event.get("usage"))
            tokens = self._fields.get("tokens", (0, 0, 0))
            self._fields["tokens"] = tuple(a + b for a, b in zip(tokens, usage, strict=True))
            step = _count(event.get("step"))
            self._fields["steps"] = max(self._fields.get("steps", 0), step)
            model = _text(event.get("model")) or self._fields.get("model") or "?"
            pair = self._measured.setdefault((self._fields.get("backend") or "?", model), [0, 0])
            pair[0] += usage[1]
            pair[1] += _number(event.get("duration_ms")) or 0.0
        elif kind == "approval_requested" and isinstance(event.get("call_id"), str):
            self._waiting.add(event["call_id"])
        elif kind == "approval" and isinstance(event.get("call_id"), str):
            self._waiting.discard(event["call_id"])
        elif kind == "run_finished":
            self._fields["end"] = _end(event)
        elif kind == "run_resumed":
            self._fields.update(end=None, resumed=True)
            self._waiting.clear()

    def _publish(self) -> None:
        fields = dict(self._fields)
        fields["waiting"] = frozenset(self._waiting)
        fields["measured"] = tuple(
            (backend, model, int(tokens), ms / 1000)
            for (backend, model), (tokens, ms) in self._measured.items()
        )
        updated = replace(self.facts, **fields)
        if updated != self.facts:
            self.facts = replace(updated, version=self.facts.version + 1)


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        event = read_line(line, constants_as_text=True)
    except ValueError:  # includes invalid UTF-8
        return None
    return event if isinstance(event, dict) else None


def _end(event: dict[str, Any]) -> dict[str, Any]:
    cost = event.get("cost")
    error = event.get("error")
    shown_error = None
    if isinstance(error, dict):
        shown_error = {k: error[k] for k in ("code", "message", "hint") if _text(error.get(k))}
    return {
        "status": _text(event.get("status")) or "unknown",
        "steps": _count(event.get("steps")) if "steps" in event else None,
        "tokens": _usage(event.get("usage")) if isinstance(event.get("usage"), dict) else None,
        "cost_usd": _number(cost.get("usd")) if isinstance(cost, dict) else None,
        "duration_s": _number(event.get("duration_s")),
        "error": shown_error or None,
        "ended_at": _text(event.get("ts")),
    }


def _usage(usage: Any) -> tuple[int, int, int]:
    if not isinstance(usage, dict):
        return (0, 0, 0)
    names = ("prompt_tokens", "completion_tokens", "total_tokens")
    prompt, completion, total = (_count(usage.get(name)) for name in names)
    return prompt, completion, total or prompt + completion


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: Any) -> int:
    """A whole number >= 0, or 0 for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None
