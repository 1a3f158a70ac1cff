"""``runs/<run_id>/runlog.jsonl``: one JSON object a line, flushed as it is written.

Every line carries ``v`` (format version), ``seq`` (0, 1, 2, ...), ``ts`` (UTC, ISO 8601),
``run_id`` and ``kind``; the event's own fields follow. Outputs too large to keep inline are
written under ``artifacts/`` beside the log and referenced by relative path.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
RUNLOG_NAME = "runlog.jsonl"
Observer = Callable[[Mapping[str, Any]], None]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_id() -> str:
    """Sortable by start time, unique enough for concurrent runs: ``20261122T031500Z-9f3a1c``."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}Z-{secrets.token_hex(3)}"


def schema_path() -> Traversable:
    """The published JSON Schema of one runlog line."""
    return resources.files("fabric").joinpath("runlog.schema.json")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class _Envelope:
    def __init__(self, run_id: str, observers: tuple[Observer, ...]) -> None:
        self.run_id = run_id
        self._seq = 0
        self._observers = observers

    def _record(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        record = {"v": FORMAT_VERSION, "seq": self._seq, "ts": _now(), "run_id": self.run_id}
        record["kind"] = kind
        record.update(data)
        self._seq += 1
        for observe in self._observers:
            observe(record)
        return record


class JsonlRunLog(_Envelope):
    """Writes ``<runs_dir>/<run_id>/runlog.jsonl``; safe to read while the run goes on."""

    def __init__(self, runs_dir: Path, run_id: str, *observers: Observer) -> None:
        super().__init__(run_id, observers)
        self.dir = runs_dir / run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self.path = self.dir / RUNLOG_NAME
        self._file = self.path.open("x", encoding="utf-8")

    @property
    def location(self) -> str:
        return str(self.path)

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        line = json.dumps(
            self._record(kind, data), ensure_ascii=False, separators=(",", ":"), default=str
        )
        self._file.write(line + "\n")
        self._file.flush()

    def save_artifact(self, name: str, content: str) -> str:
        folder = self.dir / "artifacts"
        folder.mkdir(exist_ok=True)
        safe = _UNSAFE.sub("_", name).strip("._") or "artifact"
        target = folder / safe
        target.write_text(content, encoding="utf-8")
        return os.path.relpath(target, self.dir)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class MemoryRunLog(_Envelope):
    """Keeps events and artifacts in lists; for tests and embedding."""

    def __init__(self, run_id: str = "memory", *observers: Observer) -> None:
        super().__init__(run_id, observers)
        self.events: list[dict[str, Any]] = []
        self.artifacts: dict[str, str] = {}
        self.closed = False

    @property
    def location(self) -> str | None:
        return None

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        # A JSON round trip, so tests see exactly what the file log would hold.
        self.events.append(json.loads(json.dumps(self._record(kind, data), default=str)))

    def save_artifact(self, name: str, content: str) -> str:
        ref = f"artifacts/{_UNSAFE.sub('_', name)}"
        self.artifacts[ref] = content
        return ref

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def close(self) -> None:
        self.closed = True
