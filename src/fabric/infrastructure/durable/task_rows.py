"""A task as DBOS keeps it (ADR 0020): one workflow row, ``fabric.task``, on a queue of
``fabric.tasks``, whose attributes hold the task's record; a resumed task's later attempts
are rows of their own. Reading the rows, and the record a row holds."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from dbos import DBOS

from fabric.domain.tasks import QUEUED, TaskRecord

from .checkpoints import unrecorded

TASK_WORKFLOW = "fabric.task"
QUEUE = "fabric.tasks"
MARK = "fabric_task"
"""The attribute every task row carries (workflow rows of `fabric run --durable` do not)."""
FIELDS = tuple(f.name for f in msgspec.structs.fields(TaskRecord))
"""The fields of a task record, each an attribute of its row."""


def queue_of(pack: str, per_pack: Mapping[str, int]) -> str:
    """The queue of a pack's tasks: its own when it has a global limit."""
    return f"{QUEUE}.{pack}" if pack in per_pack else QUEUE


async def read_rows(**filters: Any) -> list[Any]:
    """The workflow rows ``filters`` pick (``DBOS.list_workflows``), without their inputs and
    outputs (a task's record is in its attributes), read outside any workflow."""
    read = functools.partial(
        DBOS.list_workflows_async, load_input=False, load_output=False, **filters
    )
    return await unrecorded(read)


async def task_row(task_id: str) -> Any:
    """The task's own row (None: no such task)."""
    rows = await read_rows(workflow_ids=[task_id])
    if not rows or not (rows[0].attributes or {}).get(MARK):
        return None
    return rows[0]


async def latest_row(task_id: str) -> Any:
    """The latest workflow row of a task: its own, or its latest resume's (None: no such
    task)."""
    rows = await read_rows(workflow_id_prefix=task_id)
    mine = [r for r in rows if r.workflow_id == task_id or attempt_of(r) == task_id]
    return max(mine, key=lambda r: r.created_at or 0, default=None)


def attempt_of(row: Any) -> str | None:
    """The task a resume's workflow row runs (None for a task's own row)."""
    found = (row.attributes or {}).get("attempt_of")
    return None if found is None else str(found)


def record_of(row: Any) -> TaskRecord:
    """The task record a workflow row holds, with what DBOS knows and the attributes not yet
    (dequeued, cancelled, failed outside the run)."""
    attrs = row.attributes or {}
    fields: dict[str, Any] = {name: attrs[name] for name in FIELDS if name in attrs}
    record = TaskRecord(**fields)
    state = str(row.status)
    if record.final:
        return record
    if state == "ENQUEUED":
        return msgspec.structs.replace(record, status=QUEUED)
    if state == "CANCELLED":
        return msgspec.structs.replace(
            record,
            status="cancelled",
            finished_at=_iso(row.completed_at or row.updated_at),
            error=record.error or {"code": "cancelled", "message": "cancelled"},
        )
    if state in ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
        return msgspec.structs.replace(
            record,
            status="failed",
            finished_at=_iso(row.completed_at or row.updated_at),
            error={"code": "internal_error", "message": str(row.error or state)},
        )
    return record


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
