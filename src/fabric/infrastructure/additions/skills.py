"""Skills in a run (ADR 0027): the skills found for it (``skill_folders.py``) listed by name
and description in the prompt, and the ``load_skill`` tool (``load_skill.py``) that gives the
model a skill's instructions and files when it asks. A skill's scripts run through the pack's
own ``shell`` tool, confined like any command: a workspace skill's files are workspace files,
and the configured skill folders are bound read-only into the sandbox
(``RunSetup.commands_for``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fabric.application.additions import Addition

if TYPE_CHECKING:
    from . import Where

NAME = "skills"
"""The addition's key in ``run_started.additions``."""


def skills_addition(where: Where) -> Addition | None:
    """The skills a run in ``where.workspace`` is offered, with ``load_skill``; only the
    record of what was skipped when none is offered; None when there is nothing at all. A
    run with no configured folder and none of the workspace's costs a stat or two."""
    settings = where.settings.skills
    looked = (where.workspace / folder for folder in settings.workspace_folders)
    if not settings.folders and not any(os.path.lexists(path) for path in looked):
        return None
    from fabric.application.skills import listing
    from fabric.infrastructure.tools.function_tool import FunctionTool

    from .load_skill import Book, load_skill
    from .skill_folders import find_skills

    loaded = where.loaded
    found = find_skills(settings, where.workspace, loaded.base_dir, loaded.runs_dir)
    if not found.skills:
        return Addition(NAME, meta=found.record()) if found.skipped else None
    book = Book({s.name: s for s in found.skills}, settings.max_bytes)
    tool = FunctionTool(load_skill, bind={"book": book})
    return Addition(NAME, listing(found.skills), (tool,), found.record())
