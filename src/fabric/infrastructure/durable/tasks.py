"""The service's tasks on DBOS queues (ADR 0020): the task store, the executor and the
durable runs of every `fabric serve` and `fabric worker`.

Each task is one DBOS workflow (``fabric.task``) whose id is the task id, enqueued on
``fabric.tasks`` (or ``fabric.tasks.<pack>`` for a pack with a global limit), partitioned by
workspace so that one task at a time runs on a workspace (unless ``share_workspaces``). The
workflow's row is the task's record: its status says queued, running or ended; its attributes
hold the record's fields (the task text redacted), kept current by whoever runs it, and the
calls waiting for a person with the answers given to them. Any process on the database serves
any task: status, list, cancel and approvals read and write the row; the runlog is in the runs
folder, which processes on several machines share with the workspaces.

Whoever dequeues a task runs it, inside its workflow, as a durable run: each model reply and
tool result is a recorded step (``DbosCheckpoints``). A task whose process died is put back on
its queue by DBOS's own recovery, asked by any live process: on this machine as soon as the
process is gone, from another machine once its heartbeat is older than ``takeover_after``; the
process that dequeues it goes on from its last recorded step.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import structlog
from dbos import DBOS

from fabric.application.job import LEFT_FOR_RECOVERY, Control, RunRequest
from fabric.application.tasks.ports import RunTask
from fabric.domain.errors import RunError
from fabric.domain.models import RunResult
from fabric.domain.tasks import FINAL, QUEUED, TaskRecord

from .engine import DbosCheckpoints, DurableRuns, owner_alive, unrecorded, unrecorded_now
from .where import sqlite_path

if TYPE_CHECKING:
    from dbos._enqueue_options import EnqueueOptions

_log = logging.getLogger(__name__)
log = structlog.get_logger("fabric.tasks")

TASK_WORKFLOW = "fabric.task"
QUEUE = "fabric.tasks"
_MARK = "fabric_task"
"""The attribute every task row carries (workflow rows of `fabric run --durable` do not)."""
_FIELDS = tuple(f.name for f in dataclasses.fields(TaskRecord))
_PAGE = 200
_ANSWER = "answer:"
"""The attribute that carries a person's answer to a call, given through another process."""
TAKE_OVER_EVERY = 2.0
"""Seconds between looks for tasks whose process is gone."""
NOTE_EVERY = 1.0
"""Seconds between two writes of the running tasks' progress (steps so far, heartbeats)."""
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


async def _rows(**filters: Any) -> list[Any]:
    """The workflow rows ``filters`` pick (``DBOS.list_workflows``), without their inputs and
    outputs (a task's record is in its attributes), read outside any workflow."""
    read = functools.partial(
        DBOS.list_workflows_async, load_input=False, load_output=False, **filters
    )
    return await unrecorded(read)


class DbosTasks:
    """Tasks as DBOS workflows: the service's ``TaskStore``, its ``DurableTasks`` and (through
    ``executor``) its ``TaskExecutor``. ``concurrency``: tasks one process runs at once;
    ``per_pack``: a global limit for each named pack; ``takeover_after``: seconds without a
    heartbeat after which another machine takes a task over; ``runs_tasks``: whether this
    process takes tasks from the queues (False: an API node only)."""

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
        self._sqlite = sqlite_path(durable.url) is not None
        self.seen: dict[str, tuple[float, bool]] = {}
        """Whether a task was live (queued or running, here or elsewhere) when last read,
        and when that was: what ``DbosExecutor.holds`` answers from."""
        self._added: set[str] = set()
        """Tasks enqueued by ``add`` here, not yet handed to ``submit``."""
        self._executor: DbosExecutor | None = None
        self._notes: dict[str, dict[str, Any]] = {}
        self._urgent = asyncio.Event()
        self._ended: set[str] = set()
        """Tasks whose end this process wrote: their progress notes are dropped."""
        self._writing: dict[str, asyncio.Lock] = {}
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
        for job in (self._watcher, self._writer):
            if job is not None:
                job.cancel()
                with contextlib.suppress(BaseException):
                    await job
        await self.durable.stop()

    async def run(self, request: RunRequest, control: Control) -> RunResult:
        """Run a task's request inside its own workflow (this process dequeued it): a durable
        run whose steps are that workflow's."""
        return await self.durable.drive(request, control, DbosCheckpoints(self.durable.secrets))

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
        record = None if row is None else _record(row)
        self.seen[task_id] = (time.monotonic(), record is not None and not record.final)
        return record

    async def update(self, task_id: str, **fields: Any) -> TaskRecord:
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown or "id" in fields:
            raise ValueError(f"a task has no field {', '.join(unknown) or 'id to change'}")
        row = await self._row(task_id)
        if row is None:
            raise KeyError(f"no task with id {task_id!r}")
        if fields.get("status") in FINAL:  # its progress notes are out of date from now on
            self._ended.add(task_id)
            self._notes.pop(task_id, None)
        elif fields.get("status") == QUEUED:  # resumed
            self._ended.discard(task_id)
        await self._merge(task_id, fields)
        if fields.get("status") in FINAL and row.status == "ENQUEUED":  # it must not start
            await unrecorded(functools.partial(DBOS.cancel_workflow_async, task_id))
        found = await self.get(task_id)
        assert found is not None
        return found

    def note(self, task_id: str, **fields: Any) -> None:
        """Fields of a running task other processes show (steps so far, the model used, the
        calls waiting for a person), or a heartbeat; written in the background, the latest
        value winning. Steps, what was spent and heartbeats are written every ``NOTE_EVERY``
        seconds, all tasks' at once (a database write a step would be a cost every step pays);
        anything else at once."""
        self._notes.setdefault(task_id, {}).update(fields)
        if not set(fields) <= {"steps", "beat", "spent"}:
            self._urgent.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_notes())

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
                    await self._merge(task_id, fields)
                except Exception as exc:  # best effort: the task's final update will hold
                    _log.warning("task %s: could not note %s: %s", task_id, sorted(fields), exc)

    async def asks(self, task_id: str) -> list[dict[str, Any]]:
        row = await self._row(task_id)
        found = (row.attributes or {}).get("asks") if row is not None else None
        return list(found) if isinstance(found, list) else []

    async def answer_of(self, task_id: str, call_id: str) -> dict[str, Any] | None:
        row = await self._row(task_id)
        found = (row.attributes or {}).get(_ANSWER + call_id) if row is not None else None
        return found if isinstance(found, dict) else None

    async def give_answer(self, task_id: str, call_id: str, answer: dict[str, Any]) -> None:
        await self._merge(task_id, {_ANSWER + call_id: answer})

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
            rows = await _rows(
                name=TASK_WORKFLOW,
                attributes=by_pack,
                sort_desc=not oldest_first,
                limit=_PAGE,
                offset=offset,
            )
            offset += len(rows)
            for row in rows:
                if not (row.attributes or {}).get(_MARK):  # a resume's row: its task's counts
                    continue
                key = (int(row.created_at or 0), row.workflow_id)
                if bound is not None and (key >= bound if not oldest_first else key <= bound):
                    continue
                record = _record(row)
                if (wanted is None or record.status in wanted) and pack in (None, record.pack):
                    found.append(record)
            if len(rows) < _PAGE:
                break
        return found[:limit]

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

    async def busy(self) -> bool:
        """Whether a task runs or waits here, waits on a queue, or waits to be taken over
        from a process that is gone (``fabric worker --once`` works until none does)."""
        executor = self._executor
        if executor is not None and executor.holding():
            return True
        rows = await _rows(name=TASK_WORKFLOW, status=["ENQUEUED", "PENDING"])
        return any(r.status == "ENQUEUED" or self._gone(r, time.time()) for r in rows)

    def _gone(self, row: Any, now: float) -> bool:
        """Whether the process that holds a PENDING task is gone: on this machine, no longer
        alive; elsewhere, silent for ``takeover_after`` seconds."""
        alive = owner_alive(row.executor_id)
        if alive is None:  # another machine's: judged by its heartbeat
            attrs = row.attributes or {}
            beat = attrs.get("beat") or (row.dequeued_at or row.updated_at or 0) / 1000
            alive = now - float(beat) < self.takeover_after
        return not alive

    async def take_over(self, now: float) -> list[str]:
        """Put back on their queues the tasks whose process is gone: on this machine, a
        process that no longer lives; elsewhere, one whose heartbeat is ``takeover_after``
        seconds old. DBOS re-enqueues only rows still owned by that process, so two
        processes taking over at once start nothing twice."""
        rows = await _rows(name=TASK_WORKFLOW, status="PENDING")
        dead = {r.executor_id for r in rows if r.executor_id and self._gone(r, now)}
        if not dead:
            return []
        owners = sorted(dead)
        handles = await asyncio.to_thread(
            unrecorded_now, lambda: DBOS._recover_pending_workflows(owners)
        )
        taken = [h.workflow_id for h in handles]
        for task_id in taken:
            log.info("task.recovered", task_id=task_id, database=self.where(), owners=owners)
        return taken

    # -- rows -----------------------------------------------------------------------------

    async def _row(self, task_id: str) -> Any:
        rows = await _rows(workflow_ids=[task_id])
        if not rows or not (rows[0].attributes or {}).get(_MARK):
            return None
        return rows[0]

    async def _merge(self, task_id: str, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into the task's attributes; one write at a time per task, in the
        order they were asked for (a progress note never lands after the task's end)."""
        async with self._writing.setdefault(task_id, asyncio.Lock()):
            await asyncio.to_thread(
                unrecorded_now,
                lambda: DBOS.update_workflow_attributes(task_id, dict(fields), merge=True),
            )

    async def current(self, task_id: str) -> Any:
        """The latest workflow row of a task: its own, or its latest resume's (None: no such
        task)."""
        rows = await _rows(workflow_id_prefix=task_id)
        mine = [r for r in rows if r.workflow_id == task_id or _attempt_of(r) == task_id]
        return max(mine, key=lambda r: r.created_at or 0, default=None)

    async def live(self) -> list[TaskRecord]:
        """The tasks queued or running, in any process."""
        rows = await _rows(name=TASK_WORKFLOW, status=["ENQUEUED", "PENDING"])
        records = []
        for row in rows:
            if (row.attributes or {}).get(_MARK):
                records.append(_record(row))
            else:
                resumed = await self.get(_attempt_of(row) or "")
                if resumed is not None:
                    records.append(resumed)
        return records

    async def _enqueue_attempt(self, record: TaskRecord) -> None:
        """Queue a task that was resumed after its workflow ended, as a new attempt."""
        rows = await _rows(workflow_id_prefix=f"{record.id}.r")
        number = 1 + sum(1 for r in rows if _attempt_of(r) == record.id)
        await self._enqueue(record, f"{record.id}.r{number}", {"attempt_of": record.id})

    async def _enqueue(
        self, record: TaskRecord, workflow_id: str | None = None, attributes: Any = None
    ) -> None:
        options: dict[str, Any] = {
            "workflow_name": TASK_WORKFLOW,
            "queue_name": queue_of(record.pack, self.per_pack),
            "workflow_id": workflow_id or record.id,
            "workflow_id_reuse_policy": "reject",
            "app_version": self.durable.version,
            "attributes": attributes or {_MARK: True, **dataclasses.asdict(record)},
        }
        if record.priority > 0:  # DBOS's default, 0, starts before every number it takes
            options["priority"] = record.priority
        if not self.share_workspaces:
            options["queue_partition_key"] = str(Path(record.workspace).resolve())
        enqueue = DBOS.enqueue_workflow_with_options_async
        await unrecorded(functools.partial(enqueue, cast("EnqueueOptions", options), record.id))


class DbosExecutor:
    """The ``TaskExecutor`` of ``DbosTasks``: ``submit`` enqueues (a new task as its own
    workflow; a resumed one as a new attempt, ``<id>.r<n>``, whose run goes on in the task's
    runlog); DBOS dequeues each in some process (this one or another), whose workflow calls
    ``drive``. A dequeued task whose workspace is, contains or lies inside the workspace of a
    task running here, or of one dequeued here before it, waits here (still ``queued``) until
    that one ends: the queue's partitions keep tasks on the very same folder apart across
    processes; this keeps nested folders apart within one."""

    def __init__(self, tasks: DbosTasks, run: RunTask) -> None:
        self.tasks = tasks
        self.run = run
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
        self.tasks.seen[record.id] = (time.monotonic(), True)
        self._given[record.id] = record  # (before its workflow can start here)
        if record.id in self.tasks._added:  # enqueued by add: whoever dequeues it runs it
            self.tasks._added.discard(record.id)
            return
        await self.tasks._enqueue_attempt(record)

    async def drive(self, task_id: str) -> None:
        """Run a dequeued task here: wait for its workspace, run it, return when it ended
        (or was cancelled while it waited)."""
        if not self._accepting:  # stopping: leave it to whoever takes it over
            await asyncio.Event().wait()
        record = self._given.pop(task_id, None) or await self.tasks.get(task_id)
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
        taken = [] if self.tasks.share_workspaces else [h.folder for h in self._running.values()]
        for held in list(self._waiting):
            if _overlaps(held.folder, taken):
                taken.append(held.folder)  # later tasks on it wait behind this one
                continue
            self._waiting.remove(held)
            if not self.tasks.share_workspaces:
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
        seen = self.tasks.seen.get(task_id)
        if seen is None:
            return False
        if time.monotonic() - seen[0] > self.tasks.poll:
            self.tasks.seen[task_id] = (time.monotonic(), seen[1])
            look = asyncio.ensure_future(self.tasks.get(task_id))
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
        row = await self.tasks.current(task_id)
        if row is None:
            return None
        if row.status == "ENQUEUED":
            await unrecorded(functools.partial(DBOS.cancel_workflow_async, row.workflow_id))
            return "dequeued"
        if row.status == "PENDING":  # held by another process: it stops it
            await self.tasks._merge(task_id, {"cancel": True})
            return "signalled"
        return None

    async def waiting_for(self, record: TaskRecord) -> list[str]:
        """From the database, so for tasks held by any process: the running tasks whose
        workspace is, holds or lies in this one's, then the earlier queued ones."""
        if self.tasks.share_workspaces:
            return []
        folder = Path(os.path.realpath(record.workspace))
        running: list[str] = []
        earlier: list[str] = []
        for other in await self.tasks.live():
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
            await asyncio.sleep(self.tasks.poll)
            try:
                ids = [*self._running, *(h.record.id for h in self._waiting)]
                if ids:
                    rows = await _rows(workflow_ids=ids)
                    for row in rows:
                        attrs = row.attributes or {}
                        if attrs.get("cancel") or row.status == "CANCELLED":
                            await self.cancel(row.workflow_id)
                now = time.time()
                if now - beat >= self.tasks.takeover_after / 4:
                    beat = now
                    for task_id in ids:
                        self.tasks.note(task_id, beat=now)
                if now - looked >= TAKE_OVER_EVERY and self._accepting:
                    looked = now
                    await self.tasks.take_over(now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be away for a while: go on
                _log.warning("fabric task watcher: %s", exc)


def _attempt_of(row: Any) -> str | None:
    """The task a resume's workflow row runs (None for a task's own row)."""
    found = (row.attributes or {}).get("attempt_of")
    return None if found is None else str(found)


@dataclasses.dataclass(eq=False)
class _Held:
    """A task dequeued here: waiting for its workspace, then running."""

    record: TaskRecord
    folder: Path
    ready: asyncio.Event
    cancel: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    cancelled: bool = False
    job: asyncio.Future[None] | None = None


def _overlaps(folder: Path, others: Sequence[Path]) -> bool:
    """Whether ``folder`` is one of ``others``, or lies inside or holds one of them."""
    return any(folder.is_relative_to(o) or o.is_relative_to(folder) for o in others)


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
