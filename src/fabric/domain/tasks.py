"""Tasks submitted to the HTTP service: one record per task, one run (and runlog) per task."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from .models import RunStatus

QUEUED, RUNNING, INTERRUPTED = "queued", "running", "interrupted"
AWAITING_APPROVAL = "awaiting_approval"
"""Running, but paused until a person answers a tool call the policy asks about."""
FINAL = frozenset({*(status.value for status in RunStatus), INTERRUPTED})
"""A task in one of these states is over; the others are ``queued``, ``running`` and
``awaiting_approval``."""
STATUSES = FINAL | {QUEUED, RUNNING, AWAITING_APPROVAL}


class TaskRecord(Struct, frozen=True):
    """What the service knows of a task. ``id`` is also the run id of its runlog."""

    id: str
    pack: str
    task: str
    model: str | None
    backend: str | None
    workspace: str
    max_steps: int | None
    status: str
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    steps: int = 0
    payload: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    verify: str | None = None
    """The task's own check of the work (a command, or 'off'); None: the pack's."""
    priority: int = 0
    """Its place in the queue: lower numbers start first (0, the default, before all)."""
    budget: dict[str, float] | None = None
    """The task's own limits on what its run may spend, by name (``limits.budget``: tokens,
    cost_usd, seconds, tool_calls, model_calls); each only tightens the pack's. None: none."""
    spent: dict[str, float] | None = None
    """What its run has spent so far, by the same names (only for a run with a budget)."""

    @property
    def final(self) -> bool:
        return self.status in FINAL
