"""The memory store (ADR 0030): one SQLite file for every workspace's facts, in fabric's data
folder (``config/data.py``).

Each call opens its own connection and closes it again (a run has no hook to close one, and
an open file is nothing a run should hold). The file is in WAL mode, so readers never wait for
a writer; writers take the write lock at the start of their transaction (``BEGIN IMMEDIATE``)
and wait up to ``timeout`` seconds for it, so runs remembering at the same moment queue up
instead of failing, and a workspace's cap and the check for a fact it holds already are
decided inside the same transaction as the insert. Searching is by FTS5 (the Porter stemmer
over Unicode words, ranked by bm25, then the newest first) when this Python's SQLite has it,
else by the words each fact contains. The full-text index is kept by this code, not by
triggers, so a fabric without FTS5 can still use a store one with it made; one with it indexes
what the other added when it first opens the store.

Nothing is created until a fact is kept: reading a store that does not exist finds nothing.
The folder is made private to the user (0700) and the file too (0600)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from fabric.application.memory import Fact
from fabric.domain.errors import FabricError

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    fact TEXT NOT NULL,
    run_id TEXT NOT NULL,
    pack TEXT NOT NULL,
    created TEXT NOT NULL,
    UNIQUE (workspace, fact)
)"""
_INDEX = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(fact, tokenize='porter unicode61')"
)
_READY: set[str] = set()
"""Stores this process has checked the schema (and the full-text index) of."""
_READY_LOCK = threading.Lock()


class MemoryFull(FabricError):
    """The workspace holds as many facts as it may."""


class MemoryStore:
    """Facts by workspace, in the SQLite file at ``path``."""

    def __init__(self, path: Path, *, timeout: float = 30.0, fts: bool | None = None) -> None:
        """``timeout``: seconds a writer waits for another to finish. ``fts``: whether to
        search with FTS5 (default: when this Python's SQLite has it)."""
        self.path, self.timeout = path, timeout
        self.fts = has_fts5() if fts is None else fts

    def exists(self) -> bool:
        return self.path.is_file()

    def count(self, workspace: str) -> int:
        with self._reading() as db:
            if db is None:
                return 0
            row = db.execute("SELECT count(*) FROM memories WHERE workspace = ?", (workspace,))
            return int(row.fetchone()[0])

    def add(
        self, workspace: str, text: str, run_id: str, pack: str, *, most: int
    ) -> tuple[Fact, bool]:
        """Keep ``text`` for ``workspace``; the fact and True, or the same fact kept before
        (by any run) and False. ``MemoryFull`` when the workspace has ``most`` facts."""
        with self._writing() as db:
            row = db.execute(
                "SELECT id, workspace, fact, run_id, pack, created FROM memories "
                "WHERE workspace = ? AND fact = ?",
                (workspace, text),
            ).fetchone()
            if row is not None:
                return _fact(row), False
            held = db.execute(
                "SELECT count(*) FROM memories WHERE workspace = ?", (workspace,)
            ).fetchone()[0]
            if held >= most:
                raise MemoryFull(
                    f"this workspace's memory is full: it holds {held} facts, its most",
                    hint="finish without remembering more, and tell the user that `fabric "
                    "memory list` and `fabric memory delete` make room",
                )
            created = _now()
            cursor = db.execute(
                "INSERT INTO memories (workspace, fact, run_id, pack, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (workspace, text, run_id, pack, created),
            )
            fact_id = int(cursor.lastrowid or 0)
            if self.fts:
                db.execute("INSERT INTO memories_fts (rowid, fact) VALUES (?, ?)", (fact_id, text))
        return Fact(fact_id, workspace, text, run_id, pack, created), True

    def search(self, workspace: str, terms: Sequence[str], limit: int) -> list[Fact]:
        """The workspace's facts holding any of ``terms`` (lower-case words), the most
        relevant first, then the newest; the newest facts for no terms."""
        if terms and not self.fts:
            return _by_words(self.facts(workspace), terms)[:limit]
        with self._reading() as db:
            if db is None:
                return []
            if not terms:
                rows = db.execute(
                    "SELECT id, workspace, fact, run_id, pack, created FROM memories "
                    "WHERE workspace = ? ORDER BY id DESC LIMIT ?",
                    (workspace, limit),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT m.id, m.workspace, m.fact, m.run_id, m.pack, m.created "
                    "FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid "
                    "WHERE memories_fts MATCH ? AND m.workspace = ? "
                    "ORDER BY bm25(memories_fts), m.id DESC LIMIT ?",
                    (" OR ".join(f'"{t}"' for t in terms), workspace, limit),
                ).fetchall()
        return [_fact(r) for r in rows]

    def facts(self, workspace: str | None = None) -> list[Fact]:
        """Every fact of ``workspace`` (None: of every workspace), by workspace, oldest first."""
        with self._reading() as db:
            if db is None:
                return []
            if workspace is None:
                rows = db.execute(
                    "SELECT id, workspace, fact, run_id, pack, created FROM memories "
                    "ORDER BY workspace, id"
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT id, workspace, fact, run_id, pack, created FROM memories "
                    "WHERE workspace = ? ORDER BY id",
                    (workspace,),
                ).fetchall()
        return [_fact(r) for r in rows]

    def get(self, ids: Sequence[int]) -> list[Fact]:
        """The facts with these ids that exist, in the order asked."""
        with self._reading() as db:
            if db is None or not ids:
                return []
            rows = db.execute(
                "SELECT id, workspace, fact, run_id, pack, created FROM memories "
                "WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(ids)),),
            ).fetchall()
        by_id = {r[0]: _fact(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def delete(self, ids: Sequence[int]) -> list[int]:
        """Delete the facts with these ids; the ids that were there."""
        if not ids or not self.exists():
            return []
        with self._writing() as db:
            there = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM memories WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps(list(ids)),),
                )
            ]
            self._drop(db, there)
        return sorted(there)

    def forget(self, workspace: str) -> int:
        """Delete every fact of ``workspace``; how many there were."""
        if not self.exists():
            return 0
        with self._writing() as db:
            ids = [
                r[0]
                for r in db.execute("SELECT id FROM memories WHERE workspace = ?", (workspace,))
            ]
            self._drop(db, ids)
        return len(ids)

    def _drop(self, db: sqlite3.Connection, ids: Sequence[int]) -> None:
        listed = (json.dumps(list(ids)),)
        db.execute("DELETE FROM memories WHERE id IN (SELECT value FROM json_each(?))", listed)
        if self.fts:
            db.execute(
                "DELETE FROM memories_fts WHERE rowid IN (SELECT value FROM json_each(?))", listed
            )

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        """A connection to read with; None when there is no store yet."""
        if not self.exists():
            yield None
            return
        with self._connected() as db:
            yield db

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A connection in a write transaction (the store made first, if need be), committed
        when the block ends, rolled back when it raises."""
        self._make()
        with self._connected() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()

    @contextlib.contextmanager
    def _connected(self) -> Iterator[sqlite3.Connection]:
        """A connection, closed afterwards; SQLite's errors (in the block too) said as fabric
        says them."""
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise _failed(self.path, exc) from exc
        try:
            db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode: safe, one sync a checkpoint
            self._ready(db)
            yield db
        except (sqlite3.Error, OSError) as exc:
            raise _failed(self.path, exc) from exc
        finally:
            db.close()

    def _make(self) -> None:
        """The store's folder (private) and an empty file (private), unless they exist."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            raise FabricError(
                f"cannot create the memory store {self.path}: {exc.strerror or exc}",
                hint="make the folder writable, or name another file in FABRIC_MEMORY_DB",
            ) from exc

    def _ready(self, db: sqlite3.Connection) -> None:
        """WAL mode, the schema, and the full-text index complete: checked once a process
        for each file (a store moved away and made anew is checked again). A store a newer
        fabric made is refused, never changed."""
        info = self.path.stat()
        key = f"{self.path}\0{info.st_dev}:{info.st_ino}\0{self.fts}"
        if key in _READY:
            return
        with _READY_LOCK:  # one thread at a time: switching a new store to WAL while another
            if key not in _READY:  # connection writes fails at once ("database is locked")
                self._prepare(db)
                _READY.add(key)

    def _prepare(self, db: sqlite3.Connection) -> None:
        """What ``_ready`` checks and does, the first time this process uses the file."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:  # left as it is: this fabric cannot know what it holds
            raise FabricError(
                f"the memory store {self.path} was made by a newer fabric (its schema is "
                f"version {version}; this fabric knows version {SCHEMA_VERSION})",
                hint="upgrade fabric, or name another file in FABRIC_MEMORY_DB",
            )
        db.execute("PRAGMA journal_mode=WAL")
        if version < SCHEMA_VERSION or self.fts:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(_SCHEMA)
                if self.fts:
                    db.execute(_INDEX)
                    _reindex(db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except BaseException:
                db.rollback()
                raise
            db.commit()


def _reindex(db: sqlite3.Connection) -> None:
    """Index facts a fabric without FTS5 added, and drop what it deleted."""
    db.execute("DELETE FROM memories_fts WHERE rowid NOT IN (SELECT id FROM memories)")
    db.execute(
        "INSERT INTO memories_fts (rowid, fact) SELECT id, fact FROM memories "
        "WHERE id NOT IN (SELECT rowid FROM memories_fts)"
    )


@functools.cache
def has_fts5() -> bool:
    """Whether this Python's SQLite can make FTS5 tables (asked once)."""
    try:
        with contextlib.closing(sqlite3.connect(":memory:")) as db:
            db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.Error:
        return False
    return True


def _by_words(facts: Sequence[Fact], terms: Sequence[str]) -> list[Fact]:
    """Without FTS5: the facts holding any of ``terms``, those with more of them first, then
    the newest."""
    scored = [(sum(t in f.text.lower() for t in terms), f) for f in facts]
    return [f for n, f in sorted(scored, key=lambda p: (-p[0], -p[1].id)) if n]


def _fact(row: Sequence[object]) -> Fact:
    fact_id, workspace, text, run_id, pack, created = row
    return Fact(int(str(fact_id)), str(workspace), str(text), str(run_id), str(pack), str(created))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _failed(path: Path, exc: sqlite3.Error | OSError) -> FabricError:
    """A SQLite error as fabric says it: what happened to which file, and what to do."""
    text = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
    if "locked" in text or "busy" in text:
        hint = "another fabric is writing to it for longer than it waits; try again"
    elif "not a database" in text or "malformed" in text:
        hint = f"move {path} away (fabric starts a new one) and tell us if fabric broke it"
    else:
        hint = "check the disk and the file's permissions"
    return FabricError(f"the memory store {path} cannot be used: {text}", hint=hint)
