"""Resuming a task (``POST /tasks/{id}/resume``): a task cut off by a server stop or crash
(``interrupted``), or one that stopped at its step limit (``max_steps``, resumed with a higher
``max_steps``), goes on with the same task id, run id, runlog and workspace, as ``fabric
resume`` does
(``application/resume/``): the steps its runlog holds complete are fed back from the log,
without asking the model again, and the run continues from there.

The task goes back to ``queued``, then ``running``; its event stream goes on in the same
runlog (``run_resumed`` marks where). A queued task whose runlog already exists is a resumed
one, so after a restart it resumes again rather than starting over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fabric.application.resume import plan_resume
from fabric.domain.errors import ConfigError
from fabric.domain.tasks import INTERRUPTED, QUEUED, TaskRecord

from .errors import NotResumable, ServiceUnavailable
from .service import TaskService

RESUMABLE = (INTERRUPTED, "max_steps")
"""The task states a resume starts from."""
_AGAIN = "submit the task again (POST /tasks) to run it anew"


async def requeue(service: TaskService[Any], task_id: str, max_steps: int | None) -> TaskRecord:
    """Check that the task can go on, put it back in the queue and return its record.

    404 (``NotFound``) for an unknown task; ``NotResumable`` (409) when it is queued or running,
    ended otherwise, has no runlog, or hit its step limit and no higher ``max_steps`` is given;
    422 when its pack is no longer configured; 503 while the service shuts down."""
    record = await service.get(task_id)
    executor = service.executor
    if not executor.accepting:
        raise ServiceUnavailable("the service is shutting down; no task is resumed now")
    if task_id in service.resuming or executor.holds(task_id) or not record.final:
        raise NotResumable(
            f"task {task_id!r} is {record.status}: only a task that was interrupted or stopped "
            "at its step limit can be resumed",
            hint="follow it with GET /tasks/{id}/events, or cancel it first",
        )
    if record.status not in RESUMABLE:
        raise NotResumable(
            f"task {task_id!r} already ended ({record.status}); only an interrupted task or "
            "one that stopped at max_steps can be resumed",
            hint=_AGAIN,
        )
    service.resuming.add(task_id)  # no await since the check: a second request sees it
    try:
        limit = max_steps or record.max_steps
        completed = await _plan(service, record, limit)
        queued = await service.store.update(
            task_id, status=QUEUED, finished_at=None, error=None, payload=None,
            steps=completed, max_steps=limit,
        )  # fmt: skip
        try:
            await executor.submit(queued)
        except RuntimeError:  # the executor began shutting down meanwhile: leave it as it was
            await service.store.update(
                task_id, status=record.status, finished_at=record.finished_at,
                error=record.error, payload=record.payload, steps=record.steps,
                max_steps=record.max_steps,
            )  # fmt: skip
            raise ServiceUnavailable(
                "the service is shutting down; no task is resumed now"
            ) from None
    finally:
        service.resuming.discard(task_id)
    return queued


async def _plan(service: TaskService[Any], record: TaskRecord, limit: int | None) -> int:
    """The number of complete steps the resumed run starts after; ``NotResumable`` when the
    runlog or the workspace do not allow a resume."""
    path = service.runlog_path(record.id)
    if not path.is_file():
        raise NotResumable(
            f"task {record.id!r} has no runlog: it was stopped before its run began",
            hint=_AGAIN,
        )
    service.runner.pack(record.pack)  # a pack no longer configured: 422 naming it
    if not Path(record.workspace).is_dir():
        raise NotResumable(
            f"the workspace of task {record.id!r} ({record.workspace}) is not a folder any more",
            hint=f"restore the folder, or {_AGAIN}",
        )
    events = await asyncio.to_thread(service.runner.read_runlog, path)
    try:
        return plan_resume(events, limit).completed
    except ConfigError as exc:
        hint = exc.hint
        if record.status == "max_steps":
            hint = f'send {{"max_steps": n}} with n above {record.steps}'
        raise NotResumable(exc.message, hint=hint) from exc


__all__ = ["RESUMABLE", "NotResumable", "requeue"]
