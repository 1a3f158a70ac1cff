"""The service's tasks on DBOS queues (ADR 0020): the ``TaskStore`` and the executor of
``fabric serve`` and ``fabric worker`` when tasks are durable.

Each task is one DBOS workflow (``fabric.task``) whose id is the task id, enqueued on
``fabric.tasks`` (or ``fabric.tasks.<pack>`` for a pack with a global limit), partitioned by
workspace so that one task at a time runs on a workspace (unless ``share_workspaces``). The
workflow's row is the task's record: its status says queued, running or ended; its attributes
hold the record's fields (the task text redacted), kept current by whoever runs it. Any process
on the database serves any task: status, list and cancel read and write the row; the runlog is
in the runs folder, which processes on several machines share with the workspaces.

Whoever dequeues a task runs it, inside its workflow, as a durable run: each model reply and
tool result is a recorded step (``DbosCheckpoints``). A task whose process died is put back on
its queue (``DBOS.resume_workflow``) by any live process: on this machine as soon as the
process is gone, from another machine once its heartbeat is older than ``takeover_after``; the
process that dequeues it goes on from its last recorded step.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import structlog
from dbos import DBOS

from fabric.application.job import Control, RunRequest
from fabric.application.tasks.executor import RunTask
from fabric.domain.errors import RunError
from fabric.domain.models import RunResult
from fabric.domain.tasks import FINAL, QUEUED, RUNNING, TaskRecord

from .engine import DbosCheckpoints, DurableRuns, owner_alive
from .where import sqlite_path

if TYPE_CHECKING:
    from dbos._enqueue_options import EnqueueOptions

_log = logging.getLogger(__name__)
log = structlog.get_logger("fabric.tasks")
_T = TypeVar("_T")

TASK_WORKFLOW = "fabric.task"
QUEUE = "fabric.tasks"
_MARK = "fabric_task"
"""The attribute every task row carries (workflow rows of `fabric run --durable` do not)."""
_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))
_PAGE = 200
_host: DbosTasks | None = None
"""The tasks of this process: what a dequeued ``fabric.task`` workflow runs with."""


def queue_of(pack: str, per_pack: Mapping[str, int]) -> str:
    """The queue of a pack's tasks: its own when it has a global limit."""
    return f"{QUEUE}.{pack}" if pack in per_pack else QUEUE


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


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _outside(call: Callable[[], _T]) -> _T:
    """``call`` in a fresh context: a DBOS call made from inside a workflow would otherwise be
    recorded as one of its steps (and the steps of a run must be the same on every drive)."""
    return contextvars.Context().run(call)


async def _plain(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """The coroutine ``make()`` run in a fresh context (see ``_outside``): the task store's
    reads and writes are never steps of the workflow they are made from."""
    return await asyncio.create_task(make(), context=contextvars.Context())


class DbosTasks:
    """Tasks as DBOS workflows: the service's ``TaskStore``, its ``DurableTasks`` and (through
    ``executor``) its ``TaskExecutor``. ``concurrency``: tasks one process runs at once;
    ``per_pack``: a global limit for each named pack; ``takeover_after``: seconds without a
    heartbeat after which another machine takes a task over."""

    def __init__(
        self,
        durable: DurableRuns,
        *,
        concurrency: int,
        per_pack: Mapping[str, int],
        share_workspaces: bool,
        poll: float = 0.5,
        takeover_after: float = 60.0,
    ) -> None:
        self.durable = durable
        self.concurrency = concurrency
        self.per_pack = dict(per_pack)
        self.share_workspaces = share_workspaces
        self.poll = poll
        self.takeover_after = takeover_after
        self._sqlite = sqlite_path(durable.url) is not None
        self._added: set[str] = set()
        """Tasks enqueued by ``add`` here, not yet handed to ``submit``."""
        self._executor: DbosExecutor | None = None
        self._notes: dict[str, dict[str, Any]] = {}
        self._writer: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None

    # -- DurableTasks ---------------------------------------------------------------------

    def where(self) -> str:
        return self.durable.where()

    def queues(self) -> list[str]:
        return [QUEUE, *(queue_of(p, self.per_pack) for p in sorted(self.per_pack))]

    async def start(self) -> None:
        global _host
        _register()
        self.durable.start_here()  # on this loop: dequeued workflows run on it
        for name in self.queues():
            pack = name.removeprefix(f"{QUEUE}.") if name != QUEUE else None
            await DBOS.register_queue_async(
                name,
                worker_concurrency=self.concurrency,
                global_concurrency=None if pack is None else self.per_pack[pack],
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
        for job in (self._watcher, self._writer):
            if job is not None:
                job.cancel()
                with contextlib.suppress(BaseException):
                    await job
        await self.durable.stop()

    async def run(self, request: RunRequest, control: Control) -> RunResult:
        """Run a task's request: inside its workflow (this process dequeued it) as a durable
        run of that workflow; otherwise as a durable run of its own."""
        if request.run_id is not None and self.inside(request.run_id):
            return await self.durable.drive(request, control, DbosCheckpoints(self.durable.secrets))
        return await self.durable.run(request, control)

    def inside(self, task_id: str) -> bool:
        return DBOS.workflow_id == task_id

    # -- TaskStore ------------------------------------------------------------------------

    async def add(self, record: TaskRecord) -> None:
        """Enqueue the task (its record as given: the service redacts the task text)."""
        if await self._row(record.id) is not None:
            raise ValueError(f"a task with id {record.id!r} is already stored; give each a new id")
        await self._enqueue(record)
        self._added.add(record.id)

    async def get(self, task_id: str) -> TaskRecord | None:
        row = await self._row(task_id)
        return None if row is None else _record(row)

    async def update(self, task_id: str, **fields: Any) -> TaskRecord:
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown or "id" in fields:
            raise ValueError(f"a task has no field {', '.join(unknown) or 'id to change'}")
        row = await self._row(task_id)
        if row is None:
            raise KeyError(f"no task with id {task_id!r}")
        await self._merge(task_id, fields)
        if fields.get("status") in FINAL and row.status == "ENQUEUED":  # it must not start
            await _plain(functools.partial(DBOS.cancel_workflow_async, task_id))
        found = await self.get(task_id)
        assert found is not None
        return found

    def note(self, task_id: str, **fields: Any) -> None:
        """Fields of a running task other processes show (steps so far, the model used), or
        a flag (``cancel``); written soon, in the background, the latest value winning."""
        self._notes.setdefault(task_id, {}).update(fields)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_notes())

    async def _write_notes(self) -> None:
        while self._notes:
            task_id, fields = next(iter(self._notes.items()))
            del self._notes[task_id]
            try:
                await self._merge(task_id, fields)
            except Exception as exc:  # a note is best effort: the final update will hold
                _log.warning("task %s: could not note %s: %s", task_id, sorted(fields), exc)

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
            row = await self._row(before)
            bound = None if row is None else (int(row.created_at or 0), before)
        found: list[TaskRecord] = []
        offset = 0
        while len(found) < limit:
            rows = await _plain(
                functools.partial(
                    DBOS.list_workflows_async,
                    name=TASK_WORKFLOW,
                    attributes=by_pack,
                    sort_desc=not oldest_first,
                    limit=_PAGE,
                    offset=offset,
                    load_input=False,
                    load_output=False,
                )
            )
            offset += len(rows)
            for row in rows:
                key = (int(row.created_at or 0), row.workflow_id)
                if bound is not None and (key >= bound if not oldest_first else key <= bound):
                    continue
                record = _record(row)
                if (wanted is None or record.status in wanted) and pack in (None, record.pack):
                    found.append(record)
            if len(rows) < _PAGE:
                break
        return found[:limit]

    async def recover(self) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Nothing to do at a start: queued tasks wait on their queue, and a task a dead
        process left is put back on its queue by the watcher."""
        return [], []

    def close(self) -> None:
        """DBOS is stopped with ``stop``."""

    # -- the executor ---------------------------------------------------------------------

    def executor(self, run: RunTask) -> DbosExecutor:
        self._executor = DbosExecutor(self, run)
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

    async def take_over(self, now: float) -> list[str]:
        """Put back on their queues the tasks whose process is gone: on this machine, a
        process that no longer lives; elsewhere, one whose heartbeat is ``takeover_after``
        seconds old. DBOS re-enqueues only rows still owned by that process, so two
        processes taking over at once start nothing twice."""
        rows = await _plain(
            functools.partial(
                DBOS.list_workflows_async,
                name=TASK_WORKFLOW,
                status="PENDING",
                load_input=False,
                load_output=False,
            )
        )
        dead: set[str] = set()
        for row in rows:
            owner = row.executor_id
            alive = owner_alive(owner)
            if alive is None:  # another machine's: judged by its heartbeat
                attrs = row.attributes or {}
                beat = attrs.get("beat") or (row.dequeued_at or row.updated_at or 0) / 1000
                alive = now - float(beat) < self.takeover_after
            if not alive and owner:
                dead.add(owner)
        if not dead:
            return []
        owners = sorted(dead)
        handles = await asyncio.to_thread(_outside, lambda: DBOS._recover_pending_workflows(owners))
        taken = [h.workflow_id for h in handles]
        for task_id in taken:
            log.info("task.recovered", task_id=task_id, database=self.where(), owners=owners)
        return taken

    # -- rows -----------------------------------------------------------------------------

    async def _row(self, task_id: str) -> Any:
        rows = await _plain(
            functools.partial(
                DBOS.list_workflows_async,
                workflow_ids=[task_id],
                load_input=False,
                load_output=False,
            )
        )
        if not rows or not (rows[0].attributes or {}).get(_MARK):
            return None
        return rows[0]

    async def _merge(self, task_id: str, fields: Mapping[str, Any]) -> None:
        await asyncio.to_thread(
            _outside,
            lambda: DBOS.update_workflow_attributes(task_id, dict(fields), merge=True),
        )

    async def _enqueue(self, record: TaskRecord) -> None:
        options: dict[str, Any] = {
            "workflow_name": TASK_WORKFLOW,
            "queue_name": queue_of(record.pack, self.per_pack),
            "workflow_id": record.id,
            "workflow_id_reuse_policy": "reject",
            "app_version": self.durable.version,
            "attributes": {_MARK: True, **dataclasses.asdict(record)},
        }
        if not self.share_workspaces:
            options["queue_partition_key"] = str(Path(record.workspace).resolve())
        enqueue = DBOS.enqueue_workflow_with_options_async
        await _plain(functools.partial(enqueue, cast("EnqueueOptions", options), record.id))


class DbosExecutor:
    """The ``TaskExecutor`` of ``DbosTasks``: ``submit`` enqueues; DBOS dequeues each task in
    some process (this one or another), whose workflow calls ``drive``. A task resumed after
    it ended (``POST /tasks/{id}/resume``: its workflow is over) runs here, not durably."""

    def __init__(self, tasks: DbosTasks, run: RunTask) -> None:
        self.tasks = tasks
        self.run = run
        self._accepting = True
        self._given: dict[str, TaskRecord] = {}
        """Tasks submitted here, as given (the database holds them redacted)."""
        self._running: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}
        self._seen: dict[str, tuple[float, bool]] = {}
        """Whether a task run elsewhere was live, and when that was read."""
        self._stopping: asyncio.Future[list[str]] | None = None
        self._looks: set[asyncio.Future[None]] = set()

    @property
    def accepting(self) -> bool:
        return self._accepting

    def submit(self, record: TaskRecord) -> None:
        if not self._accepting:
            raise RuntimeError("the executor is shutting down")
        if record.id in self.tasks._added:  # enqueued: run by whoever dequeues it
            self.tasks._added.discard(record.id)
            self._given[record.id] = record  # (before the workflow can start here)
            return
        self._start(record, self.run)  # a task resumed after its workflow ended: here

    def _start(self, record: TaskRecord, run: RunTask) -> asyncio.Task[None]:
        cancel = asyncio.Event()
        job = asyncio.ensure_future(run(record, cancel))
        self._running[record.id] = (cancel, job)
        job.add_done_callback(lambda _: self._running.pop(record.id, None))
        return job

    async def drive(self, task_id: str) -> None:
        if not self._accepting:  # stopping: leave it to whoever takes it over
            await asyncio.Event().wait()
        record = self._given.pop(task_id, None) or await self.tasks.get(task_id)
        if record is None:
            raise RunError(f"task {task_id} has no record")
        await self._start(record, self.run)

    def holds(self, task_id: str) -> bool:
        if task_id in self._running:
            return True
        seen = self._seen.get(task_id)
        if seen is None or time.monotonic() - seen[0] > self.tasks.poll:
            self._seen[task_id] = (time.monotonic(), True if seen is None else seen[1])
            look = asyncio.ensure_future(self._look(task_id))
            self._looks.add(look)
            look.add_done_callback(self._looks.discard)
        return self._seen[task_id][1]

    async def _look(self, task_id: str) -> None:
        record = await self.tasks.get(task_id)
        self._seen[task_id] = (time.monotonic(), record is not None and not record.final)

    async def cancel(self, task_id: str) -> str | None:
        running = self._running.get(task_id)
        if running is not None:
            running[0].set()
            return "signalled"
        row = await self.tasks._row(task_id)
        if row is None:
            return None
        if row.status == "ENQUEUED":
            await _plain(functools.partial(DBOS.cancel_workflow_async, task_id))
            return "dequeued"
        if row.status == "PENDING":  # running elsewhere: its process stops it
            await self.tasks._merge(task_id, {"cancel": True})
            return "signalled"
        return None

    def waiting_for(self, task_id: str) -> list[str]:
        return []

    async def shutdown(self, grace: float) -> list[str]:
        self._accepting = False
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown(grace))
        return await asyncio.shield(self._stopping)

    async def _shutdown(self, grace: float) -> list[str]:
        jobs = {job: task_id for task_id, (_, job) in self._running.items()}
        if not jobs:
            return []
        _done, pending = await asyncio.wait(jobs, timeout=grace)
        for job in pending:  # left PENDING: a restart or another process goes on with it
            job.cancel()
        for job in pending:
            with contextlib.suppress(BaseException):
                await job
        return [jobs[job] for job in pending]

    # -- watching -------------------------------------------------------------------------

    async def watch(self) -> None:
        """Every ``poll`` seconds: stop the runs here whose task was cancelled elsewhere, beat
        their heart, and put back on its queue a task whose process is gone."""
        beat = 0.0
        while True:
            await asyncio.sleep(self.tasks.poll)
            try:
                ids = list(self._running)
                if ids:
                    rows = await _plain(
                        functools.partial(
                            DBOS.list_workflows_async,
                            workflow_ids=ids,
                            load_input=False,
                            load_output=False,
                        )
                    )
                    for row in rows:
                        attrs = row.attributes or {}
                        if attrs.get("cancel") or row.status == "CANCELLED":
                            running = self._running.get(row.workflow_id)
                            if running is not None:
                                running[0].set()
                now = time.time()
                if now - beat >= self.tasks.takeover_after / 4:
                    beat = now
                    for task_id in ids:
                        self.tasks.note(task_id, beat=now)
                    if self._accepting:
                        await self.tasks.take_over(now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be away for a while: go on
                _log.warning("fabric task watcher: %s", exc)


def _record(row: Any) -> TaskRecord:
    """The task record a workflow row holds, with what DBOS knows and the attributes not yet
    (dequeued, cancelled, failed outside the run)."""
    attrs = row.attributes or {}
    fields: dict[str, Any] = {name: attrs[name] for name in _FIELDS if name in attrs}
    record = TaskRecord(**fields)
    state = str(row.status)
    if record.final:
        return record
    if state == "ENQUEUED":
        return dataclasses.replace(record, status=QUEUED)
    if state == "PENDING" and record.status == QUEUED:
        return dataclasses.replace(record, status=RUNNING, started_at=_iso(row.dequeued_at))
    if state == "CANCELLED":
        return dataclasses.replace(
            record,
            status="cancelled",
            finished_at=_iso(row.completed_at or row.updated_at),
            error=record.error or {"code": "cancelled", "message": "cancelled"},
        )
    if state in ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
        return dataclasses.replace(
            record,
            status="failed",
            finished_at=_iso(row.completed_at or row.updated_at),
            error={"code": "internal_error", "message": str(row.error or state)},
        )
    return record


__all__ = ["QUEUE", "TASK_WORKFLOW", "DbosExecutor", "DbosTasks", "queue_of"]
