"""``fabric skills`` as a user meets it: the skills a run of a pack would be offered in a
workspace, where each is from, and every folder skipped with the reason; as text and JSON;
and its errors (what happened, what to do)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabric.interfaces.cli.app import app

CONFIG = """
    version: 1
    runs_dir: runs
    default_pack: helper
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        tools: [read_file, shell]
        sandbox: {allowed_commands: [python]}
        finish_schema: {type: object, properties: {answer: {type: string}}}
        skills: {folders: [team-skills]}
      quiet:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}}
        skills: {enabled: false}
"""


def _skill(folder: Path, name: str, description: str) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n")


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A project: the config, a configured skill, a workspace ``ws`` with two skills (one
    shadowed by the configured one) and a broken one."""
    (tmp_path / "fabric.yaml").write_text(textwrap.dedent(CONFIG))
    _skill(tmp_path / "team-skills", "release-notes", "Write release notes our way.")
    skills = tmp_path / "ws" / ".agents" / "skills"
    _skill(skills, "release-notes", "The workspace's own notes.")
    _skill(skills, "regen-table", "Regenerate table.txt from data.csv.")
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("---\nname: Broken!\ndescription: x\n---\n")
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_skills_lists_what_a_run_would_be_offered_and_what_was_skipped(
    cli: CliRunner, tmp_path: Path
) -> None:
    result = cli.invoke(app, ["skills", "--workspace", "ws"])
    assert result.exit_code == 0, result.output
    team = tmp_path / "team-skills" / "release-notes"
    assert result.stdout == (
        f"skills for pack 'helper' in {tmp_path / 'ws'}:\n"
        "  release-notes  Write release notes our way.\n"
        f"                 configured: {team}\n"
        "  regen-table    Regenerate table.txt from data.csv.\n"
        "                 workspace (untrusted): .agents/skills/regen-table\n"
        "skipped:\n"
        "  .agents/skills/broken: name 'Broken!' is not a skill name: lowercase letters, "
        "digits and single hyphens, at most 64 characters\n"
        f"  .agents/skills/release-notes: its name is taken by configured skill {team}, "
        "which comes first\n"
    )


def test_skills_as_json(cli: CliRunner, tmp_path: Path) -> None:
    result = cli.invoke(app, ["skills", "-w", "ws", "--json", "--pack", "helper"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pack"] == "helper" and report["enabled"] is True
    assert report["folders"] == [str(tmp_path / "team-skills"), ".agents/skills"]
    assert [(s["name"], s["source"]) for s in report["skills"]] == [
        ("release-notes", "configured"),
        ("regen-table", "workspace"),
    ]
    assert report["skills"][1]["description"] == "Regenerate table.txt from data.csv."
    assert [s["folder"] for s in report["skipped"]] == [
        ".agents/skills/broken",
        ".agents/skills/release-notes",
    ]


def test_skills_of_a_pack_with_skills_off_or_none_found(cli: CliRunner, tmp_path: Path) -> None:
    off = cli.invoke(app, ["skills", "-p", "quiet", "-w", "ws"])
    assert off.exit_code == 0, off.output
    assert off.stdout.startswith(
        "skills are off for pack 'quiet' (packs.quiet.skills.enabled: false); with them on, "
        "a run would be offered:\nskills for pack 'quiet' in "
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "team-skills").rename(tmp_path / "old-skills")
    none = cli.invoke(app, ["skills", "-w", "empty"])
    assert none.exit_code == 0, none.output
    assert none.stdout == (
        f"no skills for pack 'helper' in {tmp_path / 'empty'}; looked in: "
        f"{tmp_path / 'team-skills'}, .agents/skills\n"
        "a skill is a folder <skill>/SKILL.md with name and description in its front matter, "
        "in one of those folders\n"
    )


def test_skills_errors_say_what_to_do(cli: CliRunner, tmp_path: Path) -> None:
    unknown = cli.invoke(app, ["skills", "-p", "nope", "--json"])
    assert unknown.exit_code == 2
    error = json.loads(unknown.stdout)["error"]
    assert error["message"].startswith("no pack named 'nope' in ")
    assert error["hint"].startswith("known packs: ")
    missing = cli.invoke(app, ["skills", "-w", "not-there"])
    assert missing.exit_code == 2
    assert "not-there" in missing.stderr and "hint:" in missing.stderr


def test_names_from_the_workspace_cannot_drive_the_terminal(cli: CliRunner, tmp_path: Path) -> None:
    skills = tmp_path / "ws" / ".agents" / "skills"
    (skills / "evil\x1b[2J").mkdir()
    (skills / "bell").mkdir()
    (skills / "bell" / "SKILL.md").write_text(  # YAML's escapes: a bell and a C1 CSI
        '---\nname: bell\ndescription: "Rings\\a the \\x9b31m bell."\n---\n'
    )
    result = cli.invoke(app, ["skills", "-w", "ws"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\x9b" not in result.stdout
    assert "  .agents/skills/evil\\x1b[2J: it has no SKILL.md\n" in result.stdout
    assert "  bell           Rings\\x07 the \\x9b31m bell.\n" in result.stdout
