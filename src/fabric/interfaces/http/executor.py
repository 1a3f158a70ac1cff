"""Running tasks in the background, in submission order, under concurrency limits.

``LocalExecutor`` implements the ``TaskExecutor`` port in this process with asyncio: at most
``limit`` tasks at once, and at most ``per_pack[name]`` of one pack. Tasks wait in one queue in
the order they came; whenever a run ends, the oldest waiting task that may start, starts (a
task of a busy pack does not hold back tasks of other packs). A distributed engine can take
over by implementing the same three methods.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from fabric.domain.tasks import TaskRecord

_ASKED_GRACE = 3.0
"""Seconds a task gets to stop at a safe point once asked, before it is cancelled."""
RunTask = Callable[[TaskRecord, asyncio.Event], Awaitable[None]]
"""Runs one task to its end; the event asks it to stop at the next safe point."""


@dataclass
class _Running:
    record: TaskRecord
    cancel: asyncio.Event
    job: asyncio.Task[None]


@dataclass
class LocalExecutor:
    run: RunTask
    limit: int = 4
    per_pack: Mapping[str, int] = field(default_factory=dict)
    _queue: list[TaskRecord] = field(default_factory=list)
    _running: dict[str, _Running] = field(default_factory=dict)
    _accepting: bool = True
    _stopping: asyncio.Future[list[str]] | None = None

    @property
    def accepting(self) -> bool:
        return self._accepting

    def submit(self, record: TaskRecord) -> None:
        """Queue a task; it starts as soon as the limits allow."""
        if not self._accepting:
            raise RuntimeError("the executor is shutting down")
        self._queue.append(record)
        self._dispatch()

    def cancel(self, task_id: str) -> str | None:
        """Stop a task: ``"dequeued"`` (it never started), ``"signalled"`` (it stops at the
        next safe point), or None when this executor does not hold it."""
        for index, record in enumerate(self._queue):
            if record.id == task_id:
                del self._queue[index]
                return "dequeued"
        running = self._running.get(task_id)
        if running is None:
            return None
        running.cancel.set()
        return "signalled"

    def holds(self, task_id: str) -> bool:
        return task_id in self._running or any(r.id == task_id for r in self._queue)

    async def shutdown(self, grace: float) -> list[str]:
        """Take no more work; give running tasks ``grace`` seconds to end, then ask them to
        stop, and after that cancel them. Returns the ids of tasks cut off (still running
        when the grace period ended); queued tasks stay queued (in the store) for a restart.

        Work stops being taken the moment it is called. Calling it again (the server starts
        it on SIGTERM, the app's lifespan awaits it) waits for the first call's result."""
        self._accepting = False
        self._queue.clear()
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown(grace))
        return await asyncio.shield(self._stopping)

    async def _shutdown(self, grace: float) -> list[str]:
        jobs = {r.job for r in self._running.values()}
        if not jobs:
            return []
        _done, pending = await asyncio.wait(jobs, timeout=grace)
        cut = [rid for rid, r in self._running.items() if r.job in pending]
        for running in self._running.values():  # first ask: they stop at a safe point
            running.cancel.set()
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=_ASKED_GRACE)
        for job in pending:  # then insist
            job.cancel()
        for job in pending:
            with contextlib.suppress(BaseException):
                await job
        return cut

    def _dispatch(self) -> None:
        if not self._accepting:
            return
        index = 0
        while index < len(self._queue) and len(self._running) < self.limit:
            record = self._queue[index]
            if self._pack_busy(record.pack):
                index += 1
                continue
            del self._queue[index]
            cancel = asyncio.Event()
            job = asyncio.create_task(self._run(record, cancel), name=f"task {record.id}")
            self._running[record.id] = _Running(record, cancel, job)

    def _pack_busy(self, pack: str) -> bool:
        cap = self.per_pack.get(pack)
        if cap is None:
            return False
        return sum(1 for r in self._running.values() if r.record.pack == pack) >= cap

    async def _run(self, record: TaskRecord, cancel: asyncio.Event) -> None:
        try:
            await self.run(record, cancel)
        finally:
            self._running.pop(record.id, None)
            self._dispatch()
