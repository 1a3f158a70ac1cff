"""Plain data that flows through a run. No I/O here.

Chat messages stay in the OpenAI chat wire form (``{"role": ..., "content": ...}``): the loop
appends to that list and never re-walks it, and adapters for other providers translate at
their edge.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from msgspec import Struct, field

Message = dict[str, Any]
"""One chat message in OpenAI wire form."""

JSONSchema = Mapping[str, Any]


class ToolCall(Struct, frozen=True):
    """A tool call the model asked for.

    ``arguments`` is the parsed JSON object, or None when the model sent something that is not
    a JSON object; then ``arguments_error`` says why and ``raw_arguments`` keeps what came.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str = ""
    arguments_error: str | None = None


def content_text(content: Any) -> str:
    """A history message's content as plain text (for providers that take text only): a
    string as is, the text parts of a list of content parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping) and "text" in p
        )
    return json.dumps(content)


def assistant_message(content: str | None, calls: Sequence[ToolCall] = ()) -> Message:
    """The assistant turn in wire form, as it goes back into the history: the text, and the
    tool calls with their arguments as the JSON text the model sent."""
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in calls
        ]
    return message


class Usage(Struct, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatResponse(Struct, frozen=True):
    """What one model call returned.

    ``message`` is the assistant message exactly as it goes back into the history.
    ``tool_calls_from_text`` is set when the calls were parsed out of the reply's text (the
    per-model ``text_tool_calls`` option) rather than sent as native tool calls.
    """

    message: Message
    content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str | None = None
    tool_calls_from_text: bool = False
    warnings: tuple[str, ...] = ()
    """Things the adapter noticed and a person should see in the runlog: a prompt the server
    truncated, stream chunks it could not read."""


class ChatDelta(Struct, frozen=True):
    """A piece of a streamed reply, for live display: some text, or a fragment of tool call
    number ``tool_index`` (its ``tool_name`` comes with the first fragment)."""

    text: str = ""
    tool_index: int | None = None
    tool_name: str | None = None
    arguments: str = ""


DeltaSink = Callable[[ChatDelta], None]
"""Receives a streamed reply's pieces as they arrive (for live display only)."""


class ChatRequest(Struct, frozen=True):
    """One model call: the whole history in wire form, the tools offered (OpenAI ``tools``
    entries), and where a streaming client sends each piece of the reply. One value, so every
    client and every wrapper has the same short signature and passes the request on whole."""

    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] = ()
    on_delta: DeltaSink | None = None
    history: Sequence[Message] | None = None
    """The run's history as it is, when ``messages`` sends less of it (older turns summarised
    to fit the model's window): what a replay compares with the recorded history."""


class ModelInfo(Struct, frozen=True):
    """A model a backend offers, with what is known of it (None: not known)."""

    name: str
    backend: str
    tools: bool | None = None
    """Whether it can call tools."""
    embedding_only: bool = False
    context_length: int | None = None
    parameters_b: float | None = None
    """Size in billions of parameters."""
    family: str | None = None
    quantization: str | None = None


class ToolSpec(Struct, frozen=True):
    """How a tool is offered to the model: the OpenAI ``tools`` entry, in parts."""

    name: str
    description: str
    parameters: JSONSchema
    repeat_safe: bool = True
    """Whether running a call of it twice does no harm. A durable run driven again after its
    process died runs a call that was cut off again only after a person says so when this is
    False (ADR 0020); the model is not told."""
    reads_only: bool = False
    """Whether a call only looks (it changes nothing a person or a later call could notice):
    a durable run records its result together with the next step, so a process that dies in
    between makes the call again rather than paying for a recorded step of its own (ADR 0020)."""

    def as_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class RunStatus(enum.StrEnum):
    """How a run ended. Only ``completed`` means the work is done as far as fabric can tell."""

    COMPLETED = "completed"
    """finish_task was called with arguments that match the pack's schema, and, for a pack
    that checks its work, a check that would have failed without the work passed."""
    COMPLETED_UNCONFIRMED = "completed_unconfirmed"
    """finish_task was valid and passed every check, but none of them could confirm the work
    itself (the answer to a question; tests that passed before the run began): read it."""
    COMPLETED_FROM_TEXT = "completed_from_text"
    """The model stopped calling tools, even after a nudge; the payload wraps its text."""
    INVALID_OUTPUT = "invalid_output"
    """finish_task kept failing validation until the repair rounds ran out."""
    UNVERIFIED = "unverified"
    """finish_task was valid, but the pack's verification of the work (its tests, the
    citations' sources) kept failing until the repair rounds ran out, or could not run."""
    MAX_STEPS = "max_steps"
    """The step limit was reached before finish_task."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A limit of the run's budget (``limits.budget``: tokens, cost, time, tool or model
    calls) was reached; the error says which and how much was used."""
    CANCELLED = "cancelled"
    """Someone stopped the run."""
    FAILED = "failed"
    """A fatal error (model server, configuration) ended the run."""


class RunResult(Struct, frozen=True):
    run_id: str
    status: RunStatus
    payload: dict[str, Any] | None
    steps: int
    usage: Usage
    duration_s: float
    runlog_path: str | None
    error: dict[str, str] | None = None
    cost_usd: float | None = None
    """What the model calls cost, from the configured prices (None: no price table); models
    without a price count as 0 and are listed in the runlog's ``run_finished.cost``."""

    @property
    def succeeded(self) -> bool:
        return self.status is RunStatus.COMPLETED
