"""Re-driving a recorded run: ``fabric replay``.

The loop runs again with a chat client that answers with the recorded model responses, in
order, and (by default) tools that answer with the recorded tool results, so nothing outside
the runlog is touched. At every model call the client checks that what the loop would send now
(the whole history and the tool definitions) equals what was sent then, rebuilt from the
runlog as ADR 0003 describes; a watcher on the replay's own runlog checks that the tool calls
are the recorded ones. The first difference is the divergence the replay reports; at the end
the step count, status and payload are compared too.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import FabricError, RunError, ToolError
from fabric.domain.models import ChatResponse, Message, RunResult, ToolCall, ToolSpec, Usage

from .context import ToolContext
from .execute_task import execute_task
from .pack import Pack
from .ports import DeltaSink, RunLog, Tool

_ABSENT = "<absent>"
_SHOWN = 160


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first differed from the recording: the step, the field (a path such as
    ``messages[3].content``), and both values as short reprs."""

    step: int
    field: str
    recorded: str
    now: str

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "field": self.field, "recorded": self.recorded, "now": self.now}

    def __str__(self) -> str:
        return (
            f"diverged at step {self.step}, {self.field}\n"
            f"  recorded: {self.recorded}\n"
            f"  now:      {self.now}"
        )


class Diverged(FabricError):
    """The replay no longer matches the recording."""

    CODE = "diverged"

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(
            f"the replay diverged at step {divergence.step}, {divergence.field}: "
            f"recorded {divergence.recorded}, now {divergence.now}",
            hint="the pack, its prompts or its tools changed since the run was recorded",
        )
        self.divergence = divergence


class ReplayState:
    """What the replay's parts share: the first divergence, once found."""

    def __init__(self) -> None:
        self.divergence: Divergence | None = None
        self.step = 0
        """The model call the replay is at (1-based)."""

    def diverge(self, step: int, field: str, recorded: Any, now: Any) -> Divergence:
        """Note a difference (only the first one counts) and return the one that counts."""
        if self.divergence is None:
            shown_recorded, shown_now = _show_pair(recorded, now)
            self.divergence = Divergence(step, field, shown_recorded, shown_now)
        return self.divergence


@dataclass
class _Step:
    number: int
    request: list[Message] = field(default_factory=list)
    response: dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Recording:
    """A runlog's events, arranged for a replay."""

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        started = [e for e in events if e.get("kind") == "run_started"]
        if not started:
            raise RunError(
                "the runlog has no run_started event",
                hint="pass the runlog of a run fabric recorded",
            )
        self.started: Mapping[str, Any] = started[0]
        finished = [e for e in events if e.get("kind") == "run_finished"]
        self.finished: Mapping[str, Any] | None = finished[-1] if finished else None
        self.limits: dict[str, Any] = dict(self.started.get("limits") or {})
        """The run's limits: those it started with, or the ones it was last resumed with."""
        self.tools: list[Any] = []
        self.steps: list[_Step] = []
        self.results: list[Mapping[str, Any]] = []
        by_number: dict[int, _Step] = {}
        for event in events:
            kind, number = event.get("kind"), event.get("step")
            if kind == "run_resumed":  # what was logged of the steps redone is not what counts
                self._forget_from(by_number, int(event.get("from_step", 1)))
                self.limits = dict(event.get("limits") or self.limits)
                continue
            if not isinstance(number, int):
                continue
            step = by_number.get(number)
            if step is None:
                step = by_number[number] = _Step(number)
                self.steps.append(step)
            if kind == "llm_request":
                step.request += list(event.get("messages") or ())
                if "tools" in event:
                    self.tools = list(event["tools"])
            elif kind == "llm_response":
                step.response = dict(event)
            elif kind == "tool_call":
                step.tool_calls.append(dict(event))
            elif kind == "tool_result":
                self.results.append(event)
        self.steps.sort(key=lambda s: s.number)

    def _forget_from(self, by_number: dict[int, _Step], first: int) -> None:
        """Drop what the log holds of steps ``first`` and later (a resume redoes them)."""
        for number in [n for n in by_number if n >= first]:
            del by_number[number]
        self.steps = [s for s in self.steps if s.number < first]
        self.results = [r for r in self.results if int(r.get("step", 0)) < first]

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


class ReplayChatClient:
    """A ChatClient that checks each request against the recording and answers with the
    recorded response. On the first difference it raises ``Diverged``."""

    def __init__(
        self, recording: Recording | Sequence[Mapping[str, Any]], state: ReplayState | None = None
    ) -> None:
        self.recording = recording if isinstance(recording, Recording) else Recording(recording)
        self.state = state or ReplayState()
        self.calls = 0

    @property
    def model(self) -> str:
        return str(self.recording.started.get("model") or "replay")

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        on_delta: DeltaSink | None = None,
    ) -> ChatResponse:
        self.calls += 1
        step = self.state.step = self.calls
        if self.state.divergence is not None:  # e.g. a tool call differed; stop here
            raise Diverged(self.state.divergence)
        recorded_steps = len(self.recording.steps)
        if step > recorded_steps:
            raise Diverged(
                self.state.diverge(step, "step count", recorded_steps, f"at least {step}")
            )
        now_messages, now_tools = _plain(list(messages)), _plain(list(tools))
        difference = _first_difference(self.recording.history(step), now_messages, "messages")
        if difference is None:
            difference = _first_difference(self.recording.tools, now_tools, "tools")
        if difference is not None:
            raise Diverged(self.state.diverge(step, *difference))
        response = self.recording.steps[step - 1].response
        if response is None:  # the model call failed when recorded: fail the same way
            error = (self.recording.finished or {}).get("error") or {}
            raise RunError(
                str(error.get("message", "the recorded model call did not answer")),
                hint=str(error.get("hint", "")),
            )
        return _response(response)

    async def aclose(self) -> None:
        return None


class _RecordedToolError(ToolError):
    """A recorded failed tool result, told to the model exactly as it was then."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        error = result.get("error") or {}
        super().__init__(str(error.get("message", "")), hint=str(error.get("hint", "")))
        self._code = str(error.get("code", "tool_error"))
        self._output = str(result.get("output", ""))

    @property
    def code(self) -> str:
        return self._code

    def __str__(self) -> str:
        return self._output.removeprefix("error: ")


class _RecordedTool:
    """A tool with a pack tool's spec whose calls return the recorded results, in order."""

    def __init__(
        self,
        spec: ToolSpec,
        results: deque[tuple[Mapping[str, Any], Mapping[str, Any]]],
        state: ReplayState,
        run_dir: Path | None,
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
        recorded_args = _plain(call.get("arguments"))
        difference = _first_difference(recorded_args, _plain(dict(arguments)), "arguments")
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
    pack: Pack,
    *,
    state: ReplayState | None = None,
    run_dir: Path | None = None,
) -> list[Tool]:
    """Tools with the specs of ``pack``'s tools that answer with the recorded results, so a
    replay has no side effects. ``run_dir`` (the recorded run's folder) lets a result whose
    output was cut come back whole from its artifact."""
    recording = events if isinstance(events, Recording) else Recording(events)
    state = state or ReplayState()
    calls = {(c["step"], c["call_id"]): c for s in recording.steps for c in s.tool_calls}
    queues: dict[str, deque[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for result in recording.results:
        call = calls.get((result.get("step"), result.get("call_id")))
        if call is None or not isinstance(call.get("arguments"), Mapping):
            continue  # not run then (arguments were not an object): not run now either
        queues.setdefault(str(result.get("name")), deque()).append((call, result))
    return [
        _RecordedTool(t.spec, queues.get(t.spec.name, deque()), state, run_dir) for t in pack.tools
    ]


class _WatchingRunLog:
    """The replay's runlog, checking each tool call against the recorded one."""

    def __init__(self, inner: RunLog, recording: Recording, state: ReplayState) -> None:
        self._inner, self._state = inner, state
        self._expected = {s.number: deque(s.tool_calls) for s in recording.steps}

    @property
    def location(self) -> str | None:
        return self._inner.location

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        self._inner.emit(kind, data)
        if kind == "tool_call":
            self._check_call(data)

    def _check_call(self, data: Mapping[str, Any]) -> None:
        step = int(data.get("step", 0))
        expected = self._expected.get(step)
        if not expected:
            self._state.diverge(step, "tool_calls", "no more calls", _call_view(data))
            return
        recorded = expected.popleft()
        difference = _first_difference(
            _plain(_call_view(recorded)), _plain(_call_view(data)), "tool_call"
        )
        if difference is not None:
            self._state.diverge(step, *difference)

    def save_artifact(self, name: str, content: str) -> str:
        return self._inner.save_artifact(name, content)

    def close(self) -> None:
        self._inner.close()


def _call_view(call: Mapping[str, Any]) -> dict[str, Any]:
    return {k: call.get(k) for k in ("call_id", "name", "arguments")}


@dataclass(frozen=True)
class ReplayReport:
    """How a replay went: identical, or where it first diverged; and the replay's result."""

    original_run_id: str
    result: RunResult
    divergence: Divergence | None
    steps_recorded: int

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "identical" if self.identical else "diverged",
            "replay_of": self.original_run_id,
            "run_id": self.result.run_id,
            "runlog": self.result.runlog_path,
            "steps_recorded": self.steps_recorded,
            "steps_replayed": self.result.steps,
            "divergence": self.divergence.as_dict() if self.divergence else None,
            "result": {"status": self.result.status.value, "payload": self.result.payload},
        }


async def replay(
    events: Sequence[Mapping[str, Any]],
    *,
    pack: Pack,
    runlog: RunLog,
    run_id: str,
    workspace: Path,
    live: bool = False,
    run_dir: Path | None = None,
    limits: Limits | None = None,
    sandbox: SandboxSettings | None = None,
    protected: tuple[Path, ...] = (),
) -> ReplayReport:
    """Re-drive the recorded run ``events`` with ``pack`` (as it is now) and report whether it
    went exactly as recorded. ``live`` runs the pack's real tools (in ``workspace``, which
    should then be a copy); otherwise tools answer from the recording. ``limits`` default to
    the recorded ones; the replay's ``run_started`` names the original in ``replay_of``."""
    recording = Recording(events)
    state = ReplayState()
    chat = ReplayChatClient(recording, state)
    tools = (
        list(pack.tools) if live else recorded_tools(recording, pack, state=state, run_dir=run_dir)
    )
    replay_pack = dataclasses.replace(pack, tools=tools)
    if limits is None:
        limits = Limits.model_validate(recording.limits)
    result = await execute_task(
        str(recording.started.get("task", "")),
        pack=replay_pack,
        chat=chat,
        runlog=_WatchingRunLog(runlog, recording, state),
        run_id=run_id,
        workspace=workspace,
        sandbox=sandbox,
        limits=limits,
        protected=protected,
        meta={"replay_of": recording.run_id},
    )
    if state.divergence is None:
        _check_end(recording, result, state)
    return ReplayReport(recording.run_id, result, state.divergence, len(recording.steps))


def _check_end(recording: Recording, result: RunResult, state: ReplayState) -> None:
    recorded_steps = len(recording.steps)
    if result.steps != recorded_steps:
        state.diverge(result.steps, "step count", recorded_steps, result.steps)
        return
    finished = recording.finished
    if finished is None:
        state.diverge(result.steps, "status", "(the recorded run never finished)", result.status)
        return
    if finished.get("status") != result.status.value:
        state.diverge(result.steps, "status", finished.get("status"), result.status.value)
        return
    difference = _first_difference(finished.get("payload"), _plain(result.payload), "payload")
    if difference is not None:
        state.diverge(result.steps, *difference)


# --- comparing --------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """``value`` as the runlog holds it: through a JSON round trip."""
    return json.loads(json.dumps(value, default=str))


def _first_difference(recorded: Any, now: Any, path: str) -> tuple[str, Any, Any] | None:
    """The first place two JSON values differ, as (path, recorded, now); None when equal."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in [*recorded, *(k for k in now if k not in recorded)]:
            if key not in now or key not in recorded:
                return f"{path}.{key}", recorded.get(key, _ABSENT), now.get(key, _ABSENT)
            found = _first_difference(recorded[key], now[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list):
        for index, (a, b) in enumerate(zip(recorded, now, strict=False)):
            found = _first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(recorded) != len(now):
            index = min(len(recorded), len(now))
            return (
                f"{path}[{index}]",
                recorded[index] if index < len(recorded) else _ABSENT,
                now[index] if index < len(now) else _ABSENT,
            )
        return None
    if type(recorded) is not type(now) or recorded != now:
        return path, recorded, now
    return None


def _show_pair(recorded: Any, now: Any) -> tuple[str, str]:
    """Short reprs; for two strings, the part around where they first differ."""
    if isinstance(recorded, str) and isinstance(now, str) and recorded != _ABSENT != now:
        start = next(
            (i for i, (a, b) in enumerate(zip(recorded, now, strict=False)) if a != b),
            min(len(recorded), len(now)),
        )
        start = max(0, start - 40)
        return _clip_repr(recorded, start), _clip_repr(now, start)
    return _clip_repr(recorded, 0), _clip_repr(now, 0)


def _clip_repr(value: Any, start: int) -> str:
    if value == _ABSENT or not isinstance(value, str):
        text = value if value == _ABSENT else json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
    piece = value[start : start + _SHOWN]
    shown = json.dumps(piece, ensure_ascii=False)
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + _SHOWN < len(value) else ""
    return prefix + shown + suffix


# --- the recorded response --------------------------------------------------------------------


def _response(event: Mapping[str, Any]) -> ChatResponse:
    message: Message = dict(event.get("message") or {"role": "assistant", "content": None})
    calls: list[ToolCall] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments, raw, error = parse_arguments(function.get("arguments"))
        calls.append(
            ToolCall(str(call.get("id")), str(function.get("name")), arguments, raw, error)
        )
    usage = event.get("usage") or {}
    return ChatResponse(
        message=message,
        content=message.get("content"),
        tool_calls=tuple(calls),
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
        finish_reason=event.get("finish_reason"),
        model=event.get("model"),
        tool_calls_from_text=bool(event.get("tool_calls_from_text", False)),
        warnings=tuple(event.get("warnings") or ()),
    )


__all__ = [
    "Diverged",
    "Divergence",
    "Recording",
    "ReplayChatClient",
    "ReplayReport",
    "ReplayState",
    "recorded_tools",
    "replay",
]
