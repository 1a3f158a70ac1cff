"""Running tasks in the background, in submission order, under concurrency limits.

``LocalExecutor`` implements the ``TaskExecutor`` port in this process with asyncio: at most
``limit`` tasks at once, at most ``per_pack[name]`` of one pack, and (unless
``share_workspaces``) one at a time on a workspace: two workspaces are the same when their real
paths are equal or one lies inside the other. Tasks wait in one queue in the order they came;
whenever a run ends, the oldest waiting task that may start, starts. A task of a busy pack does
not hold back tasks of other packs, but a waiting task does hold back later tasks on its
workspace, so tasks on one workspace start in the order they came. A distributed engine can
take over by implementing the same methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fabric.domain.tasks import TaskRecord

RunTask = Callable[[TaskRecord, asyncio.Event], Awaitable[None]]
"""Runs one task to its end; the event asks it to stop at the next safe point."""


@dataclass
class _Running:
    record: TaskRecord
    folder: Path
    cancel: asyncio.Event
    job: asyncio.Task[None]


@dataclass
class LocalExecutor:
    run: RunTask
    limit: int = 4
    per_pack: Mapping[str, int] = field(default_factory=dict)
    share_workspaces: bool = False
    _queue: list[TaskRecord] = field(default_factory=list)
    _folders: dict[str, Path] = field(default_factory=dict)
    """The real path of each waiting task's workspace, found once when it was submitted."""
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
        self._folders[record.id] = Path(os.path.realpath(record.workspace))
        self._queue.append(record)
        self._dispatch()

    async def cancel(self, task_id: str) -> str | None:
        """Stop a task: ``"dequeued"`` (it never started), ``"signalled"`` (it stops at the
        next safe point), or None when this executor does not hold it."""
        for index, record in enumerate(self._queue):
            if record.id == task_id:
                del self._queue[index]
                self._folders.pop(task_id, None)
                self._dispatch()  # later tasks on its workspace may start now
                return "dequeued"
        running = self._running.get(task_id)
        if running is None:
            return None
        running.cancel.set()
        return "signalled"

    def holds(self, task_id: str) -> bool:
        return task_id in self._running or any(r.id == task_id for r in self._queue)

    def waiting_for(self, task_id: str) -> list[str]:
        """The tasks a waiting task waits for because they use its workspace: the running ones,
        then the earlier waiting ones (empty when it is not waiting, or not for that)."""
        folder = self._folders.get(task_id)
        if folder is None or self.share_workspaces:
            return []
        running = [r.record.id for r in self._running.values() if _same(folder, [r.folder])]
        earlier: list[str] = []
        for record in self._queue:
            if record.id == task_id:
                return running + earlier
            if _same(folder, [self._folders[record.id]]):
                earlier.append(record.id)
        return []

    async def shutdown(self, grace: float) -> list[str]:
        """Take no more work; give running tasks ``grace`` seconds to end, then cancel them
        (they are recorded as interrupted). Returns the ids of tasks cut off (still running
        when the grace period ended); queued tasks stay queued (in the store) for a restart.

        Work stops being taken the moment it is called. Calling it again (the server starts
        it on SIGTERM, the app's lifespan awaits it) waits for the first call's result."""
        self._accepting = False
        self._queue.clear()
        self._folders.clear()
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown(grace))
        return await asyncio.shield(self._stopping)

    async def _shutdown(self, grace: float) -> list[str]:
        jobs = {r.job for r in self._running.values()}
        if not jobs:
            return []
        _done, pending = await asyncio.wait(jobs, timeout=grace)
        cut = [rid for rid, r in self._running.items() if r.job in pending]
        # Not the cancel event: that ends a run as cancelled, a final state the client asked
        # for. A run cut off by a shutdown is interrupted, and a restarted service resumes it.
        for job in pending:
            job.cancel()
        for job in pending:
            with contextlib.suppress(BaseException):
                await job
        return cut

    def _dispatch(self) -> None:
        if not self._accepting:
            return
        index = 0
        taken = [] if self.share_workspaces else [r.folder for r in self._running.values()]
        while index < len(self._queue) and len(self._running) < self.limit:
            record = self._queue[index]
            folder = self._folders[record.id]
            if self._pack_busy(record.pack) or _same(folder, taken):
                if not self.share_workspaces:
                    taken.append(folder)  # later tasks on this workspace wait behind this one
                index += 1
                continue
            del self._queue[index]
            del self._folders[record.id]
            if not self.share_workspaces:
                taken.append(folder)
            cancel = asyncio.Event()
            job = asyncio.create_task(self._run(record, cancel), name=f"task {record.id}")
            self._running[record.id] = _Running(record, folder, cancel, job)

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


def _same(folder: Path, others: Iterable[Path]) -> bool:
    """Whether ``folder`` is one of ``others``, or lies inside or contains one of them."""
    return any(folder.is_relative_to(o) or o.is_relative_to(folder) for o in others)
