"""DBOS as the recorder of durable runs (ADR 0020): one workflow per run (its id is the run
id), each outside effect of the run one DBOS step (``DbosCheckpoints``), values stored as
JSON. SQLite in WAL mode by default; any SQLAlchemy URL DBOS takes (Postgres) otherwise.

A process launches DBOS once (``DurableRuns``) with an executor id of its own (host, process
id, a random part), so it never takes over a run another live process is driving; a run whose
process died is continued on request (``continue_run``) once that process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dbos import DBOS, DBOSConfig, Serializer, SetWorkflowID

from fabric.application.job import Control, RunRequest
from fabric.config.schema import Budget
from fabric.domain.errors import ConfigError, RunError
from fabric.domain.models import RunResult, RunStatus, Usage
from fabric.domain.secrets import Secrets

from .where import ENV_URL, shown, sqlite_path

if TYPE_CHECKING:
    import sqlalchemy as sa

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

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


class JsonSerializer(Serializer):
    """DBOS's values as JSON: its default, pickle, would make a shared database a way to run
    code in every process that reads it."""

    def serialize(self, data: Any) -> str:
        return json.dumps(data, ensure_ascii=False, default=str)

    def deserialize(self, serialized_data: str) -> Any:
        return json.loads(serialized_data)

    def name(self) -> str:
        return "fabric_json"


def unrecorded_now(call: Callable[[], _T]) -> _T:
    """``call`` in a fresh context: a DBOS call made from inside a workflow would otherwise be
    recorded as one of its steps (and the steps of a run must be the same on every drive)."""
    return contextvars.Context().run(call)


async def unrecorded(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """The coroutine ``make()`` run in a fresh context (see ``unrecorded_now``)."""
    return await asyncio.create_task(make(), context=contextvars.Context())


class DbosCheckpoints:
    """``Checkpoints`` on DBOS steps. What a step records is redacted of ``secrets`` (as the
    runlog is); the run that took the step goes on with what it really got.

    A call that only looks is no DBOS step of its own (each costs two database round trips):
    its value rides with the next step's record, ``{"value": ..., "looks": [[name, value]]}``.
    A drive after a crash reads the workflow's records once, when it reaches its first look,
    and hands back the looks recorded with the step it reaches next; past the last record it
    makes every call."""

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets
        self._steps = 0
        """DBOS steps this drive has reached."""
        self._looks: list[list[Any]] = []
        """The looks made since the last step, to be recorded with the next one."""
        self._handed = 0
        """Looks handed back from the record of the next step."""
        self._records: list[Any] | None = None
        """What the workflow's steps recorded, read at the first look; [] once past them."""

    async def step(
        self, name: str, call: Callable[[], Awaitable[Any]], *, looks: bool = False
    ) -> Any:
        if looks:
            return await self._look(name, call)
        got: list[Any] = []
        riding = self._looks

        async def run() -> Any:  # DBOS awaits what a coroutine function returns, only that
            got.append(await call())
            return {"value": self._secrets.redact_obj(got[0]), "looks": riding}

        recorded = await DBOS.run_step_async({"name": name}, run)
        self._steps += 1
        self._looks, self._handed = [], 0
        return got[0] if got else recorded["value"]

    async def _look(self, name: str, call: Callable[[], Awaitable[Any]]) -> Any:
        ahead = await self._recorded_looks()
        if self._handed < len(ahead):
            recorded, value = ahead[self._handed]
            if recorded != name:
                raise RunError(
                    f"durable run {DBOS.workflow_id} went another way than recorded: "
                    f"{recorded} was recorded where it now calls {name}",
                    hint="a run can be continued only by the fabric version that began it",
                )
            self._handed += 1
            return value
        value = await call()
        self._looks.append([name, self._secrets.redact_obj(value)])
        return value

    async def _recorded_looks(self) -> list[Any]:
        """The looks recorded with the step this drive reaches next ([] past the records)."""
        if self._records is None:
            read = functools.partial(DBOS.list_workflow_steps_async, str(DBOS.workflow_id))
            self._records = [step["output"] for step in await unrecorded(read)]
        if self._steps >= len(self._records):
            self._records = []  # past them for good: the drive makes every call from here
            return []
        record = self._records[self._steps]
        return list(record.get("looks") or ()) if isinstance(record, dict) else []


def _engine(url: str) -> sa.Engine | None:
    """For SQLite: an engine whose connections use WAL and ``synchronous=NORMAL`` (DBOS sets
    neither; each recorded step commits, ~3x faster so) and wait for a busy database."""
    path = sqlite_path(url)
    if path is None:
        return None
    import sqlalchemy as sa

    path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


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


def executor_id() -> str:
    """This process: host, process id and a random part (a reused pid is another process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the process that owns a run is alive: True or False on this host, None when
    it is another host's (or unknown)."""
    host, _, rest = (owner or "").partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        config: DBOSConfig = {
            "name": "fabric",
            "system_database_url": self.url,
            "executor_id": self.executor,
            "application_version": self.version,
            "serializer": JsonSerializer(),
            "log_level": "WARNING",
        }
        engine = _engine(self.url)
        if engine is not None:
            config["system_database_engine"] = engine
        try:
            DBOS(config=config)
            if not queues:
                DBOS.listen_queues([])
            DBOS.launch()
        except Exception as exc:
            with contextlib.suppress(Exception):
                DBOS.destroy()
            raise ConfigError(
                f"cannot open the database of durable runs ({self.where()}): {exc}",
                hint=f"check serve.durable_database in fabric.yaml or ${ENV_URL}",
            ) from exc
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
