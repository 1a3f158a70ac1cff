"""Loading eval suites: defaults under cases, every mistake named by file and line, the
published JSON Schema in step with the models, pack_settings merged into a copy of the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from support import line_of, write

from fabric.config.eval_suite import RunCheck, schema_path, suite_json_schema
from fabric.config.eval_suite_loader import load_suite
from fabric.config.eval_suite_settings import substitute, with_pack_settings
from fabric.config.loader import load_config
from fabric.domain.errors import ConfigError

SUITE = """
version: 1
name: demo
defaults:
  pack: engineering
  tier: medium
  limits: {max_steps: 9, timeout_s: 30}
  verify: "off"
cases:
  - id: inline
    task: do it
    limits: {max_steps: 3}
    checks:
      - run: python -m pytest -q
"""
CASE_B = """
id: from-file
tier: hard
workspace: ../ws
verify: null
task: Fix it.
checks:
  - file: a.py
    contains: x
  - payload: answer.items.0
    equals: 42
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "demo"
    write(folder, SUITE, "suite.yaml")
    write(folder, CASE_B, "cases/b.yaml")
    write(folder, "x = 1\n", "ws/a.py")
    return folder


def test_cases_get_the_suites_defaults_and_keep_their_own(suite: Path) -> None:
    loaded = load_suite(suite)
    assert loaded.name == "demo"
    inline, from_file = loaded.cases
    assert (inline.id, inline.pack, inline.tier) == ("inline", "engineering", "medium")
    assert (inline.max_steps, inline.timeout_s, inline.verify) == (3, 30.0, "off")
    assert inline.workspace is None and inline.checks == (RunCheck(run="python -m pytest -q"),)
    assert (from_file.tier, from_file.verify) == ("hard", None)  # null: the pack's own
    assert from_file.workspace == (suite / "ws").resolve()
    assert from_file.where == f"{suite / 'cases/b.yaml'}:2"


def test_the_content_hash_follows_what_attempts_depend_on(suite: Path) -> None:
    before = load_suite(suite).content_hash
    write(suite, "the answer\n", "solutions/from-file/a.py")
    assert load_suite(suite).content_hash == before
    write(suite, "x = 2\n", "ws/a.py")
    assert load_suite(suite).content_hash != before


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    return str(caught.value)


def test_an_unknown_key_in_a_check_names_the_case_file_line_and_the_valid_keys(
    suite: Path,
) -> None:
    case = write(suite, CASE_B.replace("    contains: x", "    contians: x"), "cases/b.yaml")
    message = _error(suite)
    assert f"{case}:{line_of(case, 'contians')}: checks.0.contians: unknown key" in message
    assert "(valid keys: file, exists, contains, not_contains, matches)" in message


@pytest.mark.parametrize(
    ("old", "new", "needle", "expected"),
    [
        ("  - id: inline", "  - id: Inline", "id: Inline", "cases.0.id: String should match"),
        (
            "    limits: {max_steps: 3}",
            "    limits: {max_steps: 0}",
            "max_steps: 0",
            "cases.0.limits.max_steps: Input should be greater than or equal to 1",
        ),
        (
            "      - run: python -m pytest -q",
            "      - exit_code: 1",
            "exit_code: 1",
            "cases.0.checks.0: a check needs exactly one of run, file, payload",
        ),
        ("name: demo", "nme: demo", "nme: demo", "nme: unknown key (valid keys: version, name"),
        ("  tier: medium", "  tier: easiest", "tier: easiest", "defaults.tier: Input should be"),
    ],
)
def test_mistakes_in_the_suite_file_name_its_line(
    suite: Path, old: str, new: str, needle: str, expected: str
) -> None:
    path = write(suite, SUITE.replace(old, new), "suite.yaml")
    message = _error(suite)
    assert f"{path}:{line_of(path, needle)}: " in message and expected in message


def test_a_bad_regex_is_caught_when_loading(suite: Path) -> None:
    case = write(suite, CASE_B.replace("contains: x", "matches: '(unclosed'"), "cases/b.yaml")
    message = _error(suite)
    assert f"{case}:{line_of(case, 'matches')}: checks.0.matches" in message
    assert "not a valid regular expression" in message


def test_suite_level_mistakes(suite: Path, tmp_path: Path) -> None:
    write(suite, CASE_B.replace("id: from-file", "id: inline"), "cases/b.yaml")
    assert "case id 'inline' is used twice (first at" in _error(suite)
    write(suite, CASE_B.replace("../ws", "../missing"), "cases/b.yaml")
    assert "workspace: " in _error(suite) and "missing is not a folder" in _error(suite)
    write(suite, CASE_B.replace("Fix it.", "Read ${web_url}."), "cases/b.yaml")
    assert "uses ${web_url}, but the suite starts no web service" in _error(suite)
    write(suite, SUITE.replace("  pack: engineering\n", ""), "suite.yaml")
    write(suite, CASE_B, "cases/b.yaml")
    assert "case 'inline' names no pack" in _error(suite)
    broken = write(tmp_path, "version: 1\ncases: [\n", "broken.yaml")
    assert f"{broken}:3:1: not valid YAML" in _error(broken)
    empty = write(tmp_path, "version: 1\nname: empty\n", "empty.yaml")
    assert "the suite has no cases" in _error(empty)
    assert "holds no suite.yaml" in _error(tmp_path)


def test_a_suite_copies_only_its_own_files_and_builds_no_pack(suite: Path, tmp_path: Path) -> None:
    """A suite from elsewhere must not hand the model the user's other files, nor run code
    of its own choosing in fabric's process."""
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    write(suite, CASE_B.replace("../ws", "../../home/.ssh"), "cases/b.yaml")
    assert "workspace: " in _error(suite) and "is outside the suite's folder" in _error(suite)
    (suite / "linked").symlink_to(tmp_path / "home")
    write(suite, CASE_B.replace("../ws", "../linked"), "cases/b.yaml")
    assert "is outside the suite's folder" in _error(suite)
    write(suite, CASE_B, "cases/b.yaml")
    write(suite, SUITE + "services:\n  web: {pages: ../home}\n", "suite.yaml")
    assert "services.web.pages: " in _error(suite) and "outside the suite's folder" in _error(suite)
    builder = "pack_settings:\n  engineering: {builder: 'evil:build'}\n"
    write(suite, SUITE + builder, "suite.yaml")
    assert "pack_settings.engineering.builder: a suite may not change the code" in _error(suite)


def test_a_single_file_suite(tmp_path: Path) -> None:
    path = write(tmp_path, SUITE, "one.yaml")
    loaded = load_suite(path)
    assert loaded.name == "demo" and [c.id for c in loaded.cases] == ["inline"]


def test_the_published_schema_is_generated_from_the_models() -> None:
    published = json.loads(schema_path().read_text("utf-8"))
    assert published == suite_json_schema(), (
        "src/fabric/eval-suite.schema.json is out of date; regenerate it with: "
        '.venv/bin/python -c "import json; from fabric.config.eval_suite import '
        'suite_json_schema as s; print(json.dumps(s(), indent=2, ensure_ascii=False))" '
        "> src/fabric/eval-suite.schema.json"
    )
    Draft202012Validator.check_schema(published)


def test_the_schema_takes_good_suites_and_refuses_bad_ones(suite: Path) -> None:
    import yaml

    validator = Draft202012Validator(json.loads(schema_path().read_text("utf-8")))
    case_validator = Draft202012Validator(
        {"$defs": validator.schema["$defs"], "$ref": "#/$defs/Case"}
    )
    root = Path(__file__).resolve().parents[2]
    suites = [suite, *sorted(p.parent for p in (root / "evals").glob("*/suite.yaml"))]
    for folder in suites:
        document = yaml.safe_load((folder / "suite.yaml").read_text())
        assert not list(validator.iter_errors(document)), folder
        for case in sorted((folder / "cases").glob("*.yaml")):
            document = yaml.safe_load(case.read_text())
            assert not [e.message for e in case_validator.iter_errors(document)], case
    bad = yaml.safe_load(CASE_B.replace("contains: x", "contains: x\n    exit_code: 1"))
    assert list(case_validator.iter_errors(bad))


PACKS = """
version: 1
packs:
  research:
    builder: packs.research:build
    sandbox: {network: true}
"""


def test_pack_settings_are_merged_into_a_copy_of_the_config(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, PACKS))
    suite = write(tmp_path, SUITE + """
pack_settings:
  research:
    sandbox: {allow_private_addresses: true}
    web: {search: {kind: searxng, url: "${web_url}"}}
services: {web: {pages: pages}}
""", "suite/suite.yaml")  # fmt: skip
    (tmp_path / "suite" / "pages").mkdir()
    merged = with_pack_settings(loaded, load_suite(suite.parent), {"web_url": "http://127.0.0.1:1"})
    section = merged.config.packs["research"].model_dump(exclude_unset=True)
    assert section["sandbox"] == {"network": True, "allow_private_addresses": True}
    assert section["web"] == {"search": {"kind": "searxng", "url": "http://127.0.0.1:1"}}
    assert "web" not in loaded.config.packs["research"].model_dump()  # the user's is unchanged
    assert merged.source == loaded.source


def test_pack_settings_for_an_unknown_pack_point_at_the_suite(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, PACKS))
    suite = write(tmp_path, SUITE + "pack_settings:\n  nope: {model: x}\n", "s/suite.yaml")
    with pytest.raises(ConfigError) as caught:
        with_pack_settings(loaded, load_suite(suite.parent), {})
    assert f"{suite}:{line_of(suite, 'nope:')}: pack_settings.nope:" in str(caught.value)
    assert "declares no pack 'nope'" in str(caught.value)


def test_substitute_replaces_only_the_given_names() -> None:
    value = {"a": ["${web_url}/x", 3], "b": "${HOME} ${web_url}"}
    assert substitute(value, {"web_url": "http://h"}) == {
        "a": ["http://h/x", 3],
        "b": "${HOME} http://h",
    }


def test_a_suites_mcp_servers_join_a_copy_of_the_config(tmp_path: Path) -> None:
    """A suite brings its MCP servers like its web service: confined, no network, no
    variables, the folder taken from the suite file; a pack gets them by pack_settings."""
    loaded = load_config(write(tmp_path, PACKS))
    (tmp_path / "servers").mkdir()
    suite = write(tmp_path, SUITE + """
mcp_servers:
  shed: {command: python3, args: [shed.py], cwd: ../servers, protocol: legacy}
pack_settings:
  research: {mcp: [{server: shed}]}
""", "suite/suite.yaml")  # fmt: skip
    found = load_suite(suite.parent)
    merged = with_pack_settings(loaded, found, {})
    server = merged.config.mcp_servers["shed"]
    assert server.cwd == str((tmp_path / "servers").resolve())
    assert (server.network, server.env, server.protocol) == (False, [], "legacy")
    assert merged.config.packs["research"].mcp[0].server == "shed"
    assert loaded.config.mcp_servers == {}  # the user's is unchanged
    # what the server answers from is part of what attempts depend on
    before = found.content_hash
    write(tmp_path, "TABLE = 2\n", "servers/shed.py")
    assert load_suite(suite.parent).content_hash != before
    # a server of the config's name; a folder the runs cannot read; more than a fixture needs
    taken = load_config(write(tmp_path, PACKS + "mcp_servers: {shed: {command: x}}\n"))
    with pytest.raises(ConfigError, match="declares an MCP server 'shed' already"):
        with_pack_settings(taken, found, {})
    inside = write(tmp_path, SUITE + "mcp_servers: {shed: {command: x, cwd: .}}\n", "in/suite.yaml")
    with pytest.raises(ConfigError, match="inside the suite's folder"):
        load_suite(inside.parent)
    wide = write(tmp_path, SUITE + "mcp_servers: {shed: {command: x, network: true}}\n", "w.yaml")
    with pytest.raises(ConfigError, match=f"{wide}:{line_of(wide, 'network')}"):
        load_suite(wide)
    bad = write(tmp_path, SUITE + "mcp_servers: {a_b: {command: x}}\n", "b.yaml")
    with pytest.raises(ConfigError, match="no '_'"):
        load_suite(bad)
