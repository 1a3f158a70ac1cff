"""The run index: every run in a runs folder, as the run console lists it.

A run is a folder named like a run id (``writer.is_run_id``) holding a ``runlog.jsonl``: CLI
runs, the service's tasks, replays and eval attempts alike. Each runlog is read by a
``FactsReader`` that remembers where it stopped and is asked again only when the file's size,
time or inode changed, so a finished runlog is read once per process however often the runs
are listed, and a running one only for what it appended. Whether a run without an end still
runs comes from the run ledger (its window is open and its fabric alive).

The folder may hold what a run or another user put there. A run folder or runlog that is a
symlink is left out (it could lead anywhere); files are opened beneath the run's folder
without following symlinks; a runlog that is no runlog is listed as ``unreadable``.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fabric.infrastructure.packs.run_ledger import open_runs

from .encoding import read_line
from .facts import MAX_LINE_BYTES, FactsReader, RunFacts
from .names import RUNLOG_NAME, is_run_id

ARTIFACTS = "artifacts"
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
Key = tuple[int, int, int, int]
"""What says a runlog changed: device, inode, size, modification time (ns)."""


class RunIndex:
    """The runs of ``runs_dir``, kept up to date as they are asked for. Thread-safe: the
    service asks from worker threads."""

    def __init__(self, runs_dir: Path, *, running: Callable[[], set[str]] = open_runs) -> None:
        """``running`` names the runs whose fabric runs them now (default: the run ledger)."""
        self.runs_dir = runs_dir
        self._running = running
        self._readers: dict[str, tuple[Key, FactsReader]] = {}
        self._lock = threading.Lock()
        self.bytes_read = 0
        """Runlog bytes read so far (each byte once, unless a file was replaced)."""

    def scan(self) -> list[tuple[RunFacts, str]]:
        """Every run with its status, newest first (run ids sort by their start)."""
        names = sorted(self._run_names(), reverse=True)
        running = self._running()
        with self._lock:
            found = [(name, self._refresh(name)) for name in names]
            for gone in set(self._readers) - set(names):
                del self._readers[gone]
        return [(facts, facts.status(facts.run_id in running)) for _, facts in found if facts]

    def get(self, run_id: str) -> tuple[RunFacts, str] | None:
        """One run and its status, or None when there is no such run."""
        if self.runlog(run_id) is None:
            return None
        with self._lock:
            facts = self._refresh(run_id)
        if facts is None:
            return None
        return facts, facts.status(run_id in self._running())

    def is_running(self, run_id: str) -> bool:
        """Whether the run's fabric is running it now."""
        return run_id in self._running()

    def runlog(self, run_id: str) -> Path | None:
        """The run's runlog, when ``run_id`` is a run id whose folder and runlog are real (no
        symlinks) and the runlog is a regular file; else None."""
        if not is_run_id(run_id):
            return None
        path = self.runs_dir / run_id / RUNLOG_NAME
        try:
            folder, info = os.lstat(path.parent), os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(folder.st_mode) or not stat.S_ISREG(info.st_mode):
            return None
        return path

    def started(self, run_id: str) -> dict[str, Any] | None:
        """The run's ``run_started`` event (its first line), or None."""
        try:
            with self._open(run_id, RUNLOG_NAME) as file:
                line = file.readline(MAX_LINE_BYTES + 1)
        except OSError:
            return None
        with contextlib.suppress(ValueError):
            event = read_line(line, constants_as_text=True)
            if isinstance(event, dict) and event.get("kind") == "run_started":
                return event
        return None

    def open_artifact(self, run_id: str, name: str) -> BinaryIO:
        """The run's artifact ``artifacts/<name>``, open for reading. FileNotFoundError for
        a name that is not a plain file name, and for anything that is not a regular file
        beneath the run's own ``artifacts`` folder (a symlink anywhere on the way counts)."""
        if not _ARTIFACT_NAME.fullmatch(name) or ".." in name:
            raise FileNotFoundError(name)
        return self._open(run_id, ARTIFACTS, name)

    def measured(self) -> list[dict[str, Any]]:
        """Model speed as the runs measured it (replays left out: their replies were
        recorded, not timed), per backend and model, from the runs listed last."""
        with self._lock:
            facts = [reader.facts for _, reader in self._readers.values()]
        totals: dict[tuple[str, str], list[float]] = {}
        for run in facts:
            if run.replay_of is not None:
                continue
            for backend, model, tokens, seconds in run.measured:
                row = totals.setdefault((backend, model), [0, 0, 0.0])
                row[0] += 1
                row[1] += tokens
                row[2] += seconds
        return [
            {
                "backend": backend,
                "model": model,
                "runs": int(runs),
                "completion_tokens": int(tokens),
                "llm_seconds": round(seconds, 3),
                "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
            }
            for (backend, model), (runs, tokens, seconds) in sorted(totals.items())
        ]

    def _run_names(self) -> Iterator[str]:
        try:
            entries = list(os.scandir(self.runs_dir))
        except OSError:
            return
        for entry in entries:
            with contextlib.suppress(OSError):
                if is_run_id(entry.name) and entry.is_dir(follow_symlinks=False):
                    yield entry.name

    def _refresh(self, run_id: str) -> RunFacts | None:
        """The run's facts, its runlog read on from where it was if it changed (the lock is
        held); None when it has no runlog that may be read (missing, a symlink, not a file)
        or holds nothing yet."""
        path = self.runs_dir / run_id / RUNLOG_NAME
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        known = self._readers.get(run_id)
        if known is not None and known[0] == key:
            reader = known[1]
        else:
            reader = known[1] if known is not None else FactsReader(run_id)
            try:
                with self._open(run_id, RUNLOG_NAME) as file:
                    self.bytes_read += reader.read(file.fileno())
            except OSError:
                return None
            self._readers[run_id] = (key, reader)
        if reader.facts.version == 0:  # nothing written yet
            return None
        return reader.facts

    def _open(self, run_id: str, *names: str) -> BinaryIO:
        """``<runs_dir>/<run_id>/<names...>`` opened without following a symlink anywhere
        below the runs folder; a regular file, or FileNotFoundError."""
        if not is_run_id(run_id):
            raise FileNotFoundError(run_id)
        *folders, name = names
        fd = os.open(self.runs_dir / run_id, _DIR)
        try:
            for folder in folders:
                inner = os.open(folder, _DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
            file_fd = os.open(name, _FILE, dir_fd=fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            os.close(file_fd)
            raise FileNotFoundError(name)
        return os.fdopen(file_fd, "rb")
