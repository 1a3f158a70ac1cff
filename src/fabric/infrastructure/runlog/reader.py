"""Reading a runlog back: every complete line, with what could not be read reported."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from fabric.domain.errors import ConfigError
from fabric.domain.runlog import check_versions


def read_runlog(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every complete line of a runlog; unreadable lines are reported, not fatal. A runlog of
    a format version newer than this fabric reads is refused (``ConfigError``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    long_numbers = _LONG_NUMBER in data.translate(_DIGITS)
    events = None if long_numbers else _every_line(data)
    problems: list[str] = []
    if events is None:
        events, problems = _line_by_line(path, data, json.loads if long_numbers else _decoded)
    check_versions(events, str(path))
    return events, problems


def _every_line(data: bytes) -> list[dict[str, Any]] | None:
    """The events of a log whose every line is one, each line's bytes read by orjson (1,040
    events: about two thirds of the time ``_line_by_line`` takes); None when a line is not (a
    torn last line, bad JSON or UTF-8, a line that is no event), for ``_line_by_line`` to say
    which."""
    if b"\r" in data:  # line ends as text mode reads them
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    try:
        events = [orjson.loads(line) for line in data.split(b"\n") if line.strip()]
    except orjson.JSONDecodeError:
        return None
    if all(type(event) is dict and "kind" in event for event in events):
        return events
    return None


def _line_by_line(
    path: Path, data: bytes, decode: Callable[[str], Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each line of ``data`` read on its own by ``decode``, the unreadable ones reported."""
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    text = data.decode("utf-8", errors="replace")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as text mode reads
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = decode(line)
        except ValueError:
            torn = number == len(lines)
            what = "the last line is torn (the run may have crashed)" if torn else "bad JSON"
            problems.append(f"{path}:{number}: {what}; skipped")
            continue
        if isinstance(event, dict) and "kind" in event:
            events.append(event)
        else:
            problems.append(f"{path}:{number}: not a runlog event; skipped")
    return events, problems


_DIGITS = bytes(48 if b in b"0123456789" else 32 for b in range(256))
"""Every digit made ``0`` and every other byte a space (``bytes.translate``), so that 19 digits
in a row are found with a plain ``in``."""
_LONG_NUMBER = b"0" * 19


def _decoded(line: str) -> Any:
    """One line's JSON. orjson reads a runlog's lines about three times as fast as ``json``
    (a replay of 1,000 events: 4 ms against 12). What orjson refuses goes to ``json``, which
    also reads what fabric never writes (NaN and Infinity, an escaped lone surrogate) and
    raises the same ``ValueError`` for a line that is no JSON. orjson reads an integer past 64
    bits as a float, so a runlog holding 19 digits in a row anywhere is read with ``json``
    throughout (``read_runlog``)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def call_logged(runlog: Path, call_id: str) -> bool:
    """Whether the runlog holds a tool call with this id (to tell "not waiting" from
    "no such call")."""
    with contextlib.suppress(OSError), runlog.open("r", encoding="utf-8") as lines:
        for line in lines:
            if call_id not in line:
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if _is_call(event, call_id):
                    return True
    return False


def _is_call(event: Any, call_id: str) -> bool:
    return (
        isinstance(event, Mapping)
        and event.get("kind") == "tool_call"
        and event.get("call_id") == call_id
    )
