"""Packs written in YAML alone: what a pack author may declare (prompt, fabric's tools, MCP
servers, limits, sandbox and policy, the finish schema) and the errors they see, each naming
the pack's key and its line; and the YAML ``fabric pack new`` adds to a config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support import line_of, write

from fabric.config.loader import load_config
from fabric.config.scaffold import first_config, pack_text, with_pack
from fabric.domain.errors import ConfigError
from fabric.infrastructure.packs.registry import check_pack, load_pack
from fabric.infrastructure.tools.library import LIBRARY

FULL = """\
llm: {models: {default: m, coder: c}}
mcp_servers:
  issues: {command: issue-server}
packs:
  triage:
    builder: declarative
    description: Sorts issues.
    model: coder
    system_prompt: You sort issues.
    tools: [read_file, search_files, shell]
    mcp: [{server: issues, include: ["get_*"]}]
    limits: {max_steps: 9, tool_output_chars: 4000}
    sandbox:
      allowed_commands: [python]
      policy:
        default: ask
        rules:
          - {tool: shell, command: "python -c **", verdict: deny}
          - {tool: issues__delete, verdict: deny}
    finish_schema:
      type: object
      properties:
        label: {enum: [bug, docs]}
      required: [label]
"""


def message_of(config: Path, name: str = "p") -> str:
    with pytest.raises(ConfigError) as info:
        load_pack(load_config(config), name)
    return str(info.value)


def test_a_yaml_pack_takes_every_part_of_a_pack(tmp_path: Path) -> None:
    config = write(tmp_path, FULL)
    lp = load_pack(load_config(config), "triage")
    assert lp.pack.name == "triage"
    assert lp.pack.description == "Sorts issues."
    assert lp.pack.system_prompt == "You sort issues."
    assert lp.pack.tool_names() == ["read_file", "search_files", "shell", "finish_task"]
    assert lp.pack.finish_schema["required"] == ["label"]
    assert lp.pack.finish_check()({"label": "feature"})  # the schema checks finish_task
    assert lp.settings.model == "coder"
    assert [(u.server, u.include) for u in lp.settings.mcp] == [("issues", ["get_*"])]
    assert lp.settings.limits.max_steps == 9
    assert lp.settings.sandbox.allowed_commands == ["python"]
    policy = lp.settings.sandbox.policy
    assert policy.default == "ask"
    assert [r.tool for r in policy.rules] == ["shell", "issues__delete"]
    assert lp.origin == str(config)


PROBLEMS = {
    "unknown tool": (
        "    tools: [read_file, shel]\n",
        "shel",
        "packs.p.tools.1: unknown tool 'shel'; fabric's tools: read_file",
    ),
    "tool twice": (
        "    tools: [read_file, list_files, read_file]\n",
        "tools:",
        "packs.p.tools.2: 'read_file' is listed twice",
    ),
    "schema below its top": (
        "    finish_schema:\n      type: object\n      properties:\n"
        "        n: {type: integer, minimum: lots}\n",
        "minimum: lots",
        "packs.p.finish_schema.properties.n.minimum: not a valid JSON Schema: 'lots' is not "
        "of type 'number'",
    ),
    "schema not an object": (
        "    finish_schema:\n      type: array\n",
        "type: array",
        "packs.p.finish_schema.type: not usable: it must describe an object",
    ),
    "no prompt": ("    system_prompt: ''\n", "system_prompt", "packs.p.system_prompt:"),
    "unknown key": (
        "    tool: [read_file]\n",
        "tool:",
        "packs.p.tool: unknown key (valid keys: builder,",
    ),
}
BASE = {
    "system_prompt": "    system_prompt: x\n",
    "finish_schema": "    finish_schema: {type: object}\n",
}


@pytest.mark.parametrize("case", sorted(PROBLEMS))
def test_each_mistake_names_the_key_and_its_line(tmp_path: Path, case: str) -> None:
    given, needle, expected = PROBLEMS[case]
    parts = [text for key, text in BASE.items() if not given.lstrip().startswith(key)]
    config = write(tmp_path, "packs:\n  p:\n    builder: declarative\n" + "".join(parts) + given)
    message = message_of(config)
    assert f"{config}:{line_of(config, needle)}: {expected}" in message
    assert "hint:" in message  # and what to do next


def test_check_says_when_a_listed_tool_cannot_work_in_the_packs_sandbox(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        """\
        packs:
          p:
            builder: declarative
            system_prompt: x
            tools:
              - read_file
              - shell
              - fetch_url
            finish_schema: {type: object}
        """,
    )
    loaded = load_config(config)
    assert load_pack(loaded, "p").pack.tool_names()[1] == "shell"  # it loads and runs
    shell, fetch = check_pack(loaded, "p")
    assert str(shell) == (
        f"{config}:7: packs.p.tools[1]: shell is listed but sandbox.allowed_commands is empty: "
        "every command would be refused\n  hint: list the programs it may start (sandbox: "
        "{allowed_commands: [python]}), or drop shell"
    )
    assert fetch.message == (
        f"{config}:8: packs.p.tools[2]: fetch_url is listed but sandbox.network is off: every "
        "call would be refused"
    )
    sandbox = "sandbox: {network: true, allowed_commands: [python]}\n    finish_schema"
    config.write_text(config.read_text().replace("finish_schema", sandbox))
    assert check_pack(load_config(config), "p") == []


def test_pack_names_are_letters_digits_dash_and_underscore(tmp_path: Path) -> None:
    config = write(tmp_path, "packs:\n  ok-pack_1: {builder: engineering}\n  my.pack:\n"
                             "    builder: engineering\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_config(config)
    message = str(info.value)
    assert f"{config}:3: packs.my.pack: 'my.pack' cannot name a pack" in message
    assert "letters, digits, '-' and '_'" in message


def test_the_wiring_problems_of_a_pack_are_all_told_at_once(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        """\
        packs:
          p:
            builder: declarative
            system_prompt: x
            tools: [read_file]
            mcp: [{server: tracker}]
            sandbox:
              policy:
                rules:
                  - {tool: write_file, verdict: deny}
            finish_schema: {type: object}
        """,
    )
    message = message_of(config)
    assert message.startswith("2 problems:")
    assert f"{config}:6: packs.p.mcp[0].server: no MCP server 'tracker'" in message
    assert f"{config}:10: packs.p.sandbox.policy.rules[0].tool: pack 'p' has no tool " \
           "'write_file'" in message  # fmt: skip
    assert "add it under mcp_servers:" in message
    assert "its tools: read_file, finish_task, load_skill" in message  # skills are on


def test_a_packs_own_tool_may_not_take_the_name_of_one_a_convention_adds(
    tmp_path: Path,
) -> None:
    """update_plan is the plan's (ADR 0029) when plan is on: a pack's own tool of that name is
    told at load, at its key, rather than failing each run as a tool declared twice."""
    (tmp_path / "planner_pack.py").write_text(
        "from fabric.sdk import FunctionTool, Pack\n"
        "def update_plan(items: str) -> str:\n"
        '    """Keep a plan of my own."""\n'
        "    return items\n"
        "def build(settings):\n"
        "    return Pack(name='p', description='', system_prompt='x',\n"
        "                tools=[FunctionTool(update_plan)], finish_schema={'type': 'object'})\n"
    )
    config = write(
        tmp_path,
        """\
        packs:
          p:
            builder: planner_pack:build
            plan: {enabled: true}
        """,
    )
    message = message_of(config)
    assert f"{config}:4: packs.p.plan: pack 'p' has a tool of its own named 'update_plan', " \
           "which plan adds to every run too" in message  # fmt: skip
    assert "set plan.enabled: false for the pack" in message
    assert check_pack(load_config(config), "p")  # --check says so too


# --- the YAML `fabric pack new` adds --------------------------------------------------------


def test_the_new_pack_template_builds_as_it_is(tmp_path: Path) -> None:
    text = pack_text("notes", list(LIBRARY))
    config = write(tmp_path, "llm: {models: {default: m}}\npacks:\n" + _indent(text))
    lp = load_pack(load_config(config), "notes")
    assert lp.pack.tool_names() == ["read_file", "list_files", "search_files", "finish_task"]
    assert lp.pack.finish_schema["required"] == ["answer"]
    listed = text.split("network: true):\n")[1].split("\n  tools:")[0]
    names = [word.strip(",") for word in listed.split() if word != "#"]
    assert names == list(LIBRARY)  # every tool fabric has, listed for the author


def _indent(text: str) -> str:
    return "".join(f"  {line}" if line.strip() else line for line in text.splitlines(True))


USER_CONFIG = """\
# my config
llm: {models: {default: m}}   # keep this comment
packs:
    first:
        builder: engineering
        # sandbox:            a commented-out key of the first pack stays with it
        #   network: true

# the runs go here
runs_dir: out
"""


def test_a_new_pack_goes_at_the_end_of_packs_and_nothing_else_changes() -> None:
    block = pack_text("second", ["read_file"])
    text, line = with_pack(USER_CONFIG, "fabric.yaml", "second", block)
    lines = text.splitlines()
    assert lines[line - 1] == "    second:"  # the file's own indentation
    kept = [ln for ln in lines if ln not in _indent(_indent(block)).splitlines()]
    assert kept == [*USER_CONFIG.splitlines()[:7], "", *USER_CONFIG.splitlines()[7:]]
    assert lines.index("        #   network: true") < line - 1 < lines.index("# the runs go here")
    data = yaml.safe_load(text)
    assert list(data["packs"]) == ["first", "second"]
    assert data["runs_dir"] == "out"


@pytest.mark.parametrize(
    "text",
    ["", "# nothing yet\n", "llm: {models: {default: m}}", "packs:\nruns_dir: r\n", "packs: ~\n"],
)
def test_a_new_pack_in_a_config_without_packs(text: str) -> None:
    new, line = with_pack(text, "fabric.yaml", "solo", pack_text("solo", ["read_file"]))
    assert new.splitlines()[line - 1] == "  solo:"
    assert list(yaml.safe_load(new)["packs"]) == ["solo"]
    others = [ln for ln in text.splitlines() if not ln.startswith("packs:")]
    rest = iter(new.splitlines())
    assert all(any(ln == seen for seen in rest) for ln in others)  # kept, in their order


def test_a_pack_that_exists_is_not_added_twice() -> None:
    with pytest.raises(ConfigError) as info:
        with_pack(USER_CONFIG, "fabric.yaml", "first", pack_text("first", ["read_file"]))
    assert "fabric.yaml:4: a pack named 'first' is there already" in str(info.value)


def test_packs_in_flow_style_are_left_to_the_author_with_the_block_to_paste() -> None:
    with pytest.raises(ConfigError) as info:
        with_pack("packs: {a: {builder: engineering}}\n", "f.yaml", "b", pack_text("b", []))
    assert info.value.message == (
        "fabric cannot add pack 'b' to f.yaml: its packs: is not written one pack per line"
    )
    assert info.value.hint.startswith("add it under packs: yourself:\n  b:\n")


def test_the_config_fabric_init_writes_loads_with_its_first_pack(tmp_path: Path) -> None:
    text, line = first_config("helper", list(LIBRARY))
    config = write(tmp_path, text)
    loaded = load_config(config)
    assert list(loaded.config.packs) == ["engineering", "research", "reviewer", "helper"]
    assert text.splitlines()[line - 1] == "  helper:"
    for name in loaded.config.packs:
        assert load_pack(loaded, name).pack.name == name
