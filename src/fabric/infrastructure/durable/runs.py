"""Durable runs on DBOS (ADR 0020): ``DurableRuns`` runs each run as one workflow (its id is
the run id) whose steps are the run's outside effects (``checkpoints.py``), on the database
DBOS was launched with (``launch.py``: SQLite in WAL mode by default, any SQLAlchemy URL DBOS
takes, Postgres, otherwise).

A process launches DBOS once (``DurableRuns``) with an executor id of its own (host, process
id, a random part), so it never takes over a run another live process is driving; a run whose
process died is continued on request (``continue_run``) once that process is gone.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from fabric.application.job import Control, RunRequest
from fabric.config.schema import Budget
from fabric.domain.errors import ConfigError, RunError
from fabric.domain.models import RunResult, RunStatus, Usage
from fabric.domain.secrets import Secrets

from .checkpoints import DbosCheckpoints
from .launch import executor_id, launch, owner_alive
from .where import shown

WORKFLOW = "fabric.run"
"""The name the run workflow is registered under (and recorded with)."""

RECORDS = "records2"
"""The shape of what a step records, part of the application version DBOS keeps with every
workflow: a process continues only the runs whose records it reads the same way (change it
with that shape; 2: the values of looks ride with the next step)."""

RunFn = Callable[[RunRequest, Control, Any], Awaitable[RunResult]]
"""Runs one request with a control and checkpoints (``Runner.run``)."""

_runs: dict[str, tuple[RunFn, Control, Secrets, RunRequest | None]] = {}
"""What drives each run this process started or continues, by run id: the workflow finds it
here (a control with its approver and observers cannot be stored in a database), with the
secrets kept out of the database and the request as it was given (the database holds it
redacted; a run continued in another process goes on with that)."""


_fallback: dict[str, tuple[RunFn, Control, Secrets, RunRequest | None]] = {}
"""What drives a run this process dequeues without having asked for it (one another process
put back on the queue): this process's runner, with nobody to ask (``"run"``)."""


def _result_json(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "status": result.status.value,
        "payload": result.payload,
        "steps": result.steps,
        "usage": [result.usage.prompt_tokens, result.usage.completion_tokens],
        "duration_s": result.duration_s,
        "runlog_path": result.runlog_path,
        "error": result.error,
        "cost_usd": result.cost_usd,
    }


def _result(value: Mapping[str, Any]) -> RunResult:
    prompt, completion = value.get("usage") or (0, 0)
    return RunResult(
        run_id=str(value["run_id"]),
        status=RunStatus(value["status"]),
        payload=value.get("payload"),
        steps=int(value.get("steps", 0)),
        usage=Usage(int(prompt), int(completion)),
        duration_s=float(value.get("duration_s", 0.0)),
        runlog_path=value.get("runlog_path"),
        error=value.get("error"),
        cost_usd=value.get("cost_usd"),
    )


@functools.cache
def _register() -> Any:
    """The run workflow, registered with DBOS once per process (before it launches)."""

    @DBOS.workflow(name=WORKFLOW)
    async def durable_run(request: dict[str, Any]) -> dict[str, Any]:
        run_id = str(request["run_id"])
        driver = _runs.get(run_id) or _fallback.get("run")
        if driver is None:
            raise RunError(
                f"durable run {run_id} was started again by DBOS without a fabric to drive it",
                hint=f"continue it with `fabric resume {run_id}`",
            )
        run, control, secrets, given = driver
        if given is None:
            fields = dict(request)
            workspace = fields.pop("workspace", None)
            budget = fields.pop("budget", None)
            given = RunRequest(
                **fields,
                workspace=None if workspace is None else Path(workspace),
                budget=None if budget is None else Budget(**budget),
            )
        result = await run(given, control, DbosCheckpoints(secrets))
        return _result_json(result)

    return durable_run


def _request_json(request: RunRequest) -> dict[str, Any]:
    return {
        "pack": request.pack,
        "task": request.task,
        "workspace": None if request.workspace is None else str(request.workspace),
        "model": request.model,
        "backend": request.backend,
        "max_steps": request.max_steps,
        "verify": request.verify,
        "run_id": request.run_id,
        "budget": None if request.budget is None else request.budget.set(),
    }


class DurableRuns:
    """DBOS, launched for this process on one database, running ``run`` (``Runner.run``) as
    durable runs. ``start`` before use, ``stop`` at the end (or ``async with``)."""

    def __init__(
        self, url: str, *, version: str, run: RunFn, secrets: Secrets | None = None
    ) -> None:
        """``secrets``: kept out of the database (the runner's, as for its runlogs)."""
        self.url = url
        self.version = f"{version}+{RECORDS}"
        self.executor = executor_id()
        self._run = run
        self._secrets = secrets or Secrets()
        self._launched = False

    def where(self) -> str:
        """The database, for people (a Postgres URL without its password)."""
        return shown(self.url)

    @property
    def secrets(self) -> Secrets:
        return self._secrets

    async def start(self) -> None:
        await asyncio.to_thread(self._launch, False)

    def start_here(self, queues: bool = True) -> None:
        """Launch on the running event loop's thread (blocking it meanwhile): the workflows
        DBOS dequeues then run on that loop, beside the service's other work. ``queues``:
        whether this process takes tasks from the task queues."""
        self._launch(queues)

    async def stop(self) -> None:
        await asyncio.to_thread(self._destroy)

    async def __aenter__(self) -> DurableRuns:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _launch(self, queues: bool) -> None:
        """``queues``: whether this process takes tasks from the task queues."""
        _register()
        launch(self.url, executor=self.executor, version=self.version, queues=queues)
        self._launched = True
        _fallback["run"] = (self._run, Control(), self._secrets, None)

    def _destroy(self) -> None:
        if self._launched:
            _fallback.clear()
            DBOS.destroy(destroy_registry=False)
            self._launched = False

    async def run(self, request: RunRequest, control: Control) -> RunResult:
        """Run ``request`` (its ``run_id`` set) as a durable workflow and return its result."""
        assert request.run_id is not None, "a durable run needs its run id up front"
        _runs[request.run_id] = (self._run, control, self._secrets, request)
        stored = self._secrets.redact_obj(_request_json(request))
        try:
            with SetWorkflowID(request.run_id):
                handle = await DBOS.start_workflow_async(_register(), stored)
            return _result(await handle.get_result())
        finally:
            _runs.pop(request.run_id, None)

    async def drive(self, request: RunRequest, control: Control, checkpoints: Any) -> RunResult:
        """Run ``request`` inside the workflow already running it (a task's)."""
        return await self._run(request, control, checkpoints)

    async def status(self, run_id: str) -> tuple[str, str | None] | None:
        """The run's workflow status and owner, or None when it was not a durable run."""
        found = await DBOS.list_workflows_async(workflow_ids=[run_id])
        if not found:
            return None
        return str(found[0].status), found[0].executor_id

    async def orphans(self) -> list[str]:
        """The durable runs left unfinished by processes of this host that are gone, oldest
        first: what ``continue_run`` may take over."""
        found = await DBOS.list_workflows_async(status="PENDING", name=WORKFLOW, sort_desc=False)
        return [w.workflow_id for w in found if owner_alive(w.executor_id) is False]

    async def continue_run(self, run_id: str, control: Control) -> RunResult:
        """Continue the durable run ``run_id`` whose process died, from its last recorded
        step; ConfigError when it is not a durable run, has ended, or its process lives."""
        status = await self.status(run_id)
        if status is None:
            raise ConfigError(
                f"run {run_id} is not in the database of durable runs ({self.where()})",
            )
        state, owner = status
        if state != "PENDING":
            raise ConfigError(f"durable run {run_id} is not unfinished (its state: {state})")
        alive = owner_alive(owner)
        if alive is not False:
            where = "still running in process" if alive else "owned by"
            raise ConfigError(
                f"durable run {run_id} is {where} {owner}",
                hint="wait for it to end; a run is continued only once its process is gone",
            )
        _runs[run_id] = (self._run, control, self._secrets, None)
        try:
            # DBOS's recovery of a dead executor: back on the queue only if that process
            # still owns it, so two processes continuing it at once start it once
            owners = [owner] if owner else []
            await asyncio.to_thread(lambda: DBOS._recover_pending_workflows(owners))
            handle: Any = await DBOS.retrieve_workflow_async(run_id)
            return _result(await handle.get_result())
        finally:
            _runs.pop(run_id, None)
