"""Tool calls that a model wrote as JSON in its reply text, for the per-model
``text_tool_calls`` option (small local models often do this instead of sending native
``tool_calls``). Off unless configured; every adapter uses the same reading.

What counts as a call (keys in JSON objects, found anywhere in the text by a real JSON decoder):

- ``{"name": N, "arguments": A}`` (Qwen2.5, Hermes, Mistral), ``{"name": N, "parameters": A}``
  (Llama 3.1/3.2 JSON tool calling), and the aliases ``"tool"``/``"tool_name"`` for the name and
  ``"args"``/``"input"`` for the arguments; optional ``"type"`` and ``"id"`` keys. Any other
  key makes the object ordinary JSON, not a call. Missing arguments mean ``{}``.
- the OpenAI shapes ``{"type": "function", "function": {"name": N, "arguments": A}}``,
  ``{"function_call": {...}}`` and ``{"tool_calls": [...]}``.
- a JSON list of calls ``[{...}, {...}]``: it counts only if every item is a call.
- bare in the text, fenced in a ```json (or plain ```) block, inside ``<tool_call>...
  </tool_call>`` tags (Qwen/Hermes), or after ``<|python_tag|>`` (Llama) or ``[TOOL_CALLS]``
  (Mistral): fences, tags and markers around a call are removed with it.

Only names among the offered tools count; everything else stays text. ``A`` must be a JSON
object, or a string holding one. JSON inside a ``<think>...</think>`` block is the model
thinking aloud and is ignored. Python-style dicts (single quotes) are not JSON and stay text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from msgspec.structs import replace

from fabric.domain.arguments import parse_arguments
from fabric.domain.models import ChatResponse, ToolCall, assistant_message

_NAME_KEYS = ("name", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
_OTHER_KEYS = frozenset({"type", "id"})
_WRAPPERS = ("function", "function_call")
_OPENERS = re.compile(r"(?:<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\])\s*\Z", re.IGNORECASE)
_CLOSER = re.compile(r"\s*</tool_call>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"```[\w-]*[ \t]*\r?\n?\s*\Z")
_FENCE_CLOSE = re.compile(r"\s*```")
_LOOK_BACK = 64
_MAX_DEPTH = 4


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def extract_tool_calls(
    text: str, tool_names: Collection[str], *, first: int = 0
) -> tuple[str, list[ToolCall]]:
    """``(remaining text, calls)``: the calls found in ``text`` to tools named in
    ``tool_names``, with ids ``text_call_<first>``, ``text_call_<first + 1>``, ... Never
    raises."""
    try:
        return _extract(text, frozenset(tool_names), first)
    except Exception:  # model text must never crash a run
        return text, []


def apply_text_tool_calls(
    response: ChatResponse,
    tools: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]] = (),
) -> ChatResponse:
    """``response`` with the calls written in its text made into tool calls, when it has no
    native ones. The wire message then carries native ``tool_calls`` (and the rest of the text
    as content), so the history the model sees next is consistent. Pass the ``history`` the
    reply answers: ids then continue after the calls already in it, so they stay unique in
    the run (some APIs, Anthropic's among them, refuse a repeated tool call id)."""
    if response.tool_calls or not response.content:
        return response
    first = sum(
        len(m.get("tool_calls") or ())
        for m in history
        if isinstance(m, Mapping) and m.get("role") == "assistant"
    )
    remaining, calls = extract_tool_calls(response.content, offered_names(tools), first=first)
    if not calls:
        return response
    content = remaining or None
    message = assistant_message(content, calls)
    return replace(
        response,
        message=message,
        content=content,
        tool_calls=tuple(calls),
        tool_calls_from_text=True,
    )


def offered_names(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    """The function names in an OpenAI ``tools`` list."""
    names = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def tool_call_schema(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A JSON schema whose instances are exactly one call of one of ``tools``,
    ``{"name": <its name>, "arguments": <its parameters>}``: with it as the reply's
    ``response_format`` (``constrained_tool_calls``) the server's grammar makes every reply such
    a call. Each tool's ``$defs`` move to the root, where its ``$ref``s point."""
    choices: list[dict[str, Any]] = []
    definitions: dict[str, dict[str, Any]] = {"$defs": {}, "definitions": {}}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = dict(function.get("parameters") or {})
        for key, found in definitions.items():
            found.update(parameters.pop(key, None) or {})
        choices.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": function["name"]},
                    "arguments": parameters or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = {"anyOf": choices}
    schema.update({key: found for key, found in definitions.items() if found})
    return schema


def _extract(text: str, names: frozenset[str], first: int) -> tuple[str, list[ToolCall]]:
    if not names or not isinstance(text, str):
        return text, []
    thinking = _think_spans(text)
    spans: list[tuple[int, int]] = []
    found: list[tuple[str, Any]] = []
    budget = 8 * len(text) + 100_000  # characters the decoder may read, against odd inputs
    resume = 0
    for start in _candidates(text):
        if start < resume or any(a <= start < b for a, b in thinking):
            continue
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            budget -= exc.pos - start + 1
        except (ValueError, RecursionError):
            budget -= len(text) - start
        else:
            budget -= end - start
            resume = end  # JSON that is not a call is text, inside too
            here = _calls_in(value, names)
            if here:
                spans.append((start, end))
                found.extend(here)
        if budget <= 0:
            break
    if not found:
        return text, []
    pieces, last = [], 0
    for a, b in _groups(text, spans):
        pieces.append(text[last : max(a, last)])
        last = max(b, last)
    pieces.append(text[last:])
    remaining = "\n".join(p.strip() for p in pieces if p.strip())
    calls: list[ToolCall] = []
    for number, (name, arguments) in enumerate(found):
        parsed, raw, _ = parse_arguments(arguments)
        calls.append(ToolCall(f"text_call_{first + number}", name, parsed, raw, None))
    return remaining, calls


def _groups(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Calls next to each other (only blanks or commas between) as one span each, widened to
    the tags, markers or fence around them."""
    groups: list[tuple[int, int]] = []
    for a, b in spans:
        if groups and not text[groups[-1][1] : a].strip(" \t\r\n,"):
            groups[-1] = (groups[-1][0], b)
        else:
            groups.append((a, b))
    return [_widen(text, a, b) for a, b in groups]


def _candidates(text: str) -> Iterator[int]:
    """Positions where a call may start: ``{"`` or ``[{`` (whitespace allowed inside)."""
    position = -1
    while True:
        position = _next_opener(text, position + 1)
        if position < 0:
            return
        following = _skip_space(text, position + 1)
        if following < len(text) and text[following] == ('"' if text[position] == "{" else "{"):
            yield position


def _next_opener(text: str, start: int) -> int:
    brace, bracket = text.find("{", start), text.find("[", start)
    if brace < 0 or bracket < 0:
        return max(brace, bracket)
    return min(brace, bracket)


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index


def _calls_in(value: Any, names: frozenset[str], depth: int = 0) -> list[tuple[str, Any]]:
    """The calls ``value`` is (all or nothing), as (name, arguments)."""
    if depth > _MAX_DEPTH:
        return []
    if isinstance(value, list):
        calls = [_calls_in(item, names, depth + 1) for item in value]
        if value and all(len(c) == 1 for c in calls):
            return [c[0] for c in calls]
        return []
    if not isinstance(value, dict):
        return []
    if set(value) <= {"tool_calls"} and isinstance(value.get("tool_calls"), list):
        return _calls_in(value["tool_calls"], names, depth + 1)
    for wrapper in _WRAPPERS:
        inner = value.get(wrapper)
        if isinstance(inner, dict) and set(value) <= {wrapper} | _OTHER_KEYS:
            return _calls_in(inner, names, depth + 1)
    call = _one_call(value, names)
    return [call] if call else []


def _one_call(value: dict[str, Any], names: frozenset[str]) -> tuple[str, Any] | None:
    name_keys = [k for k in _NAME_KEYS if k in value]
    argument_keys = [k for k in _ARGUMENT_KEYS if k in value]
    if len(name_keys) != 1 or len(argument_keys) > 1:
        return None
    if not set(value) <= {*name_keys, *argument_keys, *_OTHER_KEYS}:
        return None
    name = value[name_keys[0]]
    if not isinstance(name, str) or name not in names:
        return None
    arguments = value[argument_keys[0]] if argument_keys else {}
    parsed, _, error = parse_arguments(arguments)
    if error is not None or parsed is None:
        return None
    return name, parsed


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of a call together with the tags, markers or fence around it."""
    before = text[max(0, start - _LOOK_BACK) : start]
    opener = _OPENERS.search(before)
    if opener:
        start -= len(before) - opener.start()
        closer = _CLOSER.match(text, end)
        if closer:
            end = closer.end()
        return start, end
    fence = _FENCE_OPEN.search(before)
    closing = _FENCE_CLOSE.match(text, end)
    if fence and closing:
        return start - (len(before) - fence.start()), closing.end()
    return start, end


def _think_spans(text: str) -> list[tuple[int, int]]:
    spans, position = [], 0
    lowered = text.lower()
    while (start := lowered.find("<think>", position)) >= 0:
        stop = lowered.find("</think>", start)
        end = len(text) if stop < 0 else stop + len("</think>")
        spans.append((start, end))
        position = end
    return spans
