"""What the eval needs from outside the application: a task runner, workspace folders,
confined check commands and a log of finished attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from msgspec import Struct

from fabric.application.commands import CommandOutcome
from fabric.application.job import RunRequest
from fabric.domain.models import RunResult

from .records import AttemptRecord


class RunOutcome(Struct, frozen=True):
    """How the run ended, and which model and backend it used (None: not known)."""

    result: RunResult
    model: str | None = None
    backend: str | None = None


class TaskRunner(Protocol):
    """Runs tasks the way ``fabric run`` does (one composition root)."""

    def new_run_id(self) -> str: ...

    def runlog_path(self, run_id: str) -> Path:
        """Where the run with this id writes its runlog."""
        ...

    async def run(self, request: RunRequest, cancel: asyncio.Event) -> RunOutcome:
        """Run to the end; setting ``cancel`` ends the run as cancelled at its next safe point.
        A ``ConfigError`` means no attempt can run (the eval stops)."""
        ...


class FileRead(Struct, frozen=True):
    """A workspace file as a check sees it: its bytes, None when it does not exist, or why it
    may not be read (a symlink out of the workspace, not a regular file)."""

    data: bytes | None
    problem: str | None = None


class Workspaces(Protocol):
    """The attempts' folders."""

    def prepare(self, template: Path | None, folder: Path, memory: Sequence[str] = ()) -> None:
        """Make ``folder`` a fresh copy of ``template`` (an empty folder for None), removing
        whatever an earlier, unfinished attempt left there, its memories too; then have it
        remember the facts ``memory`` (``EvalCase.memory``)."""
        ...

    def read(self, folder: Path, path: str) -> FileRead:
        """Read ``path`` (relative) inside ``folder``, never following a link out of it."""
        ...


class CheckCommands(Protocol):
    """Runs a check's command in a finished workspace, confined like the pack's commands and
    without network."""

    async def run(self, folder: Path, pack: str, command: str, timeout: float) -> CommandOutcome:
        """Raises a ``FabricError`` when the command cannot be run at all (not parsable, the
        program is missing, this machine cannot confine it)."""
        ...


class AttemptLog(Protocol):
    """Where finished attempts are kept, one by one, as they end."""

    def append(self, record: AttemptRecord) -> None: ...


class EvalPorts(Struct, frozen=True):
    runner: TaskRunner
    workspaces: Workspaces
    commands: CheckCommands
    log: AttemptLog
