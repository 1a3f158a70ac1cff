"""One pack handing part of its task to another (ADR 0021). A pack's ``delegates`` become
tools ``delegate_<pack>(task)``; a call starts a sub-run of that pack in the same workspace,
with its own runlog, tools, sandbox and policy, never more than the delegating run allows:
its sandbox is narrowed to the parent's (``SandboxSettings.within``), the parent's policies
are checked as well as its own, its spending counts against the parent's budget, a cancel of
the parent cancels it, and its asks go to whoever answers the parent's. The result is the
sub-pack's validated ``finish_task`` payload; the two runlogs name each other (``parent`` in
the child's ``run_started``, ``child_run_ids`` in the parent's ``tool_result``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct

from fabric.config.policy import PolicySettings
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ToolError
from fabric.domain.models import RunResult, RunStatus, ToolSpec

from .budget import Spending
from .context import ToolContext
from .loop.state import Stop
from .ports import Approver

PREFIX = "delegate_"
"""A delegation tool's name: this, then the pack's name."""
DONE = (RunStatus.COMPLETED, RunStatus.COMPLETED_UNCONFIRMED)


class Parent(Struct, frozen=True):
    """The run a sub-run was delegated by, and what it hands down."""

    run_id: str
    call_id: str
    """The delegating tool call."""
    depth: int
    """The sub-run's depth: 1 under a run started by a person."""
    max_depth: int
    """How deep the tree may go (the root's ``limits.max_depth``, tightened on the way)."""
    workspace: Path
    sandbox: SandboxSettings
    """The delegating run's sandbox: the sub-run's is narrowed to it."""
    policies: tuple[PolicySettings, ...]
    """The policies of the delegating runs, nearest first: checked as well as the sub-run's."""
    spending: Spending | None = None
    cancel: asyncio.Event | None = None
    approver: Approver | None = None
    step: int = 0
    """The delegating call's step."""

    @property
    def child_id(self) -> str:
        """The sub-run's run id, derived from the call: a resumed or recovered parent that
        makes the call again finds the sub-run it started (and goes on with it, or takes its
        result) instead of starting another."""
        tag = hashlib.sha256(f"{self.step}:{self.call_id}".encode()).hexdigest()[:8]
        return f"{self.run_id[:100]}.d{tag}"

    def as_json(self) -> dict[str, Any]:
        """For the sub-run's ``run_started.parent``."""
        return {"run_id": self.run_id, "call_id": self.call_id, "depth": self.depth}


Delegate = Callable[[str, str, Parent], Awaitable[RunResult]]
"""Runs a sub-run: the pack, the task, and the run it was delegated by (``Runner.delegated``)."""


class Lineage(Struct, frozen=True):
    """Where a run stands in its task tree: what its delegation tools hand down."""

    depth: int = 0
    max_depth: int = 3
    policies: tuple[PolicySettings, ...] = ()
    """The policies of the runs above it, nearest first."""
    approver: Approver | None = None


class DelegateTool:
    """``delegate_<pack>(task)``: a sub-run of ``pack``; its payload, or a ToolError saying
    how it ended."""

    def __init__(self, pack: str, description: str, delegate: Delegate, lineage: Lineage) -> None:
        self._pack, self._delegate, self._lineage = pack, delegate, lineage
        told = f" ({description})" if description else ""
        self._spec = ToolSpec(
            f"{PREFIX}{pack}",
            f"Hand a part of the task to the {pack} pack{told}: it works on it in the same "
            "workspace with its own tools and returns its result as JSON. Say exactly what "
            "it should do and what it should return.",
            {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": f"What the {pack} pack should do."}
                },
                "required": ["task"],
                "additionalProperties": False,
            },
            repeat_safe=False,  # the sub-run may have written files, run commands
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolError("task must be a non-empty string", hint="say what the pack should do")
        lineage = self._lineage
        if lineage.depth >= lineage.max_depth:
            raise ToolError(
                f"delegation is limited to {lineage.max_depth} level(s) below the first run, "
                "and this run is at that depth: it cannot hand work on",
                hint="do the work with this run's own tools, or finish with what you have",
            )
        parent = Parent(
            ctx.run_id,
            ctx.call_id,
            lineage.depth + 1,
            lineage.max_depth,
            ctx.workspace,
            ctx.sandbox,
            (ctx.sandbox.policy, *lineage.policies),
            ctx.spending,
            ctx.cancel,
            lineage.approver,
            ctx.step,
        )
        result = await self._delegate(self._pack, task, parent)
        if result.status is RunStatus.CANCELLED and ctx.cancel is not None and ctx.cancel.is_set():
            # the parent is being cancelled: this call has no result, so a resume of the
            # parent makes it again and goes on with the same sub-run (``Parent.child_id``)
            raise Stop(RunStatus.CANCELLED)
        if ctx.delegated is not None:
            ctx.delegated.append(result.run_id)
        if result.status in DONE:
            told = {"run_id": result.run_id, "status": result.status.value,
                    "result": result.payload}  # fmt: skip
            return json.dumps(told, ensure_ascii=False)
        error = result.error or {}
        why = f": {error.get('message')}" if error.get("message") else ""
        raise ToolError(
            f"the {self._pack} run {result.run_id} ended {result.status.value}{why}",
            hint=error.get("hint") or "do that part yourself, or ask again more precisely",
        )


__all__ = ["PREFIX", "Delegate", "DelegateTool", "Lineage", "Parent"]
