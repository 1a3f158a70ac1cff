"""Stand-ins that answer from a recording, and check the loop against it as they go.

- ``ReplayChatClient``: before answering model call *k* it compares what the loop sends now
  (the whole history, the tool definitions) with what was sent then, rebuilt from the runlog
  (ADR 0003), and answers with the recorded reply.
- ``recorded_tools``: tools with the pack's specs whose calls return the recorded results, in
  order (no side effects); a call the policy or a person refused never ran, so it has none.
- ``recorded_verifiers``: the checks of the work, giving the recorded verdicts.
- ``WatchingRunLog``: the replay's own runlog, comparing each tool call and each policy
  decision with the recorded one as it is written.

The first difference is noted in the shared ``ReplayState``; the chat client raises
``Diverged`` at the next model call, which ends the replay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.pack import Brief, Briefing, Pack
from fabric.application.ports import RunLog, Summarize, Tool
from fabric.application.verify import RunRecord, Verdict, Verifier
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import RecordedRunError, RecordedToolError, RunError, ToolError
from fabric.domain.models import ChatRequest, ChatResponse, Message, ToolCall, ToolSpec, Usage

from .divergence import (
    Diverged,
    ReplayState,
    first_difference,
    first_difference_in_list,
    plain,
)
from .recording import Recording

REFUSED = frozenset({"policy_denied", "approval_denied"})
"""Error codes of a tool result whose tool never ran: the policy or a person refused it."""


class ReplayChatClient:
    """A ChatClient that checks each request against the recording and answers with the
    recorded response. On the first difference it raises ``Diverged``."""

    def __init__(
        self, recording: Recording | Sequence[Mapping[str, Any]], state: ReplayState | None = None
    ) -> None:
        self.recording = recording if isinstance(recording, Recording) else Recording(recording)
        self.state = state or ReplayState()
        self.calls = 0
        self._history: list[Message] = []
        """The recorded history of the current call, extended call by call."""
        self._checked = 0
        """Leading messages of the history found equal at an earlier call: the loop only
        appends to its history, so each call compares only what is new (a replay stays
        linear in the log's length)."""
        self._tools_seen: object = None
        self._tools_then: list[Any] = []
        """The tool definitions the recorded run sent last, up to the current call."""

    @property
    def model(self) -> str:
        return str(self.recording.started.get("model") or "replay")

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        step = self.state.step = self.calls
        if self.state.divergence is not None:  # e.g. a tool call differed; stop here
            raise Diverged(self.state.divergence)
        recorded_steps = len(self.recording.steps)
        if step > recorded_steps:
            raise Diverged(
                self.state.diverge(step, "step count", recorded_steps, f"at least {step}")
            )
        self._extend_history(step)
        messages = request.messages if request.history is None else request.history
        tools = request.tools
        start = min(self._checked, len(messages))
        difference = None
        if list(messages[start:]) != self._history[start:]:  # compared as JSON only then
            now = [None] * start + plain(list(messages[start:]))
            difference = first_difference_in_list(self._history, now, "messages", start)
        recorded_tools = self.recording.steps[step - 1].tools
        if recorded_tools is not None:  # sent then: the first, or after a change
            self._tools_then = recorded_tools
        if difference is None and (tools is not self._tools_seen or recorded_tools is not None):
            difference = first_difference(self._tools_then, plain(list(tools)), "tools")
            self._tools_seen = tools  # the same list every call, a new one after a change
        if difference is not None:
            raise Diverged(self.state.diverge(step, *difference))
        self._checked = len(messages)
        response = self.recording.steps[step - 1].response
        if response is None:  # the model call failed when recorded: fail the same way
            error = (self.recording.finished or {}).get("error") or {}
            raise RunError(
                str(error.get("message", "the recorded model call did not answer")),
                hint=str(error.get("hint", "")),
            )
        return recorded_response(response)

    def _extend_history(self, step: int) -> None:
        """The recorded history of call ``step`` (1-based) from that of the call before:
        that call's reply, then this call's new messages (ADR 0003)."""
        steps = self.recording.steps
        previous = steps[step - 2] if step >= 2 else None
        if previous is not None and previous.response is not None:
            self._history.append(previous.response["message"])
        self._history += steps[step - 1].request

    async def aclose(self) -> None:
        return None


def recorded_response(event: Mapping[str, Any]) -> ChatResponse:
    """The ``ChatResponse`` an ``llm_response`` event records."""
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
        recorded, now = _call_view(expected.popleft()), _call_view(data)
        if recorded == now:
            return
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


class RecordedSummaries:
    """``Summarize`` from a recording: the summaries its ``context_compacted`` events hold, in
    order (a replay writes none of its own); ``upto_step``: only those written before the
    model call of that step or an earlier one (a resume: later ones are new)."""

    def __init__(
        self,
        recording: Recording | Sequence[Mapping[str, Any]],
        state: ReplayState,
        *,
        then: Summarize | None = None,
        upto_step: int | None = None,
    ) -> None:
        events = recording.events if isinstance(recording, Recording) else recording
        self._written = [
            (int(e.get("step", 0)), e["summary"])
            for e in events
            if e.get("kind") == "context_compacted" and isinstance(e.get("summary"), Mapping)
        ]
        self._state, self._then, self._upto = state, then, upto_step
        self._next = 0

    async def __call__(self, messages: Sequence[Message]) -> ChatResponse:
        recorded = self._written[self._next] if self._next < len(self._written) else None
        if recorded is not None and (self._upto is None or recorded[0] <= self._upto):
            self._next += 1
            text = str(recorded[1].get("text", ""))
            usage = recorded[1].get("usage") or {}
            return ChatResponse(
                {"role": "assistant", "content": text}, text, (),
                Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
                "stop",
            )  # fmt: skip
        if self._then is not None:
            return await self._then(messages)
        step = self._state.step + 1
        raise Diverged(self._state.diverge(step, "summary", "no summary here", "a summary"))


__all__ = [
    "REFUSED",
    "RecordedSummaries",
    "ReplayChatClient",
    "WatchingRunLog",
    "recorded_response",
    "recorded_tools",
]


class _RecordedVerifier:
    """A pack check whose verdicts come from the recording, in order; with ``live``, the
    checks of steps after ``upto_step`` are made for real (a resumed run's new steps)."""

    def __init__(
        self,
        name: str,
        events: deque[Mapping[str, Any]],
        state: ReplayState,
        live: Verifier | None = None,
        upto_step: int = 0,
    ) -> None:
        self._name, self._events, self._state = name, events, state
        self._live, self._upto = live, upto_step

    @property
    def name(self) -> str:
        return self._name

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        if self._live is not None and self._state.step > self._upto:
            return await self._live.verify(payload, ctx, record)
        if not self._events:
            self._state.diverge(self._state.step, f"verification({self._name})", "none", "one")
            raise RunError(f"the recording has no further result of the check {self._name!r}")
        event = self._events.popleft()
        if isinstance(event.get("error"), Mapping):
            raise RecordedRunError(event["error"])  # it could not run then
        # a skipped check too: its recorded verdict says whether it confirmed (older logs:
        # every pass did), so an old completed run replays completed
        return Verdict.from_event(event)


def recorded_verifiers(
    recording: Recording,
    pack: Pack,
    *,
    state: ReplayState,
    live: bool = False,
    upto_step: int = 0,
) -> list[Verifier]:
    """Checks named as the run recorded them (``run_started.verify``) whose verdicts come from
    its ``verification`` events, so a replay reaches the same end without running anything.
    With ``live`` (a resume, a live replay), the pack's own checks of the same name judge the
    steps after ``upto_step``; a resume needs every one of them (``missing_checks``)."""
    names = [str(n) for n in recording.started.get("verify") or ()]
    queues: dict[str, deque[Mapping[str, Any]]] = {n: deque() for n in names}
    for event in recording.verifications:
        queues.setdefault(str(event.get("check")), deque()).append(event)
    own = {v.name: v for v in pack.verifiers}
    return [
        _RecordedVerifier(n, queues[n], state, own.get(n) if live else None, upto_step)
        for n in names
    ]


def missing_checks(recording: Recording, pack: Pack) -> list[str]:
    """The checks the recorded run started with that ``pack`` no longer has."""
    own = {v.name for v in pack.verifiers}
    return [str(n) for n in recording.started.get("verify") or () if str(n) not in own]


def recorded_brief(recording: Recording) -> Brief | None:
    """The pack's look at the workspace as the run recorded it (its ``brief`` event), so a
    replay or a resume sends the model the same first message; None when it had none."""
    event = next((e for e in recording.events if e.get("kind") == "brief"), None)
    if event is None:
        return None
    told = Briefing(
        str(event.get("text", "")),
        tuple(str(p) for p in event.get("keep") or ()),
        str(event.get("keep_why", "")),
        {str(k): int(v) for k, v in (event.get("ran") or {}).items()},
    )

    async def brief(ctx: ToolContext) -> Briefing:
        return told

    return brief
