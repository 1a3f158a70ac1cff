"""``runs/<run_id>/runlog.jsonl``: one JSON object a line, written in whole lines as they are
made (ADR 0003: a step's lines together, once the loop gets control back).

Every line carries ``v`` (format version), ``seq`` (0, 1, 2, ...), ``ts`` (UTC, ISO 8601),
``run_id`` and ``kind``; the event's own fields follow. The format version is
``FORMAT_VERSION`` (3; see ``fabric.domain.runlog``). Outputs too large to keep inline are
written under ``artifacts/`` beside the log and referenced by relative path.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fabric.domain.clock import Clock, utc_now
from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets

from .encoding import now_stamp, runlog_line, strict_json, timestamp
from .names import FORMAT_VERSION, is_run_id, runlog_path, safe_file_name, unique_name
from .reopen import ReplacedTail, last_line

Observer = Callable[[Mapping[str, Any]], None]
_HOLD_BYTES = 64 << 10
"""Lines held at most before they are written, when the loop does not get control back."""


class _Envelope:
    def __init__(
        self, run_id: str, observers: tuple[Observer, ...], clock: Clock = utc_now
    ) -> None:
        self.run_id = run_id
        self._seq = 0
        self._observers = observers
        self._now: Callable[[], str] = now_stamp if clock is utc_now else lambda: timestamp(clock())

    def _record(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        record = self._stamp(kind, data)
        self._notify(record)
        return record

    def _stamp(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        seq, ts = self._seq, self._now()
        record = {"v": FORMAT_VERSION, "seq": seq, "ts": ts, "run_id": self.run_id, "kind": kind}
        record.update(data)
        if len(record) < 5 + len(data):  # data reused an envelope key: it loses
            record.update(v=FORMAT_VERSION, seq=seq, ts=ts, run_id=self.run_id, kind=kind)
        self._seq = seq + 1
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
        if not is_run_id(run_id):
            raise ConfigError(
                f"run id {run_id!r} cannot name a run folder",
                hint="use letters, digits, '.', '_' and '-' only (at most 128), or let fabric "
                "pick the id",
            )
        super().__init__(run_id, observers, clock)
        self._secrets = secrets or Secrets()
        self._redacting = bool(self._secrets)  # asked once: five lines a step
        self.path = runlog_path(runs_dir, run_id)
        self.dir = self.path.parent
        self.dir.mkdir(parents=True, exist_ok=False)
        self._file: io.BufferedIOBase = self.path.open("xb")
        self._lines: list[bytes] = []
        """Lines made and not yet written (``_write``)."""
        self._held = 0
        """Their bytes."""
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
        one replaces the log whole (``ReplacedTail``), so a kill at any moment leaves the old
        log or the new one. Every other complete line stays as it is."""
        data = path.read_bytes()
        complete = data.rfind(b"\n") + 1  # everything after the last newline is torn
        start, last = last_line(data[:complete])
        if not isinstance(last, Mapping) or not isinstance(last.get("seq"), int):
            raise ConfigError(
                f"{path} has no complete runlog line to continue from",
                hint="pass the runlog of a run fabric recorded",
            )
        log = cls.__new__(cls)
        _Envelope.__init__(log, str(last.get("run_id", path.parent.name)), observers, clock)
        log._secrets = secrets or Secrets()
        log._redacting = bool(log._secrets)
        ended = last.get("kind") == "run_finished"
        log._seq = int(last["seq"]) + (0 if ended else 1)
        log._flushing = False
        log._lines, log._held = [], 0
        log.dir = path.parent
        log.path = path
        keep = start if ended else complete
        log._file = path.open("ab") if keep == len(data) else ReplacedTail(path, keep)
        return log

    @property
    def location(self) -> str:
        return str(self.path)

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        # five lines a step: what is done here for each one is kept to the few calls needed
        record = self._stamp(kind, data)
        line = safe = runlog_line(record)
        if self._redacting:  # the same line, unless a secret was in it
            text = line[:-1].decode()
            redacted = self._secrets.redact_json(text)
            if redacted is not text:
                safe = redacted.encode("utf-8", errors="backslashreplace") + b"\n"
        self._lines.append(safe)
        self._held += len(safe)
        if not self._flushing:
            self._flush_soon()
        elif self._held >= _HOLD_BYTES:  # a long stretch without a wait (a replay)
            self._write()
        # Observers (live progress, the service's event wake-up) see what the log holds,
        # once it holds it.
        if self._observers:
            self._notify(record if safe is line else json.loads(safe))

    def _flush_soon(self) -> None:
        """Write now or, in a running event loop, as soon as the loop gets control back (no
        write is pending when this is called): the lines a step writes together (a reply, a
        tool call, its verdict, its result) reach the file in one write, before anything
        waits on a model, a tool or a person, and before a live reader this emit wakes reads
        the file (its wake-up is scheduled after this)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write()
            return
        self._flushing = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if not self._file.closed:
            self._write()

    def _write(self) -> None:
        """The lines held, to the file in one write (whole lines only: a reader never sees
        half of one that was made)."""
        lines, self._lines, self._held = self._lines, [], 0
        self._file.write(b"".join(lines))
        self._file.flush()

    def save_artifact(self, name: str, content: str) -> str:
        folder = self.dir / "artifacts"
        folder.mkdir(exist_ok=True)
        target = folder / unique_name(safe_file_name(name), lambda n: (folder / n).exists())
        content = self._secrets.redact(content)
        target.write_text(content, encoding="utf-8", errors="backslashreplace")
        return Path(os.path.relpath(target, self.dir)).as_posix()

    def close(self) -> None:
        if not self._file.closed:
            try:
                if self._lines:
                    self._write()
            finally:
                self._file.close()

    def discard(self) -> None:
        """Close the log and, if it is a new one with no line written, remove it and its
        folder: a run that never started leaves no trace in the runs folder."""
        self.close()
        if self._seq == 0:  # a reopened log goes on from a line it holds: never 0
            with contextlib.suppress(OSError):
                self.path.unlink()
                self.dir.rmdir()


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
        ref = "artifacts/" + unique_name(
            safe_file_name(name), lambda n: f"artifacts/{n}" in self.artifacts
        )
        self.artifacts[ref] = content
        return ref

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    def close(self) -> None:
        self.closed = True
