"""Reading a runlog back: every complete line, with what could not be read reported."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabric.domain.errors import ConfigError
from fabric.domain.runlog import check_versions

from .encoding import read_line


def read_runlog(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every complete line of a runlog; unreadable lines are reported, not fatal. A runlog of
    a format version newer than this fabric reads is refused (``ConfigError``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    events = _every_line(data)
    problems: list[str] = []
    if events is None:
        events, problems = _line_by_line(path, data)
    check_versions(events, str(path))
    return events, problems


def _every_line(data: bytes) -> list[dict[str, Any]] | None:
    """The events of a log whose every line is one, each line's bytes read as they are (no
    decoded copy of the whole text); None when a line is not (a torn last line, bad JSON or
    UTF-8, a line that is no event), for ``_line_by_line`` to say which."""
    if b"\r" in data:  # line ends as text mode reads them
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    try:
        events = [read_line(line) for line in data.split(b"\n") if line.strip()]
    except ValueError:
        return None
    if all(type(event) is dict and "kind" in event for event in events):
        return events
    return None


def _line_by_line(path: Path, data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    """Each line of ``data`` read on its own, the unreadable ones reported."""
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    text = data.decode("utf-8", errors="replace")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as text mode reads
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = read_line(line)
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


def call_logged(runlog: Path, call_id: str) -> bool:
    """Whether the runlog holds a tool call with this id (to tell "not waiting" from
    "no such call")."""
    needle = call_id.encode("utf-8", errors="replace")
    with contextlib.suppress(OSError), runlog.open("rb") as lines:
        for line in lines:
            if needle not in line:
                continue
            with contextlib.suppress(ValueError):
                if _is_call(read_line(line), call_id):
                    return True
    return False


def _is_call(event: Any, call_id: str) -> bool:
    return (
        isinstance(event, Mapping)
        and event.get("kind") == "tool_call"
        and event.get("call_id") == call_id
    )
