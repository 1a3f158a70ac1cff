"""The workspace's instructions for agents (``AGENTS.md``, ADR 0026) as the model is given
them: a file's bytes cleaned and cut to the room left, framed as the project's guidance and
never as a command, the folders a tool call reaches into, and what a recorded run was given.
Reading the files is the adapter's (``infrastructure/additions/instructions.py``)."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from fabric.config.prompts import (
    INSTRUCTIONS,
    INSTRUCTIONS_BLOCK,
    INSTRUCTIONS_CUT,
    NESTED_INSTRUCTIONS,
)
from fabric.domain.text import without_invisible

NAME = "instructions"
"""The addition's key in ``run_started.additions`` and ``tool_result.additions``."""
PATH_ARGUMENTS = ("path", "paths")
"""The arguments of a tool call that name workspace paths (the file tools' ``path``)."""
_DEEPEST = 16
"""Folders below the root looked at for one path, at most."""
_CONTROLS = dict.fromkeys([*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)])
"""Control characters but newline and tab (a ``str.translate`` table: they go)."""
_TAG = re.compile(r"<(?=\s*/?\s*project_instructions)", re.IGNORECASE)
_NOT_A_TAG = "\u2039"
"""What a file's own ``<project_instructions`` starts with instead (a look-alike angle)."""


class Given(Struct, frozen=True):
    """One file's instructions as the model got them."""

    path: str
    """Workspace-relative, '/'-separated."""
    text: str
    cut: bool = False
    """The file goes on past ``text``: it did not fit the room left."""

    @property
    def folder(self) -> str:
        """The folder it speaks for ('' for the workspace root)."""
        return posixpath.dirname(self.path)

    def meta(self) -> dict[str, Any]:
        """As ``additions.instructions.given`` records it: ``sha256`` is that of the text as
        given (for a file given whole, the file's own)."""
        digest = hashlib.sha256(self.text.encode()).hexdigest()
        return {"path": self.path, "chars": len(self.text), "sha256": digest, "cut": self.cut}


class Skipped(Struct, frozen=True):
    """A file that was there but not given, and why."""

    path: str
    why: str

    def meta(self) -> dict[str, str]:
        return {"path": self.path, "why": self.why}


def cleaned(path: str, raw: bytes, room: int, *, more: bool) -> Given | Skipped:
    """The instructions ``raw`` (a file's first bytes; ``more``: the file goes on) hold, at
    most ``room`` characters of them: decoded as UTF-8 (bad bytes replaced), control
    characters but newline and tab removed, invisible ones too, cut where the room ends; or
    why they are not given (binary, not text, empty)."""
    if b"\x00" in raw[:8192]:
        return Skipped(path, "binary: it holds NUL bytes")
    text = raw.decode("utf-8", "replace")
    if text.count("\ufffd") > max(8, len(text) // 10):
        return Skipped(path, "not UTF-8 text")
    text = without_invisible(text.replace("\r\n", "\n").translate(_CONTROLS))
    text = _TAG.sub(_NOT_A_TAG, text)  # the file's text cannot end its own block
    cut = more or len(text) > room
    text = text[:room]
    if not text.strip():
        return Skipped(path, "empty")
    return Given(path, text, cut)


def block(given: Given) -> str:
    """One file's text between its markers, and a note when it was cut short."""
    path = quoted(given.path)
    cut = INSTRUCTIONS_CUT.format(path=path) if given.cut else ""
    text = given.text if given.text.endswith("\n") else given.text + "\n"
    return INSTRUCTIONS_BLOCK.format(path=path, text=text, cut=cut)


def root_prompt(given: Given) -> str:
    """What the system prompt gets after the pack's own: the root's instructions."""
    return INSTRUCTIONS.format(path=quoted(given.path), block=block(given))


def nested_text(given: Sequence[Given]) -> str:
    """What one tool call's output gets: subfolders' instructions, farther ones first."""
    ordered = sorted(given, key=lambda g: g.folder.count("/"))
    folders = " and ".join(quoted(g.folder + "/") for g in ordered)
    paths = " then ".join(quoted(g.path) for g in ordered)
    blocks = "\n".join(block(g) for g in ordered)
    return NESTED_INSTRUCTIONS.format(folders=folders, paths=paths, blocks=blocks)


def quoted(path: str) -> str:
    """A workspace path in fabric's own words: quoted and escaped, so that no name of a
    file or folder can read as fabric's text or end a block."""
    return json.dumps(path)


def touched_folders(arguments: Mapping[str, Any]) -> list[str]:
    """The folders a tool call's path arguments reach into, below the root, farther ones
    first: ``src/app/models.py`` reaches ``src``, ``src/app`` (and ``src/app/models.py``,
    which may be a folder too). Absolute paths and paths that leave the root reach none."""
    found: dict[str, None] = {}
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        paths = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        for path in paths[:16]:
            if isinstance(path, str):
                found.update(dict.fromkeys(_folders_of(path)))
    return sorted(found, key=lambda f: f.count("/"))


def _folders_of(path: str) -> list[str]:
    text = path.strip()
    if not text or "\x00" in text or text.startswith(("/", "~")):
        return []
    normal = posixpath.normpath(text)
    if normal in (".", "..") or normal.startswith("../"):
        return []
    parts = normal.split("/")[:_DEEPEST]
    return ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def recorded_meta(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """What ``run_started`` or a ``tool_result`` records of the instructions ({}: none)."""
    meta = (event.get("additions") or {}).get(NAME) if isinstance(event, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def given_entries(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    entries = meta.get("given")
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, Mapping) and isinstance(e.get("path"), str)]


def given_before(events: Sequence[Mapping[str, Any]]) -> tuple[set[str], int]:
    """The folders whose instructions a recorded run was given, and their characters in all
    (``run_started`` and its ``tool_result`` events)."""
    folders: set[str] = set()
    chars = 0
    for event in events:
        if event.get("kind") not in ("run_started", "tool_result"):
            continue
        for entry in given_entries(recorded_meta(event)):
            folders.add(posixpath.dirname(str(entry["path"])))
            chars += int(entry.get("chars") or 0)
    return folders, chars


def recovered(system_prompt: str, entry: Mapping[str, Any]) -> Given | None:
    """The root's instructions as a recorded run was given them, found in its recorded
    system prompt by the path, length and digest ``entry`` (``additions.instructions.given``)
    records; None when it is not there as recorded."""
    path, chars = str(entry.get("path")), entry.get("chars")
    if not isinstance(chars, int):
        return None
    opening = INSTRUCTIONS_BLOCK.split("{text}")[0].format(path=quoted(path))
    at = system_prompt.find(opening)
    while at >= 0:
        start = at + len(opening)
        given = Given(path, system_prompt[start : start + chars], bool(entry.get("cut")))
        if given.meta()["sha256"] == entry.get("sha256") and root_prompt(given) in system_prompt:
            return given
        at = system_prompt.find(opening, at + 1)
    return None
