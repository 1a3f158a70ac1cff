"""What the HTTP API reads and writes: request bodies, the task document, the error shape and
which status an error gets."""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from msgspec.structs import asdict
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from fabric.application.tasks import Conflict, NotFound, ServiceUnavailable
from fabric.config.schema import Budget
from fabric.domain.errors import ConfigError, FabricError, ModelError, PackError
from fabric.domain.tasks import TaskRecord
from fabric.infrastructure.tools.search_check import SearchUnavailable

MAX_STEPS = 10_000
"""The most model calls a task may ask for."""


class ApprovalIn(BaseModel):
    """A person's answer to a tool call waiting for approval."""

    model_config = ConfigDict(extra="forbid")

    approve: StrictBool = Field(description="true runs the call; false refuses it.")
    scope: Literal["once", "run"] = Field(
        "once",
        description="'once': this call only. 'run': the same answer for every later call of "
        "this tool under the same policy rule, for the rest of the task's run.",
    )


class ResumeIn(BaseModel):
    """How to resume a task."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(
        None, ge=1, le=MAX_STEPS, description="Model calls at most, in all (default: the task's)."
    )


MAX_PRIORITY = 1000


class TaskIn(BaseModel):
    """A task to run."""

    model_config = ConfigDict(extra="forbid")

    pack: str = Field(min_length=1, max_length=200, description="A pack name (GET /packs).")
    task: str = Field(min_length=1, description="What the pack should do.")
    model: str | None = Field(None, max_length=300, description="A model key or name.")
    backend: str | None = Field(None, max_length=100, description="A backend name, or auto.")
    workspace: str | None = Field(
        None,
        max_length=4096,
        description="A folder under the service's workspace roots (default: the first root); "
        "relative paths are taken from the first root. Not the filesystem root, the home "
        "folder or one that contains it, nor a folder of fabric's own (runs, task records, "
        "token, caches). Tasks on one workspace run one at a time, in the order they came, "
        "unless serve.share_workspaces is set.",
    )
    max_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Model calls at most.")
    budget: Budget | None = Field(
        None,
        description="Limits on what the task's run may spend: tokens, cost_usd, seconds, "
        "tool_calls, model_calls. Each only tightens the pack's limits.budget; the task ends "
        "'budget_exceeded' when one is reached, and its record shows what was spent.",
    )
    verify: str | None = Field(
        None,
        min_length=1,
        max_length=2000,
        description="Check the work with this command (run confined in the workspace) before "
        "the task may end completed, instead of the pack's verify.command; 'off': no command "
        "check. The task ends 'unverified' when its work keeps failing the check.",
    )
    priority: int = Field(
        0,
        ge=0,
        le=MAX_PRIORITY,
        description="Its place in the queue: a task with a lower number starts before one "
        "with a higher number that waits with it; the same number, in the order they came. "
        "0 (the default) starts first.",
    )


def task_json(
    record: TaskRecord,
    approvals: list[dict[str, Any]] | None = None,
    waiting_for: list[str] | None = None,
) -> dict[str, Any]:
    """The task document: the record's fields, ``approvals`` (calls waiting for an answer),
    ``waiting_for`` (ids of the tasks a queued task waits for because they use its workspace:
    running ones first, then earlier queued ones) and ``urls``."""
    out = asdict(record)
    out["approvals"] = approvals or []
    out["waiting_for"] = waiting_for or []
    out["urls"] = {
        "self": f"/tasks/{record.id}",
        "events": f"/tasks/{record.id}/events",
        "runlog": f"/tasks/{record.id}/runlog",
        "cancel": f"/tasks/{record.id}/cancel",
        "resume": f"/tasks/{record.id}/resume",
    }
    return out


def error_response(status: int, code: str, message: str, details: Any = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details}}
    return JSONResponse(body, status_code=status)


def status_of(exc: FabricError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, ServiceUnavailable | SearchUnavailable):
        return 503
    if isinstance(exc, PackError | ConfigError):
        return 422
    if isinstance(exc, ModelError):
        return 502
    return 500
