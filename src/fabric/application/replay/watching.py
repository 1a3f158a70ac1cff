"""The replay's own runlog, ``WatchingRunLog``: each tool call and each policy decision is
compared with the recorded one as it is written, and the first difference noted in the shared
``ReplayState`` (the chat client raises ``Diverged`` at the next model call)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from fabric.application.ports import RunLog

from .divergence import ReplayState, first_difference, plain
from .recording import Recording


class WatchingRunLog:
    """The replay's runlog, checking each tool call and policy decision against the recorded
    ones as they are written."""

    def __init__(self, inner: RunLog, recording: Recording, state: ReplayState) -> None:
        self._inner, self._recording, self._state = inner, recording, state
        self._expected = {s.number: deque(s.tool_calls) for s in recording.steps}

    @property
    def location(self) -> str | None:
        return self._inner.location

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        self._inner.emit(kind, data)
        if kind == "tool_call":
            self._check_call(data)
        elif kind == "policy_decision":
            self._check_policy(data)

    def _check_call(self, data: Mapping[str, Any]) -> None:
        step = int(data.get("step", 0))
        expected = self._expected.get(step)
        if not expected:
            self._state.diverge(step, "tool_calls", "no more calls", _call_view(data))
            return
        then = expected.popleft()
        if (
            then.get("call_id") == data.get("call_id")
            and then.get("name") == data.get("name")
            and then.get("arguments") == data.get("arguments")
        ):
            return
        recorded, now = _call_view(then), _call_view(data)
        difference = first_difference(plain(recorded), plain(now), "tool_call")
        if difference is not None:
            self._state.diverge(step, *difference)

    def _check_policy(self, data: Mapping[str, Any]) -> None:
        """A different verdict for the same call is a divergence (field ``policy``). A step
        recorded in format version 1 has no decisions to compare with."""
        step = int(data.get("step", 0))
        recorded_step = self._recording.step(step)
        if recorded_step is None or recorded_step.version < 2:
            return
        recorded = self._recording.policy.get((step, str(data.get("call_id"))))
        if recorded is None or recorded.get("verdict") != data.get("verdict"):
            self._state.diverge(step, "policy", _verdict_view(recorded), _verdict_view(data))

    def save_artifact(self, name: str, content: str) -> str:
        return self._inner.save_artifact(name, content)

    def close(self) -> None:
        self._inner.close()


def _call_view(call: Mapping[str, Any]) -> dict[str, Any]:
    return {k: call.get(k) for k in ("call_id", "name", "arguments")}


def _verdict_view(decision: Mapping[str, Any] | None) -> str:
    """``ask (shell, rule: shell git push **)``: a policy decision on one line."""
    if decision is None:
        return "(no policy decision recorded)"
    rule = decision.get("rule")
    why = f"rule: {rule}" if rule else "the policy default"
    return f"{decision.get('verdict')} ({decision.get('tool')}, {why})"


__all__ = ["WatchingRunLog"]
