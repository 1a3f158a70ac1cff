"""Checking the work before a run may end ``completed``.

A model's ``finish_task`` is a claim. A pack's verifiers test the claim against what really
happened: the project's tests pass in the workspace now, the cited pages were really read
during the run. A failed check goes back to the model as the result of its finish_task call
(a repair round, like a schema error); when the rounds run out the run ends ``unverified``
with the evidence. Every check is recorded in the runlog as a ``verification`` event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .context import ToolContext


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call of the run and what came of it (the output uncut)."""

    name: str
    arguments: Mapping[str, Any]
    ok: bool
    output: str


@dataclass(slots=True)
class RunRecord:
    """What the run has done so far, as verifiers see it."""

    uses: list[ToolUse] = field(default_factory=list)
    task: str = ""
    """The task as the user wrote it: what it states is the user's own, not a claim to check
    (the figures of a question need no quote)."""
    brief: str = ""
    """What the pack's brief told the model before its first step (seen, like tool output)."""

    def used(self, *names: str) -> bool:
        """Whether the run called one of the tools ``names`` (successfully or not)."""
        return any(u.name in names for u in self.uses)

    def outputs_of(self, name: str) -> list[ToolUse]:
        """The successful calls of tool ``name``, in order."""
        return [u for u in self.uses if u.name == name and u.ok]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one check. ``summary`` is one line; ``evidence`` is what the model and
    the person reading the runlog need to see to understand a failure (trimmed)."""

    RESERVED = frozenset(
        {
            "v",
            "seq",
            "ts",
            "run_id",
            "kind",
            "step",
            "call_id",
            "check",
            "ok",
            "summary",
            "evidence",
            "error",
            "duration_ms",
        }
    )
    """The fields of a ``verification`` event that are not a verdict's ``detail``."""

    ok: bool
    summary: str
    evidence: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """Check-specific facts for the runlog, e.g. the command and its exit code."""

    def as_event(self) -> dict[str, Any]:
        """The fields of its ``verification`` event (the loop adds the check's name)."""
        event: dict[str, Any] = {"ok": self.ok, "summary": self.summary}
        if self.evidence:
            event["evidence"] = self.evidence
        event.update(self.detail)
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Verdict:
        """The verdict a recorded ``verification`` event holds (for replays)."""
        detail = {k: v for k, v in event.items() if k not in cls.RESERVED}
        return cls(
            bool(event.get("ok")),
            str(event.get("summary", "")),
            str(event.get("evidence", "")),
            detail,
        )


class Verifier(Protocol):
    """One check of a finished run's claim."""

    @property
    def name(self) -> str:
        """What is checked, for ``run_started.verify`` (e.g. ``command: python -m pytest``)."""
        ...

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        """Check the finish_task ``payload`` against the workspace and the run so far; None
        when there is nothing to check for this run (e.g. it changed nothing). A check that
        cannot be made at all raises a ``FabricError``: the run then ends ``unverified``."""
        ...


def describe(verifiers: Sequence[Verifier]) -> list[str]:
    return [v.name for v in verifiers]
