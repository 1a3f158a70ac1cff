"""Helpers shared by the tests (importable because tests/conftest.py's folder is on sys.path)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from fabric.infrastructure.runlog import schema_path

_VALIDATOR = Draft202012Validator(
    json.loads(schema_path().read_text("utf-8")), format_checker=FormatChecker()
)


def read_events(path: Path | str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines() if line]


def assert_valid_runlog(source: Path | str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every line validates against the published schema; seq runs 0..n-1 with one run_id;
    the log opens with run_started and closes with run_finished. Returns the events."""
    events = source if isinstance(source, list) else read_events(source)
    assert events, "the runlog is empty"
    for event in events:
        errors = [e.message for e in _VALIDATOR.iter_errors(event)]
        assert not errors, f"line {event.get('seq')} ({event.get('kind')}) invalid: {errors}"
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert len({e["run_id"] for e in events}) == 1
    assert events[0]["kind"] == "run_started"
    assert events[-1]["kind"] == "run_finished"
    assert [e["kind"] for e in events].count("run_finished") == 1
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


def write(folder: Path, text: str, name: str = "fabric.yaml") -> Path:
    """Write a (dedented) config or source file; returns its path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), "utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based number of the first line of ``path`` containing ``needle``."""
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")
