"""The service's ``TaskStore`` on DBOS (ADR 0020): a task added is enqueued as its own
workflow, read from that workflow's row and changed in the row's attributes, by any process
on the database; the calls of a task waiting for a person, and the answers given to them
through another process, are attributes too."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec
from dbos import DBOS

from fabric.domain.tasks import FINAL, QUEUED, TaskRecord

from .checkpoints import unrecorded
from .task_rows import (
    FIELDS,
    MARK,
    TASK_WORKFLOW,
    attempt_of,
    queue_of,
    read_rows,
    record_of,
    task_row,
)
from .where import sqlite_path
from .writes import TaskWrites

if TYPE_CHECKING:
    from dbos._enqueue_options import EnqueueOptions

_PAGE = 200
_ANSWER = "answer:"
"""The attribute that carries a person's answer to a call, given through another process."""


class DbosTaskStore:
    """Tasks as the rows of their workflows on the database ``url``, enqueued as workflows
    of the application ``version``; ``per_pack``: the packs with a queue of their own;
    ``share_workspaces``: whether tasks on one workspace may run at once."""

    def __init__(
        self, url: str, *, version: str, per_pack: Mapping[str, int], share_workspaces: bool
    ) -> None:
        self.version = version
        self.per_pack = dict(per_pack)
        self.share_workspaces = share_workspaces
        self._sqlite = sqlite_path(url) is not None
        self.seen: dict[str, tuple[float, bool]] = {}
        """Whether a task was live (queued or running, here or elsewhere) when last read,
        and when that was: what ``DbosExecutor.holds`` answers from."""
        self._added: set[str] = set()
        """Tasks enqueued by ``add`` here, not yet handed to the executor."""
        self._writes = TaskWrites()

    async def add(self, record: TaskRecord) -> None:
        """Enqueue the task (its record as given: the service redacts the task text)."""
        if await task_row(record.id) is not None:
            raise ValueError(f"a task with id {record.id!r} is already stored; give each a new id")
        await self._enqueue(record)
        self._added.add(record.id)

    async def get(self, task_id: str) -> TaskRecord | None:
        row = await task_row(task_id)
        record = None if row is None else record_of(row)
        self.seen[task_id] = (time.monotonic(), record is not None and not record.final)
        return record

    async def update(self, task_id: str, **fields: Any) -> TaskRecord:
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown or "id" in fields:
            raise ValueError(f"a task has no field {', '.join(unknown) or 'id to change'}")
        row = await task_row(task_id)
        if row is None:
            raise KeyError(f"no task with id {task_id!r}")
        if fields.get("status") in FINAL:
            self._writes.ended(task_id)
        elif fields.get("status") == QUEUED:
            self._writes.resumed(task_id)
        await self._writes.merge(task_id, fields)
        if fields.get("status") in FINAL and row.status == "ENQUEUED":  # it must not start
            await unrecorded(functools.partial(DBOS.cancel_workflow_async, task_id))
        found = await self.get(task_id)
        assert found is not None
        return found

    def note(self, task_id: str, **fields: Any) -> None:
        """Fields of a running task other processes show (steps so far, the model used, the
        calls waiting for a person), or a heartbeat (``TaskWrites.note``)."""
        self._writes.note(task_id, **fields)

    async def asks(self, task_id: str) -> list[dict[str, Any]]:
        row = await task_row(task_id)
        found = (row.attributes or {}).get("asks") if row is not None else None
        return list(found) if isinstance(found, list) else []

    async def answer_of(self, task_id: str, call_id: str) -> dict[str, Any] | None:
        row = await task_row(task_id)
        found = (row.attributes or {}).get(_ANSWER + call_id) if row is not None else None
        return found if isinstance(found, dict) else None

    async def give_answer(self, task_id: str, call_id: str, answer: dict[str, Any]) -> None:
        await self._writes.merge(task_id, {_ANSWER + call_id: answer})

    async def signal_cancel(self, task_id: str) -> None:
        """Ask the process running the task to stop it (its watcher reads this)."""
        await self._writes.merge(task_id, {"cancel": True})

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
        limit = max(1, min(int(limit), 500))
        wanted = None if statuses is None else set(statuses)
        if status is not None:
            wanted = {status} if wanted is None else wanted & {status}
        # Postgres filters by pack; DBOS on SQLite cannot filter by attributes: read them here
        by_pack = {"pack": pack} if pack is not None and not self._sqlite else None
        bound: tuple[int, str] | None = None
        if before is not None:
            row = await task_row(before)
            bound = None if row is None else (int(row.created_at or 0), before)
        found: list[TaskRecord] = []
        offset = 0
        while len(found) < limit:
            rows = await read_rows(
                name=TASK_WORKFLOW,
                attributes=by_pack,
                sort_desc=not oldest_first,
                limit=_PAGE,
                offset=offset,
            )
            offset += len(rows)
            for row in rows:
                if not (row.attributes or {}).get(MARK):  # a resume's row: its task's counts
                    continue
                key = (int(row.created_at or 0), row.workflow_id)
                if bound is not None and (key >= bound if not oldest_first else key <= bound):
                    continue
                record = record_of(row)
                if (wanted is None or record.status in wanted) and pack in (None, record.pack):
                    found.append(record)
            if len(rows) < _PAGE:
                break
        return found[:limit]

    async def live(self) -> list[TaskRecord]:
        """The tasks queued or running, in any process."""
        rows = await read_rows(name=TASK_WORKFLOW, status=["ENQUEUED", "PENDING"])
        records = []
        for row in rows:
            if (row.attributes or {}).get(MARK):
                records.append(record_of(row))
            else:
                resumed = await self.get(attempt_of(row) or "")
                if resumed is not None:
                    records.append(resumed)
        return records

    async def ensure_queued(self, record: TaskRecord) -> None:
        """Have a task the service submits on its queue: one ``add`` enqueued here is there
        already; a resumed one after its workflow ended is queued as a new attempt."""
        if record.id in self._added:  # enqueued by add: whoever dequeues it runs it
            self._added.discard(record.id)
            return
        rows = await read_rows(workflow_id_prefix=f"{record.id}.r")
        number = 1 + sum(1 for r in rows if attempt_of(r) == record.id)
        await self._enqueue(record, f"{record.id}.r{number}", {"attempt_of": record.id})

    async def stop(self) -> None:
        """Stop writing progress notes."""
        await self._writes.stop()

    async def _enqueue(
        self, record: TaskRecord, workflow_id: str | None = None, attributes: Any = None
    ) -> None:
        options: dict[str, Any] = {
            "workflow_name": TASK_WORKFLOW,
            "queue_name": queue_of(record.pack, self.per_pack),
            "workflow_id": workflow_id or record.id,
            "workflow_id_reuse_policy": "reject",
            "app_version": self.version,
            "attributes": attributes or {MARK: True, **msgspec.structs.asdict(record)},
        }
        if record.priority > 0:  # DBOS's default, 0, starts before every number it takes
            options["priority"] = record.priority
        if not self.share_workspaces:
            options["queue_partition_key"] = str(Path(record.workspace).resolve())
        enqueue = DBOS.enqueue_workflow_with_options_async
        await unrecorded(functools.partial(enqueue, cast("EnqueueOptions", options), record.id))
