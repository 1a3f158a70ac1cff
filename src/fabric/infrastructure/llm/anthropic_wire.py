"""Translating between fabric's OpenAI-form history and Anthropic's Messages API, both ways.

Going out: system messages become the ``system`` field, assistant tool calls become
``tool_use`` blocks (arguments as objects), tool results become ``tool_result`` blocks at the
start of the next user turn, and adjacent messages of one role merge, because the API wants user
and assistant turns to alternate. Coming back: text and ``tool_use`` blocks become an OpenAI-form
assistant message with ``tool_calls``, so the history stays provider-neutral and a fallback to
another backend can carry on with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fabric.domain.arguments import parse_arguments
from fabric.domain.models import ChatResponse, Message, Usage, assistant_message, content_text

from .anthropic_stream import Reply

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
"""Anthropic stop reasons as OpenAI finish reasons; others (``refusal``, ``pause_turn``) pass
through as they are."""
_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API from an OpenAI-form history."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    awaiting: set[str] = set()  # tool_use ids of the last assistant turn without a result yet
    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role in ("system", "developer"):
            if text.strip():
                system.append(text)
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text.strip():
                blocks.append({"type": "text", "text": text})
            awaiting = set()
            for index, call in enumerate(message.get("tool_calls") or []):
                block = _tool_use(call, index)
                awaiting.add(block["id"])
                blocks.append(block)
            _append(turns, "assistant", blocks)
        elif role == "tool":
            call_id = _safe_id(message.get("tool_call_id"), 0)
            if call_id in awaiting:
                awaiting.discard(call_id)
                result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
                if text:
                    result["content"] = text
                _append(turns, "user", [result])
            else:  # the API refuses a result without its tool_use turn; keep it as text
                _append(turns, "user", [{"type": "text", "text": f"[tool {call_id}] {text}"}])
        elif text.strip():
            _append(turns, "user", [{"type": "text", "text": text}])
    return "\n\n".join(system), turns


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI ``tools`` entries as Anthropic tool definitions."""
    out = []
    for tool in tools:
        function = tool.get("function", tool)
        entry: dict[str, Any] = {"name": str(function.get("name") or "")}
        if function.get("description"):
            entry["description"] = str(function["description"])
        entry["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        out.append(entry)
    return out


def to_chat_response(reply: Reply) -> ChatResponse:
    """A ``Reply`` as fabric's ``ChatResponse``, its message in OpenAI wire form."""
    content = reply.text or None
    wire = assistant_message(content, reply.tool_calls)
    reason = reply.stop_reason
    return ChatResponse(
        message=wire,
        content=content,
        tool_calls=tuple(reply.tool_calls),
        usage=Usage(reply.input_tokens, reply.output_tokens),
        finish_reason=_FINISH.get(reason, reason) if reason else None,
        model=reply.model,
        warnings=tuple(reply.warnings),
    )


def _append(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Add blocks as a turn, merged into the last one when it has the same role (tool results
    first: the API wants them at the start of the user turn that follows the tool calls)."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        merged = turns[-1]["content"] + blocks
        turns[-1]["content"] = sorted(merged, key=lambda b: b["type"] != "tool_result")
    else:
        turns.append({"role": role, "content": blocks})


def _tool_use(call: Any, index: int) -> dict[str, Any]:
    call = call if isinstance(call, Mapping) else {}
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    arguments, _, _ = parse_arguments(function.get("arguments"))
    return {
        "type": "tool_use",
        "id": _safe_id(call.get("id"), index),
        "name": str(function.get("name") or ""),
        "input": arguments or {},
    }


def _safe_id(value: Any, index: int) -> str:
    """A tool call id the API accepts (letters, digits, ``_`` and ``-``), the same on the
    tool_use and its tool_result."""
    return _ID_UNSAFE.sub("_", str(value or "")) or f"call_{index}"
