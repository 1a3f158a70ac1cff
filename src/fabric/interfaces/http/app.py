"""The HTTP task service: ``POST /tasks`` and friends (FastAPI; OpenAPI at ``/openapi.json``),
the runs of the runs folder (``/runs``, ``runs.py`` and ``run_files.py``), the web console
(``/console``, ``console/``) and the packs as MCP tools (``/mcp``, ``mcp_mount.py``).

Every endpoint but ``/healthz`` and the console's page needs the bearer token (or the
console's session cookie, with its CSRF token for changes); the Host header must be an
allowed one; bodies are size-limited; every error has one JSON shape,
``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from fabric.application.tasks import NotFound, requeue
from fabric.config.loader import LoadedConfig
from fabric.config.where import error_message
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.tasks import QUEUED, STATUSES, TaskRecord
from fabric.infrastructure.runlog.index import RunIndex
from fabric.infrastructure.runlog.names import RUNLOG_NAME
from fabric.infrastructure.runlog.tail import follow_runlog
from fabric.interfaces.compose import build_service

from .access_log import AccessLog
from .console.headers import ConsoleHeaders
from .console.routes import OPEN_PATHS, OPEN_PREFIXES, console_router
from .console.session import ConsoleSessions
from .downloads import runlog_download
from .events import last_event_id, queued_note, sse_comment, sse_event
from .pack_details import pack_details
from .redaction import RedactSecrets
from .run_files import run_files_router
from .runs import runs_router
from .runs_view import RunsView
from .security import BearerAuth, BodyLimit, HostCheck
from .shapes import ApprovalIn, ResumeIn, TaskIn, error_response, status_of, task_json

log = structlog.get_logger("fabric.http")
BY_HTTP = "http"
"""How an answer given over the API is recorded (``approval_answered.by``)."""


def create_app(
    loaded: LoadedConfig,
    *,
    token: str,
    runs_poll: float = 1.0,
    runs_tasks: bool = True,
    **overrides: Any,
) -> FastAPI:
    """The ASGI app for one config; nothing runs until the app starts (lifespan).
    ``runs_poll``: seconds between looks at the runs folder for ``GET /runs/stream``;
    ``runs_tasks``: whether this process runs tasks (False: an API node only).
    ``overrides`` go to ``build_service`` (e.g. ``clock``, ``chat_factory``)."""
    settings = loaded.config.serve
    service = build_service(loaded, token=token, runs_tasks=runs_tasks, **overrides)
    runner, store = service.runner, service.store
    secrets = runner.secrets  # never in a response, a runlog or an artifact
    index = RunIndex(runner.runs_dir)
    sessions = ConsoleSessions(token)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = service.durable
        await tasks.start()  # takes over what a dead process left, and queued tasks run
        try:
            log.info("service.started", durable=tasks.where(), queues=tasks.queues())
            async with AsyncExitStack() as stack:
                if mcp_sessions is not None:
                    await stack.enter_async_context(mcp_sessions)
                yield
        finally:
            cut = await service.executor.shutdown(settings.shutdown_grace)
            log.info("service.stopped", interrupted=cut)
            await runner.aclose()
            await tasks.stop()

    app = FastAPI(
        title="agent-fabric",
        summary="Run specialist packs over HTTP: submit tasks, follow them live, fetch results.",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.service = service
    mcp_sessions = None
    if settings.mcp:  # the SDK is loaded only for this (ADR 0019)
        from .mcp_mount import mount_mcp

        mcp_sessions = mount_mcp(app, runner, service.roots, settings.cors_origins)

    async def shown(record: TaskRecord) -> dict[str, Any]:
        """The task document: the record, the calls it waits to have approved, and the tasks
        it waits for because they use its workspace."""
        waiting = await service.waiting_for(record) if record.status == QUEUED else []
        return task_json(record, await service.asks(record), waiting)

    @app.exception_handler(FabricError)
    async def fabric_error(_: Request, exc: FabricError) -> JSONResponse:
        return error_response(
            status_of(exc), exc.code, exc.message, {"hint": exc.hint} if exc.hint else None
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": list(e.get("loc", ())), "message": error_message(e)} for e in exc.errors()
        ]
        return error_response(422, "invalid_request", "the request does not match the API", details)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception) -> JSONResponse:
        log.exception("request.crashed")
        return error_response(500, "internal_error", "the service failed; see its log")

    @app.post("/tasks", status_code=202, summary="Submit a task")
    async def submit(body: TaskIn) -> dict[str, Any]:
        record = await service.submit(**body.model_dump())
        return await shown(record)

    @app.get("/tasks", summary="List tasks, newest first")
    async def list_tasks(
        status: str | None = None,
        pack: str | None = None,
        limit: int = Query(50, ge=1, le=500),
        before: str | None = Query(None, description="Page after this task id."),
    ) -> dict[str, Any]:
        if status is not None and status not in STATUSES:
            raise ConfigError(
                f"unknown status {status!r}", hint=f"use one of: {', '.join(sorted(STATUSES))}"
            )
        records = await store.query(status=status, pack=pack, limit=limit, before=before)
        nxt = records[-1].id if len(records) == limit else None
        return {"tasks": [await shown(service.live(r)) for r in records], "next": nxt}

    @app.get(
        "/tasks/{task_id}",
        summary="One task: status, steps so far, result, calls waiting for approval",
        description="While the task is queued, `waiting_for` lists the tasks it waits for "
        "because they use its workspace (or a folder inside or around it): the running ones, "
        "then the earlier queued ones. Tasks on one workspace run one at a time, in the order "
        "they came, unless serve.share_workspaces is set.",
    )
    async def get_task(task_id: str) -> dict[str, Any]:
        return await shown(await service.get(task_id))

    @app.post(
        "/tasks/{task_id}/approvals/{call_id}",
        summary="Approve or refuse a tool call the task waits on (status awaiting_approval)",
        description="The call is announced by an approval_requested event and listed under "
        "`approvals` in GET /tasks/{id}. Answer before its expires_at (the pack's "
        "sandbox.policy.approval_timeout), or it is refused. scope 'run' gives the same "
        "answer to later calls of the tool under the same rule.",
        responses={
            404: {"description": "No such task, or the task has no such call."},
            409: {"description": "The call is not waiting (answered, timed out, never asked)."},
            422: {"description": "The body is not {approve: bool, scope?: 'once'|'run'}."},
        },
    )
    async def approve(task_id: str, call_id: str, body: ApprovalIn) -> dict[str, Any]:
        return await service.answer_approval(
            task_id, call_id, approve=body.approve, scope=body.scope, by=BY_HTTP
        )

    @app.post("/tasks/{task_id}/cancel", status_code=202, summary="Cancel a task")
    async def cancel(task_id: str) -> dict[str, Any]:
        return await shown(await service.cancel(task_id))

    @app.post(
        "/tasks/{task_id}/resume",
        status_code=202,
        summary="Resume an interrupted task, or one that stopped at max_steps",
        description="The task goes back to queued, then running, with the same id, runlog and "
        "workspace: the steps its runlog holds complete are not sent to the model again, and "
        "its events go on in the same stream. Body (optional): {max_steps: n}, the model calls "
        "allowed in all (needed, above the steps done, for a task that stopped at max_steps).",
        responses={
            404: {"description": "No such task."},
            409: {"description": "Not resumable: queued, running, or ended otherwise."},
        },
    )
    async def resume(task_id: str, body: ResumeIn | None = None) -> dict[str, Any]:
        max_steps = body.max_steps if body is not None else None
        return await shown(await requeue(service, task_id, max_steps))

    @app.get(
        "/tasks/{task_id}/runlog",
        summary="The task's runlog (JSON lines; while it runs: the lines written so far)",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}}}},
    )
    async def runlog(task_id: str) -> StreamingResponse:
        await service.get(task_id)
        try:
            return await runlog_download(service.runlog_path(task_id), secrets, RUNLOG_NAME)
        except FileNotFoundError:
            raise NotFound(
                f"task {task_id!r} has no runlog yet: it is queued or its run is starting "
                "(or it was cancelled before it started)",
                hint="follow GET /tasks/{id}/events, which waits for the runlog to begin",
            ) from None

    @app.get(
        "/tasks/{task_id}/events",
        summary="The task's runlog as Server-Sent Events (live; resumable with Last-Event-ID)",
        response_class=StreamingResponse,
    )
    async def events(
        task_id: str, last_event: str | None = Header(None, alias="Last-Event-ID")
    ) -> StreamingResponse:
        record = await service.get(task_id)
        wake = asyncio.Event()
        service.wakers.setdefault(task_id, set()).add(wake)

        async def stream() -> AsyncIterator[bytes]:
            try:
                if record.status == QUEUED:  # a comment: clients see it, SSE readers skip it
                    yield sse_comment(queued_note(await service.waiting_for(record)))
                # The stream ends when the task is no longer queued or running here, not at a
                # run_finished: a resumed task's log ends with the old one until it goes on.
                # Last-Event-ID is only a seq: the client may have seen there the end that a
                # resume has since replaced by run_resumed, which it then gets (ADR 0010).
                async for event in follow_runlog(
                    service.runlog_path(task_id),
                    after=last_event_id(last_event),
                    is_over=lambda: not service.is_live(task_id),
                    resumable=True,
                    saw_end=True,
                    wake=wake,
                ):
                    if event is None:
                        yield sse_comment("ping")
                    else:
                        yield sse_event(secrets.redact_obj(event))
            finally:
                waiting = service.wakers.get(task_id, set())
                waiting.discard(wake)
                if not waiting:
                    service.wakers.pop(task_id, None)

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    @app.get(
        "/packs",
        summary="The packs this service runs",
        description="Each pack's name, description, tools, model key and the model it names "
        "(`asks`), and `will_use`: the backend and model a task of it would run with now (the "
        "configured model may be missing and another picked), or why no model would do. "
        "Also its `policy`, `limits`, `finish_schema`, `tools_detail` (name, description, "
        "parameters) and `inputs`: what POST /tasks accepts for it (`workspace`: whether a "
        "client may choose one, under `workspace_roots`; `verify`: the programs a task's own "
        "check may start, besides 'off'; `max_steps`: {default, max}; `task`: {max_chars}).",
    )
    async def packs() -> dict[str, Any]:
        from fabric.interfaces.models_report import packs_report

        rows = await packs_report(runner, loaded.config.packs)
        for row in rows:
            row.update(pack_details(runner, row["name"], settings, service.roots))
        return {"packs": rows}

    @app.get(
        "/models",
        summary="What each backend offers, and the pick for the default pack",
        description="Also `measured`: per backend and model, the speed the runs in the runs "
        "folder measured (runs, completion_tokens, llm_seconds, tokens_per_s; replays left "
        "out).",
    )
    async def models(pack: str | None = None) -> dict[str, Any]:
        from fabric.interfaces.models_report import gather

        report = await gather(loaded, loaded.pack_name(pack), None)
        await asyncio.to_thread(index.scan)
        report["measured"] = index.measured()
        return report

    @app.get("/healthz", summary="Liveness (no token needed)")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Ready: the default pack's model backend answers")
    async def readyz() -> JSONResponse:
        try:
            chosen = await runner.resolve(loaded.pack_name(), fresh=True)
        except FabricError as exc:
            return error_response(503, "not_ready", exc.message, {"hint": exc.hint})
        return JSONResponse({"status": "ready", "backend": chosen.backend, "model": chosen.model})

    app.include_router(runs_router(RunsView(service, index), poll=runs_poll))
    app.include_router(run_files_router(service, index))
    app.include_router(console_router(sessions, token))

    hosts = {h.lower() for h in settings.allowed_hosts} | {settings.host.lower()}
    app.add_middleware(
        BearerAuth,
        token=token,
        open_paths=("/healthz", *OPEN_PATHS),
        open_prefixes=OPEN_PREFIXES,
        sessions=sessions,
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    app.add_middleware(HostCheck, allowed=hosts)  # checked first
    app.add_middleware(RedactSecrets, secrets=secrets)  # the guards' refusals too
    app.add_middleware(ConsoleHeaders)  # the console's security headers, on refusals too
    app.add_middleware(AccessLog)  # outermost: refused requests are logged too
    return app


def _version() -> str:
    import fabric

    return fabric.__version__
