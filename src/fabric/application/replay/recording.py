"""A runlog read back for a replay or a resume: its steps, their requests, replies, tool calls
and results, and the policy decisions and approvals of version 2 logs.

Every format version fabric wrote is read (``fabric.domain.runlog``); a log of a later version
is refused. What a resumed run's log holds of a step it redid (everything from ``run_resumed``'s
``from_step`` on, logged before that line) is dropped: the redone step, logged after, counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct, field

from fabric.domain.errors import RunError
from fabric.domain.models import Message
from fabric.domain.runlog import check_versions

CallKey = tuple[int, str]
"""A tool call in a run: its step and its call id."""


class RecordedStep(Struct):
    """One model call of the recording and what followed it."""

    number: int
    request: list[Message] = field(default_factory=list)
    response: dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    version: int = 1
    """The format version its events were written in (2 and later log policy decisions)."""
    tools: list[Any] | None = None
    """The tool definitions sent, when this request sent them (the first, and any after the
    tools changed)."""
    tools_changed: dict[str, Any] | None = None
    """How the tools changed before this request (an MCP server's list), if they did."""


class Recording:
    """A runlog's events, arranged for a replay."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        check_versions(events)
        self.steps: list[RecordedStep] = []
        self.results: list[Mapping[str, Any]] = []
        self.verifications: list[Mapping[str, Any]] = []
        """``verification`` events (format version 3 and later), in order."""
        self.policy: dict[CallKey, Mapping[str, Any]] = {}
        """``policy_decision`` events by call (format version 2 and later)."""
        self.brief: Mapping[str, Any] | None = None
        """The ``brief`` event: the pack's look at the workspace before the first step."""
        self.compacted: list[Mapping[str, Any]] = []
        """``context_compacted`` events, in order."""
        self.answers: list[Mapping[str, Any]] = []
        """Every ``approval`` event, in order (a replay gives the same answers again)."""
        started: Mapping[str, Any] | None = None
        self.finished: Mapping[str, Any] | None = None
        resumed: list[Mapping[str, Any]] = []
        by_number: dict[int, RecordedStep] = {}
        for event in events:  # one pass: a replay reads every event of a long log once
            kind, number = event.get("kind"), event.get("step")
            if kind == "run_resumed":  # what was logged of the steps redone is not what counts
                self._forget_from(by_number, int(event.get("from_step", 1)))
                resumed.append(event)
                continue
            if kind == "run_started" and started is None:
                started = event
            elif kind == "run_finished":
                self.finished = event
            elif kind == "brief" and self.brief is None:
                self.brief = event
            elif kind == "context_compacted":
                self.compacted.append(event)
            elif kind == "approval":
                self.answers.append(event)
            if not isinstance(number, int):
                continue
            step = by_number.get(number)
            if step is None:
                step = by_number[number] = RecordedStep(number)
                self.steps.append(step)
            self._add(step, event)
        if started is None:
            raise RunError(
                "the runlog has no run_started event",
                hint="pass the runlog of a run fabric recorded",
            )
        self.started: Mapping[str, Any] = started
        self.limits: dict[str, Any] = dict(started.get("limits") or {})
        """The run's limits: those it started with, or the ones it was last resumed with."""
        self._mcp: list[Mapping[str, Any]] = []
        """``mcp`` of ``run_started``, then of each ``run_resumed``."""
        for event in (started, *resumed):
            if event is not started:
                self.limits = dict(event.get("limits") or self.limits)
            if isinstance(event.get("mcp"), Mapping):
                self._mcp.append(event["mcp"])
        self.steps.sort(key=lambda s: s.number)
        self._by_number = {s.number: s for s in self.steps}

    def _add(self, step: RecordedStep, event: Mapping[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "llm_request":
            step.request += list(event.get("messages") or ())
            step.version = _version(event)
            if "tools" in event:
                step.tools = list(event["tools"])
            if isinstance(event.get("tools_changed"), Mapping):
                step.tools_changed = dict(event["tools_changed"])
        elif kind == "llm_response":
            step.response = dict(event)
        elif kind == "tool_call":
            step.tool_calls.append(dict(event))
        elif kind == "tool_result":
            self.results.append(event)
        elif kind == "verification":
            self.verifications.append(event)
        elif kind == "policy_decision":
            self.policy[(step.number, str(event.get("call_id")))] = event

    def _forget_from(self, by_number: dict[int, RecordedStep], first: int) -> None:
        """Drop what the log holds of steps ``first`` and later (a resume redoes them)."""
        for number in [n for n in by_number if n >= first]:
            del by_number[number]
        self.steps = [s for s in self.steps if s.number < first]
        self.results = [r for r in self.results if int(r.get("step", 0)) < first]
        self.verifications = [v for v in self.verifications if int(v.get("step", 0)) < first]
        self.policy = {k: v for k, v in self.policy.items() if k[0] < first}

    @property
    def tools(self) -> list[Any]:
        """The tool definitions of the first request."""
        return next((s.tools for s in self.steps if s.tools is not None), [])

    def mcp_names(self) -> list[str]:
        """The names of every MCP tool the run was offered: at its start and each resume
        (``mcp`` of ``run_started``, ``run_resumed``) and later (``tools_changed``)."""
        entries = [e for mcp in self._mcp for e in mcp.get("tools") or ()]
        for step in self.steps:
            if step.tools_changed is not None:
                entries += list(step.tools_changed.get("added") or ())
        names = [str(e.get("name")) for e in entries if isinstance(e, Mapping)]
        return list(dict.fromkeys(names))

    @property
    def run_id(self) -> str:
        return str(self.started.get("run_id", ""))

    def history(self, upto: int) -> list[Message]:
        """The exact history sent at the ``upto``-th model call (1-based)."""
        messages: list[Message] = []
        for step in self.steps[:upto]:
            messages += step.request
            if step.number < self.steps[upto - 1].number and step.response is not None:
                messages.append(step.response["message"])
        return messages

    def step(self, number: int) -> RecordedStep | None:
        """The recorded step ``number`` (1-based), if the log has it."""
        return self._by_number.get(number)


def _version(event: Mapping[str, Any]) -> int:
    version = event.get("v")
    return version if isinstance(version, int) else 1


__all__ = ["CallKey", "RecordedStep", "Recording"]
