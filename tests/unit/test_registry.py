"""Packs by dotted path: built-in short names, a user's own packs/ beside fabric.yaml, YAML-only
packs, and the errors a pack author sees."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import assert_valid_runlog, kinds, line_of, write

from fabric.application.job import RunRequest
from fabric.config.loader import LoadedConfig, load_config
from fabric.domain.errors import ConfigError, PackError
from fabric.infrastructure.packs.registry import load_pack
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call, tool_calls


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry puts the config's folder on sys.path and imports pack modules; undo both
    so one test's packs/ folder cannot leak into the next."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "packs" or name.startswith("packs.") or name.startswith("userpack"):
            del sys.modules[name]


def load(folder: Path, text: str) -> LoadedConfig:
    return load_config(write(folder, text))


def pack_error(loaded: LoadedConfig, name: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_pack(loaded, name)
    return str(info.value)


# --- built-in short names -------------------------------------------------------------------

BUILTINS = """\
llm:
  models: {default: m, coder: c}
packs:
  eng:
    builder: engineering
    model: coder
  res:
    builder: research
  rev:
    builder: declarative
    description: Reviews.
    system_prompt: You review code.
    tools: [read_file, search_files]
    finish_schema: {type: object, properties: {verdict: {type: string}}, required: [verdict]}
"""


def test_builtin_engineering(tmp_path: Path) -> None:
    lp = load_pack(load(tmp_path, BUILTINS), "eng")
    assert lp.pack.name == "eng"
    assert lp.pack.model == "coder"
    assert lp.pack.tool_names() == [
        "read_file",
        "edit_file",
        "write_file",
        "list_files",
        "search_files",
        "shell",
        "finish_task",
    ]
    assert lp.pack.finish_schema["required"] == ["summary"]
    # the pack's own default allowlist applies when the YAML does not set a sandbox
    assert "pytest" in lp.settings.sandbox.allowed_commands


def test_builtin_research(tmp_path: Path) -> None:
    lp = load_pack(load(tmp_path, BUILTINS), "res")
    assert lp.pack.tool_names() == ["web_search", "fetch_url", "finish_task"]
    assert lp.settings.sandbox.network is True
    assert set(lp.pack.finish_schema["required"]) == {"answer", "citations"}


def test_builtin_declarative(tmp_path: Path) -> None:
    lp = load_pack(load(tmp_path, BUILTINS), "rev")
    assert lp.pack.name == "rev"
    assert lp.pack.description == "Reviews."
    assert lp.pack.system_prompt == "You review code."
    assert lp.pack.tool_names() == ["read_file", "search_files", "finish_task"]
    assert lp.pack.finish_schema["required"] == ["verdict"]


def test_repo_fabric_yaml_packs_all_build(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_config(Path(__file__).resolve().parents[2] / "fabric.yaml")
    for name in loaded.config.packs:
        assert load_pack(loaded, name).pack.name == name
    reviewer = load_pack(loaded, "reviewer").pack
    assert "write_file" not in reviewer.tool_names()


def test_engineering_settings_from_yaml_reach_the_pack(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        """\
        packs:
          eng:
            builder: engineering
            description: My engineer.
            system_prompt: Be brief.
            limits: {max_steps: 7}
            sandbox: {allowed_commands: [python], command_timeout: 5}
        """,
    )
    lp = load_pack(loaded, "eng")
    assert lp.pack.description == "My engineer."
    assert lp.pack.system_prompt == "Be brief."
    assert lp.settings.limits.max_steps == 7
    assert lp.settings.sandbox.allowed_commands == ["python"]
    assert lp.settings.sandbox.command_timeout == 5


# --- a user's own pack beside fabric.yaml ---------------------------------------------------

USER_PACK = '''\
"""A user's pack with its own settings model."""

from __future__ import annotations

from pydantic import Field

from fabric.application.pack import Pack
from fabric.config.schema import PackSettings
from fabric.infrastructure.tools.library import library_tools


class MineSettings(PackSettings):
    greeting: str = Field(description="How the pack greets.")
    repeat: int = Field(1, ge=1, le=3, description="How often.")


def build(settings: MineSettings) -> Pack:
    return Pack(
        name="mine",
        description="A user pack.",
        system_prompt=" ".join([settings.greeting] * settings.repeat),
        tools=library_tools("read_file"),
        finish_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
    )


def not_a_builder(settings):
    return "a string, not a Pack"


def broken(settings: MineSettings) -> Pack:
    raise RuntimeError("the pack author's bug")
'''


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    write(project, USER_PACK, "packs/mine.py")
    return project


def test_user_pack_beside_config_is_found_with_its_own_settings(user_project: Path) -> None:
    loaded = load(
        user_project,
        """\
        packs:
          hello:
            builder: packs.mine:build
            greeting: Hi there.
            repeat: 2
          eng:
            builder: packs.engineering:build
        """,
    )
    lp = load_pack(loaded, "hello")
    assert lp.pack.name == "hello"
    assert lp.pack.system_prompt == "Hi there. Hi there."
    assert lp.pack.description == "A user pack."
    assert type(lp.settings).__name__ == "MineSettings"
    # packs/ is a namespace package: the user's folder merges with the built-in one
    assert load_pack(loaded, "eng").pack.tool_names()[0] == "read_file"


def test_user_pack_extra_key_is_validated(user_project: Path) -> None:
    config = write(
        user_project,
        """\
        packs:
          hello:
            builder: packs.mine:build
            greeting: Hi.
            repeat: 10
        """,
    )
    message = pack_error(load_config(config), "hello")
    assert f"{config}:{line_of(config, 'repeat')}: packs.hello.repeat:" in message
    assert "less than or equal to 3" in message


def test_user_pack_missing_required_key_points_at_the_pack(user_project: Path) -> None:
    config = write(user_project, "packs:\n  hello:\n    builder: packs.mine:build\n")
    message = pack_error(load_config(config), "hello")
    assert f"{config}:2: packs.hello.greeting: Field required" in message


def test_user_pack_unknown_key_lists_its_settings_keys(user_project: Path) -> None:
    config = write(
        user_project,
        """\
        packs:
          hello:
            builder: packs.mine:build
            greeting: Hi.
            greting: typo
        """,
    )
    message = pack_error(load_config(config), "hello")
    assert f"{config}:5: packs.hello.greting: unknown key" in message
    valid = message.split("valid keys:")[1]
    assert "greeting" in valid
    assert "repeat" in valid
    assert "builder" in valid


def test_a_packs_init_that_hides_the_built_in_packs_is_explained(
    user_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """packs/ must stay a namespace package; a user's packs/__init__.py turns it into a regular
    package that shadows fabric's own packs/ folder."""
    for name in [n for n in sys.modules if n == "packs" or n.startswith("packs.")]:
        monkeypatch.delitem(sys.modules, name)
    (user_project / "packs" / "__init__.py").write_text("")
    config = write(user_project, "packs:\n  eng:\n    builder: engineering\n")
    message = pack_error(load_config(config), "eng")
    assert "cannot import 'packs.engineering'" in message
    assert f"{user_project / 'packs' / '__init__.py'} makes 'packs' a regular package" in message
    assert "delete that __init__.py" in message


def test_builder_that_raises_is_a_pack_error_naming_the_builder(user_project: Path) -> None:
    config = write(
        user_project, "packs:\n  hello:\n    builder: packs.mine:broken\n    greeting: x\n"
    )
    with pytest.raises(PackError) as info:
        load_pack(load_config(config), "hello")
    message = str(info.value)
    assert f"{config}:3:" in message
    assert "RuntimeError: the pack author's bug" in message


def test_builder_returning_something_else_is_a_pack_error(user_project: Path) -> None:
    config = write(user_project, "packs:\n  hello:\n    builder: packs.mine:not_a_builder\n")
    message = pack_error(load_config(config), "hello")
    assert "returned str, not a Pack" in message


def test_builder_module_that_does_not_import(tmp_path: Path) -> None:
    config = write(tmp_path, "packs:\n  p:\n    builder: packs.nosuch:build\n")
    message = pack_error(load_config(config), "p")
    assert f"{config}:3: packs.p.builder: cannot import 'packs.nosuch'" in message
    assert "ModuleNotFoundError" in message


def test_builder_module_with_a_syntax_error(tmp_path: Path) -> None:
    write(tmp_path, "def build(settings:\n", "userpack_bad.py")
    config = write(tmp_path, "packs:\n  p:\n    builder: userpack_bad:build\n")
    message = pack_error(load_config(config), "p")
    assert "cannot import 'userpack_bad'" in message
    assert "SyntaxError" in message


def test_builder_attribute_that_does_not_exist_lists_the_modules_callables(
    user_project: Path,
) -> None:
    config = write(user_project, "packs:\n  p:\n    builder: packs.mine:biuld\n")
    message = pack_error(load_config(config), "p")
    assert f"{config}:3: packs.p.builder: module 'packs.mine' has no callable 'biuld'" in message
    callables = message.split("callables there:")[1]
    assert "build" in callables
    assert "broken" in callables
    assert "Field" not in callables  # imported names are not the module's own builders
    assert "library_tools" not in callables


@pytest.mark.parametrize("builder", ["mine", "packs.mine", "packs.mine:", ":build"])
def test_builder_that_is_not_a_dotted_path_lists_the_builtins(tmp_path: Path, builder: str) -> None:
    config = write(tmp_path, f"packs:\n  p:\n    builder: '{builder}'\n")
    message = pack_error(load_config(config), "p")
    assert "neither 'module:callable', a built-in builder nor an installed pack" in message
    assert "engineering, research, declarative" in message


def test_unknown_pack_name_lists_the_known_packs(tmp_path: Path) -> None:
    message = pack_error(load(tmp_path, BUILTINS), "reviewer")
    assert "no pack named 'reviewer'" in message
    assert "known packs: eng, res, rev" in message


def test_pack_model_key_must_be_in_llm_models(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        """\
        llm:
          models: {default: m, coder: c}
        packs:
          p:
            builder: engineering
            model: large
        """,
    )
    message = pack_error(load_config(config), "p")
    assert (
        f"{config}:6: packs.p.model: 'large' is not a model key in llm.models or a backend's models"
        in message
    )
    assert "default, coder" in message


def test_fabric_model_makes_any_model_key_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_MODEL", "tiny")
    loaded = load(tmp_path, "packs:\n  p:\n    builder: engineering\n    model: large\n")
    lp = load_pack(loaded, "p")
    assert build_runner(loaded).model_for(lp) == "tiny"


# --- YAML-only (declarative) packs ----------------------------------------------------------


def declarative(tools: str = "[read_file]", schema: str = "{type: object}") -> str:
    return f"""\
packs:
  d:
    builder: declarative
    system_prompt: Review.
    tools: {tools}
    finish_schema: {schema}
"""


def test_declarative_unknown_tool_lists_the_library(tmp_path: Path) -> None:
    config = write(tmp_path, declarative(tools="[read_file, rm_rf]"))
    message = pack_error(load_config(config), "d")
    assert f"{config}:5: packs.d.tools.1: unknown tool 'rm_rf'" in message
    assert "read_file, write_file, list_files, search_files, shell" in message


def test_declarative_invalid_finish_schema(tmp_path: Path) -> None:
    config = write(tmp_path, declarative(schema="{type: object, properties: {a: {type: 12}}}"))
    message = pack_error(load_config(config), "d")
    expected = f"{config}:6: packs.d.finish_schema.properties.a.type: not a valid JSON Schema"
    assert expected in message


def test_declarative_finish_schema_must_be_an_object(tmp_path: Path) -> None:
    config = write(tmp_path, declarative(schema="{type: array}"))
    message = pack_error(load_config(config), "d")
    assert "packs.d.finish_schema" in message
    assert "type: object" in message


def test_declarative_needs_a_system_prompt(tmp_path: Path) -> None:
    config = write(
        tmp_path, "packs:\n  d:\n    builder: declarative\n    finish_schema: {type: object}\n"
    )
    message = pack_error(load_config(config), "d")
    assert f"{config}:2: packs.d.system_prompt: Field required" in message


REVIEWER = """\
llm:
  models: {default: m, coder: c}
runs_dir: runs
packs:
  reviewer:
    builder: declarative
    model: coder
    system_prompt: You are a code reviewer.
    tools: [read_file, list_files, search_files]
    finish_schema:
      type: object
      properties:
        verdict: {type: string, enum: [approve, request_changes]}
        problems:
          type: array
          items:
            type: object
            properties: {file: {type: string}, line: {type: integer}, problem: {type: string}}
            required: [file, problem]
      required: [verdict, problems]
"""


def test_declarative_pack_runs_end_to_end(tmp_path: Path, workspace: Path) -> None:
    (workspace / "app.py").write_text("def add(a, b):\n    return a - b\n")
    client = ScriptedChatClient(
        [
            tool_calls(("list_files", {}), ("search_files", {"pattern": "return"})),
            tool_call("read_file", path="app.py"),
            # wrong enum value: goes back to the model, which corrects itself
            tool_call("finish_task", verdict="bad", problems=[]),
            tool_call(
                "finish_task",
                verdict="request_changes",
                problems=[{"file": "app.py", "line": 2, "problem": "subtracts instead of adds"}],
            ),
        ],
        model="c",
    )
    models: list[str] = []

    def factory(model: str) -> ScriptedChatClient:
        models.append(model)
        return client

    runs = tmp_path / "runs"
    runner = build_runner(load(tmp_path, REVIEWER), chat_factory=factory, runs_dir=runs)
    result = asyncio.run(runner.run(RunRequest("reviewer", "review app.py", workspace=workspace)))

    assert result.succeeded, result
    assert result.payload == {
        "verdict": "request_changes",
        "problems": [{"file": "app.py", "line": 2, "problem": "subtracts instead of adds"}],
    }
    assert models == ["c"]  # the pack's model key, resolved through llm.models
    assert client.closed
    offered = [t["function"]["name"] for t in client.requests[0][1]]
    assert offered == ["read_file", "list_files", "search_files", "finish_task"]
    assert client.requests[0][0][0] == {"role": "system", "content": "You are a code reviewer."}

    assert result.runlog_path is not None
    assert Path(result.runlog_path).parent.parent == runs
    events = assert_valid_runlog(Path(result.runlog_path))
    assert kinds(events).count("tool_call") == 5
    assert kinds(events).count("tool_result") == 4  # a valid finish_task ends the run
    results = [e for e in events if e["kind"] == "tool_result"]
    assert results[0]["output"] == "app.py"
    assert "app.py:2:     return a - b" in results[1]["output"]
    assert "return a - b" in results[2]["output"]
    assert results[3]["ok"] is False  # the invalid finish_task
    assert "verdict" in results[3]["output"]
    assert events[-1]["status"] == "completed"
    assert events[0]["pack"] == "reviewer"


def test_runner_refuses_an_empty_task_and_a_missing_workspace(tmp_path: Path) -> None:
    runner = build_runner(
        load(tmp_path, REVIEWER),
        chat_factory=lambda model: ScriptedChatClient([]),
        runs_dir=tmp_path / "runs",
    )
    with pytest.raises(ConfigError, match="task is empty"):
        asyncio.run(runner.run(RunRequest("reviewer", "  ")))
    with pytest.raises(ConfigError, match="is not a folder"):
        asyncio.run(runner.run(RunRequest("reviewer", "x", workspace=tmp_path / "missing")))
    with pytest.raises(ConfigError, match="max-steps"):
        asyncio.run(runner.run(RunRequest("reviewer", "x", workspace=tmp_path, max_steps=0)))
    assert not (tmp_path / "runs").exists()  # nothing ran, so no runlog was started


def test_a_partial_sandbox_keeps_the_packs_other_defaults(tmp_path: Path) -> None:
    """Changing only the timeout must not silently take away the engineering allowlist."""
    loaded = load(
        tmp_path,
        """\
        packs:
          engineering:
            builder: engineering
            sandbox: {command_timeout: 300}
        """,
    )
    sandbox = load_pack(loaded, "engineering").settings.sandbox
    assert sandbox.command_timeout == 300
    assert "python" in sandbox.allowed_commands and "git" in sandbox.allowed_commands


def test_an_explicit_empty_allowlist_is_respected(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        """\
        packs:
          engineering:
            builder: engineering
            sandbox: {allowed_commands: []}
        """,
    )
    assert load_pack(loaded, "engineering").settings.sandbox.allowed_commands == []


def test_a_policy_rule_for_a_tool_the_pack_lacks_is_refused_at_load(tmp_path: Path) -> None:
    """A misspelt tool name would never match, turning an intended deny into the default."""
    text = (
        "packs:\n"
        "  engineering:\n"
        "    builder: engineering\n"
        "    sandbox:\n"
        "      allowed_commands: [git]\n"
        "      policy:\n"
        "        rules:\n"
        "          - {tool: shell, command: 'git push **', verdict: ask}\n"
        "          - {tool: write_fil, verdict: deny}\n"
    )
    loaded = load(tmp_path, text)
    with pytest.raises(PackError) as caught:
        load_pack(loaded, "engineering")
    message = str(caught.value)
    assert "rules[1].tool" in message and "'write_fil'" in message
    line = line_of(Path(loaded.source), "write_fil")
    assert f"fabric.yaml:{line}:" in message and "write_file" in caught.value.hint


def test_a_cli_run_cannot_read_the_services_task_database_or_rewrite_its_config(
    tmp_path: Path,
) -> None:
    """The workspace is the config folder, as with `fabric run` started there: the service's
    task database beside fabric.yaml is out of the tools' reach, and the config is read-only."""
    loaded = load(tmp_path, REVIEWER)
    (tmp_path / "tasks.sqlite3").write_text("other clients' tasks")
    client = ScriptedChatClient(
        [
            tool_call("read_file", path="tasks.sqlite3"),
            tool_call("finish_task", verdict="approve", problems=[]),
        ]
    )
    runner = build_runner(loaded, chat_factory=lambda model: client, runs_dir=tmp_path / "runs")
    result = asyncio.run(runner.run(RunRequest("reviewer", "read it", workspace=tmp_path)))
    events = assert_valid_runlog(Path(str(result.runlog_path)))
    [refused] = [e for e in events if e["kind"] == "tool_result"]
    assert refused["ok"] is False and "protected" in refused["output"]
    assert "other clients" not in refused["output"]
    assert tmp_path / "fabric.yaml" in runner.read_only_in(tmp_path)
