"""``/runs``: every run in the runs folder (CLI runs, the service's tasks, replays, eval
attempts), listed, watched and followed, for the web console and any other client.

The lists come from ``RunsView`` (the run index and the task store); a run's events from its
runlog (``follow_runlog``, as ``GET /tasks/{id}/events``), with, for the service's own running
tasks, the model's text as it streams (``event: delta``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from fabric.domain.tasks import QUEUED
from fabric.infrastructure.runlog.names import is_run_id, runlog_path
from fabric.infrastructure.runlog.tail import follow_runlog

from .events import last_event_id, queued_note, sse_comment, sse_event, sse_message
from .runs_view import Row, RunsView, no_such_run
from .shapes import task_json

KEEP_ALIVE = 15.0
"""Seconds without a message after which a stream sends a comment (proxies close idle ones)."""
_MAX_PIECES = 10_000
"""Streamed pieces of model text held for a slow client at most (the oldest go first)."""
_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def runs_router(view: RunsView, *, poll: float = 1.0) -> APIRouter:
    """The ``/runs`` routes; ``/runs/stream`` looks at the runs folder every ``poll`` s."""
    router = APIRouter(tags=["runs"])
    service, index = view.service, view.index
    secrets = service.runner.secrets

    @router.get("/runs", summary="Every run in the runs folder, newest first")
    async def list_runs(
        status: str | None = None,
        pack: str | None = None,
        q: str | None = Query(None, description="Part of the task text (any case)."),
        limit: int = Query(50, ge=1, le=500),
        before: str | None = Query(None, description="Page after this run id (the 'next')."),
    ) -> dict[str, Any]:
        return await view.listing(status=status, pack=pack, q=q, limit=limit, before=before)

    @router.get(
        "/runs/stream",
        summary="A run summary as Server-Sent Events whenever a run appears or changes",
        response_class=StreamingResponse,
    )
    async def stream_runs() -> StreamingResponse:
        async def stream() -> AsyncIterator[bytes]:
            seen = {row.run_id: row.key for row in await view.rows()}
            quiet_since = time.monotonic()
            while service.executor.accepting:
                await asyncio.sleep(poll)
                for row in await view.rows():
                    if seen.get(row.run_id) == row.key:
                        continue
                    seen[row.run_id] = row.key
                    summary = await view.summary(row)
                    yield sse_message("run", secrets.redact_obj(summary))
                    quiet_since = time.monotonic()
                if time.monotonic() - quiet_since >= KEEP_ALIVE:
                    yield sse_comment("ping")
                    quiet_since = time.monotonic()

        return StreamingResponse(stream(), media_type="text/event-stream", headers=_STREAM_HEADERS)

    @router.get("/runs/{run_id}", summary="One run: its summary, its start, its task")
    async def get_run(run_id: str) -> dict[str, Any]:
        summary, record = await view.one(run_id)
        started = await asyncio.to_thread(index.started, run_id)
        task = None
        if record is not None:
            live = service.live(record)
            waiting = await service.waiting_for(live) if live.status == QUEUED else []
            task = task_json(live, await service.asks(live), waiting)
        return {"summary": summary, "started": started, "task": task}

    @router.get(
        "/runs/{run_id}/events",
        summary="The run's runlog as Server-Sent Events (live; resumable with Last-Event-ID)",
        description="As GET /tasks/{id}/events, for any run. For the service's own running "
        "tasks also `event: delta` messages (no id), data {step, text}: the model's text as "
        "it streams, when its client streams.",
        response_class=StreamingResponse,
    )
    async def run_events(
        run_id: str, last_event: str | None = Header(None, alias="Last-Event-ID")
    ) -> StreamingResponse:
        if not is_run_id(run_id):
            raise no_such_run(run_id)
        record = await service.store.get(run_id)
        # a task's runlog may not be there yet; anything else must be a real runlog now
        there = record is None or os.path.lexists(service.runlog_path(run_id))
        if there and index.runlog(run_id) is None:
            raise no_such_run(run_id)
        after = last_event_id(last_event)
        if record is None:
            events = _follow(run_id, after, lambda: not index.is_running(run_id))
            return StreamingResponse(
                events, media_type="text/event-stream", headers=_STREAM_HEADERS
            )
        waiting = await service.waiting_for(record) if record.status == QUEUED else None
        return StreamingResponse(
            _follow_task(run_id, after, waiting), media_type="text/event-stream",
            headers=_STREAM_HEADERS,
        )  # fmt: skip

    async def _follow(run_id: str, after: int, over: Callable[[], bool]) -> AsyncIterator[bytes]:
        async for event in follow_runlog(
            runlog_path(index.runs_dir, run_id),
            after=after,
            is_over=lambda: over() or not service.executor.accepting,
            heartbeat=KEEP_ALIVE,
        ):
            yield sse_comment("ping") if event is None else sse_event(secrets.redact_obj(event))

    async def _follow_task(
        run_id: str, after: int, waiting: list[str] | None
    ) -> AsyncIterator[bytes]:
        """A task's events, as ``GET /tasks/{id}/events`` sends them, and the pieces of model
        text of its running steps, each after the ``llm_request`` of its step."""
        wake = asyncio.Event()
        pieces: deque[dict[str, Any]] = deque(maxlen=_MAX_PIECES)

        def listen(piece: dict[str, Any]) -> None:
            pieces.append(piece)
            wake.set()

        service.wakers.setdefault(run_id, set()).add(wake)
        service.listeners.setdefault(run_id, set()).add(listen)
        requested = 0  # the latest step whose llm_request went out
        sent = time.monotonic()

        def ready() -> list[bytes]:
            out = []
            while pieces and pieces[0]["step"] <= requested:
                out.append(sse_message("delta", pieces.popleft()))
            return out

        try:
            if waiting is not None:
                yield sse_comment(queued_note(waiting))
            async for event in follow_runlog(
                service.runlog_path(run_id),
                after=after,
                is_over=lambda: not service.is_live(run_id),
                resumable=True,
                saw_end=True,
                wake=wake,
                heartbeat=0,  # back after every idle poll: streamed text may be waiting
            ):
                out = ready()
                if event is not None:
                    out.append(sse_event(secrets.redact_obj(event)))
                    if event.get("kind") == "llm_request" and isinstance(event.get("step"), int):
                        requested = max(requested, event["step"])
                        out += ready()
                elif not out and time.monotonic() - sent >= KEEP_ALIVE:
                    out.append(sse_comment("ping"))
                for message in out:
                    yield message
                    sent = time.monotonic()
        finally:
            wakers, listeners = service.wakers.get(run_id, set()), service.listeners.get(run_id)
            wakers.discard(wake)
            if not wakers:
                service.wakers.pop(run_id, None)
            if listeners is not None:
                listeners.discard(listen)
                if not listeners:
                    service.listeners.pop(run_id, None)

    return router


__all__ = ["Row", "runs_router"]
