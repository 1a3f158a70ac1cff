"""Tools that answer from a recording: the pack's specs, the recorded results in order, so
a replay has no side effects. A call the policy or a person refused never ran, so it has no
result to give back; a call whose arguments differ from the recorded ones is noted in the
shared ``ReplayState`` as the first difference."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.ports import Tool
from fabric.domain.errors import RecordedToolError, ToolError
from fabric.domain.models import ToolSpec

from .divergence import ReplayState, first_difference, plain
from .recording import Recording

REFUSED = frozenset({"policy_denied", "approval_denied"})
"""Error codes of a tool result whose tool never ran: the policy or a person refused it."""


class _RecordedToolError(RecordedToolError):
    """A recorded failed tool result, told to the model exactly as it was then."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        super().__init__(result.get("error") or {})
        self._output = str(result.get("output", ""))

    def __str__(self) -> str:
        return self._output.removeprefix("error: ")


_Calls = deque[tuple[Mapping[str, Any], Mapping[str, Any]]]


class _RecordedTool:
    """A tool with a pack tool's spec whose calls return the recorded results, in order."""

    def __init__(
        self, spec: ToolSpec, results: _Calls, state: ReplayState, run_dir: Path | None
    ) -> None:
        self._spec, self._results, self._state, self._run_dir = spec, results, state, run_dir

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        if not self._results:
            self._state.diverge(
                self._state.step, f"tool_calls({self._spec.name})", "no more calls", "a call"
            )
            raise ToolError(f"the recording has no further result for {self._spec.name}")
        call, result = self._results.popleft()
        step = int(result.get("step", self._state.step))
        difference = None
        if call.get("arguments") != arguments:
            recorded_args = plain(call.get("arguments"))
            difference = first_difference(recorded_args, plain(dict(arguments)), "arguments")
        if difference is not None:
            where, recorded, now = difference
            self._state.diverge(step, f"tool_calls[{call.get('call_id')}].{where}", recorded, now)
        if not result.get("ok", False):
            raise _RecordedToolError(result)
        return self._full_output(result)

    def _full_output(self, result: Mapping[str, Any]) -> str:
        """The output as the tool returned it: the artifact when the log holds a cut copy."""
        artifact = result.get("artifact")
        if artifact and self._run_dir is not None:
            try:
                return (self._run_dir / str(artifact)).read_text("utf-8")
            except OSError:
                pass
        return str(result.get("output", ""))


def recorded_tools(
    events: Recording | Sequence[Mapping[str, Any]],
    tools: Sequence[Tool],
    *,
    state: ReplayState | None = None,
    run_dir: Path | None = None,
) -> list[Tool]:
    """Tools with the specs of ``tools`` that answer with the recorded results, so a
    replay has no side effects. ``run_dir`` (the recorded run's folder) lets a result whose
    output was cut come back whole from its artifact."""
    recording = events if isinstance(events, Recording) else Recording(events)
    state = state or ReplayState()
    calls = {(c["step"], c["call_id"]): c for s in recording.steps for c in s.tool_calls}
    queues: dict[str, _Calls] = {}
    for result in recording.results:
        call = calls.get((result.get("step"), result.get("call_id")))
        if call is None or not isinstance(call.get("arguments"), Mapping):
            continue  # not run then (arguments were not an object): not run now either
        if (result.get("error") or {}).get("code") in REFUSED:
            continue  # refused then: the tool never ran
        queues.setdefault(str(result.get("name")), deque()).append((call, result))
    return [_RecordedTool(t.spec, queues.get(t.spec.name, deque()), state, run_dir) for t in tools]


__all__ = ["REFUSED", "recorded_tools"]
