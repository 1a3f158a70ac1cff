"""The runs as the console lists them: the run index (every run folder) merged with the task
store (the service's tasks: a queued one has no run folder yet, a requeued one waits again).

A summary (``GET /runs``, ``/runs/stream``, ``/runs/{id}``) is::

    {run_id, status, pack, model, backend, task, workspace, steps,
     tokens: {prompt, completion, total}, cost_usd, duration_s, started_at, ended_at,
     task_id, replay_of, resumed, error: {code, message, hint?} | null}
"""

from __future__ import annotations

import asyncio
from typing import Any

from msgspec import Struct

from fabric.application.tasks import NotFound, TaskService
from fabric.domain.errors import ConfigError
from fabric.domain.tasks import AWAITING_APPROVAL, QUEUED, STATUSES, TaskRecord
from fabric.infrastructure.runlog.facts import RunFacts
from fabric.infrastructure.runlog.index import RunIndex
from fabric.infrastructure.runlog.names import is_run_id

UNREADABLE = "unreadable"
RUN_STATUSES = frozenset(STATUSES | {UNREADABLE})
_MANY = 10_000  # queued tasks looked at, at most


class Row(Struct, frozen=True):
    """One run of the listing: its runlog's facts (None: a task not started yet) and status."""

    run_id: str
    facts: RunFacts | None
    status: str
    record: TaskRecord | None = None

    @property
    def key(self) -> tuple[int, str]:
        """What changes when the run's summary does."""
        return (self.facts.version if self.facts else -1, self.status)

    def matches(self, status: str | None, pack: str | None, q: str | None) -> bool:
        if status is not None and self.status != status:
            return False
        source = self.facts or self.record
        if pack is not None and (source.pack if source else None) != pack:
            return False
        if q:
            task = (source.task if source else None) or ""
            return q.casefold() in task.casefold()
        return True


class RunsView:
    """Summaries of the runs of one service."""

    def __init__(self, service: TaskService[Any], index: RunIndex) -> None:
        self.service, self.index = service, index

    async def rows(self) -> list[Row]:
        """Every run, newest first: the index's, and queued tasks that have no run yet."""
        scanned = await asyncio.to_thread(self.index.scan)
        queued = {r.id: r for r in await self.service.store.query(statuses=[QUEUED], limit=_MANY)}
        rows = [
            Row(facts.run_id, facts, QUEUED if facts.run_id in queued else status)
            for facts, status in scanned
        ]
        logged = {row.run_id for row in rows}
        rows += [Row(r.id, None, QUEUED, r) for r in queued.values() if r.id not in logged]
        rows.sort(key=lambda row: row.run_id, reverse=True)
        return rows

    async def listing(
        self, *, status: str | None, pack: str | None, q: str | None, limit: int, before: str | None
    ) -> dict[str, Any]:
        """``GET /runs``: a page of summaries, newest first, and where the next page starts."""
        if status is not None and status not in RUN_STATUSES:
            raise ConfigError(
                f"unknown status {status!r}", hint=f"use one of: {', '.join(sorted(RUN_STATUSES))}"
            )
        if before is not None and not is_run_id(before):
            raise ConfigError(
                f"before={before!r} is not a run id",
                hint="pass the 'next' of the page before, or leave it out for the newest runs",
            )
        page: list[Row] = []
        for row in await self.rows():
            if before is not None and row.run_id >= before:
                continue
            if row.matches(status, pack, q):
                page.append(row)
                if len(page) > limit:
                    break
        more = len(page) > limit
        page = page[:limit]
        return {
            "runs": [await self.summary(row) for row in page],
            "next": page[-1].run_id if more else None,
        }

    async def summary(self, row: Row) -> dict[str, Any]:
        """The summary of a row, with what the task store knows when it is a task."""
        record = row.record or await self.service.store.get(row.run_id)
        if row.facts is None:
            assert record is not None  # a row without a runlog comes from the store
            return task_summary(self.service.live(record))
        status = row.status
        if record is not None and record.status == AWAITING_APPROVAL and status == "running":
            status = AWAITING_APPROVAL  # the store heard first
        return facts_summary(row.facts, status, record.id if record else None)

    async def one(self, run_id: str) -> tuple[dict[str, Any], TaskRecord | None]:
        """``GET /runs/{id}``'s summary and task record; NotFound for no such run."""
        found = await asyncio.to_thread(self.index.get, run_id) if is_run_id(run_id) else None
        record = await self.service.store.get(run_id) if is_run_id(run_id) else None
        if found is None and record is None:
            raise no_such_run(run_id)
        if found is None:
            assert record is not None
            return task_summary(self.service.live(record)), record
        facts, status = found
        if record is not None and record.status == QUEUED:
            status = QUEUED
        row = Row(run_id, facts, status, record)
        return await self.summary(row), record


def no_such_run(run_id: str) -> NotFound:
    if not is_run_id(run_id):
        return NotFound(
            f"{run_id!r} is not a run id",
            hint="run ids look like 20261125T010306.803Z-ae7fb4; GET /runs lists them",
        )
    return NotFound(
        f"no run {run_id!r} in the runs folder",
        hint="GET /runs lists the runs there (a run folder or runlog that is a symlink is "
        "not listed)",
    )


def facts_summary(facts: RunFacts, status: str, task_id: str | None) -> dict[str, Any]:
    end = facts.end or {}
    prompt, completion, total = end.get("tokens") or facts.tokens
    steps = end.get("steps")
    return {
        "run_id": facts.run_id,
        "status": status,
        "pack": facts.pack,
        "model": facts.model,
        "backend": facts.backend,
        "task": facts.task,
        "workspace": facts.workspace,
        "steps": steps if isinstance(steps, int) else facts.steps,
        "tokens": {"prompt": prompt, "completion": completion, "total": total},
        "cost_usd": end.get("cost_usd"),
        "duration_s": end.get("duration_s"),
        "started_at": facts.started_at,
        "ended_at": end.get("ended_at"),
        "task_id": task_id,
        "replay_of": facts.replay_of,
        "resumed": facts.resumed,
        "error": end.get("error") or _error_of(facts, status, task_id),
    }


def task_summary(record: TaskRecord) -> dict[str, Any]:
    """A task whose run has not begun (queued, or cancelled before it started)."""
    return {
        "run_id": record.id,
        "status": record.status,
        "pack": record.pack,
        "model": record.model,
        "backend": record.backend,
        "task": record.task,
        "workspace": record.workspace,
        "steps": record.steps,
        "tokens": {"prompt": 0, "completion": 0, "total": 0},
        "cost_usd": None,
        "duration_s": None,
        "started_at": record.started_at,
        "ended_at": record.finished_at,
        "task_id": record.id,
        "replay_of": None,
        "resumed": False,
        "error": record.error,
    }


def _error_of(facts: RunFacts, status: str, task_id: str | None) -> dict[str, str] | None:
    """What went wrong with a run that has no end to say it."""
    if status == UNREADABLE:
        return {
            "code": "unreadable_runlog",
            "message": f"the runlog of {facts.run_id} cannot be read as one: {facts.problem}",
            "hint": f"look at runs/{facts.run_id}/runlog.jsonl; fabric starts every runlog "
            "with a run_started line",
        }
    if status == "interrupted":
        how = f"POST /tasks/{task_id}/resume" if task_id else f"fabric resume {facts.run_id}"
        return {
            "code": "interrupted",
            "message": "the run stopped without an end: the fabric running it was stopped or "
            "crashed; its runlog holds what happened up to then",
            "hint": f"resume it ({how}): it goes on from its last complete step",
        }
    return None
