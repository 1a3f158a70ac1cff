"""Layered configuration as a user meets it (ADR 0024): `fabric config show` (and `--origin`)
in a home of the test's own, with a user config, a project config and environment variables;
`fabric run` taking its model from the user config and letting options win; what a broken user
config says; and a user config that a run wrote is not loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from sandbox.host import confining_backends
from support import line_of, run_fabric, write

from fabric.application.job import RunRequest
from fabric.application.workspaces import check_workspace
from fabric.config.loader import load_config
from fabric.domain.errors import ConfigError
from fabric.interfaces.compose import build_runner
from fabric.testing import MockOpenAIServer, ScriptedChatClient, completion, tool_call

API_KEY = "sk-config-show-never-7777"
USER = """\
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "URL"}
  models: {default: user-model, coder: user-coder}
  temperature: 0.3
  retry: {attempts: 1}
"""
PROJECT = """\
version: 1
llm:
  models: {coder: project-coder}
default_pack: notes
packs:
  notes:
    builder: declarative
    system_prompt: You take notes.
    tools: [read_file]
    finish_schema: {type: object, properties: {summary: {type: string}}, required: [summary]}
"""


class Home:
    """A home folder, a user config under $XDG_CONFIG_HOME, a project folder, and the
    environment a `fabric` command gets there."""

    def __init__(self, root: Path, model_url: str = "http://127.0.0.1:1/v1") -> None:
        self.home, self.xdg, self.project = root / "home", root / "xdg", root / "project"
        self.user = write(self.xdg / "fabric", USER.replace("URL", model_url), "config.yaml")
        write(self.project, PROJECT)
        (self.project / "ws").mkdir()
        self.home.mkdir()
        self.env = {**os.environ, "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.xdg)}

    def fabric(self, *args: str, **env: str) -> Any:
        return run_fabric(*args, cwd=self.project, env={**self.env, **env})


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


# --- fabric config show -----------------------------------------------------------------------


def test_config_show_prints_every_layer_merged_and_no_secret(home: Home) -> None:
    shown = home.fabric("config", "show", FABRIC_MODEL="env-model", FABRIC_API_KEY=API_KEY)
    assert shown.returncode == 0, shown.stderr
    config = yaml.safe_load(shown.stdout)
    assert config["llm"]["backend"] == "openai"  # the user's
    assert config["llm"]["temperature"] == 0.3  # the user's
    assert config["llm"]["models"] == {"default": "env-model", "coder": "env-model"}
    assert config["llm"]["retry"]["total_time"] == 180  # nobody's: the default
    assert config["default_pack"] == "notes"  # the project's
    assert config["packs"]["notes"]["tools"] == ["read_file"]
    assert API_KEY not in shown.stdout + shown.stderr
    assert "#   FABRIC_API_KEY: set" in shown.stdout
    assert "#   ANTHROPIC_API_KEY: not set" in shown.stdout


def test_config_show_origin_says_where_each_value_came_from(home: Home) -> None:
    shown = home.fabric(
        "config", "show", "--origin", "--backend", "ollama", FABRIC_MODEL="env-model"
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    user, project = home.user, home.project / "fabric.yaml"
    assert (
        f"# layers, lowest first: default < {user} < fabric.yaml < environment < "
        + ("command line")
        in lines
    )
    assert f"  temperature: 0.3  # {user}:{line_of(user, 'temperature')}" in lines
    assert "  backend: ollama  # --backend" in lines
    assert "    coder: env-model  # $FABRIC_MODEL" in lines
    assert "    attempts: 1  # " + f"{user}:{line_of(user, 'retry')}" in lines
    assert "    total_time: 180.0  # default" in lines
    assert f"default_pack: notes  # fabric.yaml:{line_of(project, 'default_pack')}" in lines
    assert yaml.safe_load(shown.stdout)["llm"]["backend"] == "ollama"  # still YAML


def test_config_show_json_has_the_origins_and_the_yaml_reads_back_the_same(home: Home) -> None:
    shown = home.fabric("config", "show", "--origin", "--json", FABRIC_SERVE__PORT="9100")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert answer["config"]["serve"]["port"] == 9100
    assert answer["origins"]["serve"]["port"] == "$FABRIC_SERVE__PORT"
    assert answer["origins"]["llm"]["models"]["default"] == f"{home.user}:5"
    assert answer["secrets"]["FABRIC_API_TOKEN"] == "not set"
    as_yaml = home.fabric("config", "show", "--origin", FABRIC_SERVE__PORT="9100")
    assert yaml.safe_load(as_yaml.stdout) == answer["config"]


def test_a_broken_user_config_exits_2_naming_its_line_and_the_closest_keys(home: Home) -> None:
    home.user.write_text(home.user.read_text().replace("temperature", "temprature"))
    shown = home.fabric("config", "show")
    assert shown.returncode == 2
    line = line_of(home.user, "temprature")
    assert f"{home.user}:{line}: llm.temprature: unknown key" in shown.stderr
    assert "did you mean temperature?" in shown.stderr
    ran = home.fabric("run", "-w", "ws", "x")  # every command reads the same layers
    assert ran.returncode == 2 and f"{home.user}:{line}" in ran.stderr


def test_a_bad_environment_value_exits_2_naming_the_variable(home: Home) -> None:
    shown = home.fabric("config", "show", FABRIC_SANDBOX__NETWORK="yes")
    assert shown.returncode == 2
    assert "FABRIC_SANDBOX__NETWORK='yes': sandbox: unknown key" in shown.stderr
    assert "fix or unset the environment variable" in shown.stderr


# --- fabric run ---------------------------------------------------------------------------------


def finish(_: dict[str, Any]) -> tuple[int, Any]:
    return 200, completion(None, [("finish_task", {"summary": "noted"})])


def test_run_takes_its_model_from_the_user_config(tmp_path: Path) -> None:
    """The project's file names no model for the pack's key (default): the user's does."""
    with MockOpenAIServer(finish, models=["user-model", "env-model", "flag-model"]) as server:
        home = Home(tmp_path, server.base_url)
        done = home.fabric("run", "-w", "ws", "--json", "take a note")
    assert done.returncode == 0, done.stderr
    assert [r["model"] for r in server.requests] == ["user-model"]


def test_options_win_over_the_environment_and_the_files(tmp_path: Path) -> None:
    with MockOpenAIServer(finish, models=["user-model", "env-model", "flag-model"]) as server:
        home = Home(tmp_path, server.base_url)
        by_env = home.fabric("run", "-w", "ws", "x", FABRIC_MODEL="env-model")
        # FABRIC_BACKEND names a backend that is not running: --backend goes over it
        by_flag = home.fabric(
            "run", "-w", "ws", "--backend", "openai", "--model", "flag-model", "x",
            FABRIC_MODEL="env-model", FABRIC_BACKEND="ollama", OLLAMA_HOST="127.0.0.1:1",
        )  # fmt: skip
    assert (by_env.returncode, by_flag.returncode) == (0, 0), by_flag.stderr
    assert [r["model"] for r in server.requests] == ["env-model", "flag-model"]


# --- a user config is fabric's own: runs cannot write it -------------------------------------


def test_fabrics_settings_folders_are_no_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    for folder in (home / ".config" / "fabric", xdg / "fabric" / "inside"):
        folder.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    loaded = load_config(write(tmp_path / "project", "serve: {token_file: /elsewhere/token}\n"))
    refused = [
        (home / ".config" / "fabric", "the run ledger"),
        (xdg / "fabric", "your settings"),
        (xdg / "fabric" / "inside", "lies inside"),
        (home, "your home folder"),
    ]
    for folder, says in refused:
        with pytest.raises(ConfigError) as info:
            check_workspace(folder, loaded, runs_dir=loaded.runs_dir)
        assert says in str(info.value), info.value


def test_tools_cannot_write_the_user_config_from_a_workspace_that_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    workspace = tmp_path / "ws"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(workspace / ".config"))
    write(workspace / ".config" / "fabric", "llm: {temperature: 0.1}\n", "config.yaml")
    config = write(tmp_path, PROJECT.replace("[read_file]", "[read_file, write_file]"))
    client = ScriptedChatClient(
        [
            tool_call("write_file", path=".config/fabric/config.yaml", content="packs: {}\n"),
            tool_call("read_file", path=".config/fabric/config.yaml"),
            tool_call("finish_task", summary="tried"),
        ]
    )
    runner = build_runner(load_config(config), chat_factory=lambda model: client)
    result = asyncio.run(runner.run(RunRequest("notes", "change it", workspace=workspace)))
    assert result.succeeded, result
    answers = [m["content"] for m in client.requests[2][0] if m["role"] == "tool"]
    assert all("protected place" in answer for answer in answers), answers
    assert (workspace / ".config" / "fabric" / "config.yaml").read_text() == (
        "llm: {temperature: 0.1}\n"
    )


PLANT = """\
import os
os.makedirs(".config/fabric", exist_ok=True)
with open(".config/fabric/config.yaml", "w") as f:
    f.write("llm: {temperature: 1.9}\\n")
print("planted")
"""


def test_a_user_config_a_run_wrote_is_not_loaded_at_the_next_start(tmp_path: Path) -> None:
    """$XDG_CONFIG_HOME lies in the workspace and holds no fabric folder yet (so there is
    nothing to hide from commands): a command creates a user config there. The next fabric
    refuses it, as it refuses a fabric.yaml a run wrote, until the user saves it again."""
    home = Home(tmp_path)
    home.user.unlink()
    home.user.parent.rmdir()
    workspace = home.project / "ws"
    backend = confining_backends()[0]
    project = home.project / "fabric.yaml"
    project.write_text(
        PROJECT.replace("[read_file]", "[write_file, shell]")
        + f"    sandbox: {{allowed_commands: [python], confinement: {backend}}}\n"
    )
    steps = [
        ("write_file", {"path": "plant.py", "content": PLANT}),
        ("shell", {"command": "python plant.py"}),
        ("finish_task", {"summary": "done"}),
    ]

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        return 200, completion(None, [steps[min(done, 2)]])

    env = {"XDG_CONFIG_HOME": str(workspace / ".config")}
    with MockOpenAIServer(model, models=["m"]) as server:
        ran = home.fabric("run", "-w", "ws", "plant it", FABRIC_BASE_URL=server.base_url, **env)
    assert ran.returncode == 0, ran.stderr
    planted = workspace / ".config" / "fabric" / "config.yaml"
    assert planted.read_text() == "llm: {temperature: 1.9}\n"

    refused = home.fabric("config", "show", **env)
    assert refused.returncode == 2
    assert f"{planted} was written while run" in refused.stderr
    assert "save it again" in refused.stderr
    planted.write_text(planted.read_text())  # the user read it and accepts it
    accepted = home.fabric("config", "show", **env)
    assert accepted.returncode == 0, accepted.stderr
    assert yaml.safe_load(accepted.stdout)["llm"]["temperature"] == 1.9
