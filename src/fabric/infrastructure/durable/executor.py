"""The ``TaskExecutor`` of the service's tasks on DBOS (ADR 0020): ``DbosExecutor`` hands
the service's tasks to the queues and runs those DBOS hands to this process, one at a time on
a workspace; its watcher stops the runs here whose task was cancelled elsewhere, beats the
heart of the tasks here and takes over the tasks of processes that are gone."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from dbos import DBOS
from msgspec import Struct, field

from fabric.application.job import LEFT_FOR_RECOVERY
from fabric.application.tasks.ports import RunTask
from fabric.domain.errors import RunError
from fabric.domain.tasks import QUEUED, TaskRecord

from .checkpoints import unrecorded
from .store import DbosTaskStore
from .takeover import TAKE_OVER_EVERY, take_over
from .task_rows import latest_row, read_rows

_log = logging.getLogger(__name__)


class DbosExecutor:
    """The ``TaskExecutor`` of ``DbosTasks``: ``submit`` enqueues (a new task as its own
    workflow; a resumed one as a new attempt, ``<id>.r<n>``, whose run goes on in the task's
    runlog); DBOS dequeues each in some process (this one or another), whose workflow calls
    ``drive``. A dequeued task whose workspace is, contains or lies inside the workspace of a
    task running here, or of one dequeued here before it, waits here (still ``queued``) until
    that one ends: the queue's partitions keep tasks on the very same folder apart across
    processes; this keeps nested folders apart within one."""

    def __init__(
        self, store: DbosTaskStore, run: RunTask, *, poll: float, takeover_after: float, where: str
    ) -> None:
        """``poll``: seconds between looks at the tasks held here; ``takeover_after``: seconds
        without a heartbeat after which another machine takes a task over; ``where``: the
        database, for people."""
        self.store = store
        self.run = run
        self.poll = poll
        self.takeover_after = takeover_after
        self.where = where
        self._accepting = True
        self._given: dict[str, TaskRecord] = {}
        """Tasks submitted here, as given (the database holds them redacted)."""
        self._running: dict[str, _Held] = {}
        self._waiting: list[_Held] = []
        """Tasks dequeued here that wait for a workspace, in the order they came."""
        self._stopping: asyncio.Future[list[str]] | None = None
        self._looks: set[asyncio.Future[TaskRecord | None]] = set()

    @property
    def accepting(self) -> bool:
        return self._accepting

    async def submit(self, record: TaskRecord) -> None:
        if not self._accepting:
            raise RuntimeError("the executor is shutting down")
        self.store.seen[record.id] = (time.monotonic(), True)
        self._given[record.id] = record  # (before its workflow can start here)
        await self.store.ensure_queued(record)

    async def drive(self, task_id: str) -> None:
        """Run a dequeued task here: wait for its workspace, run it, return when it ended
        (or was cancelled while it waited)."""
        if not self._accepting:  # stopping: leave it to whoever takes it over
            await asyncio.Event().wait()
        record = self._given.pop(task_id, None) or await self.store.get(task_id)
        if record is None:
            raise RunError(f"task {task_id} has no record")
        held = _Held(record, Path(os.path.realpath(record.workspace)), asyncio.Event())
        self._waiting.append(held)
        self._waiting.sort(key=lambda h: (h.record.created_at, h.record.id))
        self._dispatch()
        await held.ready.wait()
        if held.cancelled:
            return
        held.job = asyncio.ensure_future(self.run(record, held.cancel))
        try:
            await held.job
        except asyncio.CancelledError:
            if self._accepting:
                raise
            # cut off by a shutdown: the task stays PENDING, for a restart or another
            # process to go on with once this one is gone
            await asyncio.Event().wait()
        finally:
            self._running.pop(task_id, None)
            self._dispatch()

    def _dispatch(self) -> None:
        taken = [] if self.store.share_workspaces else [h.folder for h in self._running.values()]
        for held in list(self._waiting):
            if _overlaps(held.folder, taken):
                taken.append(held.folder)  # later tasks on it wait behind this one
                continue
            self._waiting.remove(held)
            if not self.store.share_workspaces:
                taken.append(held.folder)
            self._running[held.record.id] = held
            held.ready.set()

    def holding(self) -> bool:
        """Whether a task runs or waits for its workspace here."""
        return bool(self._running or self._waiting)

    def holds(self, task_id: str) -> bool:
        """Held here, or live when last read (``get``); a stale answer is read again in
        the background, so a follower's next question gets the news."""
        if task_id in self._running or any(h.record.id == task_id for h in self._waiting):
            return True
        if not self._accepting:  # stopping: this process writes no more of any runlog
            return False
        seen = self.store.seen.get(task_id)
        if seen is None:
            return False
        if time.monotonic() - seen[0] > self.poll:
            self.store.seen[task_id] = (time.monotonic(), seen[1])
            look = asyncio.ensure_future(self.store.get(task_id))
            self._looks.add(look)
            look.add_done_callback(self._looks.discard)
        return seen[1]

    async def cancel(self, task_id: str) -> str | None:
        running = self._running.get(task_id)
        if running is not None:
            running.cancel.set()
            return "signalled"
        for held in self._waiting:
            if held.record.id == task_id:  # dequeued here, waiting for its workspace
                self._waiting.remove(held)
                held.cancelled = True
                held.ready.set()
                self._dispatch()
                return "dequeued"
        row = await latest_row(task_id)
        if row is None:
            return None
        if row.status == "ENQUEUED":
            await unrecorded(functools.partial(DBOS.cancel_workflow_async, row.workflow_id))
            return "dequeued"
        if row.status == "PENDING":  # held by another process: it stops it
            await self.store.signal_cancel(task_id)
            return "signalled"
        return None

    async def waiting_for(self, record: TaskRecord) -> list[str]:
        """From the database, so for tasks held by any process: the running tasks whose
        workspace is, holds or lies in this one's, then the earlier queued ones."""
        if self.store.share_workspaces:
            return []
        folder = Path(os.path.realpath(record.workspace))
        running: list[str] = []
        earlier: list[str] = []
        for other in await self.store.live():
            if other.id == record.id or not _overlaps(folder, [Path(other.workspace)]):
                continue
            if other.status != QUEUED:
                running.append(other.id)
            elif (other.created_at, other.id) < (record.created_at, record.id):
                earlier.append(other.id)
        return running + earlier

    async def shutdown(self, grace: float) -> list[str]:
        self._accepting = False
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown(grace))
        return await asyncio.shield(self._stopping)

    async def _shutdown(self, grace: float) -> list[str]:
        jobs = {h.job: task_id for task_id, h in self._running.items() if h.job is not None}
        if not jobs:
            return []
        _done, pending = await asyncio.wait(jobs, timeout=grace)
        for job in pending:  # left PENDING: a restart or another process goes on with it
            job.cancel(LEFT_FOR_RECOVERY)
        for job in pending:
            with contextlib.suppress(BaseException):
                await job
        cut = [jobs[job] for job in pending]
        for task_id in cut:  # its followers stop here: its runlog goes on elsewhere
            self._running.pop(task_id, None)
        return cut

    # -- watching -------------------------------------------------------------------------

    async def watch(self) -> None:
        """Every ``poll`` seconds: stop the runs here whose task was cancelled elsewhere; every
        ``TAKE_OVER_EVERY`` seconds put back on its queue a task whose process is gone; every
        quarter of ``takeover_after`` beat the heart of the tasks here."""
        beat = looked = 0.0
        while True:
            await asyncio.sleep(self.poll)
            try:
                ids = [*self._running, *(h.record.id for h in self._waiting)]
                if ids:
                    rows = await read_rows(workflow_ids=ids)
                    for row in rows:
                        attrs = row.attributes or {}
                        if attrs.get("cancel") or row.status == "CANCELLED":
                            await self.cancel(row.workflow_id)
                now = time.time()
                if now - beat >= self.takeover_after / 4:
                    beat = now
                    for task_id in ids:
                        self.store.note(task_id, beat=now)
                if now - looked >= TAKE_OVER_EVERY and self._accepting:
                    looked = now
                    await take_over(now, self.takeover_after, self.where)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be away for a while: go on
                _log.warning("fabric task watcher: %s", exc)


class _Held(Struct, eq=False):
    """A task dequeued here: waiting for its workspace, then running."""

    record: TaskRecord
    folder: Path
    ready: asyncio.Event
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False
    job: asyncio.Future[None] | None = None


def _overlaps(folder: Path, others: Sequence[Path]) -> bool:
    """Whether ``folder`` is one of ``others``, or lies inside or holds one of them."""
    return any(folder.is_relative_to(o) or o.is_relative_to(folder) for o in others)
