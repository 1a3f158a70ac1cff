"""Tool names as providers accept them: ``server__tool``, at most 64 characters of
``[A-Za-z0-9_-]``. A tool whose own name does not fit as it is gets a short hash of that name,
so its fabric name is the same in every run (policy rules and replays rely on that) and two
tools never share one."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
SEPARATOR = "__"
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def fabric_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``."""
    clean = _BAD.sub("_", tool)[:200] or "tool"
    name = f"{server}{SEPARATOR}{clean}"
    if clean == tool and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    room = MAX_NAME - len(server) - len(SEPARATOR) - len(digest) - 1
    return f"{server}{SEPARATOR}{clean[:room]}_{digest}"


def printable(text: str, limit: int = 120) -> str:
    """A server-chosen name, safe to quote in a message: no control characters, short."""
    text = "".join(c if c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"
