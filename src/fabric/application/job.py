"""What a run is given, in three parts: what to run (``RunRequest`` as a user asks for it,
``Job`` once the pack is built), what it runs with (``Kit``), and how it is controlled from
outside (``Control``: cancel, approvals, observers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from fabric.config.policy import PolicySettings
from fabric.config.schema import Budget, Limits, SandboxSettings, ToolSearchSettings
from fabric.domain.errors import FabricError
from fabric.domain.models import ChatDelta

from .budget import Spending
from .commands import CommandRunner
from .cost import Prices
from .delegation import Parent
from .pack import Pack
from .ports import Approver, ChatClient, RunLog, RunObserver, Summarize, ToolUpdates


class RunRequest(Struct, frozen=True):
    """A run as someone asks for it (``fabric run``, ``POST /tasks``, an eval attempt)."""

    pack: str
    task: str
    workspace: Path | None = None
    """None: the current folder."""
    model: str | None = None
    """A model name or model key (None: the pack's)."""
    backend: str | None = None
    max_steps: int | None = None
    """None: the pack's ``limits.max_steps``."""
    verify: str | None = None
    """None: the pack's own verification; 'off': none; else a command line."""
    run_id: str | None = None
    """None: a new id."""
    budget: Budget | None = None
    """The run's own limits on what it may spend; each only tightens the pack's
    (``limits.budget``). None: the pack's."""
    parent: Parent | None = None
    """The run that delegated this one (None: a person started it)."""


class Job(Struct, frozen=True):
    """What the loop runs: the task, the built pack, where, and within which limits."""

    task: str
    pack: Pack
    run_id: str
    workspace: Path
    limits: Limits = field(default_factory=Limits)
    sandbox: SandboxSettings | None = None
    """None: the pack's own."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Recorded in ``run_started`` as it is (fabric version, backend, selection, ...)."""
    outer_policies: tuple[PolicySettings, ...] = ()
    """The policies of the runs that delegated this one, nearest first: checked as well."""
    tool_search: ToolSearchSettings | None = None
    """When the run searches its tools rather than offering them all (ADR 0028; None:
    never)."""


class Kit(Struct, frozen=True):
    """What a run works with, set up by the composition root."""

    chat: ChatClient | None
    """None only with ``start_error``: the run is then recorded as failed from the start."""
    runlog: RunLog
    commands: CommandRunner | None = None
    """Starts the processes tools ask for, confined by the OS (None: the pack starts none)."""
    protected: tuple[Path, ...] = ()
    """Places file tools neither read nor write."""
    read_only: tuple[Path, ...] = ()
    """Host code in the workspace (ADR 0013): tools only read it."""
    prices: Prices | None = None
    """With prices the run's cost is counted."""
    start_error: FabricError | None = None
    """Why the run cannot start (no model, no confinement); it still gets a runlog."""
    tool_updates: ToolUpdates | None = None
    """Tools that may change during the run (its MCP servers' lists): asked before each model
    call; a change is offered to the model and logged in that ``llm_request``."""
    context_size: int | None = None
    """The model's context window in tokens (None: not known): requests are kept inside it."""
    reply_tokens: int | None = None
    """The most tokens one reply may have (None: no limit set), kept free in the window."""
    summarize: Summarize | None = None
    """Writes the summary of older turns when eliding outputs is not enough to fit the window
    (None: asked of ``chat``, outside the run's numbered model calls)."""


LEFT_FOR_RECOVERY = "fabric: left for recovery"
"""What a durable run's task is cancelled with when a shutdown cuts it off: its runlog is left
without an end, as if its process had died, so the run that continues it goes on in it."""


class Control(Struct, frozen=True):
    """How a run is steered from outside while it goes on."""

    cancel: asyncio.Event | None = None
    """Set: the run ends ``cancelled`` at its next safe point (a model call is cut at once)."""
    approver: Approver | None = None
    """Answers the calls the policy asks about (None: they are refused)."""
    observers: Sequence[RunObserver] = ()
    """Watch the run live. Their ``event`` is called by the runlog once it holds the event,
    so whoever opens the runlog (the ``Runner``) hands them to it; their ``delta`` by the
    loop as the model's reply streams in."""
    spending: Spending | None = None
    """The delegating run's budget and use: this run counts against it (None: none)."""

    def on_delta(self) -> DeltaFanout | None:
        """The observers' ``delta`` as one sink for the model client (None: nobody watches)."""
        return DeltaFanout(tuple(self.observers)) if self.observers else None

    def events(self) -> tuple[Callable[[Mapping[str, Any]], None], ...]:
        """The observers' ``event`` methods, for the runlog to call."""
        return tuple(o.event for o in self.observers)


class DeltaFanout(Struct, frozen=True):
    """Passes each streamed piece to every observer."""

    observers: tuple[RunObserver, ...]

    def __call__(self, delta: ChatDelta) -> None:
        for observer in self.observers:
            observer.delta(delta)


__all__ = ["Control", "Job", "Kit", "RunRequest"]
