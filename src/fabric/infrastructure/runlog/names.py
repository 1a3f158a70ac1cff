"""What names a run's files: its id (the folder), the runlog's path in the runs folder, the
published schema of a runlog line, and the file names of its artifacts."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from fabric.domain import runlog as _format

FORMAT_VERSION = _format.FORMAT_VERSION
"""The format version every line is written in (``v``); older ones stay readable."""
READABLE_VERSIONS = _format.READABLE_VERSIONS
RUNLOG_NAME = "runlog.jsonl"


def runlog_path(runs_dir: Path, run_id: str) -> Path:
    """Where run ``run_id`` keeps its runlog: ``<runs_dir>/<run_id>/runlog.jsonl``. The one
    place that path is built (the writer, ``fabric run``'s Ctrl-C, the service, the eval)."""
    return runs_dir / run_id / RUNLOG_NAME


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


def safe_file_name(name: str) -> str:
    """A file name made from ``name`` (which may come from the model): no separators, no
    leading dots, short enough for any file system; the extension is kept."""
    safe = _UNSAFE.sub("_", name).strip("._") or "artifact"
    if len(safe) > _NAME_CHARS:
        stem, dot, ext = safe.rpartition(".")
        ext = ext[:16] if dot and stem else ""
        safe = safe[: _NAME_CHARS - len(ext) - 1].rstrip("._") + (f".{ext}" if ext else "")
    return safe


def unique_name(name: str, taken: Callable[[str], bool]) -> str:
    """``name``, or ``name-2``, ``name-3``, ... (before the extension) if it is taken."""
    if not taken(name):
        return name
    stem, dot, ext = name.rpartition(".")
    stem, ext = (stem, dot + ext) if dot and stem else (name, "")
    number = 2
    while taken(f"{stem}-{number}{ext}"):
        number += 1
    return f"{stem}-{number}{ext}"
