"""What the console fetches of one run besides its events: the runlog, its artifacts, the
share file, and a replay of it. Every run id is checked for the runs folder's id shape, and
every file is opened beneath the run's own folder without following a symlink."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from fabric.application.tasks import NotFound, TaskService
from fabric.application.workspaces import check_workspace
from fabric.domain.errors import ConfigError
from fabric.infrastructure.runlog.index import RunIndex
from fabric.infrastructure.runlog.reader import read_runlog
from fabric.interfaces.replays import recording_of

from .console.headers import ARTIFACT_CSP, PLAIN, SHARE_CSP
from .downloads import runlog_download
from .runs_view import no_such_run

_CHUNK = 1 << 16


class ReplayIn(BaseModel):
    """How to replay a run."""

    model_config = ConfigDict(extra="forbid")

    live_tools: StrictBool = Field(
        False,
        description="Run the pack's real tools on a copy of the run's workspace (the "
        "workspace itself is never touched); false: the recorded tool results answer.",
    )


def run_files_router(service: TaskService[Any], index: RunIndex) -> APIRouter:
    router = APIRouter(tags=["runs"])
    runner, secrets = service.runner, service.runner.secrets

    def runlog_of(run_id: str) -> Path:
        path = index.runlog(run_id)
        if path is None:
            raise no_such_run(run_id)
        return path

    @router.get(
        "/runs/{run_id}/runlog",
        summary="The run's runlog (JSON lines; while it runs: the lines written so far)",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {}}}},
    )
    async def runlog(run_id: str) -> StreamingResponse:
        try:
            return await runlog_download(runlog_of(run_id), secrets, f"{run_id}.jsonl")
        except FileNotFoundError:
            raise no_such_run(run_id) from None

    @router.get(
        "/runs/{run_id}/artifacts/{name}",
        summary="An artifact of the run: the whole of an output the model saw cut",
        description="As tool_result.artifact names it (artifacts/<name>); plain text.",
        response_class=StreamingResponse,
    )
    async def artifact(run_id: str, name: str) -> StreamingResponse:
        if index.runlog(run_id) is None:
            raise no_such_run(run_id)
        try:
            file = await asyncio.to_thread(index.open_artifact, run_id, name)
        except OSError:
            raise NotFound(
                f"run {run_id!r} has no artifact {name!r}",
                hint="artifact names come from the run's tool_result events (artifact: "
                "artifacts/<name>); they are files of the run's own artifacts folder",
            ) from None
        headers = {"Content-Security-Policy": ARTIFACT_CSP, **PLAIN, "Cache-Control": "no-store"}
        return StreamingResponse(
            secrets.redact_lines(_chunks(file)),
            media_type="text/plain; charset=utf-8",
            headers=headers,
        )

    @router.post(
        "/runs/{run_id}/replay",
        summary="Replay the run with its pack as configured now, as a new run",
        description="Answers the replay's own run id, whether it went as recorded "
        "(identical) and if not where it first diverged: {step, field, recorded, now}.",
    )
    async def replay(run_id: str, body: ReplayIn | None = None) -> dict[str, Any]:
        path = runlog_of(run_id)
        live = body.live_tools if body is not None else False
        recording, _problems = await asyncio.to_thread(recording_of, path)
        if live:  # a copy of the run's folder, real tools: only where the service may work
            recorded = str(recording.started.get("workspace", ""))
            try:
                check_workspace(
                    recorded, runner.loaded, runs_dir=runner.runs_dir, roots=service.roots
                )
            except ConfigError as exc:
                raise ConfigError(
                    f"live_tools would run the pack's tools on a copy of {recorded}: {exc.message}",
                    hint="replay it with live_tools false (the recorded results answer), or "
                    "with `fabric replay --live-tools` on the machine",
                ) from None
        report = await runner.replay(path, live=live, recording=recording)
        divergence = report.divergence
        return {
            "run_id": report.result.run_id,
            "identical": report.identical,
            "divergence": divergence.as_dict() if divergence is not None else None,
            "steps": report.result.steps,
            "status": report.result.status.value,
        }

    @router.get(
        "/runs/{run_id}/html",
        summary="The run as one self-contained HTML file (what `fabric show RUN --html` writes)",
        response_class=Response,
        responses={200: {"content": {"text/html": {}}}},
    )
    async def html(run_id: str) -> Response:
        from fabric.interfaces.share_html import share_html

        path = runlog_of(run_id)
        events, _problems = await asyncio.to_thread(read_runlog, path)
        page = share_html(secrets.redact_obj(events), title=f"fabric run {run_id}")
        headers = {
            "Content-Disposition": f'attachment; filename="{run_id}.html"',
            "Content-Security-Policy": SHARE_CSP,
            **PLAIN,
        }
        return Response(page, media_type="text/html; charset=utf-8", headers=headers)

    return router


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    with file:
        while data := file.read(_CHUNK):
            yield data
