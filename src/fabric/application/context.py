"""What a tool gets to know about the run it is part of."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from fabric.config.schema import SandboxSettings

from .commands import CommandRunner

if TYPE_CHECKING:
    from .budget import Spending


class FileChange(Struct, frozen=True):
    """One file a tool call changed, for the runlog (``tool_result.changes``), never for the
    model: its workspace-relative ``path``, a unified ``diff`` (cut when long, with a note),
    and whether the call created or deleted it."""

    path: str
    diff: str
    created: bool = False
    deleted: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "diff": self.diff,
            "created": self.created,
            "deleted": self.deleted,
        }


class ToolContext(Struct, frozen=True):
    """The run's workspace and sandbox rules, handed to every tool call."""

    run_id: str
    workspace: Path
    sandbox: SandboxSettings
    protected: tuple[Path, ...] = ()
    """Folders file tools must not write to, even inside the workspace (the runs folder)."""
    commands: CommandRunner | None = None
    """Starts processes under the pack's confinement; None for a run that starts none."""
    read_only: tuple[Path, ...] = ()
    """Files and folders file tools may read but never write: what fabric or the user's own
    tools execute later (fabric.yaml, pack sources, virtualenvs, .git hooks and config; see
    ADR 0013). A path equal to one of them or below it is refused for writing."""
    save_artifact: Callable[[str, str], str] | None = None
    """Keeps a text beside the runlog and returns its reference (``RunLog.save_artifact``):
    for a tool that shows the model less than it got (e.g. pytest output cut to the
    failures), so the whole stays on record. None outside a logged run."""
    kept: tuple[Path, ...] = ()
    """Workspace files the file tools read but do not change in this run, as the pack's brief
    asked (``Briefing.keep``: e.g. the tests that failed at the start of a fix); ``kept_why``
    says why, in the refusal. A guide for the model, not a wall: commands are not bound."""
    kept_why: str = ""
    changes: list[FileChange] | None = None
    """Where file tools note what they change (``FileChange``): the loop gives each tool call
    a list of its own and records what it holds in the call's ``tool_result``. None: nobody
    records, and the tools spend nothing on diffs."""
    cancel: asyncio.Event | None = None
    """Set when the run is cancelled: a tool that waits on another program (an MCP server's
    call) stops waiting and fails, so the run ends now rather than when the call would."""
    step: int = 0
    """The model call whose tool call this is (0 outside one)."""
    call_id: str = ""
    """The id of the tool call this context was handed to ("" outside one)."""
    spending: Spending | None = None
    """The run's budget and use (None: no budget in its tree): a sub-run counts against it."""
    delegated: list[str] | None = None
    """Where a delegation tool notes the sub-runs it started (``tool_result.child_run_ids``);
    the loop gives each tool call a list of its own."""
    brief_chars: int | None = None
    """The most characters the pack's brief may have, so that the task it is appended to (and
    never compacted) leaves the run's steps room in the model's window
    (``Window.brief_chars``); None: the window is not known, and the brief is not held to one."""
    emit: Callable[[str, Mapping[str, Any]], None] | None = None
    """Records an event of the tool's own in the run's runlog (``RunLog.emit``: e.g. the
    plan's ``plan`` event), which the run's observers see as it happens. None outside a
    logged run."""
