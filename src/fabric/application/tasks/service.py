"""The task service: submit, list, cancel, resume, answer approvals.

Shared by every way in that queues tasks (the HTTP API today). Runs go through the same
``Runner`` as ``fabric run`` (same packs, same resolution, same runlogs; the ``Runs`` port);
records live in a ``TaskStore``; an executor decides when each task runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog
from msgspec.structs import replace

from fabric.application.job import Control, RunRequest
from fabric.application.ports import TaskExecutor, TaskStore
from fabric.config.schema import Budget
from fabric.domain.clock import Clock, iso_z, utc_now
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.policy import ApprovalAnswer, Scope
from fabric.domain.tasks import (
    AWAITING_APPROVAL,
    QUEUED,
    RUNNING,
    TaskRecord,
)

from .approvals import Approvals
from .errors import Conflict, NotFound, ServiceUnavailable
from .ports import DurableTasks, Runs, RunTask
from .watch import Listener, TaskWatch

log = structlog.get_logger("fabric.tasks")


R = TypeVar("R", bound=Runs)


class TaskService(Generic[R]):
    """Everything the endpoints do, without HTTP."""

    def __init__(
        self,
        runner: R,
        store: TaskStore,
        *,
        workspace_roots: list[Path],
        max_task_chars: int,
        executor: Callable[[RunTask], TaskExecutor],
        durable: DurableTasks,
        clock: Clock = utc_now,
    ) -> None:
        """``executor`` makes what runs the submitted tasks, given the function that runs one
        (this service's ``run``); ``durable`` runs each task as a durable run, so one a dead
        process left is continued from its last step (store, executor and ``durable`` are the
        DBOS queues, ADR 0020); ``clock`` stamps the records' times."""
        self.runner = runner
        self.durable = durable
        self.store = store
        self.roots = [r.resolve() for r in workspace_roots]
        self.max_task_chars = max_task_chars
        self.clock = clock
        self.executor: TaskExecutor = executor(self.run)
        self.progress: dict[str, int] = {}
        """Steps so far of running tasks (kept in memory; the store has the final count)."""
        self.wakers: dict[str, set[asyncio.Event]] = {}
        """Events set whenever a running task's runlog grows (for live event streams)."""
        self.listeners: dict[str, set[Listener]] = {}
        """Called with each piece of model text a running task's run streams (``TaskWatch``):
        the run console shows it as it comes; it is not kept anywhere."""
        self.approvals = Approvals(store)
        """Tool calls of running tasks waiting for a person's answer."""
        self.resuming: set[str] = set()
        """Tasks a resume request is putting back in the queue (see resume.py)."""
        self.used: dict[str, dict[str, str]] = {}
        self.spent: dict[str, dict[str, float]] = {}
        """What each running task with a budget has spent so far (``llm_response.spent``)."""
        """The model (and backend) running tasks' runs use, from their run_started: the task
        shows them at once, and keeps them when it ends."""

    def now(self) -> str:
        """The clock's time as records keep it (ISO 8601, milliseconds, ``Z``)."""
        return iso_z(self.clock())

    def runlog_path(self, task_id: str) -> Path:
        return self.runner.runlog_path(task_id)

    # --- submitting --------------------------------------------------------------------------

    async def submit(
        self,
        *,
        pack: str,
        task: str,
        model: str | None = None,
        backend: str | None = None,
        workspace: str | None = None,
        max_steps: int | None = None,
        verify: str | None = None,
        priority: int = 0,
        budget: Mapping[str, float] | None = None,
    ) -> TaskRecord:
        """Check a task (as ``fabric run`` would, within the workspace roots, with only the
        pack's own programs as its ``verify``), store it as queued and hand it to the
        executor."""
        if len(task) > self.max_task_chars:
            raise ConfigError(
                f"the task has {len(task)} characters; at most {self.max_task_chars} are taken",
                hint="shorten it, or raise serve.max_task_chars",
            )
        asked = RunRequest(
            pack,
            task,
            workspace=Path(workspace or self.roots[0]),
            model=model,
            backend=backend,
            max_steps=max_steps,
            verify=verify,
            budget=_budget(budget),
        )
        folder = await self.runner.admit(asked, roots=self.roots, remote=True)
        if not self.executor.accepting:
            raise ServiceUnavailable(_SHUTTING_DOWN)
        record = TaskRecord(
            id=self.runner.new_run_id(),
            pack=pack,
            task=task,
            model=model,
            backend=backend,
            workspace=str(folder),
            max_steps=max_steps,
            status=QUEUED,
            created_at=self.now(),
            verify=verify,
            priority=priority,
            budget=asked.budget.set() if asked.budget is not None else None,
        )
        # The database keeps no secret: the run gets the task as it was sent, the store a
        # redacted copy (which a task still queued when the server stops runs from later).
        try:
            await self.store.add(replace(record, task=self.runner.secrets.redact(task)))
        except RuntimeError:  # the store closed: shutdown got there first
            raise ServiceUnavailable(_SHUTTING_DOWN) from None
        try:
            await self.executor.submit(record)
        except RuntimeError:  # shutdown began while the record was written: take it back
            await self.store.update(
                record.id, status="cancelled", finished_at=self.now(),
                error={"code": "unavailable", "message": _SHUTTING_DOWN},
            )  # fmt: skip
            raise ServiceUnavailable(_SHUTTING_DOWN) from None
        log.info("task.queued", task_id=record.id, pack=pack)
        return record

    async def cancel(self, task_id: str) -> TaskRecord:
        record = await self.get(task_id)
        if record.final:
            return record
        how = await self.executor.cancel(task_id)
        if how is None:  # not held here: it ended meanwhile, so report how it ended
            return await self.get(task_id)
        if how == "dequeued":
            record = await self.store.update(
                task_id, status="cancelled", finished_at=self.now(),
                error={"code": "cancelled", "message": "cancelled before it started"},
            )  # fmt: skip
        log.info("task.cancel", task_id=task_id, how=how or "not held")
        return record

    async def get(self, task_id: str) -> TaskRecord:
        record = await self.store.get(task_id)
        if record is None:
            raise NotFound(f"no task {task_id!r}")
        return self.live(record)

    def live(self, record: TaskRecord) -> TaskRecord:
        """``record`` with what its running run knows and the store not yet: the steps so far
        and the model it uses."""
        task_id = record.id
        if record.status in (RUNNING, AWAITING_APPROVAL) and task_id in self.progress:
            record = replace(record, steps=self.progress[task_id])
            if task_id in self.spent:
                record = replace(record, spent=self.spent[task_id])
        used = self.used.get(task_id)
        if used:
            model, backend = used.get("model", record.model), used.get("backend", record.backend)
            record = replace(record, model=model, backend=backend)
        return record

    async def answer_approval(
        self, task_id: str, call_id: str, *, approve: bool, scope: Scope, by: str
    ) -> dict[str, Any]:
        """Answer a call of the task that waits for approval, recorded as given ``by`` (e.g.
        "http"). ``NotFound``: no such task or call; ``Conflict``: the call does not wait, or
        was answered already."""
        record = await self.get(task_id)
        answered = {"task_id": task_id, "call_id": call_id, "approved": approve,
                    "scope": scope, "by": by}  # fmt: skip
        if self.approvals.answer(task_id, call_id, ApprovalAnswer(approve, by, scope)):
            return answered
        elsewhere = task_id not in self.progress  # a task run here was answered just above
        if elsewhere and any(a["call_id"] == call_id for a in await self.asks(record)):
            if await self.store.answer_of(task_id, call_id) is not None:
                raise Conflict(
                    f"the call {call_id!r} of task {task_id!r} was answered already",
                    hint="GET /tasks/{id} shows what still waits for approval",
                )
            await self.store.give_answer(task_id, call_id, answered)
            log.info("task.approval", task_id=task_id, call_id=call_id, approved=approve,
                     through="database")  # fmt: skip
            return answered
        logged = self.runner.call_logged
        if await asyncio.to_thread(logged, self.runlog_path(task_id), call_id):
            raise Conflict(
                f"the call {call_id!r} of task {task_id!r} is not waiting for approval: it was "
                "answered, timed out, or never needed approval",
                hint="GET /tasks/{id} lists the calls that wait (under approvals)",
            )
        raise NotFound(
            f"task {task_id!r} has no tool call {call_id!r}",
            hint="use a call_id from the approval_requested event or GET /tasks/{id}",
        )

    async def asks(self, record: TaskRecord) -> list[dict[str, Any]]:
        """The task's calls waiting for a person: from this process when it runs the task,
        else as the process that runs it published them."""
        here = self.approvals.listing(record.id)
        if here or record.status != AWAITING_APPROVAL:
            return here
        return await self.store.asks(record.id)

    # --- running -----------------------------------------------------------------------------

    async def run(self, record: TaskRecord, cancel: asyncio.Event) -> None:
        """Run one task (called by the executor) and record how it ended."""
        task_id = record.id
        await self.store.update(task_id, status=RUNNING, started_at=record.started_at or self.now())
        log.info("task.started", task_id=task_id, pack=record.pack)
        self.progress[task_id] = record.steps
        runlog = self.runlog_path(task_id)
        control = Control(
            cancel=cancel,
            approver=self.approvals.for_task(task_id),
            observers=(TaskWatch(self, task_id),),
        )
        # Cancelled (the service stops): the task stays running, to go on where it was.
        try:
            if self.durable.inside(task_id):  # new, or driven again from its recorded steps
                request = RunRequest(
                    record.pack,
                    record.task,
                    workspace=Path(record.workspace),
                    model=record.model,
                    backend=record.backend,
                    max_steps=record.max_steps,
                    verify=record.verify,
                    run_id=task_id,
                    budget=_budget(record.budget),
                )
                result = await self.durable.run(request, control)
            else:  # resumed after it ended (POST /tasks/{id}/resume): on in its runlog
                events = await asyncio.to_thread(self.runner.read_runlog, runlog)
                result = await self.runner.resume(
                    events, runlog, max_steps=record.max_steps, control=control
                )
        except FabricError as exc:
            await self._finish(task_id, "failed", error=exc.as_dict())
        except Exception as exc:  # a bug: the record must still end
            await self._finish(
                task_id, "failed", error={"code": "internal_error", "message": repr(exc)}
            )
        else:
            await self._finish(
                task_id,
                result.status.value,
                steps=result.steps,
                payload=result.payload,
                error=result.error,
            )

    async def _finish(self, task_id: str, status: str, **fields: Any) -> None:
        """Record how a task ended, and the model its run used; its payload and error are kept
        without secrets."""
        self.progress.pop(task_id, None)
        self.approvals.forget(task_id)
        fields.update(self.used.pop(task_id, {}))
        if task_id in self.spent:
            fields["spent"] = self.spent.pop(task_id)
        kept = self.runner.secrets.redact_obj(fields)
        await self.store.update(task_id, status=status, finished_at=self.now(), **kept)
        self._wake(task_id)
        log.info("task.finished", task_id=task_id, status=status)

    async def waiting_for(self, record: TaskRecord) -> list[str]:
        """The tasks a queued task waits for because they use its workspace (running ones,
        then earlier queued ones); empty for any other task."""
        return await self.executor.waiting_for(record)

    def is_live(self, task_id: str) -> bool:
        """Whether the task is still queued or running here (its runlog may still grow)."""
        return self.executor.holds(task_id)

    def saw(self, task_id: str, event: Mapping[str, Any]) -> None:
        """A task's run wrote ``event``: note its step and model, wake its event streams."""
        if event["kind"] == "llm_request":
            self.progress[task_id] = int(event.get("step", 0))
            self.store.note(task_id, steps=self.progress[task_id])
        elif (
            event["kind"] in ("llm_response", "run_finished")
            and (spent := _spent(event)) is not None
        ):
            self.spent[task_id] = spent
            self.store.note(task_id, spent=spent)
        elif event["kind"] == "run_started" and event.get("model"):
            self.used[task_id] = _used(event)
            self.store.note(task_id, **self.used[task_id])
        elif event["kind"] == "approval_requested":
            self.approvals.expect(task_id, str(event.get("call_id")))
        self._wake(task_id)

    def _wake(self, task_id: str) -> None:
        for event in self.wakers.get(task_id, ()):
            event.set()


_SHUTTING_DOWN = "the service is shutting down; no new tasks are taken"


def _budget(limits: Mapping[str, float] | None) -> Budget | None:
    """A task's own budget (its record keeps the limits by name); ConfigError when bad."""
    given = {k: v for k, v in (limits or {}).items() if v is not None}
    if not given:
        return None
    try:
        return Budget.model_validate(given)
    except ValueError as exc:
        names = "tokens, cost_usd, seconds, tool_calls, model_calls"
        raise ConfigError(f"the task's budget is not valid: {exc}", hint=names) from exc


def _spent(event: Mapping[str, Any]) -> dict[str, float] | None:
    """What a run has spent so far, from its ``llm_response`` or ``run_finished`` event."""
    if event["kind"] == "run_finished":
        budget = event.get("budget")
        return dict(budget["used"]) if isinstance(budget, Mapping) else None
    spent = event.get("spent")
    return dict(spent) if isinstance(spent, Mapping) else None


def _used(started: Mapping[str, Any]) -> dict[str, str]:
    """The task fields a ``run_started`` settles: the model the run uses (the task may have
    named none, or a key, or a model that was not there) and, when resolved, its backend."""
    used = {"model": str(started["model"])}
    backend = started.get("backend")
    if isinstance(backend, Mapping) and backend.get("name"):
        used["backend"] = str(backend["name"])
    return used
