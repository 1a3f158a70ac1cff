"""The task service behind the HTTP API: submit, list, cancel, recover after a restart.

Runs go through the same ``Runner`` as ``fabric run`` (same packs, same resolution, same
runlogs); records live in a ``TaskStore``; an executor decides when each task runs.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from fabric.application.ports import TaskExecutor, TaskStore
from fabric.application.workspaces import check_workspace
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.policy import ApprovalAnswer, Scope
from fabric.domain.tasks import (
    AWAITING_APPROVAL,
    INTERRUPTED,
    INTERRUPTED_ERROR,
    QUEUED,
    RUNNING,
    TaskRecord,
)
from fabric.infrastructure.packs.registry import LoadedPack
from fabric.infrastructure.runlog import new_run_id, read_runlog
from fabric.interfaces.compose import Runner
from fabric.interfaces.search_check import search_problem

from .approvals import BY_HTTP, Approvals, Conflict, call_logged
from .executor import LocalExecutor, RunTask

log = structlog.get_logger("fabric.tasks")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaskService:
    """Everything the endpoints do, without HTTP."""

    def __init__(
        self,
        runner: Runner,
        store: TaskStore,
        *,
        workspace_roots: list[Path],
        max_task_chars: int,
        executor: Callable[[RunTask], TaskExecutor],
    ) -> None:
        """``executor`` makes what runs the submitted tasks, given the function that runs one
        (this service's ``run``)."""
        self.runner = runner
        self.store = store
        self.roots = [r.resolve() for r in workspace_roots]
        self.max_task_chars = max_task_chars
        self.executor: TaskExecutor = executor(self.run)
        self.progress: dict[str, int] = {}
        """Steps so far of running tasks (kept in memory; the store has the final count)."""
        self.wakers: dict[str, set[asyncio.Event]] = {}
        """Events set whenever a running task's runlog grows (for live event streams)."""
        self.approvals = Approvals(store)
        """Tool calls of running tasks waiting for a person's answer."""
        self.resuming: set[str] = set()
        """Tasks a resume request is putting back in the queue (see resume.py)."""
        self.used: dict[str, dict[str, str]] = {}
        """The model (and backend) running tasks' runs use, from their run_started: the task
        shows them at once, and keeps them when it ends."""

    def runlog_path(self, task_id: str) -> Path:
        return self.runner.runlog_path(task_id)

    # --- submitting --------------------------------------------------------------------------

    def check(
        self, pack: str, task: str, workspace: str | None, backend: str | None = None
    ) -> Path:
        """Validate a submission before it is stored; return the workspace to use."""
        if backend is not None and backend != "auto":
            self.runner.backends.settings(backend)  # unknown: a ConfigError listing the known
        if not task.strip():
            raise ConfigError("the task is empty", hint="say what the pack should do")
        if len(task) > self.max_task_chars:
            raise ConfigError(
                f"the task has {len(task)} characters; at most {self.max_task_chars} are taken",
                hint="shorten it, or raise serve.max_task_chars",
            )
        self.runner.pack(pack)  # unknown pack or broken builder: a ConfigError naming it
        return check_workspace(  # the rules `fabric run` follows, and the workspace roots
            workspace or self.roots[0],
            self.runner.loaded,
            runs_dir=self.runner.runs_dir,
            roots=self.roots,
        )

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
    ) -> TaskRecord:
        folder = self.check(pack, task, workspace, backend)
        _check_verify(self.runner.pack(pack), verify)
        problem = await search_problem(pack, self.runner.pack(pack))
        if problem is not None:  # every search would fail once the task runs: refuse it now
            raise problem
        if not self.executor.accepting:
            raise ServiceUnavailable(_SHUTTING_DOWN)
        record = TaskRecord(
            id=new_run_id(),
            pack=pack,
            task=task,
            model=model,
            backend=backend,
            workspace=str(folder),
            max_steps=max_steps,
            status=QUEUED,
            created_at=now(),
            verify=verify,
        )
        # The database keeps no secret: the run gets the task as it was sent, the store a
        # redacted copy (which a task still queued when the server stops runs from later).
        try:
            await self.store.add(replace(record, task=self.runner.secrets.redact(task)))
        except RuntimeError:  # the store closed: shutdown got there first
            raise ServiceUnavailable(_SHUTTING_DOWN) from None
        try:
            self.executor.submit(record)
        except RuntimeError:  # shutdown began while the record was written: take it back
            await self.store.update(
                record.id, status="cancelled", finished_at=now(),
                error={"code": "unavailable", "message": _SHUTTING_DOWN},
            )  # fmt: skip
            raise ServiceUnavailable(_SHUTTING_DOWN) from None
        log.info("task.queued", task_id=record.id, pack=pack)
        return record

    async def cancel(self, task_id: str) -> TaskRecord:
        record = await self.get(task_id)
        if record.final:
            return record
        how = self.executor.cancel(task_id)
        if how is None:  # not held here: it ended meanwhile, so report how it ended
            return await self.get(task_id)
        if how == "dequeued":
            record = await self.store.update(
                task_id, status="cancelled", finished_at=now(),
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
        used = self.used.get(task_id)
        if used:
            model, backend = used.get("model", record.model), used.get("backend", record.backend)
            record = replace(record, model=model, backend=backend)
        return record

    async def answer_approval(
        self, task_id: str, call_id: str, *, approve: bool, scope: Scope
    ) -> dict[str, Any]:
        """Answer a call of the task that waits for approval (404: no such task or call;
        409: the call does not wait, or was answered already)."""
        await self.get(task_id)
        if self.approvals.answer(task_id, call_id, ApprovalAnswer(approve, BY_HTTP, scope)):
            return {"task_id": task_id, "call_id": call_id, "approved": approve,
                    "scope": scope, "by": BY_HTTP}  # fmt: skip
        if await asyncio.to_thread(call_logged, self.runlog_path(task_id), call_id):
            raise Conflict(
                f"the call {call_id!r} of task {task_id!r} is not waiting for approval: it was "
                "answered, timed out, or never needed approval",
                hint="GET /tasks/{id} lists the calls that wait (under approvals)",
            )
        raise NotFound(
            f"task {task_id!r} has no tool call {call_id!r}",
            hint="use a call_id from the approval_requested event or GET /tasks/{id}",
        )

    # --- running -----------------------------------------------------------------------------

    async def run(self, record: TaskRecord, cancel: asyncio.Event) -> None:
        """Run one task (called by the executor) and record how it ended."""
        task_id = record.id
        await self.store.update(task_id, status=RUNNING, started_at=record.started_at or now())
        log.info("task.started", task_id=task_id, pack=record.pack)
        self.progress[task_id] = record.steps
        runlog = self.runlog_path(task_id)
        try:
            if runlog.is_file():  # resumed (POST /tasks/{id}/resume): go on in its runlog
                events, _ = await asyncio.to_thread(read_runlog, runlog)
                result = await self.runner.resume(
                    events, runlog, max_steps=record.max_steps,
                    observers=(self._observer(task_id),), cancel=cancel,
                    approver=self.approvals.for_task(task_id),
                )  # fmt: skip
            else:
                result = await self.runner.run(
                    record.pack,
                    record.task,
                    model=record.model,
                    backend=record.backend,
                    workspace=Path(record.workspace),
                    max_steps=record.max_steps,
                    run_id=task_id,
                    observers=(self._observer(task_id),),
                    cancel=cancel,
                    approver=self.approvals.for_task(task_id),
                    verify=record.verify,
                )
        except asyncio.CancelledError:
            await self._finish(task_id, INTERRUPTED, error=INTERRUPTED_ERROR)
            raise
        except FabricError as exc:
            await self._finish(task_id, "failed", error=_error(exc))
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
        fields.update(self.used.pop(task_id, {}))
        kept = self.runner.secrets.redact_obj(fields)
        await self.store.update(task_id, status=status, finished_at=now(), **kept)
        self._wake(task_id)
        log.info("task.finished", task_id=task_id, status=status)

    def waiting_for(self, task_id: str) -> list[str]:
        """The tasks a queued task waits for because they use its workspace (running ones,
        then earlier queued ones); empty for any other task, and for other executors."""
        if isinstance(self.executor, LocalExecutor):
            return self.executor.waiting_for(task_id)
        return []

    def is_live(self, task_id: str) -> bool:
        """Whether the task is still queued or running here (its runlog may still grow)."""
        return self.executor.holds(task_id)

    def _observer(self, task_id: str) -> Any:
        def observe(event: Mapping[str, Any]) -> None:
            if event["kind"] == "llm_request":
                self.progress[task_id] = int(event.get("step", 0))
            elif event["kind"] == "run_started" and event.get("model"):
                self.used[task_id] = _used(event)
            self._wake(task_id)

        return observe

    def _wake(self, task_id: str) -> None:
        for event in self.wakers.get(task_id, ()):
            event.set()

    async def recover(self) -> tuple[list[str], list[str]]:
        """After a (re)start: running tasks become interrupted, queued ones run again."""
        interrupted, queued = await self.store.recover()
        for record in queued:
            self.executor.submit(record)
        return [r.id for r in interrupted], [r.id for r in queued]


_SHUTTING_DOWN = "the service is shutting down; no new tasks are taken"


def _used(started: Mapping[str, Any]) -> dict[str, str]:
    """The task fields a ``run_started`` settles: the model the run uses (the task may have
    named none, or a key, or a model that was not there) and, when resolved, its backend."""
    used = {"model": str(started["model"])}
    backend = started.get("backend")
    if isinstance(backend, Mapping) and backend.get("name"):
        used["backend"] = str(backend["name"])
    return used


def _error(exc: FabricError) -> dict[str, str]:
    out = {"code": exc.code, "message": exc.message}
    if exc.hint:
        out["hint"] = exc.hint
    return out


class NotFound(FabricError):
    """No such task."""

    CODE = "not_found"


class ServiceUnavailable(FabricError):
    """The service cannot take the request now."""

    CODE = "unavailable"


def _check_verify(loaded_pack: LoadedPack, verify: str | None) -> None:
    """A task's own check may use only what the pack's commands may (its allowed programs):
    the config, not a token holder, decides what runs. A command that cannot be parsed is
    refused now, not when the task runs."""
    loaded_pack.for_run(verify)
    if verify is None or verify.strip() == "off":
        return
    program = shlex.split(verify)[0]
    allowed = loaded_pack.settings.sandbox.allowed_commands
    if program not in allowed:
        raise ConfigError(
            f"verify: {program!r} is not one of the allowed commands of pack "
            f"{loaded_pack.pack.name!r}, so a task may not run it",
            hint=f"use one of: {', '.join(allowed)}; or 'off'" if allowed else "use 'off'",
        )
