"""Reading a runlog back: every complete line, with what could not be read reported."""

from __future__ import annotations

import json
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
