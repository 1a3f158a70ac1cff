"""The service's tasks on DBOS queues (ADR 0020): the task store, the executor and the
durable runs of every `fabric serve` and `fabric worker`, launched and stopped together.

Each task is one DBOS workflow (``fabric.task``) whose id is the task id, enqueued on
``fabric.tasks`` (or ``fabric.tasks.<pack>`` for a pack with a global limit), partitioned by
workspace so that one task at a time runs on a workspace (unless ``share_workspaces``). The
workflow's row is the task's record (``task_rows.py``): its status says queued, running or
ended; its attributes hold the record's fields (the task text redacted), kept current by
whoever runs it, and the calls waiting for a person with the answers given to them. Any
process on the database serves any task: status, list, cancel and approvals read and write
the row (``store.py``); the runlog is in the runs folder, which processes on several machines
share with the workspaces.

Whoever dequeues a task runs it (``executor.py``), inside its workflow, as a durable run: each
model reply and tool result is a recorded step (``DbosCheckpoints``). A task whose process
died is put back on its queue by DBOS's own recovery, asked by any live process
(``takeover.py``): on this machine as soon as the process is gone, from another machine once
its heartbeat is older than ``takeover_after``; the process that dequeues it goes on from its
last recorded step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Mapping
from typing import Any

from dbos import DBOS

from fabric.application.job import Control, RunRequest
from fabric.application.tasks.ports import RunTask
from fabric.domain.errors import RunError
from fabric.domain.models import RunResult

from .checkpoints import DbosCheckpoints
from .executor import DbosExecutor
from .runs import DurableRuns
from .store import DbosTaskStore
from .takeover import gone
from .task_rows import QUEUE, TASK_WORKFLOW, queue_of, read_rows

_host: DbosTasks | None = None
"""The tasks of this process: what a dequeued ``fabric.task`` workflow runs with."""


@functools.cache
def _register() -> Any:
    """The task workflow, registered with DBOS once per process (before it launches)."""

    @DBOS.workflow(name=TASK_WORKFLOW)
    async def fabric_task(task_id: str) -> None:
        host = _host
        if host is None:
            raise RunError(
                f"task {task_id} was dequeued by a process that does not run tasks",
                hint="only fabric serve and fabric worker listen to the task queues",
            )
        await host.drive(task_id)

    return fabric_task


class DbosTasks:
    """Tasks as DBOS workflows: the service's ``DurableTasks``, with its ``TaskStore``
    (``store``) and, through ``executor``, its ``TaskExecutor``. ``concurrency``: tasks one
    process runs at once; ``per_pack``: a global limit for each named pack;
    ``takeover_after``: seconds without a heartbeat after which another machine takes a task
    over; ``runs_tasks``: whether this process takes tasks from the queues (False: an API
    node only)."""

    def __init__(
        self,
        durable: DurableRuns,
        *,
        concurrency: int,
        per_pack: Mapping[str, int],
        share_workspaces: bool,
        runs_tasks: bool = True,
        poll: float = 0.5,
        takeover_after: float = 60.0,
    ) -> None:
        self.durable = durable
        self.concurrency = concurrency
        self.per_pack = dict(per_pack)
        self.share_workspaces = share_workspaces
        self.poll = poll
        self.takeover_after = takeover_after
        self.runs_tasks = runs_tasks
        self.store = DbosTaskStore(
            durable.url,
            version=durable.version,
            per_pack=per_pack,
            share_workspaces=share_workspaces,
        )
        self._executor: DbosExecutor | None = None
        self._watcher: asyncio.Task[None] | None = None

    # -- DurableTasks ---------------------------------------------------------------------

    def where(self) -> str:
        return self.durable.where()

    def queues(self) -> list[str]:
        return [QUEUE, *(queue_of(p, self.per_pack) for p in sorted(self.per_pack))]

    async def start(self) -> None:
        global _host
        _register()
        self.durable.start_here(self.runs_tasks)  # on this loop: dequeued workflows run on it
        for name in self.queues():
            limit = self.per_pack.get(name.removeprefix(f"{QUEUE}."))  # a pack's own queue
            await DBOS.register_queue_async(
                name,
                worker_concurrency=min(self.concurrency, limit or self.concurrency),
                global_concurrency=limit if name != QUEUE else None,
                partition_concurrency=None if self.share_workspaces else 1,
                polling_interval_sec=self.poll,
                on_conflict="always_update",
            )
        _host = self
        self._watcher = asyncio.create_task(self._watch(), name="fabric task watcher")

    async def stop(self) -> None:
        global _host
        if _host is self:
            _host = None
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(BaseException):
                await self._watcher
        await self.store.stop()
        await self.durable.stop()

    async def run(self, request: RunRequest, control: Control) -> RunResult:
        """Run a task's request inside its own workflow (this process dequeued it): a durable
        run whose steps are that workflow's."""
        return await self.durable.drive(request, control, DbosCheckpoints(self.durable.secrets))

    def inside(self, task_id: str) -> bool:
        return DBOS.workflow_id == task_id

    # -- the executor ---------------------------------------------------------------------

    def executor(self, run: RunTask) -> DbosExecutor:
        self._executor = DbosExecutor(
            self.store,
            run,
            poll=self.poll,
            takeover_after=self.takeover_after,
            where=self.where(),
        )
        return self._executor

    async def drive(self, task_id: str) -> None:
        """Run a task this process dequeued (its workflow calls this)."""
        executor = self._executor
        if executor is None:
            raise RunError(f"task {task_id} was dequeued before the service was ready")
        await executor.drive(task_id)

    async def _watch(self) -> None:
        executor = self._executor
        if executor is not None:
            await executor.watch()

    async def busy(self) -> bool:
        """Whether a task runs or waits here, waits on a queue, or waits to be taken over
        from a process that is gone (``fabric worker --once`` works until none does)."""
        executor = self._executor
        if executor is not None and executor.holding():
            return True
        rows = await read_rows(name=TASK_WORKFLOW, status=["ENQUEUED", "PENDING"])
        after = self.takeover_after
        return any(r.status == "ENQUEUED" or gone(r, time.time(), after) for r in rows)


__all__ = ["DbosTasks"]
