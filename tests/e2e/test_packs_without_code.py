"""Packs without code, as a pack author meets them: ``fabric init`` in an empty folder, the
first pack run by the real command against a loopback model server, ``fabric pack new``, and
``fabric packs --check`` on good and broken packs (each problem named by pack, key and line)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from support import assert_valid_runlog, line_of, run_fabric, write
from typer.testing import CliRunner

from fabric.interfaces.cli.app import app
from fabric.testing import MockOpenAIServer, completion


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


# --- fabric init ----------------------------------------------------------------------------


def test_init_writes_a_config_whose_first_pack_runs(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    init = run_fabric("init", cwd=project)
    assert init.returncode == 0, init.stderr
    assert init.stdout.startswith("wrote fabric.yaml: fabric's packs and 'helper', a pack ")
    assert 'try it:      fabric run --pack helper "What is in this folder?"' in init.stdout
    assert "Confinement on this machine" in init.stdout  # then what `fabric doctor` says
    assert "  helper         starts no commands" in init.stdout
    assert sorted(p.name for p in project.iterdir()) == ["fabric.yaml"]
    config = project / "fabric.yaml"
    assert config.read_text().startswith("# Written by `fabric init`.")
    assert "helper:" in config.read_text().split("packs:")[-1]

    (project / "notes.txt").write_text("buy milk\n")
    script = [
        completion("Looking.", [("list_files", {})]),
        completion(None, [("read_file", {"path": "notes.txt"})]),
        completion(
            None, [("finish_task", {"answer": "a note to buy milk", "files": ["notes.txt"]})]
        ),
    ]
    with MockOpenAIServer(script, models=["small-model"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        python = (sys.executable, "-X", "importtime")
        run = run_fabric("run", "--pack", "helper", "--json", "What is in this folder?",
                         cwd=project, env=env, python=python)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["status"] == "completed"
    assert out["payload"] == {"answer": "a note to buy milk", "files": ["notes.txt"]}
    first = server.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "read_file", "list_files", "search_files", "finish_task"
    ]  # fmt: skip
    assert first["messages"][0]["content"].startswith("You answer questions about the files")
    finish = first["tools"][-1]["function"]["parameters"]
    assert finish["required"] == ["answer"]
    assert_valid_runlog(out["runlog"])
    # running a pack of the config never looks for installed packs
    assert "fabric.infrastructure.packs.entry_points" not in _imported(run.stderr)


def test_init_again_leaves_the_file_alone_and_force_replaces_it(cli: CliRunner) -> None:
    first = cli.invoke(app, ["init"])
    assert first.exit_code == 0, first.stderr
    config = Path("fabric.yaml")
    mine = config.read_text().replace("max_steps: 15", "max_steps: 5")  # the author's edit
    config.write_text(mine)

    again = cli.invoke(app, ["init"])
    assert again.exit_code == 0, again.stderr
    assert again.stdout.startswith(
        "left fabric.yaml alone: it exists already (fabric init --force replaces it, keeping "
        "it as fabric.yaml.bak)"
    )
    assert "wrote" not in again.stdout
    assert "Confinement on this machine" in again.stdout  # the doctor looks at the one there
    assert config.read_text() == mine
    assert not Path("fabric.yaml.bak").exists()

    forced = cli.invoke(app, ["init", "--force"])
    assert forced.exit_code == 0, forced.stderr
    assert "the old file is fabric.yaml.bak" in forced.stdout
    assert Path("fabric.yaml.bak").read_text() == mine
    assert "max_steps: 15" in config.read_text()


def test_init_names_the_first_pack_and_refuses_a_bad_name(cli: CliRunner) -> None:
    bad = cli.invoke(app, ["init", "sub", "--pack", "my pack"])
    assert bad.exit_code == 2
    assert "'my pack' cannot name a pack" in bad.stderr
    assert not Path("sub").exists()
    good = cli.invoke(app, ["init", "sub", "--pack", "notes"])
    assert good.exit_code == 0, good.stderr
    assert "notes" in yaml.safe_load(Path("sub/fabric.yaml").read_text())["packs"]


# --- fabric pack new ------------------------------------------------------------------------

MINIMAL = """\
llm: {models: {default: m}}   # the author's comment stays
packs:
  eng:
    builder: engineering
"""


def test_pack_new_adds_a_yaml_pack_that_checks_clean(cli: CliRunner) -> None:
    config = write(Path(), MINIMAL)
    result = cli.invoke(app, ["pack", "new", "triage"])
    assert result.exit_code == 0, result.stderr
    line = line_of(config, "  triage:")
    assert result.stdout.startswith(f"added pack 'triage' to fabric.yaml (line {line}): a pack ")
    assert config.read_text().startswith(MINIMAL + "\n  triage:\n")
    check = cli.invoke(app, ["packs", "--check"])
    assert check.exit_code == 0, check.stdout
    assert "ok       triage  (fabric.yaml)" in check.stdout
    assert "all 2 packs are ready" in check.stdout


@pytest.mark.parametrize("name", ["my pack", "1st", "a.b", "../evil", "x" * 49, "-x"])
def test_pack_new_refuses_a_bad_name(cli: CliRunner, name: str) -> None:
    config = write(Path(), MINIMAL)
    result = cli.invoke(app, ["pack", "new", "--", name])
    assert result.exit_code == 2
    assert f"error: {name!r} cannot name a pack: use letters, digits, '-' and '_'" in result.stderr
    assert "hint: e.g. fabric pack new code-reviewer" in result.stderr
    assert config.read_text() == MINIMAL


def test_pack_new_refuses_a_pack_that_exists(cli: CliRunner) -> None:
    config = write(Path(), MINIMAL)
    result = cli.invoke(app, ["pack", "new", "eng"])
    assert result.exit_code == 2
    assert "error: fabric.yaml:3: a pack named 'eng' is there already" in result.stderr
    assert "hint: choose another name, or edit that pack" in result.stderr
    assert config.read_text() == MINIMAL


def test_pack_new_without_a_config_says_to_run_init(cli: CliRunner) -> None:
    result = cli.invoke(app, ["pack", "new", "triage"])
    assert result.exit_code == 2
    assert "there is no fabric.yaml here to add the pack to" in result.stderr
    assert "run `fabric init` first" in result.stderr
    assert list(Path().iterdir()) == []


# --- fabric packs --check -------------------------------------------------------------------

BROKEN = """\
llm: {models: {default: m}}
default_pack: nowhere
packs:
  good:
    builder: engineering
  imports:
    builder: packs.nowhere:build
  schema:
    builder: declarative
    system_prompt: x
    finish_schema:
      type: object
      properties: {n: {type: numbr}}
  tools:
    builder: declarative
    system_prompt: x
    tools: [read_file, delete_everything]
    finish_schema: {type: object}
  policy:
    builder: declarative
    system_prompt: x
    tools: [read_file]
    sandbox:
      policy:
        rules:
          - {tool: write_file, verdict: deny}
    finish_schema: {type: object}
  mcp:
    builder: declarative
    system_prompt: x
    mcp: [{server: tracker}]
    finish_schema: {type: object}
  model:
    builder: engineering
    model: huge
  idle:
    builder: declarative
    system_prompt: x
    tools: [read_file, shell]
    finish_schema: {type: object}
"""
EXPECTED = {
    "imports": ("packs.nowhere", "packs.imports.builder: cannot import 'packs.nowhere'"),
    "schema": ("numbr", "packs.schema.finish_schema.properties.n.type: not a valid JSON Schema"),
    "tools": ("delete_everything", "packs.tools.tools.1: unknown tool 'delete_everything'"),
    "policy": (
        "tool: write_file",
        "packs.policy.sandbox.policy.rules[0].tool: pack 'policy' has no tool 'write_file'",
    ),
    "mcp": ("server: tracker", "packs.mcp.mcp[0].server: no MCP server 'tracker'"),
    "model": ("huge", "packs.model.model: 'huge' is not a model key"),
    "idle": (
        "[read_file, shell]",
        "packs.idle.tools[1]: shell is listed but sandbox.allowed_commands is empty",
    ),
    "(default_pack)": ("default_pack", "default_pack: no pack named 'nowhere'"),
}


def test_packs_check_names_each_problem_by_pack_key_and_line(cli: CliRunner) -> None:
    config = write(Path(), BROKEN)
    result = cli.invoke(app, ["packs", "--check"])
    assert result.exit_code == 1
    out = result.stdout
    assert "ok       good            (fabric.yaml)" in out  # a broken pack stops no other
    for pack, (needle, message) in EXPECTED.items():
        assert f"PROBLEM  {pack:<14}  (fabric.yaml)" in out
        assert f"         fabric.yaml:{line_of(config, needle)}: {message}" in out, pack
    assert out.count("hint: ") == len(EXPECTED)
    assert out.rstrip().endswith(
        "problems in 8 of 9: fix what is said above, then run `fabric packs --check` again"
    )

    as_json = json.loads(cli.invoke(app, ["packs", "--check", "--json"]).stdout)
    assert as_json["ok"] is False
    rows = {row["name"]: row for row in as_json["packs"]}
    assert rows["good"] == {"name": "good", "origin": "fabric.yaml", "ok": True}
    assert rows["mcp"]["error"]["code"] == "pack_error"
    assert "mcp_servers:" in rows["mcp"]["error"]["hint"]


def test_packs_check_on_a_config_that_does_not_load_exits_2(cli: CliRunner) -> None:
    config = write(Path(), "packs:\n  p:\n    builder: engineering\n    sandbox:\n"
                           "      policy: {rules: [{tool: shell, verdict: maybe}]}\n")  # fmt: skip
    result = cli.invoke(app, ["packs", "--check"])
    assert result.exit_code == 2
    assert f"error: fabric.yaml:{line_of(config, 'maybe')}: " in result.stderr
    assert "packs.p.sandbox.policy.rules.0.verdict" in result.stderr
    assert "'allow', 'ask' or 'deny'" in result.stderr


def test_packs_lists_where_each_pack_comes_from(cli: CliRunner) -> None:
    write(Path(), MINIMAL)
    rows = json.loads(cli.invoke(app, ["packs", "--json"]).stdout)
    assert [(r["name"], r["origin"]) for r in rows] == [("eng", "fabric.yaml")]
    Path("fabric.yaml").unlink()
    rows = json.loads(cli.invoke(app, ["packs", "--json"]).stdout)  # the packaged default
    assert {r["origin"] for r in rows} == {"built-in"}
    text = cli.invoke(app, ["packs"]).stdout
    assert "    from: built-in\n" in text
