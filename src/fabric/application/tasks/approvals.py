"""Approvals of queued tasks' tool calls (over HTTP today).

When a task's run reaches a tool call its pack's policy asks about, the task pauses in
``awaiting_approval``: the runlog (and so ``GET /tasks/{id}/events``) carries
``approval_requested`` with the exact call, ``GET /tasks/{id}`` lists it under ``approvals``,
and ``POST /tasks/{id}/approvals/{call_id}`` with ``{"approve": true|false}`` answers it
(recorded ``by: "http"``). With no answer within the policy's ``approval_timeout`` the call is
denied (``by: "timeout"``); cancelling the task while it waits works as always. Either way the
task goes back to ``running``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from msgspec import Struct

from fabric.application.ports import TaskStore
from fabric.domain.clock import iso_z
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.domain.tasks import AWAITING_APPROVAL, RUNNING

from .errors import Conflict

log = structlog.get_logger("fabric.tasks")


class _Pending(Struct):
    request: ApprovalRequest
    expires_at: str | None
    answer: asyncio.Future[ApprovalAnswer]


HEAR_EVERY = 0.5
"""Seconds between looks for an answer given through another process."""


class Approvals:
    """The calls waiting for a person, per task, in this process; and the task's status
    while they wait (written by the run itself, so it never overwrites how a task ended).
    The waiting calls are published in the store (``asks``) and an answer stored there by
    another process (``give_answer``) is heard, so any API node answers any task's calls."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self._pending: dict[str, dict[str, _Pending]] = {}
        self._early: dict[tuple[str, str], asyncio.Future[ApprovalAnswer]] = {}
        """Answers to calls whose ``approval_requested`` is in the runlog, given before the
        run began to wait (a durable run records the wait as a step first)."""

    def expect(self, task_id: str, call_id: str) -> None:
        """The task's runlog asks about ``call_id``: an answer may come from now on."""
        self._early.setdefault((task_id, call_id), asyncio.get_running_loop().create_future())

    def forget(self, task_id: str) -> None:
        """The task's run ended: its calls wait for nothing any more."""
        for key in [k for k in self._early if k[0] == task_id]:
            del self._early[key]

    def for_task(self, task_id: str) -> TaskApprover:
        """The approver a task's run asks."""
        return TaskApprover(self, task_id)

    def listing(self, task_id: str) -> list[dict[str, Any]]:
        """The task's calls waiting for an answer, as the API shows them."""
        return [
            {
                "call_id": p.request.call_id,
                "step": p.request.step,
                "tool": p.request.tool,
                "arguments": dict(p.request.arguments),
                "rule": p.request.rule,
                "reason": p.request.reason,
                "expires_at": p.expires_at,
                "url": f"/tasks/{task_id}/approvals/{p.request.call_id}",
            }
            for p in self._pending.get(task_id, {}).values()
        ]

    def answer(self, task_id: str, call_id: str, answer: ApprovalAnswer) -> bool:
        """Give the waiting call its answer; False when no such call waits."""
        pending = self._pending.get(task_id, {}).get(call_id)
        future = pending.answer if pending is not None else self._early.get((task_id, call_id))
        if future is None:
            return False
        if future.done():
            raise Conflict(
                f"the call {call_id!r} of task {task_id!r} was answered already",
                hint="GET /tasks/{id} shows what still waits for approval",
            )
        future.set_result(answer)
        log.info("task.approval", task_id=task_id, call_id=call_id, approved=answer.approved)
        return True

    async def wait(self, task_id: str, request: ApprovalRequest) -> ApprovalAnswer:
        """Register the call (before anything else, so an answer sent the moment the event
        is seen finds it), mark the task awaiting_approval, and wait for the answer."""
        future = self._early.pop((task_id, request.call_id), None)
        if future is None:
            future = asyncio.get_running_loop().create_future()
        expires = None
        if request.timeout is not None:
            expires = iso_z(datetime.now(UTC) + timedelta(seconds=request.timeout))
        waiting = self._pending.setdefault(task_id, {})
        waiting[request.call_id] = _Pending(request, expires, future)
        heard = asyncio.ensure_future(self._hear(task_id, request.call_id, future))
        try:
            self._store.note(task_id, asks=self.listing(task_id))
            await self._set_status(task_id, AWAITING_APPROVAL)
            return await future
        finally:
            heard.cancel()
            waiting.pop(request.call_id, None)
            self._store.note(task_id, asks=self.listing(task_id))
            if not waiting:
                self._pending.pop(task_id, None)
                await self._set_status(task_id, RUNNING)

    async def _hear(
        self, task_id: str, call_id: str, future: asyncio.Future[ApprovalAnswer]
    ) -> None:
        """Give the call the answer another process (an API node) stored for it."""
        while not future.done():
            await asyncio.sleep(HEAR_EVERY)
            try:
                given = await self._store.answer_of(task_id, call_id)
            except Exception as exc:  # the database away for a while: ask again later
                log.warning("task.answer_not_read", task_id=task_id, error=str(exc))
                continue
            if given is not None and not future.done():
                answer = ApprovalAnswer(bool(given["approved"]), str(given["by"]), given["scope"])
                future.set_result(answer)
                log.info("task.approval", task_id=task_id, call_id=call_id,
                         approved=answer.approved, through="database")  # fmt: skip

    async def _set_status(self, task_id: str, status: str) -> None:
        try:
            await self._store.update(task_id, status=status)
        except (KeyError, RuntimeError) as exc:  # no such task, or the store closed: go on
            log.warning("task.status_not_saved", task_id=task_id, status=status, error=str(exc))


class TaskApprover:
    """The ``Approver`` of one task's run."""

    def __init__(self, approvals: Approvals, task_id: str) -> None:
        self._approvals, self._task_id = approvals, task_id

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        return await self._approvals.wait(self._task_id, request)
