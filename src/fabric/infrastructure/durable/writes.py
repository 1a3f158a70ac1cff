"""Writes to the task rows (ADR 0020): one at a time per task, in the order they were asked
for, so that a progress note never lands after the task's end; and the progress of running
tasks (steps, spending, heartbeats) written in the background, all tasks' at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from dbos import DBOS

from .checkpoints import unrecorded_now

_log = logging.getLogger(__name__)

NOTE_EVERY = 1.0
"""Seconds between two writes of the running tasks' progress (steps so far, heartbeats)."""


class TaskWrites:
    """The attributes of task rows, merged in; a task's notes dropped once its end is
    written (``ended``), until it is queued again (``resumed``)."""

    def __init__(self) -> None:
        self._notes: dict[str, dict[str, Any]] = {}
        self._urgent = asyncio.Event()
        self._ended: set[str] = set()
        """Tasks whose end this process wrote: their progress notes are dropped."""
        self._writing: dict[str, asyncio.Lock] = {}
        self._writer: asyncio.Task[None] | None = None

    async def merge(self, task_id: str, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into the task's attributes; one write at a time per task, in the
        order they were asked for (a progress note never lands after the task's end)."""
        async with self._writing.setdefault(task_id, asyncio.Lock()):
            await asyncio.to_thread(
                unrecorded_now,
                lambda: DBOS.update_workflow_attributes(task_id, dict(fields), merge=True),
            )

    def note(self, task_id: str, **fields: Any) -> None:
        """Written in the background, the latest value winning. Steps, what was spent and
        heartbeats are written every ``NOTE_EVERY`` seconds, all tasks' at once (a database
        write a step would be a cost every step pays); anything else at once."""
        self._notes.setdefault(task_id, {}).update(fields)
        if not set(fields) <= {"steps", "beat", "spent"}:
            self._urgent.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_notes())

    def ended(self, task_id: str) -> None:
        """The task's end is being written: its progress notes are out of date from now on."""
        self._ended.add(task_id)
        self._notes.pop(task_id, None)

    def resumed(self, task_id: str) -> None:
        """The task is queued again: its notes count again."""
        self._ended.discard(task_id)

    async def stop(self) -> None:
        """Stop writing notes (those not written yet are dropped)."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(BaseException):
                await self._writer

    async def _write_notes(self) -> None:
        while self._notes:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), NOTE_EVERY)
            self._urgent.clear()
            notes, self._notes = self._notes, {}
            for task_id, fields in notes.items():
                if task_id in self._ended:  # its end is written: older news must not follow
                    continue
                try:
                    await self.merge(task_id, fields)
                except Exception as exc:  # best effort: the task's final update will hold
                    _log.warning("task %s: could not note %s: %s", task_id, sorted(fields), exc)
