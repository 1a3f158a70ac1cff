"""Content on spans, when it is captured (ADR 0022): a run's messages, tool arguments and tool
results in the JSON shapes of the OpenTelemetry GenAI conventions (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.call.*``). Plain data;
nothing here imports OpenTelemetry."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CONTENT = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
)
"""Attributes that hold content: only set when it is captured, redacted as JSON."""
_FINISH = {"tool_calls": "tool_call"}
"""Finish reasons named otherwise in the conventions' output messages."""


def input_messages(messages: Any) -> str:
    """``gen_ai.input.messages``: a request's messages (the runlog's wire form) as the
    conventions' JSON (role and parts)."""
    items = messages if isinstance(messages, list) else []
    return as_json([{"role": m.get("role"), "parts": _parts(m)} for m in items if _is_map(m)])


def output_messages(message: Any, finish_reason: Any) -> str:
    """``gen_ai.output.messages``: the model's reply as the conventions' JSON."""
    parts = _parts(message) if isinstance(message, Mapping) else []
    reason = finish_reason if isinstance(finish_reason, str) and finish_reason else "stop"
    reply = {"role": "assistant", "parts": parts, "finish_reason": _FINISH.get(reason, reason)}
    return as_json([reply])


def text_messages(role: str, text: Any) -> str:
    """One message of one text part, as the conventions' JSON (a run's task, its result)."""
    content = text if isinstance(text, str) else as_json(text)
    return as_json([{"role": role, "parts": [{"type": "text", "content": content}]}])


def instructions(text: Any) -> str | None:
    """``gen_ai.system_instructions``: a system prompt as one text part."""
    return as_json([{"type": "text", "content": text}]) if isinstance(text, str) else None


def arguments(value: Any) -> str:
    """``gen_ai.tool.call.arguments``: the call's arguments as JSON (raw text stays text)."""
    return value if isinstance(value, str) else as_json(value)


def _is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") == "tool":
        return [{"type": "tool_call_response", "id": message.get("tool_call_id"),
                 "response": content}]  # fmt: skip
    parts: list[dict[str, Any]] = []
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    for item in content if isinstance(content, list) else ():
        if _is_map(item) and item.get("type") == "text":
            parts.append({"type": "text", "content": item.get("text")})
        elif _is_map(item):
            parts.append({"type": str(item.get("type") or "unknown")})
    for call in message.get("tool_calls") or ():
        function = call.get("function") if _is_map(call) and _is_map(call.get("function")) else {}
        parts.append({"type": "tool_call", "id": call.get("id") if _is_map(call) else None,
                      "name": function.get("name"),
                      "arguments": _decoded(function.get("arguments"))})  # fmt: skip
    return parts


def _decoded(raw: Any) -> Any:
    """Wire arguments (JSON text) as the object they encode; text that is no JSON as it is."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # a model's text, nested too deeply to read
        return raw


def as_json(value: Any) -> str:
    """``value`` as JSON text (what is not JSON, as its ``str``)."""
    return json.dumps(value, ensure_ascii=False, default=str)
