"""The model's side of a recorded run, answered from the recording.

``ReplayChatClient``: before answering model call *k* it compares what the loop sends now (the
whole history, the tool definitions) with what was sent then, rebuilt from the runlog (ADR
0003), and answers with the recorded reply; on a difference it raises ``Diverged``, which
ends the replay. ``RecordedSummaries`` gives back the summaries the run's
``context_compacted`` events hold, so older turns are summarised as they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fabric.application.ports import Summarize
from fabric.domain.arguments import parse_arguments
from fabric.domain.errors import RunError
from fabric.domain.models import ChatRequest, ChatResponse, Message, ToolCall, Usage

from .divergence import Diverged, ReplayState, first_difference, first_difference_in_list, plain
from .recording import Recording


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


class RecordedSummaries:
    """``Summarize`` from a recording: the summaries its ``context_compacted`` events hold, in
    order (a replay writes none of its own); ``upto_step``: only those written before the
    model call of that step or an earlier one (a resume: later ones are new)."""

    def __init__(
        self,
        recording: Recording,
        state: ReplayState,
        *,
        then: Summarize | None = None,
        upto_step: int | None = None,
    ) -> None:
        self._written = [
            (int(e.get("step", 0)), e["summary"])
            for e in recording.compacted
            if isinstance(e.get("summary"), Mapping)
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


__all__ = ["RecordedSummaries", "ReplayChatClient", "recorded_response"]
