"""``runs/<run_id>/runlog.jsonl``: one JSON object a line, flushed as it is written.

Every line carries ``v`` (format version), ``seq`` (0, 1, 2, ...), ``ts`` (UTC, ISO 8601),
``run_id`` and ``kind``; the event's own fields follow. The format version is
``FORMAT_VERSION`` (2; see ``fabric.domain.runlog``). Outputs too large to keep inline are
written under ``artifacts/`` beside the log and referenced by relative path.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from fabric.domain import runlog as _format
from fabric.domain.errors import ConfigError

FORMAT_VERSION = _format.FORMAT_VERSION
"""The format version every line is written in (``v``); older ones stay readable."""
READABLE_VERSIONS = _format.READABLE_VERSIONS
RUNLOG_NAME = "runlog.jsonl"
Observer = Callable[[Mapping[str, Any]], None]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_NAME_CHARS = 120


def new_run_id() -> str:
    """Sortable by start time to the millisecond, unique enough for concurrent runs:
    ``20261122T031500.123Z-9f3a1c``."""
    now = datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}.{now.microsecond // 1000:03d}Z-{secrets.token_hex(3)}"


def schema_path(version: int | None = None) -> Traversable:
    """The published JSON Schema of one runlog line of format ``version`` (default: the one
    this fabric writes): ``runlog.schema.json`` for the newest, ``runlog-v<N>.schema.json``
    for each older one (kept unchanged, so old runlogs can still be checked)."""
    version = FORMAT_VERSION if version is None else version
    if version not in READABLE_VERSIONS:
        known = ", ".join(map(str, READABLE_VERSIONS))
        raise ValueError(f"no runlog format version {version}; fabric knows {known}")
    name = "runlog.schema.json" if version == FORMAT_VERSION else f"runlog-v{version}.schema.json"
    return resources.files("fabric").joinpath(name)


def _safe_name(name: str) -> str:
    """A file name made from ``name`` (which may come from the model): no separators, no
    leading dots, short enough for any file system; the extension is kept."""
    safe = _UNSAFE.sub("_", name).strip("._") or "artifact"
    if len(safe) > _NAME_CHARS:
        stem, dot, ext = safe.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        safe = safe[: _NAME_CHARS - len(ext) - 1].rstrip("._") + (f".{ext}" if ext else "")
    return safe


def _unique(name: str, taken: Callable[[str], bool]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... (before the extension) if it is taken."""
    if not taken(name):
        return name
    stem, dot, ext = name.rpartition(".")
    stem, ext = (stem, dot + ext) if dot and stem else (name, "")
    number = 2
    while taken(f"{stem}-{number}{ext}"):
        number += 1
    return f"{stem}-{number}{ext}"


def strict_json(record: Mapping[str, Any], **options: Any) -> str:
    """Strict JSON (no NaN or Infinity, which most JSON readers refuse): such numbers, e.g.
    from a tool argument like ``1e999``, are written as text."""
    encoder = _encoder(**options)
    try:
        return encoder.encode(record)
    except ValueError:
        return encoder.encode(_finite(record))


@functools.lru_cache(maxsize=8)
def _encoder(**options: Any) -> json.JSONEncoder:
    """One encoder per set of options (``json.dumps`` with options builds one every call)."""
    return json.JSONEncoder(allow_nan=False, default=str, **options)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class _Envelope:
    def __init__(self, run_id: str, observers: tuple[Observer, ...]) -> None:
        self.run_id = run_id
        self._seq = 0
        self._observers = observers

    def _record(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        envelope = {
            "v": FORMAT_VERSION,
            "seq": self._seq,
            "ts": _now(),
            "run_id": self.run_id,
            "kind": kind,
        }
        record = {**envelope, **data}
        if len(record) < len(envelope) + len(data):  # data reused an envelope key: it loses
            record.update(envelope)
        self._seq += 1
        for observe in self._observers:
            observe(record)
        return record


class JsonlRunLog(_Envelope):
    """Writes ``<runs_dir>/<run_id>/runlog.jsonl``; safe to read while the run goes on."""

    def __init__(self, runs_dir: Path, run_id: str, *observers: Observer) -> None:
        if not _RUN_ID.fullmatch(run_id):
            raise ConfigError(
                f"run id {run_id!r} cannot name a run folder",
                hint="use letters, digits, '.', '_' and '-' only (at most 128), or let fabric "
                "pick the id",
            )
        super().__init__(run_id, observers)
        self.dir = runs_dir / run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self.path = self.dir / RUNLOG_NAME
        # A lone surrogate (a model can send one as a JSON escape) is written as the JSON
        # escape it came from, so the line stays valid UTF-8 and valid JSON.
        self._file = self.path.open("x", encoding="utf-8", errors="backslashreplace")

    @classmethod
    def reopen(cls, path: Path, *observers: Observer) -> JsonlRunLog:
        """Append to the existing runlog at ``path`` (``fabric resume``), going on with its
        ``seq`` numbering and run id. A torn last line (the writer was killed mid-line) is
        cut off first; every complete line stays as it is."""
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1  # everything after the last newline is torn
        last: Mapping[str, Any] | None = None
        for line in reversed(data[:end].splitlines()):
            if line.strip():
                try:
                    last = json.loads(line)
                except ValueError:
                    continue
                break
        if not isinstance(last, Mapping) or not isinstance(last.get("seq"), int):
            raise ConfigError(
                f"{path} has no complete runlog line to continue from",
                hint="pass the runlog of a run fabric recorded",
            )
        log = cls.__new__(cls)
        _Envelope.__init__(log, str(last.get("run_id", path.parent.name)), observers)
        log._seq = int(last["seq"]) + 1
        log.dir = path.parent
        log.path = path
        if end < len(data):
            with path.open("r+b") as raw:
                raw.truncate(end)
        log._file = path.open("a", encoding="utf-8", errors="backslashreplace")
        return log

    @property
    def location(self) -> str:
        return str(self.path)

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        line = strict_json(self._record(kind, data), ensure_ascii=False, separators=(",", ":"))
        self._file.write(line + "\n")
        self._file.flush()

    def save_artifact(self, name: str, content: str) -> str:
        folder = self.dir / "artifacts"
        folder.mkdir(exist_ok=True)
        target = folder / _unique(_safe_name(name), lambda n: (folder / n).exists())
        target.write_text(content, encoding="utf-8", errors="backslashreplace")
        return Path(os.path.relpath(target, self.dir)).as_posix()

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
        self.events.append(json.loads(strict_json(self._record(kind, data))))

    def save_artifact(self, name: str, content: str) -> str:
        ref = "artifacts/" + _unique(_safe_name(name), lambda n: f"artifacts/{n}" in self.artifacts)
        self.artifacts[ref] = content
        return ref

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def close(self) -> None:
        self.closed = True
