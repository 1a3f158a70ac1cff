"""Finding skills (ADR 0027): configured folders and the workspace's, which one wins, and every
reason a folder that looks like a skill is skipped, hostile ones included; the prompt that
lists them and what run_started records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from fabric.application.skills import Found, listing, one_line, recorded_skills
from fabric.config.loader import load_config
from fabric.config.schema import SkillSettings
from fabric.infrastructure.additions import Where, additions_for
from fabric.infrastructure.additions.skill_folders import find_skills
from fabric.infrastructure.additions.skills import skills


def skill(folder: Path, name: str, description: str = "Does a thing.", body: str = "") -> Path:
    """``folder/name/SKILL.md`` with that name and description in its front matter."""
    (folder / name).mkdir(parents=True, exist_ok=True)
    path = folder / name / "SKILL.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}", "utf-8")
    return path


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A config folder (tmp_path) with a workspace ``ws`` and runs folder ``runs``."""
    (tmp_path / "ws").mkdir()
    return tmp_path


def found_in(place: Path, **settings: object) -> Found:
    return find_skills(SkillSettings(**settings), place / "ws", place, place / "runs")  # type: ignore[arg-type]


def reasons(found: Found) -> dict[str, str]:
    return {s.folder: s.reason for s in found.skipped}


def test_configured_skills_come_first_and_win_over_the_workspaces(place: Path) -> None:
    ws_skills = place / "ws" / ".agents" / "skills"
    skill(place / "team", "release-notes", "Team release notes.", "# Team way\n")
    skill(ws_skills, "release-notes", "Workspace release notes.")
    skill(ws_skills, "regen-schema", "Regenerate   the\n schema.", "Run the script.\n")
    found = found_in(place, folders=["team"])
    assert [(s.name, s.source, s.folder) for s in found.skills] == [
        ("release-notes", "configured", str(place / "team" / "release-notes")),
        ("regen-schema", "workspace", ".agents/skills/regen-schema"),
    ]
    assert found.skills[0].body == "# Team way\n"
    assert reasons(found) == {
        ".agents/skills/release-notes": "its name is taken by configured skill "
        f"{place / 'team' / 'release-notes'}, which comes first"
    }
    record = found.record()
    assert record["offered"][1]["sha256"] == found.skills[1].sha256
    assert len(found.skills[1].sha256) == 64
    assert record["skipped"] == [{"folder": s.folder, "reason": s.reason} for s in found.skipped]


def test_the_prompt_lists_names_and_one_line_descriptions_only(place: Path) -> None:
    ws_skills = place / "ws" / ".agents" / "skills"
    skill(ws_skills, "regen-schema", "Regenerate the\n  schema.", "SECRET-BODY-TEXT\n")
    skill(place / "team", "deploy", "Ship it.", "OTHER-BODY\n")
    text = listing(found_in(place, folders=["team"]).skills)
    assert "- deploy: Ship it.\n" in text
    assert text.endswith("- regen-schema: Regenerate the schema. (workspace)")
    assert "load_skill" in text
    assert "BODY" not in text
    shown = repr(found_in(place, folders=["team"]).skills[0])  # as a log or traceback shows it
    assert shown.startswith("Skill(name='deploy', description='Ship it.'")
    assert "sha256=" in shown and "BODY" not in shown
    assert one_line("Clears\x1b[2J the\n  screen\x07.") == "Clears[2J the screen."


def test_a_workspace_without_skills_has_none_and_nothing_skipped(place: Path) -> None:
    assert found_in(place) == Found()
    assert found_in(place, folders=["missing"]) == Found()


def test_the_first_configured_folder_wins_and_the_limit_holds(place: Path) -> None:
    for name in ("a", "b", "c"):
        skill(place / "one", name)
    skill(place / "two", "a")
    found = found_in(place, folders=["one", "two"], max_skills=2)
    assert [s.name for s in found.skills] == ["a", "b"]
    assert reasons(found) == {
        str(place / "one" / "c"): "over the limit of 2 skills (max_skills)",
        str(place / "two" / "a"): f"its name is taken by configured skill {place / 'one' / 'a'}"
        ", which comes first",
    }


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")


def test_every_reason_a_workspace_folder_is_skipped(place: Path) -> None:
    folder = place / "ws" / ".agents" / "skills"
    secret = place / "secret.md"
    secret.write_text("---\nname: stolen\ndescription: outside\n---\nthe host's file\n")
    (place / "elsewhere").mkdir()
    skill(place / "elsewhere", "away")
    _write(folder / "no-file" / "README.md", "no SKILL.md here")
    _write(folder / "plain" / "SKILL.md", "# just markdown\n")
    _write(folder / "unclosed" / "SKILL.md", "---\nname: unclosed\n")
    _write(folder / "bad-yaml" / "SKILL.md", "---\nname: [bad\ndescription: x\n---\n")
    _write(folder / "a-list" / "SKILL.md", "---\n- name\n---\n")
    _write(folder / "no-name" / "SKILL.md", "---\ndescription: x\n---\n")
    _write(folder / "dots" / "SKILL.md", "---\nname: ../x\ndescription: x\n---\n")
    _write(folder / "number" / "SKILL.md", "---\nname: 12\ndescription: x\n---\n")
    _write(folder / "other" / "SKILL.md", "---\nname: another\ndescription: x\n---\n")
    _write(folder / "no-words" / "SKILL.md", "---\nname: no-words\ndescription: ''\n---\n")
    _write(folder / "dated" / "SKILL.md", "---\nname: dated\ndescription: 2024-01-01\n---\n")
    _write(folder / "wordy" / "SKILL.md", f"---\nname: wordy\ndescription: {'w' * 1025}\n---\n")
    _write(folder / "huge" / "SKILL.md", "---\nname: huge\ndescription: x\n---\n" + "x" * 5000)
    latin1 = "---\nname: latin1\ndescription: caf\xe9\n---\n".encode("latin-1")
    _write(folder / "latin1" / "SKILL.md", latin1)
    (folder / "folder-file" / "SKILL.md").mkdir(parents=True)
    (folder / "fifo").mkdir()
    os.mkfifo(folder / "fifo" / "SKILL.md")
    (folder / "link-out").mkdir()
    (folder / "link-out" / "SKILL.md").symlink_to(secret)
    (folder / "away").symlink_to(place / "elsewhere" / "away")
    (folder / "to-file").symlink_to(folder / "plain" / "SKILL.md")
    _write(folder / "README.md", "files beside the skills are not skills")
    skill(folder, "good")
    found = found_in(place, max_bytes=4000)
    assert [s.name for s in found.skills] == ["good"]
    front = "its SKILL.md has no front matter: a block between '---' lines at the top, with "
    front += "name and description"
    bad_name = "is not a skill name: lowercase letters, digits and single hyphens, at most 64 "
    bad_name += "characters"
    no_description = "its front matter has no description (a string saying when to use the skill)"
    assert reasons(found) == {
        ".agents/skills/a-list": "its front matter is not a mapping of keys (name: ..., "
        "description: ...)",
        ".agents/skills/away": "a symlink leads out of .agents/skills",
        ".agents/skills/bad-yaml": "its front matter is not valid YAML: did not find expected ',' "
        "or ']' (line 3 of SKILL.md)",
        ".agents/skills/dated": no_description,
        ".agents/skills/dots": f"name '../x' {bad_name}",
        ".agents/skills/fifo": "its SKILL.md is not a regular file",
        ".agents/skills/folder-file": "its SKILL.md is not a regular file",
        ".agents/skills/huge": "its SKILL.md is too large (5034 bytes; max_bytes is 4000)",
        ".agents/skills/latin1": "its SKILL.md is not UTF-8 text",
        ".agents/skills/link-out": "a symlink leads out of .agents/skills",
        ".agents/skills/no-file": "it has no SKILL.md",
        ".agents/skills/no-name": "its front matter has no name",
        ".agents/skills/no-words": no_description,
        ".agents/skills/number": "its name is not a string but a int",
        ".agents/skills/other": "name 'another' differs from its folder's name 'other': they "
        "must match",
        ".agents/skills/plain": front,
        ".agents/skills/to-file": "it is not a folder",
        ".agents/skills/unclosed": front,
        ".agents/skills/wordy": "its description is longer than 1024 characters",
    }


def test_yaml_that_would_blow_up_is_skipped_or_read_as_a_small_mapping(place: Path) -> None:
    folder = place / "ws" / ".agents" / "skills"
    laughs = "---\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for before, level in zip("abcdefghi", "bcdefghij", strict=True):  # 10 ** 10 x unfolded
        laughs += f"{level}: &{level} [{', '.join([f'*{before}'] * 10)}]\n"
    laughs += "name: *j\n---\n"
    _write(folder / "lol" / "SKILL.md", laughs)
    _write(folder / "deep" / "SKILL.md", "---\nname: " + "[" * 20_000 + "\n---\n")
    _write(folder / "tagged" / "SKILL.md", "---\nname: !!python/object:os.system x\n---\n")
    _write(folder / "no-date" / "SKILL.md", "---\nname: no-date\ndescription: 2024-13-45\n---\n")
    _write(folder / "no-int" / "SKILL.md", "---\nname: no-int\nsize: !!int 0x\n---\n")
    found = found_in(place)
    assert found.skills == ()
    said = reasons(found)
    assert said[".agents/skills/lol"] == "its name is not a string but a list"
    assert said[".agents/skills/deep"].startswith("its front matter is not valid YAML")
    assert said[".agents/skills/tagged"].startswith("its front matter is not valid YAML")
    assert said[".agents/skills/no-date"] == (
        "its front matter is not valid YAML: month must be in 1..12"
    )
    assert said[".agents/skills/no-int"].startswith("its front matter is not valid YAML: ")


def test_fabric_s_own_folders_and_the_workspace_are_never_skill_folders(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = place / "home"
    skill(home / ".config" / "fabric" / "skills", "mine")
    skill(place / "runs", "planted")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    skill(place / "ws" / "skills", "in-ws")
    found = found_in(place, folders=["~/.config/fabric/skills", "runs", str(home), "ws"])
    assert found.skills == ()
    fabric_settings = home / ".config" / "fabric"
    assert reasons(found) == {
        str(fabric_settings / "skills"): f"not a skill folder: it is or holds {fabric_settings}, "
        "a folder of fabric's own or of credentials",
        str(place / "runs"): f"not a skill folder: it is or holds {place / 'runs'}, a folder of "
        "fabric's own or of credentials",
        str(home): f"not a skill folder: it is or holds {fabric_settings}, a folder of fabric's "
        "own or of credentials",
        str(place / "ws"): "not a skill folder: it is or holds the run's workspace, whose files "
        "a run may change",
    }
    # a workspace whose runs folder is inside it: that folder is no skill folder either
    inside = find_skills(SkillSettings(workspace_folders=["runs"]), place, place, place / "runs")
    assert reasons(inside) == {
        "runs": f"not a skill folder: it is or holds {place / 'runs'}, a folder of fabric's own "
        "or of credentials"
    }


def test_the_memory_store_s_folder_is_no_skill_folder(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_MEMORY_DB", str(place / "data" / "memory.sqlite3"))
    skill(place / "data", "planted")
    found = found_in(place, folders=["data"])
    assert found.skills == ()
    assert reasons(found) == {
        str(place / "data"): f"not a skill folder: it is or holds {place / 'data'}, a folder of "
        "fabric's own or of credentials"
    }


def test_a_workspace_skill_folder_that_leads_out_is_skipped(place: Path) -> None:
    skill(place / "outside", "away")
    (place / "ws" / ".agents").mkdir()
    (place / "ws" / ".agents" / "skills").symlink_to(place / "outside")
    found = found_in(place)
    assert found.skills == ()
    assert reasons(found) == {".agents/skills": "a symlink on the way leads out of the workspace"}


def test_a_folder_with_many_entries_is_looked_at_up_to_a_bound(place: Path) -> None:
    folder = place / "ws" / ".agents" / "skills"
    for index in range(30):
        skill(folder, f"s{index:02d}")
    found = found_in(place, max_skills=5)
    assert [s.name for s in found.skills] == ["s00", "s01", "s02", "s03", "s04"]
    said = reasons(found)
    assert said[".agents/skills"] == "20 more folders not looked at (max_skills is 5)"
    assert said[".agents/skills/s09"] == "over the limit of 5 skills (max_skills)"
    assert len(found.skipped) == 6


@pytest.mark.parametrize("folder", ["../skills", "/etc/skills", "~/skills", "", "a/../../b"])
def test_workspace_folders_stay_inside_the_workspace(folder: str) -> None:
    with pytest.raises(ValidationError, match="workspace"):
        SkillSettings(workspace_folders=[folder])


def test_a_run_without_skill_folders_is_offered_none_at_a_stat_or_two(place: Path) -> None:
    (place / "fabric.yaml").write_text(
        "packs:\n  helper:\n    builder: declarative\n    system_prompt: You help.\n"
        "    finish_schema: {type: object}\n"
    )
    loaded = load_config(place / "fabric.yaml")
    where = Where(place / "ws", loaded.config.packs["helper"], loaded)
    none = skills(where)
    assert (none.prompt, none.tools, dict(none.meta)) == ("", (), {})
    assert none.restore is not None  # a replay of a run that had skills gets them back
    skill(place / "ws" / ".agents" / "skills", "one")
    found = skills(where)
    assert [t.spec.name for t in found.tools] == ["load_skill"]
    assert found.meta["offered"][0]["folder"] == ".agents/skills/one"
    (place / "ws" / ".agents" / "skills" / "one" / "SKILL.md").write_text("no front matter")
    only_skipped = skills(where)
    assert only_skipped.prompt == "" and only_skipped.tools == ()
    assert only_skipped.meta["skipped"][0]["folder"] == ".agents/skills/one"
    assert [a.name for a in additions_for(where)] == ["instructions", "skills"]


def test_a_recorded_list_is_read_back_from_the_recorded_prompt(place: Path) -> None:
    skill(place / "team", "deploy", "Ship it, carefully.")
    skill(place / "ws" / ".agents" / "skills", "regen", "Regenerate (workspace) files.")
    found = found_in(place, folders=["team"])
    prompt = "You help.\n\n" + listing(found.skills) + "\n\n## Later\n- not: a skill"
    started = {"system_prompt": prompt, "additions": {"skills": found.record()}}
    back = recorded_skills(started)
    assert back is not None
    assert [(s.name, s.description, s.source, s.folder, s.sha256) for s in back] == [
        (s.name, s.description, s.source, s.folder, s.sha256) for s in found.skills
    ]
    assert all(s.body is None for s in back)
    assert recorded_skills({"system_prompt": "You help."}) == []
    edited = {**started, "system_prompt": prompt.replace("Ship it", "Ship")}
    assert recorded_skills({**edited, "system_prompt": prompt.replace("- deploy", "- dep")}) is None
    assert recorded_skills({**started, "system_prompt": "You help."}) is None
    assert recorded_skills(edited) is not None  # the description is whatever the prompt said
