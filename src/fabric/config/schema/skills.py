"""A pack's ``skills:``: where its runs find skills, folders of instructions (``SKILL.md``) with
the scripts and files they need, which the model loads by name when a task calls for one
(ADR 0027)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from pydantic import Field, field_validator

from .base import _Strict


class SkillSettings(_Strict):
    """Where a pack's runs look for skills, and how much they take of them."""

    enabled: bool = Field(
        True,
        description="Offer the skills found to the model: their names and descriptions in the "
        "prompt and a load_skill tool (only when at least one is found).",
    )
    folders: list[str] = Field(
        [],
        description="Configured skill folders, each holding <skill>/SKILL.md: relative to the "
        "config file's folder, or absolute, or from ~. A skill here wins over a workspace "
        "skill of the same name; commands may read these folders (read-only).",
    )
    workspace_folders: list[str] = Field(
        default_factory=lambda: [".agents/skills"],
        description="Folders inside the run's workspace that hold skills (relative paths). "
        "Their skills are the workspace's, untrusted like any file there.",
    )
    max_skills: int = Field(32, ge=1, le=500, description="Skills offered to a run at most.")
    max_bytes: int = Field(
        32_000,
        ge=1_000,
        le=1_000_000,
        description="A SKILL.md larger than this many bytes is skipped; a file of a skill "
        "read with load_skill is cut at this size.",
    )

    @field_validator("workspace_folders")
    @classmethod
    def _inside_the_workspace(cls, folders: list[str]) -> list[str]:
        for folder in folders:
            path = PurePosixPath(folder)
            if not folder.strip() or folder.startswith("~") or path.is_absolute():
                raise ValueError(
                    f"{folder!r} is not a folder inside the workspace: give a relative path "
                    "such as .agents/skills (configured folders go under skills.folders)"
                )
            if ".." in path.parts or "\x00" in folder:
                raise ValueError(f"{folder!r} leads out of the workspace: '..' is refused")
        return folders

    def configured(self, base_dir: Path) -> tuple[Path, ...]:
        """The configured folders as absolute paths (symlinks resolved), in order, once each:
        relative ones from ``base_dir``, the config file's folder."""
        places = (base_dir / Path(folder).expanduser() for folder in self.folders if folder)
        return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in places))
