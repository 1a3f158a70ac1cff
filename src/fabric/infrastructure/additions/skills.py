"""Skills in a run (ADR 0027): the skills found for it (``skill_folders.py``) listed by name
and description in the prompt, and the ``load_skill`` tool (``load_skill.py``) that gives the
model a skill's instructions and files when it asks. A skill's scripts run through the pack's
own ``shell`` tool, confined like any command: a workspace skill's files are workspace files,
and the configured skill folders are bound read-only into the sandbox
(``RunSetup.commands_for``). A resume or a replay offers the skills the run was offered
(``restore``), each loading only while its SKILL.md is still the one recorded."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fabric.application.additions import Addition, started_in

if TYPE_CHECKING:
    from fabric.application.skills import Found, Skill

    from . import Where

NAME = "skills"
"""The addition's key in ``run_started.additions``."""


def skills(where: Where) -> Addition:
    """The skills a run in ``where.workspace`` is offered, with ``load_skill``; only the
    record of what was skipped when none is; nothing to record when nothing was found (but a
    ``restore``). A run with no configured folder and none of the workspace's costs a stat or
    two, and imports nothing more."""
    settings = where.settings.skills
    looked = (where.workspace / folder for folder in settings.workspace_folders)
    if not settings.folders and not any(os.path.lexists(path) for path in looked):
        return _addition(where, (), {})
    found = _found(where)
    return _addition(where, found.skills, found.record() if found.skipped or found.skills else {})


def _found(where: Where) -> Found:
    from .skill_folders import find_skills

    loaded = where.loaded
    return find_skills(where.settings.skills, where.workspace, loaded.base_dir, loaded.runs_dir)


def _addition(where: Where, offered: Sequence[Skill], meta: Mapping[str, Any]) -> Addition:
    def restore(events: Sequence[Mapping[str, Any]]) -> Addition:
        return _restored(where, events)

    if not offered:
        return Addition(NAME, meta=meta, restore=restore)
    from fabric.application.skills import listing
    from fabric.infrastructure.tools.function_tool import FunctionTool

    from .load_skill import Book, load_skill

    book = Book({s.name: s for s in offered}, where.settings.skills.max_bytes)
    tool = FunctionTool(load_skill, bind={"book": book})
    return Addition(NAME, listing(offered), (tool,), meta, restore=restore)


def _restored(where: Where, events: Sequence[Mapping[str, Any]]) -> Addition:
    """The skills as the recorded run was offered them (its ``run_started``): the same list in
    the prompt, whatever the folders hold now; each skill's instructions those found now if
    its SKILL.md is still the one recorded (same hash), else none (``load_skill`` says so).
    When the prompt does not hold them as recorded, the skills as they are now."""
    import msgspec

    from fabric.application.skills import recorded_skills

    started = started_in(events)
    then = recorded_skills(started)
    if then is None:  # not as recorded: as they are now (a replay says where it differs)
        return skills(where)
    meta = (started.get("additions") or {}).get(NAME) or {}
    if not then:
        return _addition(where, (), meta)
    now = {_same(s): s.body for s in _found(where).skills}
    kept = [msgspec.structs.replace(s, body=now.get(_same(s))) for s in then]
    return _addition(where, kept, meta)


def _same(skill: Skill) -> tuple[str, str, str, str]:
    """What must match for a skill found now to be the one a run was offered."""
    return skill.name, skill.source, skill.folder, skill.sha256
