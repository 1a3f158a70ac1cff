"""``fabric skills``: the skills a run of a pack in a workspace would be offered, where each
comes from, and every folder that looked like a skill but was skipped, with the reason
(ADR 0027). It looks exactly as a run does (``find_skills``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from .options import ConfigOpt, JsonOpt
from .startup import fail, load

if TYPE_CHECKING:
    from fabric.application.skills import Found
    from fabric.config.schema import SkillSettings


def skills(
    config: ConfigOpt = None,
    pack: Annotated[
        str | None,
        typer.Option("--pack", "-p", help="Whose skill settings to use (default: default_pack)."),
    ] = None,
    workspace: Annotated[
        Path,
        typer.Option(
            "--workspace",
            "-w",
            help="The workspace to look in (default: here).",
            show_default=False,
        ),
    ] = Path(),
    as_json: JsonOpt = False,
) -> None:
    """List the skills a run would be offered (name, description, where from) and the folders
    skipped, with why: the pack's configured skill folders and the workspace's .agents/skills."""
    from fabric.application.workspaces import check_workspace
    from fabric.domain.errors import FabricError
    from fabric.infrastructure.additions.skill_folders import find_skills
    from fabric.infrastructure.packs.registry import load_pack

    loaded = load(config, as_json)
    try:
        name = loaded.pack_name(pack)
        settings = load_pack(loaded, name).settings.skills
        folder = check_workspace(workspace, loaded, runs_dir=loaded.runs_dir)
        found = find_skills(settings, folder, loaded.base_dir, loaded.runs_dir)
    except FabricError as exc:
        fail(exc, as_json=as_json, code=2)
    looked = [*map(str, settings.configured(loaded.base_dir)), *settings.workspace_folders]
    if as_json:
        report = _report(name, folder, settings, looked, found)
        typer.echo(json.dumps(report, indent=2))
    else:
        _print(name, folder, settings, looked, found, sys.stdout)


def _report(
    pack: str, workspace: Path, settings: SkillSettings, looked: list[str], found: Found
) -> dict[str, Any]:
    skills = [
        {"name": s.name, "description": s.description, "source": s.source,
         "folder": s.folder, "sha256": s.sha256}
        for s in found.skills
    ]  # fmt: skip
    skipped = [{"folder": s.folder, "reason": s.reason} for s in found.skipped]
    return {
        "pack": pack,
        "workspace": str(workspace),
        "enabled": settings.enabled,
        "folders": looked,
        "skills": skills,
        "skipped": skipped,
    }


def _print(
    pack: str,
    workspace: Path,
    settings: SkillSettings,
    looked: list[str],
    found: Found,
    out: TextIO,
) -> None:
    if not settings.enabled:
        out.write(f"skills are off for pack {pack!r} (packs.{pack}.skills.enabled: false); "
                  "with them on, a run would be offered:\n")  # fmt: skip
    if found.skills:
        out.write(f"skills for pack {pack!r} in {workspace}:\n")
        width = max(len(s.name) for s in found.skills)
        for s in found.skills:
            where = "workspace (untrusted)" if s.source == "workspace" else "configured"
            out.write(f"  {s.name:<{width}}  {_short(s.description)}\n")
            out.write(f"  {'':<{width}}  {where}: {_plain(s.folder)}\n")
    else:
        out.write(f"no skills for pack {pack!r} in {workspace}; looked in: "
                  f"{', '.join(looked) or 'no folder'}\n")  # fmt: skip
        out.write("a skill is a folder <skill>/SKILL.md with name and description in its "
                  "front matter, in one of those folders\n")  # fmt: skip
    if found.skipped:
        out.write("skipped:\n")
        for skipped in found.skipped:
            out.write(f"  {_plain(skipped.folder)}: {_plain(skipped.reason)}\n")


def _short(text: str, most: int = 100) -> str:
    line = _plain(" ".join(text.split()))
    return line if len(line) <= most else line[: most - 3] + "..."


def _plain(text: str) -> str:
    """``text`` with what a terminal would act on (escape sequences, other control
    characters) written out: folder names and descriptions come from the workspace."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
