"""A pack's ``instructions:``: the workspace's own guidance for agents (``AGENTS.md``) given to
the model with the pack's prompt (ADR 0026)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from .base import _Strict

_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A file name looked for in a folder: no folders, no leading dot or dash."""


class InstructionsSettings(_Strict):
    """Which files of the workspace tell the model how to work in the project, and how much
    of them it gets. Their text is the project's guidance, never a command: it cannot change
    the pack's tools, sandbox, policy or the task."""

    enabled: bool = Field(
        True,
        description="Give the model the workspace's instructions: the file at its root in "
        "the system prompt, after the pack's own prompt.",
    )
    files: tuple[str, ...] = Field(
        ("AGENTS.md",),
        min_length=1,
        max_length=8,
        description="File names looked for in a folder, in order: the first one there is "
        "that folder's instructions (e.g. [AGENTS.md, CLAUDE.md]).",
    )
    nested: bool = Field(
        True,
        description="Also give the instructions of a subfolder, once, with the output of the "
        "first tool call that touches a path below it (nearer files take precedence).",
    )
    max_chars: int = Field(
        12_000,
        ge=0,
        le=200_000,
        description="Characters of instructions one run gets in all; a file that does not "
        "fit is cut short, and says so.",
    )

    @field_validator("files")
    @classmethod
    def _plain_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _FILE_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a plain file name: give names like AGENTS.md (letters, "
                    "digits, '.', '-', '_'; no folders)"
                )
        return names
