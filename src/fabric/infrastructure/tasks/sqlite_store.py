"""The task store in one SQLite file (WAL mode), beside the runs directory.

One connection per store, used from worker threads (``asyncio.to_thread``) one call at a time
under a lock: the event loop never waits on the disk, and calls from several event loops or
threads are safe. The file is created owner-only (0600), since task texts may be sensitive. Its
schema version lives in ``PRAGMA user_version``; ``_MIGRATIONS[n]`` takes a file from version
``n`` to ``n + 1``, so a later fabric can bring an older file forward.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from fabric.domain.errors import ConfigError
from fabric.domain.tasks import (
    AWAITING_APPROVAL,
    INTERRUPTED,
    INTERRUPTED_ERROR,
    QUEUED,
    RUNNING,
    TaskRecord,
)

_T = TypeVar("_T")

FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))
"""The columns of a task, in TaskRecord's order."""
_JSON_FIELDS = frozenset({"payload", "error"})
_COLUMNS = ", ".join(FIELDS)
# Only TaskRecord's field names are ever put into SQL text; every value goes in as a parameter.
_SELECT = f"SELECT {_COLUMNS} FROM tasks"  # noqa: S608
_INSERT = f"INSERT INTO tasks ({_COLUMNS}) VALUES ({', '.join('?' * len(FIELDS))})"  # noqa: S608
MAX_LIMIT = 500


_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # seq keeps the order of submission for good (rowids may change on VACUUM; this not).
        """CREATE TABLE tasks (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            pack TEXT NOT NULL,
            task TEXT NOT NULL,
            model TEXT,
            backend TEXT,
            workspace TEXT NOT NULL,
            max_steps INTEGER,
            status TEXT NOT NULL,
            created_at TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT,
            steps INTEGER NOT NULL DEFAULT 0,
            payload TEXT,
            error TEXT
        )""",
        "CREATE INDEX tasks_by_status ON tasks (status, id)",
        "CREATE INDEX tasks_by_pack ON tasks (pack, id)",
    ),
    ("ALTER TABLE tasks ADD COLUMN verify TEXT",),  # issue 12: a task's own verification
)
SCHEMA_VERSION = len(_MIGRATIONS)
"""The version this fabric writes in ``PRAGMA user_version``."""


class SqliteTaskStore:
    """Task records in the SQLite file ``path``; created with its folders on first use."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    # -- the TaskStore port ---------------------------------------------------------------

    async def add(self, record: TaskRecord) -> None:
        values = [_encode(record.id, name, getattr(record, name)) for name in FIELDS]

        def work(conn: sqlite3.Connection) -> None:
            try:
                with _transaction(conn):
                    conn.execute(_INSERT, values)
            except sqlite3.IntegrityError as exc:
                raise ValueError(
                    f"a task with id {record.id!r} is already stored; give each task a new id"
                ) from exc

        await self._call(work)

    async def get(self, task_id: str) -> TaskRecord | None:
        return await self._call(lambda conn: _fetch(conn, task_id))

    async def update(self, task_id: str, **fields: Any) -> TaskRecord:
        """Change fields of one task and return the new record; KeyError if it is unknown,
        ValueError for a field a task does not have (or for ``id``, which never changes)."""
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise ValueError(
                f"a task has no field {', '.join(unknown)}; its fields are {', '.join(FIELDS)}"
            )
        if "id" in fields:
            raise ValueError("a task's id never changes; submit a new task instead")
        values = {name: _encode(task_id, name, value) for name, value in fields.items()}
        assignments = ", ".join(f"{name} = ?" for name in values)

        def work(conn: sqlite3.Connection) -> TaskRecord:
            with _transaction(conn):
                if values:
                    sql = f"UPDATE tasks SET {assignments} WHERE id = ?"  # noqa: S608
                    conn.execute(sql, [*values.values(), task_id])
                record = _fetch(conn, task_id)
            if record is None:
                raise KeyError(f"no task with id {task_id!r}")
            return record

        return await self._call(work)

    async def query(
        self,
        *,
        status: str | None = None,
        pack: str | None = None,
        limit: int = 50,
        before: str | None = None,
        statuses: Sequence[str] | None = None,
        oldest_first: bool = False,
    ) -> list[TaskRecord]:
        """Tasks newest first by id (oldest first on request), at most ``limit`` (1..500).
        ``before`` is the last id of the previous page: the page holds the ids after it in
        the chosen order. ``status``, ``statuses`` and ``pack`` filter (all must hold; an
        empty ``statuses`` matches nothing)."""
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if statuses is not None:
            wanted = [statuses] if isinstance(statuses, str) else list(statuses)
            clauses.append(f"status IN ({', '.join('?' * len(wanted))})")
            params += wanted
        if pack is not None:
            clauses.append("pack = ?")
            params.append(pack)
        if before is not None:
            clauses.append("id > ?" if oldest_first else "id < ?")
            params.append(before)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "ASC" if oldest_first else "DESC"
        params.append(max(1, min(int(limit), MAX_LIMIT)))
        sql = f"{_SELECT} {where} ORDER BY id {order} LIMIT ?"
        return await self._call(lambda conn: [_decode(row) for row in conn.execute(sql, params)])

    def note(self, task_id: str, **fields: Any) -> None:
        """Nothing: only the service that runs a task reads this file while the task runs,
        and it shows its running tasks' fields itself."""

    # -- service (re)start and lifetime ---------------------------------------------------

    async def recover(self) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """For a server (re)start: every ``running`` (or ``awaiting_approval``) task becomes
        ``interrupted`` (returned first); the ``queued`` ones are returned in the order they
        were submitted, to run again."""

        def work(conn: sqlite3.Connection) -> tuple[list[TaskRecord], list[TaskRecord]]:
            now = _now()
            select = f"{_SELECT} WHERE status = ? ORDER BY seq"
            live = f"{_SELECT} WHERE status IN (?, ?) ORDER BY seq"
            with _transaction(conn):
                running = [_decode(row) for row in conn.execute(live, [RUNNING, AWAITING_APPROVAL])]
                conn.execute(
                    "UPDATE tasks SET status = ?, finished_at = ?, error = ? "
                    "WHERE status IN (?, ?)",
                    [INTERRUPTED, now, json.dumps(INTERRUPTED_ERROR), RUNNING, AWAITING_APPROVAL],
                )
                queued = [_decode(row) for row in conn.execute(select, [QUEUED])]
            interrupted = [
                dataclasses.replace(
                    r, status=INTERRUPTED, finished_at=now, error=dict(INTERRUPTED_ERROR)
                )
                for r in running
            ]
            return interrupted, queued

        return await self._call(work)

    def close(self) -> None:
        """Close the file; the store cannot be used afterwards."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def __aenter__(self) -> Self:
        await self._call(lambda conn: None)  # opens the file now: a broken one fails here
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the connection -------------------------------------------------------------------

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.to_thread(self._locked, work)

    def _locked(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the task store {self.path} is closed; open a new one")
            if self._conn is None:
                self._conn = _open(self.path)
            return work(self._conn)


def _open(path: Path) -> sqlite3.Connection:
    hint = (
        f"move {path} away (for example to {path.name}.broken) and start again: fabric then "
        "creates a new, empty task store; the runs directory keeps every runlog"
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        path.chmod(0o600)
    except OSError as exc:
        raise ConfigError(
            f"cannot open the task store {path}: {exc.strerror or exc}",
            hint="check the path and its permissions, or configure another place for it",
        ) from exc
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path, hint)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ConfigError(
            f"{path} is not a usable fabric task store (SQLite says: {exc})", hint=hint
        ) from exc
    except BaseException:
        conn.close()
        raise
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if side.exists():  # SQLite gives them the database's mode; older ones may be wider
            side.chmod(0o600)
    return conn


def _migrate(conn: sqlite3.Connection, path: Path, hint: str) -> None:
    with _transaction(conn):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the task store {path} was written by a newer fabric (schema version "
                f"{version}; this fabric knows up to {SCHEMA_VERSION})",
                hint="upgrade fabric, or configure another file for the task store",
            )
        if version == 0:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
            if tables:
                raise ConfigError(
                    f"{path} is an SQLite database but not a fabric task store (it holds "
                    f"{', '.join(sorted(tables))})",
                    hint=hint,
                )
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the lock at once (no upgrade deadlocks between
    processes sharing the file)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _fetch(conn: sqlite3.Connection, task_id: str) -> TaskRecord | None:
    row = conn.execute(f"{_SELECT} WHERE id = ?", [task_id]).fetchone()
    return None if row is None else _decode(row)


def _encode(task_id: str, name: str, value: Any) -> Any:
    if name not in _JSON_FIELDS or value is None:
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the {name} of task {task_id!r} is not JSON ({exc})") from exc


def _decode(row: Sequence[Any]) -> TaskRecord:
    values = {
        name: json.loads(value) if name in _JSON_FIELDS and value is not None else value
        for name, value in zip(FIELDS, row, strict=True)
    }
    return TaskRecord(**values)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
