"""Reading a runlog back: every complete line, with what could not be read reported."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabric.domain.errors import ConfigError
from fabric.domain.runlog import check_versions


def read_runlog(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every complete line of a runlog; unreadable lines are reported, not fatal. A runlog of
    a format version newer than this fabric reads is refused (``ConfigError``)."""
    events: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            torn = number == len(lines)
            what = "the last line is torn (the run may have crashed)" if torn else "bad JSON"
            problems.append(f"{path}:{number}: {what}; skipped")
            continue
        if isinstance(event, dict) and "kind" in event:
            events.append(event)
        else:
            problems.append(f"{path}:{number}: not a runlog event; skipped")
    check_versions(events, str(path))
    return events, problems


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
