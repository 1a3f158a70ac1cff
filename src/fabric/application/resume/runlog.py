"""The reopened runlog of a resumed run, ``ResumingRunLog``: the re-driven steps' events are
in the log already and are dropped, ``run_resumed`` is written where ``run_started`` would be
(with the end the run is resumed from, which the reopened log leaves out), and a re-driven
step's artifact is the one saved when the step first ran."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from fabric.application.ports import RunLog
from fabric.application.replay.divergence import ReplayState

from .plan import ResumePlan

_STEP_KINDS = {
    "llm_request",
    "llm_response",
    "tool_call",
    "policy_decision",
    "approval_requested",
    "approval",
    "tool_result",
    "verification",
    "nudge",
    "context_compacted",
    "plan",
}
"""Events of a step: those of the re-driven steps are in the log already."""


def _without_envelope(end: Mapping[str, Any]) -> dict[str, Any]:
    """A ``run_finished`` as ``run_resumed.ended`` keeps it: its fields and ``ts``, without
    ``v``, ``seq``, ``run_id`` and ``kind`` (its seq is the ``run_resumed``'s now)."""
    return {k: v for k, v in end.items() if k not in {"v", "seq", "run_id", "kind"}}


class ResumingRunLog:
    """The reopened runlog: drops ``run_started`` and the re-driven steps' events (already in
    the log), writing ``run_resumed`` in place of the former, with the end the run is resumed
    from (which the reopened log leaves out); passes everything else on."""

    def __init__(self, inner: RunLog, plan: ResumePlan, state: ReplayState) -> None:
        self._inner, self._plan, self._state = inner, plan, state
        self._briefed = any(e.get("kind") == "brief" for e in plan.events)
        self._artifacts = deque(
            str(e["artifact"])
            for e in plan.events
            if e.get("kind") == "tool_result" and e.get("artifact")
        )

    @property
    def location(self) -> str | None:
        return self._inner.location

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "brief" and self._briefed:
            return  # the recorded look, told again: the log holds it already
        if kind == "run_started":
            resumed = {
                "from_step": self._plan.completed + 1,
                "reason": self._plan.reason,
                "limits": data.get("limits"),
            }
            if self._plan.ended is not None:
                resumed["ended"] = _without_envelope(self._plan.ended)
            if "mcp" in data:  # the MCP servers as started again, and their tools now
                resumed["mcp"] = data["mcp"]
            if "additions" in data:  # what fabric's conventions found for the new steps
                resumed["additions"] = data["additions"]
            self._inner.emit("run_resumed", resumed)
            return
        step = data.get("step")
        if kind in _STEP_KINDS and isinstance(step, int) and step <= self._plan.completed:
            return
        self._inner.emit(kind, data)

    def save_artifact(self, name: str, content: str) -> str:
        if self._state.step <= self._plan.completed and self._artifacts:
            return self._artifacts.popleft()  # saved when the step first ran
        return self._inner.save_artifact(name, content)

    def close(self) -> None:
        self._inner.close()


__all__ = ["ResumingRunLog"]
