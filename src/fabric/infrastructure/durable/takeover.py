"""Tasks whose process is gone (ADR 0020): when a process counts as gone (on this machine,
once it no longer lives; on another, once the heartbeats it writes stop), and how its tasks
go back on their queues for a live process to go on with."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from dbos import DBOS

from .checkpoints import unrecorded_now
from .launch import owner_alive
from .task_rows import TASK_WORKFLOW, read_rows

log = structlog.get_logger("fabric.tasks")

TAKE_OVER_EVERY = 2.0
"""Seconds between looks for tasks whose process is gone."""


def gone(row: Any, now: float, takeover_after: float) -> bool:
    """Whether the process that holds a PENDING task is gone: on this machine, no longer
    alive; elsewhere, silent for ``takeover_after`` seconds."""
    alive = owner_alive(row.executor_id)
    if alive is None:  # another machine's: judged by its heartbeat
        attrs = row.attributes or {}
        beat = attrs.get("beat") or (row.dequeued_at or row.updated_at or 0) / 1000
        alive = now - float(beat) < takeover_after
    return not alive


async def take_over(now: float, takeover_after: float, where: str) -> list[str]:
    """Put back on their queues the tasks whose process is gone: on this machine, a
    process that no longer lives; elsewhere, one whose heartbeat is ``takeover_after``
    seconds old. DBOS re-enqueues only rows still owned by that process, so two
    processes taking over at once start nothing twice. ``where``: the database, for the
    log."""
    rows = await read_rows(name=TASK_WORKFLOW, status="PENDING")
    dead = {r.executor_id for r in rows if r.executor_id and gone(r, now, takeover_after)}
    if not dead:
        return []
    owners = sorted(dead)
    handles = await asyncio.to_thread(
        unrecorded_now, lambda: DBOS._recover_pending_workflows(owners)
    )
    taken = [h.workflow_id for h in handles]
    for task_id in taken:
        log.info("task.recovered", task_id=task_id, database=where, owners=owners)
    return taken
