"""``runs/<run_id>/runlog.jsonl``: one JSON object a line, flushed as it is written.

Every line carries ``v`` (format version), ``seq`` (0, 1, 2, ...), ``ts`` (UTC, ISO 8601),
``run_id`` and ``kind``; the event's own fields follow. The format version is
``FORMAT_VERSION`` (3; see ``fabric.domain.runlog``). Outputs too large to keep inline are
written under ``artifacts/`` beside the log and referenced by relative path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import math
import os
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib import resources
from importlib.abc import Traversable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from pathlib import Path
from typing import Any

from fabric.domain import runlog as _format
from fabric.domain.clock import Clock, iso_z, utc_now
from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets

FORMAT_VERSION = _format.FORMAT_VERSION
"""The format version every line is written in (``v``); older ones stay readable."""
READABLE_VERSIONS = _format.READABLE_VERSIONS
RUNLOG_NAME = "runlog.jsonl"


def runlog_path(runs_dir: Path, run_id: str) -> Path:
    """Where run ``run_id`` keeps its runlog: ``<runs_dir>/<run_id>/runlog.jsonl``. The one
    place that path is built (the writer, ``fabric run``'s Ctrl-C, the service, the eval)."""
    return runs_dir / run_id / RUNLOG_NAME


Observer = Callable[[Mapping[str, Any]], None]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_NAME_CHARS = 120


def is_run_id(name: str) -> bool:
    """Whether ``name`` has the shape of a run id, so it can name a run folder (letters,
    digits, '.', '_' and '-', starting with a letter or digit; at most 128): no path
    separators, never '.' or '..'."""
    return _RUN_ID.fullmatch(name) is not None


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
    encode = _encoder(**options)
    try:
        return encode(record)
    except ValueError:
        return encode(_finite(record))


@functools.lru_cache(maxsize=8)
def _encoder(**options: Any) -> Callable[[Any], str]:
    """One encoding function per set of options (``json.dumps`` with options builds an
    encoder every call). For a compact or default line, the C encoder is made once and called
    straight, as ``JSONEncoder.encode`` would call it but without making it again on every
    line; with no circular-reference check, which only changes the error a circular value
    gets (``_finite`` then recursed without end anyway)."""
    encoder = json.JSONEncoder(allow_nan=False, default=str, **options)
    if c_make_encoder is None or set(options) - {"ensure_ascii", "separators"}:
        return encoder.encode
    make = c_make_encoder(
        None,
        str,
        encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
        None,
        encoder.key_separator,
        encoder.item_separator,
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
    return lambda value: "".join(make(value, 0))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _timestamp(moment: datetime) -> str:
    """``iso_z(moment, "microseconds")``, the same text at about half the cost for a UTC
    moment (the clock's): one line of the runlog each."""
    if moment.tzinfo is not UTC:
        return iso_z(moment, "microseconds")
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031 (the fastest here)
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
    )


class _Envelope:
    def __init__(
        self, run_id: str, observers: tuple[Observer, ...], clock: Clock = utc_now
    ) -> None:
        self.run_id = run_id
        self._seq = 0
        self._observers = observers
        self._clock = clock

    def _record(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        record = self._stamp(kind, data)
        self._notify(record)
        return record

    def _stamp(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        envelope = {
            "v": FORMAT_VERSION,
            "seq": self._seq,
            "ts": _timestamp(self._clock()),
            "run_id": self.run_id,
            "kind": kind,
        }
        record = {**envelope, **data}
        if len(record) < len(envelope) + len(data):  # data reused an envelope key: it loses
            record.update(envelope)
        self._seq += 1
        return record

    def _notify(self, record: Mapping[str, Any]) -> None:
        for observe in self._observers:
            observe(record)


class JsonlRunLog(_Envelope):
    """Writes ``<runs_dir>/<run_id>/runlog.jsonl``; safe to read while the run goes on.
    ``secrets`` are redacted from every line and artifact (and from what observers get)."""

    def __init__(
        self,
        runs_dir: Path,
        run_id: str,
        *observers: Observer,
        secrets: Secrets | None = None,
        clock: Clock = utc_now,
    ) -> None:
        if not _RUN_ID.fullmatch(run_id):
            raise ConfigError(
                f"run id {run_id!r} cannot name a run folder",
                hint="use letters, digits, '.', '_' and '-' only (at most 128), or let fabric "
                "pick the id",
            )
        super().__init__(run_id, observers, clock)
        self._secrets = secrets or Secrets()
        self.path = runlog_path(runs_dir, run_id)
        self.dir = self.path.parent
        self.dir.mkdir(parents=True, exist_ok=False)
        # A lone surrogate (a model can send one as a JSON escape) is written as the JSON
        # escape it came from, so the line stays valid UTF-8 and valid JSON.
        self._file = self.path.open("x", encoding="utf-8", errors="backslashreplace")
        self._flushing = False

    @classmethod
    def reopen(
        cls,
        path: Path,
        *observers: Observer,
        secrets: Secrets | None = None,
        clock: Clock = utc_now,
    ) -> JsonlRunLog:
        """Go on with the existing runlog at ``path`` (``fabric resume``): same run id, ``seq``
        numbering continued. What ends the log is not kept: a torn last line (the writer was
        killed mid-line), and a trailing ``run_finished`` (the run stopped at ``max_steps``),
        whose ``seq`` the first new line takes; the caller records that end in that line
        (``run_resumed.ended``, ADR 0010). Nothing changes until the first line is written; that
        one replaces the log whole (``_ReplacedTail``), so a kill at any moment leaves the old
        log or the new one. Every other complete line stays as it is."""
        data = path.read_bytes()
        complete = data.rfind(b"\n") + 1  # everything after the last newline is torn
        start, last = _last_line(data[:complete])
        if not isinstance(last, Mapping) or not isinstance(last.get("seq"), int):
            raise ConfigError(
                f"{path} has no complete runlog line to continue from",
                hint="pass the runlog of a run fabric recorded",
            )
        log = cls.__new__(cls)
        _Envelope.__init__(log, str(last.get("run_id", path.parent.name)), observers, clock)
        log._secrets = secrets or Secrets()
        ended = last.get("kind") == "run_finished"
        log._seq = int(last["seq"]) + (0 if ended else 1)
        log._flushing = False
        log.dir = path.parent
        log.path = path
        keep = start if ended else complete
        if keep == len(data):
            log._file = path.open("a", encoding="utf-8", errors="backslashreplace")
        else:
            log._file = io.TextIOWrapper(
                _ReplacedTail(path, keep), encoding="utf-8", errors="backslashreplace"
            )
        return log

    @property
    def location(self) -> str:
        return str(self.path)

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        record = self._stamp(kind, data)
        line = strict_json(record, ensure_ascii=False, separators=(",", ":"))
        safe = self._secrets.redact_json(line)  # the same line, unless a secret was in it
        self._file.write(safe + "\n")
        self._flush_soon()
        # Observers (live progress, the service's event wake-up) see what the log holds,
        # once it holds it.
        self._notify(record if safe is line else json.loads(safe))

    def _flush_soon(self) -> None:
        """Flush now, or, in a running event loop, as soon as the loop gets control back: the
        lines a step writes together (a reply, a tool call, its verdict, its result) reach the
        file in one write, before anything waits on a model, a tool or a person, and before a
        live reader this emit wakes reads the file (its wake-up is scheduled after this)."""
        if self._flushing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._file.flush()
            return
        self._flushing = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if not self._file.closed:
            self._file.flush()

    def save_artifact(self, name: str, content: str) -> str:
        folder = self.dir / "artifacts"
        folder.mkdir(exist_ok=True)
        target = folder / _unique(_safe_name(name), lambda n: (folder / n).exists())
        content = self._secrets.redact(content)
        target.write_text(content, encoding="utf-8", errors="backslashreplace")
        return Path(os.path.relpath(target, self.dir)).as_posix()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def discard(self) -> None:
        """Close the log and, if it is a new one with no line written, remove it and its
        folder: a run that never started leaves no trace in the runs folder."""
        self.close()
        if self._seq == 0:  # a reopened log goes on from a line it holds: never 0
            with contextlib.suppress(OSError):
                self.path.unlink()
                self.dir.rmdir()


def _last_line(data: bytes) -> tuple[int, Any]:
    """Where the last line of ``data`` that holds JSON starts, and its value (None: there is
    none); blank and unreadable lines after it are passed over."""
    stop = len(data)
    while stop > 0:
        start = data.rfind(b"\n", 0, stop - 1) + 1
        with contextlib.suppress(ValueError):
            if data[start:stop].strip():
                return start, json.loads(data[start:stop])
        stop = start
    return 0, None


class _ReplacedTail(io.BufferedIOBase):
    """The bytes of a reopened runlog whose end, from offset ``keep`` on, gives way to what is
    written next. Nothing changes until the first flush, which writes the first ``keep`` bytes
    of the log and the new ones to a file beside it, syncs it to disk and renames it over the
    log (``_replace``): a reader or a crash sees the whole old log or the whole new one, never
    a mix. Later writes append to the new log."""

    def __init__(self, path: Path, keep: int) -> None:
        super().__init__()
        self._path, self._keep = path, keep
        self._pending = bytearray()
        self._out: io.BufferedWriter | None = None

    @property
    def name(self) -> str:
        return str(self._path)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._out is not None:
            return self._out.write(data)
        self._pending += data
        return len(data)

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()
        elif self._pending:
            self._out = _replace(self._path, self._keep, bytes(self._pending))
            self._pending.clear()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            out, self._out = self._out, None
            if out is not None:
                out.close()
            super().close()


def _replace(path: Path, keep: int, tail: bytes) -> io.BufferedWriter:
    """Replace the file at ``path`` with its first ``keep`` bytes followed by ``tail``,
    atomically (a new file beside it, fsync, rename over, fsync of the folder); the new file is
    returned open for appending."""
    new = path.with_name(f".{path.name}.new")  # a leftover of a killed attempt is overwritten
    with path.open("rb") as source, new.open("wb") as target:
        left = keep
        while left > 0 and (chunk := source.read(min(left, 1 << 20))):
            target.write(chunk)
            left -= len(chunk)
        if left:
            raise OSError(f"{path} is shorter than when it was reopened")
        target.write(tail)
        target.flush()
        os.fsync(target.fileno())
    new.replace(path)
    with contextlib.suppress(OSError):  # the rename made durable, where the system allows it
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return path.open("ab")


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
