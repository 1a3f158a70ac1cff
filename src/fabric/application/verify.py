"""Checking the work before a run may end ``completed``.

A model's ``finish_task`` is a claim. A pack's verifiers test the claim against what really
happened: the project's tests pass in the workspace now, the cited pages were really read
during the run. A failed check goes back to the model as the result of its finish_task call
(a repair round, like a schema error); when the rounds run out the run ends ``unverified``
with the evidence. Every check is recorded in the runlog as a ``verification`` event.

Passing a check is not always proof. Tests that passed before the run began pass after a run
that did nothing; a real quote does not make an answer right. A verdict says whether its pass
*confirms* the work; when a pack's checks all pass and none confirms, the run ends
``completed_unconfirmed`` rather than ``completed`` (ADR 0016).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from msgspec import Struct, field

from .context import ToolContext


class ToolUse(Struct, frozen=True):
    """One tool call of the run and what came of it (the output uncut)."""

    name: str
    arguments: Mapping[str, Any]
    ok: bool
    output: str


class RunRecord(Struct):
    """What the run has done so far, as verifiers see it."""

    uses: list[ToolUse] = field(default_factory=list)
    task: str = ""
    """The task as the user wrote it: what it states is the user's own, not a claim to check
    (the figures of a question need no quote)."""
    brief: str = ""
    """What the pack's brief told the model before its first step (seen, like tool output)."""
    before: Mapping[str, int] = field(default_factory=dict)
    """The commands the brief ran before the first step and their exit codes: how the
    project's checks fared before the run changed anything."""

    def used(self, *names: str) -> bool:
        """Whether the run called one of the tools ``names`` (successfully or not)."""
        return any(u.name in names for u in self.uses)

    def outputs_of(self, name: str) -> list[ToolUse]:
        """The successful calls of tool ``name``, in order."""
        return [u for u in self.uses if u.name == name and u.ok]


class Verdict(Struct, frozen=True):
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
            "confirms",
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
    confirms: bool | None = True
    """Whether a pass shows the work was done: False for a check that only finds nothing
    wrong (the figures were seen; tests that passed before the run and pass now). None: not
    recorded (a runlog of a fabric that counted every pass as confirming, which it then is)."""

    def as_event(self) -> dict[str, Any]:
        """The fields of its ``verification`` event (the loop adds the check's name)."""
        event: dict[str, Any] = {"ok": self.ok, "summary": self.summary}
        if self.ok and self.confirms is not None:
            event["confirms"] = self.confirms
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
            # None in runlogs written before fabric told the two apart (every pass confirmed);
            # kept as None so that a replay writes the event as it was
            confirms=None if "confirms" not in event else bool(event["confirms"]),
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
