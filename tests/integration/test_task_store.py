"""The SQLite task store on real files: what goes in comes out, across restarts, under
concurrency, owner-only, and a broken file is refused with a clear way out."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fabric.domain.errors import ConfigError
from fabric.domain.tasks import TaskRecord
from fabric.infrastructure.tasks import INTERRUPTED_ERROR, SCHEMA_VERSION, SqliteTaskStore

T = TypeVar("T")


def run(store_path: Path, work: Callable[[SqliteTaskStore], Awaitable[T]]) -> T:
    """Open the store at ``store_path``, do ``work`` with it, close it."""

    async def main() -> T:
        async with SqliteTaskStore(store_path) as store:
            return await work(store)

    return asyncio.run(main())


def task(n: int, *, status: str = "queued", pack: str = "engineering", **more: Any) -> TaskRecord:
    """Task number ``n``; its id sorts by ``n`` like real ids sort by creation time."""
    fields: dict[str, Any] = {"task": f"task {n}", **more}
    return TaskRecord(
        id=f"20261122T03{n // 60 % 60:02d}{n % 60:02d}Z-{n:06x}",
        pack=pack,
        model=None,
        backend=None,
        workspace="/srv/ws",
        max_steps=None,
        status=status,
        created_at=f"2026-11-22T03:{n // 60 % 60:02d}:{n % 60:02d}Z",
        **fields,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "nested" / "tasks.sqlite3"


def test_every_field_round_trips_and_the_folders_are_created(db: Path) -> None:
    full = TaskRecord(
        id="20261122T031500Z-9f3a1c",
        pack="research",
        task="Résume ce rapport 📄 — «vite»\nsecond line",
        model="qwen2.5:7b",
        backend="ollama",
        workspace="/home/ana/ws",
        max_steps=12,
        status="completed",
        created_at="2026-11-22T03:15:00.123456Z",
        started_at="2026-11-22T03:15:01Z",
        finished_at="2026-11-22T03:16:00Z",
        steps=7,
        payload={"summary": "naïve café ✓", "items": [1, 2.5, None, True], "nested": {"k": []}},
        error={"code": "x", "message": "m"},
    )
    sparse = task(1)

    async def work(store: SqliteTaskStore) -> list[TaskRecord | None]:
        await store.add(full)
        await store.add(sparse)
        return [await store.get(full.id), await store.get(sparse.id), await store.get("nope")]

    assert run(db, work) == [full, sparse, None]
    assert sparse.payload is None and sparse.error is None and sparse.steps == 0


def test_update_changes_fields_and_returns_the_new_record(db: Path) -> None:
    async def work(store: SqliteTaskStore) -> tuple[TaskRecord, TaskRecord | None]:
        await store.add(task(1))
        await store.update(task(1).id, status="running", started_at="2026-11-22T03:00:02Z")
        new = await store.update(task(1).id, status="completed", steps=3, payload={"ok": "é"})
        return new, await store.get(task(1).id)

    new, stored = run(db, work)
    expected = dataclasses.replace(
        task(1),
        status="completed",
        started_at="2026-11-22T03:00:02Z",
        steps=3,
        payload={"ok": "é"},
    )
    assert new == stored == expected


def test_update_refuses_unknown_tasks_and_fields_and_never_changes_the_id(db: Path) -> None:
    async def work(store: SqliteTaskStore) -> TaskRecord | None:
        await store.add(task(1))
        with pytest.raises(KeyError, match="nope"):
            await store.update("nope", status="running")
        with pytest.raises(ValueError, match="colour"):
            await store.update(task(1).id, status="running", colour="red")
        with pytest.raises(ValueError, match="id never changes"):
            await store.update(task(1).id, id="other")
        with pytest.raises(ValueError, match="already stored"):
            await store.add(task(1))
        return await store.get(task(1).id)

    assert run(db, work) == task(1)  # nothing changed by the refused calls


def test_query_filters_and_pages_both_ways(db: Path) -> None:
    records = [
        task(n, status="completed" if n % 3 == 0 else "queued", pack="a" if n % 2 else "b")
        for n in range(1, 13)
    ]

    async def work(store: SqliteTaskStore) -> dict[str, list[int]]:
        for record in reversed(records):  # stored out of order: the order comes from the ids
            await store.add(record)

        async def numbers(**options: Any) -> list[int]:
            return [int(r.task.split()[1]) for r in await store.query(**options)]

        first = await store.query(limit=5)
        return {
            "all": await numbers(),
            "page1": await numbers(limit=5),
            "page2": await numbers(limit=5, before=first[-1].id),
            "oldest": await numbers(limit=4, oldest_first=True),
            "oldest2": await numbers(limit=4, oldest_first=True, before=task(4).id),
            "done": await numbers(status="completed"),
            "pack_a": await numbers(pack="a"),
            "done_b": await numbers(status="completed", pack="b"),
            "statuses": await numbers(statuses=["completed", "running"], pack="a"),
            "none": await numbers(statuses=[]),
            "zero": await numbers(limit=0),
            "negative": await numbers(limit=-3),
        }

    got = run(db, work)
    assert got["all"] == list(range(12, 0, -1))
    assert got["page1"] == [12, 11, 10, 9, 8]
    assert got["page2"] == [7, 6, 5, 4, 3]
    assert got["oldest"] == [1, 2, 3, 4]
    assert got["oldest2"] == [5, 6, 7, 8]
    assert got["done"] == [12, 9, 6, 3]
    assert got["pack_a"] == [11, 9, 7, 5, 3, 1]
    assert got["done_b"] == [12, 6]
    assert got["statuses"] == [9, 3]
    assert got["none"] == []
    assert got["zero"] == got["negative"] == [12]  # at least one


def test_query_returns_at_most_500(db: Path) -> None:
    async def work(store: SqliteTaskStore) -> tuple[int, int]:
        await asyncio.gather(*(store.add(task(n)) for n in range(520)))
        return len(await store.query(limit=10_000)), len(await store.query(limit=500))

    assert run(db, work) == (500, 500)


def test_records_survive_closing_and_reopening(db: Path) -> None:
    async def write(store: SqliteTaskStore) -> None:
        await store.add(task(1))
        await store.update(task(1).id, status="completed", payload={"answer": 42})

    run(db, write)
    store = SqliteTaskStore(db)
    stored = asyncio.run(store.get(task(1).id))
    store.close()
    assert stored == dataclasses.replace(task(1), status="completed", payload={"answer": 42})
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(store.get(task(1).id))


def test_recover_interrupts_running_tasks_and_returns_queued_ones_in_order(db: Path) -> None:
    async def before_crash(store: SqliteTaskStore) -> None:
        for record in [
            task(5, status="queued"),
            task(1, status="running", started_at="2026-11-22T03:00:02Z", steps=4),
            task(2, status="completed"),
            task(3, status="queued"),
            task(4, status="running"),
            task(6, status="queued"),
        ]:
            await store.add(record)

    run(db, before_crash)  # the server "crashed" here; a new one starts on the same file

    async def restart(store: SqliteTaskStore) -> Any:
        interrupted, queued = await store.recover()
        again = await store.recover()
        stored = [await store.get(task(n).id) for n in (1, 4)]
        return interrupted, queued, again, stored

    interrupted, queued, again, stored = run(db, restart)
    assert [r.task for r in interrupted] == ["task 1", "task 4"]
    assert all(r.status == "interrupted" and r.error == INTERRUPTED_ERROR for r in interrupted)
    assert all(r.finished_at and r.finished_at.endswith("Z") for r in interrupted)
    assert interrupted[0].steps == 4 and interrupted[0].started_at == "2026-11-22T03:00:02Z"
    assert stored == interrupted
    assert [r.task for r in queued] == ["task 5", "task 3", "task 6"]  # as submitted
    assert all(r.status == "queued" for r in queued)
    assert again == ([], queued)  # nothing is interrupted twice


def test_200_concurrent_adds_and_updates_land_exactly_once(db: Path) -> None:
    async def one(store: SqliteTaskStore, n: int) -> TaskRecord:
        await store.add(task(n))
        await store.update(task(n).id, status="running")
        return await store.update(task(n).id, status="completed", steps=n, payload={"n": n})

    async def work(store: SqliteTaskStore) -> tuple[list[TaskRecord], list[TaskRecord]]:
        done = await asyncio.gather(*(one(store, n) for n in range(200)))
        return done, await store.query(limit=500, oldest_first=True)

    done, stored = run(db, work)
    expected = [
        dataclasses.replace(task(n), status="completed", steps=n, payload={"n": n})
        for n in range(200)
    ]
    assert done == stored == expected


def test_one_store_is_safe_from_several_threads(db: Path) -> None:
    store = SqliteTaskStore(db)
    failures: list[BaseException] = []

    async def batch(first: int) -> None:
        for n in range(first, first + 25):
            await store.add(task(n))
            await store.update(task(n).id, steps=n)

    def thread(first: int) -> None:
        try:
            asyncio.run(batch(first))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=thread, args=(k * 25,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = asyncio.run(store.query(limit=500))
    store.close()
    assert failures == []
    assert sorted(r.steps for r in stored) == list(range(200))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_the_file_is_owner_only_even_if_it_was_wider(db: Path) -> None:
    async def write(store: SqliteTaskStore) -> None:
        await store.add(task(1, task="secret text"))

    run(db, write)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    db.chmod(0o644)
    assert run(db, lambda store: store.get(task(1).id)) == task(1, task="secret text")
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_the_schema_version_is_recorded(db: Path) -> None:
    run(db, lambda store: store.query())
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_a_file_that_is_not_a_database_is_refused_with_what_to_do(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is a text file, not SQLite\n" * 200)
    with pytest.raises(ConfigError) as caught:
        run(db, lambda store: store.query())
    assert str(db) in caught.value.message
    assert "move" in caught.value.hint and str(db) in caught.value.hint
    assert db.read_bytes().startswith(b"this is a text file")  # left as it was


def test_another_sqlite_database_is_refused(db: Path) -> None:
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (n INTEGER)")
    conn.close()
    with pytest.raises(ConfigError, match=r"not a fabric task store.*invoices"):
        run(db, lambda store: store.query())


def test_a_file_from_a_newer_fabric_is_refused(db: Path) -> None:
    run(db, lambda store: store.query())
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(ConfigError, match="newer fabric") as caught:
        run(db, lambda store: store.query())
    assert "upgrade fabric" in caught.value.hint


def test_a_store_from_before_task_verification_is_brought_forward(db: Path) -> None:
    """A task store written before issue 12 (schema version 1, no ``verify`` column) keeps
    its tasks and takes new ones with their own check."""
    from fabric.infrastructure.tasks.sqlite_store import _MIGRATIONS

    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        for statement in _MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO tasks (id, pack, task, workspace, status, created_at) "
            "VALUES ('20261120T000000Z-aaaaaa', 'engineering', 'old', '/w', 'completed', 't')"
        )
        conn.execute("PRAGMA user_version = 1")
    conn.close()

    async def work(store: SqliteTaskStore) -> tuple[TaskRecord | None, TaskRecord | None]:
        await store.add(task(7, verify="python -m pytest -q"))
        return await store.get("20261120T000000Z-aaaaaa"), await store.get(task(7).id)

    old, new = run(db, work)
    assert old is not None and old.task == "old" and old.verify is None
    assert new is not None and new.verify == "python -m pytest -q"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    conn.close()
