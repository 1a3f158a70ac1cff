"""Keeping what a run sends inside its model's context window (ADR 0021).

Before each model call, a run whose window is known counts what it is about to send: the
characters of the history and the tool schemas, at the tokens a character the server counted
for the run's last request (one for every 3.5 characters before it has counted any). Past three
quarters of the room left for the prompt, the oldest tool outputs outside the latest turns
are replaced by a short reference (``step:call_id``), until the request is back under half of
it; the model can read any of them back with ``recall_output``. When that is not enough, the
turns before the latest ones are replaced by notes the model writes (``summary_request``).
The history the run keeps, and the runlog, hold every output and turn whole; each compaction
is a ``context_compacted`` event, and since it depends only on the history, the recorded
token counts and the recorded notes, a replay makes the same one. A request that still does
not fit ends the run with an error that says so, rather than leaving it to the server to cut
the prompt without a word. The task's message is never compacted, so the pack's brief that is
appended to it gets only a share of the room (``Window.brief_chars``). The loop's side of this
is ``fitting.py``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from fabric.application.ports import ChatClient, Summarize
from fabric.domain.models import ChatRequest, ChatResponse, Message, ToolSpec

RECALL_TOOL = "recall_output"
RECALL = ToolSpec(
    RECALL_TOOL,
    "Read again, whole, a tool output that was elided from the conversation to save context.",
    {
        "type": "object",
        "properties": {"ref": {"type": "string", "description": "The ref the elision names."}},
        "required": ["ref"],
        "additionalProperties": False,
    },
)
KEEP_TURNS = 2
"""The latest model turns whose tool outputs are never elided."""
TRIGGER, TARGET = 0.75, 0.5
"""Compact past this share of the prompt's room, down to that share."""
FIRST_RATIO = 1 / 3.5
"""Tokens a character before the server has counted a request of the run. The embedded Qwen
model counted 3.8 characters a token for the engineering pack's first request (system prompt,
tools, task and brief); 3.5 keeps a margin until the server's own count replaces it."""
SHORTEST = 400
"""Outputs shorter than this many characters are not worth eliding."""
BRIEF_SHARE = 0.25
"""The share of the prompt's room a pack's brief may fill. The brief goes into the task's
message, which is never compacted, nor are the system prompt and the tool schemas (the
engineering pack's take about another quarter of the embedded model's room): the steps get
about half, and eliding and summarising keep them in it."""


class Window(Struct, frozen=True):
    """A model's context window and the part of it kept free for the reply."""

    size: int
    reserve: int

    @property
    def prompt(self) -> int:
        """The tokens a request may have."""
        return self.size - self.reserve

    def brief_chars(self) -> int:
        """The characters a pack's brief may have: ``BRIEF_SHARE`` of the prompt's room, at
        the ``FIRST_RATIO`` the first request is counted with."""
        return int(self.prompt * BRIEF_SHARE / FIRST_RATIO)

    @classmethod
    def of(cls, size: int, max_tokens: int | None = None) -> Window:
        """A window of ``size`` tokens, keeping the reply's ``max_tokens`` free (a quarter of
        the window, at most 2,048, when the reply has no limit)."""
        reserve = max_tokens if max_tokens is not None else min(2048, size // 4)
        return cls(size, min(reserve, size // 2))


SUMMARY_CHARS = 1_500
"""Characters of each message a summary request shows, at most (head and tail)."""
SUMMARIZE = (
    "You write the working notes of an agent whose conversation no longer fits its context "
    "window. From the task, the earlier notes and the steps below, write notes that let it go "
    "on without them: what it did, what it found (file names, commands, errors, values and "
    "names exactly), and what is left to do. At most 300 words; no preamble."
)


def _clipped(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    half = SUMMARY_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - SUMMARY_CHARS:,} characters ...]\n{text[-half:]}"


def summary_request(task: str, earlier: str, turns: Sequence[Message]) -> list[Message]:
    """The request for a summary of ``turns`` (as they are sent: outputs elided), with the
    task and the summary they follow."""
    lines = [f"The task:\n{_clipped(task)}"]
    if earlier:
        lines.append(f"The notes so far:{earlier}")
    lines.append("The steps to summarise, oldest first:")
    for message in turns:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "assistant":
            functions = [c.get("function") or {} for c in message.get("tool_calls") or ()]
            calls = [f"{f.get('name')}({f.get('arguments')})" for f in functions]
            said = f" said: {_clipped(content)}" if content.strip() else ""
            lines.append(f"- the agent{said}{' and called ' + '; '.join(calls) if calls else ''}")
        elif role == "tool":
            lines.append(f"  result of {message.get('tool_call_id')}: {_clipped(content)}")
        else:
            lines.append(f"- {role}: {_clipped(content)}")
    return [{"role": "system", "content": SUMMARIZE}, {"role": "user", "content": "\n".join(lines)}]


def summary_block(through: int, text: str) -> str:
    """What stands for the summarised turns, after the task."""
    return (
        f"\n\n[fabric: steps 1-{through} were summarised to fit the model's context window; "
        f"the outputs they read are in the runlog]\n{text}"
    )


def asked_of(chat: ChatClient | None) -> Summarize | None:
    """Summaries asked of the run's own model, without tools (None: no model)."""
    if chat is None:
        return None

    async def summarize(messages: Sequence[Message]) -> ChatResponse:
        return await chat.chat(ChatRequest(messages))

    return summarize


def recorded_window(started: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The window a recorded run had (its ``run_started.context``) and its reply's limit,
    for ``Kit``: a replay or a resume of it counts and elides as it did."""
    context = started.get("context")
    if not isinstance(context, Mapping):
        return None, None
    return context.get("window"), context.get("reply_tokens")


def message_chars(message: Mapping[str, Any]) -> int:
    """About the characters ``message`` adds to a request."""
    size = len(str(message.get("content") or ""))
    calls = message.get("tool_calls")
    return size + (len(json.dumps(calls)) if calls else 0) + 16  # the role and framing


def elided_note(chars: int, ref: str) -> str:
    return (
        f"[output elided to save context: {chars:,} characters; call {RECALL_TOOL} with "
        f'ref "{ref}" to read it whole again]'
    )


__all__ = [
    "BRIEF_SHARE",
    "FIRST_RATIO",
    "KEEP_TURNS",
    "RECALL",
    "RECALL_TOOL",
    "SHORTEST",
    "TARGET",
    "TRIGGER",
    "Window",
    "asked_of",
    "elided_note",
    "message_chars",
    "recorded_window",
    "summary_block",
    "summary_request",
]
