"""An MCP tool result as the model gets it: text, images and audio kept as artifacts (the
model is told where), embedded resources and links described, structured content as JSON.
Every part of it came from another program: sizes are capped, names quoted safely."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .names import printable

MAX_TEXT = 1_000_000
"""Characters of a result kept before the loop's own cap (the rest is dropped, and said)."""
MAX_PARTS = 200

SaveArtifact = Callable[[str, str], str]


def render(result: Mapping[str, Any], *, stem: str, save: SaveArtifact | None) -> str:
    """The text of ``result`` (a ``CallToolResult`` as JSON, by alias)."""
    parts: list[str] = []
    content = result.get("content")
    items = content if isinstance(content, list) else []
    for index, item in enumerate(items[:MAX_PARTS]):
        if isinstance(item, Mapping):
            parts.append(_part(item, f"{stem}-{index + 1}", save))
    if len(items) > MAX_PARTS:
        parts.append(f"[{len(items) - MAX_PARTS} more content parts left out]")
    structured = result.get("structuredContent")
    if structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False, default=str)
        if dumped not in parts:  # servers often send the same JSON as text too
            parts.append(f"structured content: {dumped}")
    text = "\n".join(p for p in parts if p) or "(the tool returned no content)"
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} characters dropped ...]"
    return text


def _part(item: Mapping[str, Any], name: str, save: SaveArtifact | None) -> str:
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))[: MAX_TEXT + 1]
    if kind in ("image", "audio"):
        mime = printable(str(item.get("mimeType", "")), 60)
        data = str(item.get("data", ""))[: 2 * MAX_TEXT]
        size = len(data) * 3 // 4
        if save is None:
            return f"[{kind} {mime}, about {size} bytes, not kept]"
        where = save(f"{name}.{kind}.base64.txt", data)
        return f"[{kind} {mime}, about {size} bytes, kept base64-encoded in {where}]"
    if kind == "resource":
        resource = item.get("resource")
        resource = resource if isinstance(resource, Mapping) else {}
        uri = printable(str(resource.get("uri", "")))
        if "text" in resource:
            return f"[resource {uri}]\n{str(resource.get('text', ''))[: MAX_TEXT + 1]}"
        return f"[resource {uri}: binary content, not shown]"
    if kind == "resource_link":
        uri, label = printable(str(item.get("uri", ""))), printable(str(item.get("name", "")))
        return f"[link to resource {label}: {uri}]"
    return f"[content of type {printable(str(kind), 40)!r} not shown]"
