"""What the task service needs of the runner: the composition root's ``Runner``
(``interfaces/compose.py``) fits it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from fabric.application.job import Control, RunRequest
from fabric.domain.models import RunResult
from fabric.domain.secrets import Secrets
from fabric.domain.tasks import TaskRecord

RunTask = Callable[[TaskRecord, asyncio.Event], Awaitable[None]]
"""Runs one task to its end; the event asks it to stop at the next safe point."""


class Runs(Protocol):
    """Runs tasks the way ``fabric run`` does, and finds their runlogs."""

    @property
    def secrets(self) -> Secrets:
        """What is never written out (kept out of task records too)."""
        ...

    def new_run_id(self) -> str: ...

    def runlog_path(self, run_id: str) -> Path: ...

    def read_runlog(self, path: Path) -> list[dict[str, Any]]:
        """The events of a runlog (blocking: call it in a thread)."""
        ...

    def call_logged(self, path: Path, call_id: str) -> bool:
        """Whether the runlog holds a tool call with this id (blocking)."""
        ...

    def pack(self, name: str) -> object:
        """The pack called ``name``; a ``ConfigError`` naming the known ones if none is."""
        ...

    async def admit(
        self, request: RunRequest, *, roots: Sequence[Path] = (), remote: bool = False
    ) -> Path:
        """Check a run before it is queued, and return its workspace folder."""
        ...

    async def run(self, request: RunRequest, control: Control | None = None) -> RunResult: ...

    async def resume(
        self,
        events: Sequence[Mapping[str, Any]],
        path: Path,
        *,
        max_steps: int | None = None,
        control: Control | None = None,
    ) -> RunResult: ...


class DurableTasks(Protocol):
    """Runs tasks as durable runs (ADR 0020): each step recorded, so a task whose process
    died is continued from its last recorded step (``infrastructure/durable`` fits it)."""

    def where(self) -> str:
        """The database, for people."""
        ...

    def queues(self) -> list[str]:
        """The queues tasks wait on."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def inside(self, task_id: str) -> bool:
        """Whether this is the task's own durable drive (its run is recorded step by step)."""
        ...

    async def run(self, request: RunRequest, control: Control) -> RunResult: ...
