"""Layered configuration (ADR 0024): built-in defaults < the user's config < the project's
fabric.yaml < FABRIC_* variables < command-line options; how they merge, where each value came
from, and what a mistake in any of them says."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import line_of, write

from fabric.config.loader import PACKAGED, Flags, LoadedConfig, load_config
from fabric.config.schema import OpenAIBackend
from fabric.domain.errors import ConfigError, FabricError
from fabric.infrastructure.packs.registry import load_pack

USER = """\
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:9001/v1", api_key_env: [MY_KEY]}
  models: {default: user-default, coder: user-coder}
  auto: [ollama, embedded]
  timeouts: {read: 30}
  temperature: 0.3
packs:
  notes:
    builder: declarative
    system_prompt: You take notes.
    tools: [read_file]
    finish_schema: {type: object}
"""
PROJECT = """\
llm:
  models: {coder: project-coder}
  auto: [embedded]
  timeouts: {connect: 3}
packs:
  eng:
    builder: engineering
    model: coder
    sandbox: {allowed_commands: [python]}
"""


class Places:
    """A home with a user config folder and a project folder, and an environment that points
    at them (``load_config``'s ``env``)."""

    def __init__(self, root: Path) -> None:
        self.xdg = root / "xdg"
        self.user = self.xdg / "fabric" / "config.yaml"
        self.project = root / "project" / "fabric.yaml"
        self.env = {"HOME": str(root / "home"), "XDG_CONFIG_HOME": str(self.xdg)}

    def load(
        self,
        user: str | None = USER,
        project: str | None = PROJECT,
        flags: Flags | None = None,
        **env: str,
    ) -> LoadedConfig:
        if user is not None:
            write(self.user.parent, user, "config.yaml")
        if project is not None:
            write(self.project.parent, project)
        explicit = self.project if project is not None else None
        return load_config(explicit, flags=flags, env={**self.env, **env})

    def error(self, *args: str | None, **env: str) -> str:
        with pytest.raises(ConfigError) as info:
            self.load(*args, **env)
        return str(info.value)


@pytest.fixture
def places(tmp_path: Path) -> Places:
    return Places(tmp_path)


# --- merging: each layer over the one below ---------------------------------------------------


def test_the_project_file_goes_over_the_user_config(places: Places) -> None:
    llm = places.load().config.llm
    assert llm.models == {"default": "user-default", "coder": "project-coder"}
    assert llm.backend == "openai"  # the user's, which the project does not set
    assert llm.temperature == 0.3


def test_nested_mappings_merge_key_by_key(places: Places) -> None:
    config = places.load().config
    assert (config.llm.timeouts.read, config.llm.timeouts.connect) == (30, 3)
    assert config.llm.timeouts.write == 60  # neither sets it: the default
    assert list(config.packs) == ["notes", "eng"]  # the user's pack and the project's


def test_lists_replace_the_list_below_whole(places: Places) -> None:
    assert places.load().config.llm.auto == ["embedded"]


def test_the_environment_goes_over_the_files(places: Places) -> None:
    config = places.load(FABRIC_MODEL="env-model", FABRIC_LLM__TEMPERATURE="0.9").config
    assert config.llm.models == {"default": "env-model", "coder": "env-model"}
    assert config.llm.temperature == 0.9


def test_options_go_over_the_environment(places: Places) -> None:
    flags: Flags = {"--backend": (("llm", "backend"), "ollama")}
    config = places.load(flags=flags, FABRIC_BACKEND="embedded").config
    assert config.llm.backend == "ollama"
    assert places.load(FABRIC_BACKEND="embedded").config.llm.backend == "embedded"
    unset: Flags = {"--backend": (("llm", "backend"), None)}  # an option not given sets nothing
    assert places.load(flags=unset).config.llm.backend == "openai"


def test_a_pack_section_given_in_part_merges_into_the_one_below(places: Places) -> None:
    project = PROJECT + "  notes:\n    limits: {max_steps: 4}\n"
    notes = places.load(project=project).config.packs["notes"]
    assert notes.builder == "declarative" and notes.limits.max_steps == 4
    assert notes.model_extra == {
        "system_prompt": "You take notes.",
        "tools": ["read_file"],
        "finish_schema": {"type": "object"},
    }


def test_another_kind_or_builder_replaces_the_entry_below_whole(places: Places) -> None:
    project = PROJECT + "  notes:\n    builder: engineering\n"
    project = project.replace("llm:\n", "llm:\n  backends: {openai: {kind: ollama}}\n", 1)
    config = places.load(project=project).config
    assert config.llm.backends["openai"].kind == "ollama"  # no api_key_env of the openai one
    assert config.packs["notes"].model_extra == {}  # none of the declarative pack's keys


def test_null_replaces_a_value_below(places: Places) -> None:
    project = PROJECT.replace("llm:\n", "llm:\n  temperature: null\n", 1)
    assert places.load(project=project).config.llm.temperature is None


def test_the_packaged_default_lies_below_the_user_config(
    places: Places, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./fabric.yaml: the packaged default
    user = "llm: {models: {coder: mine}}\ndefault_pack: reviewer\n"
    loaded = places.load(user=user, project=None)
    assert loaded.source == PACKAGED
    assert loaded.config.llm.models == {"default": "qwen2.5-coder:7b", "coder": "mine"}
    assert loaded.config.default_pack == "reviewer"
    assert list(loaded.config.packs) == ["engineering", "research", "reviewer"]


def test_relative_paths_in_the_user_config_are_taken_from_its_folder(places: Places) -> None:
    user = "runs_dir: my-runs\nserve: {workspace_roots: [work, /abs], durable_database: d.db}\n"
    loaded = places.load(user=user)
    folder = places.user.parent
    assert loaded.runs_dir == (folder / "my-runs").resolve()
    assert loaded.config.serve.workspace_roots == [str(folder / "work"), "/abs"]
    assert loaded.config.serve.durable_database == str(folder / "d.db")
    user = "packs: {eng: {skills: {folders: [team, ~/.agents/skills]}}}\n"
    skills = places.load(user=user).config.packs["eng"].skills
    assert skills.folders == [str(folder / "team"), "~/.agents/skills"]
    # the project's stay relative to the project's folder, as before
    loaded = places.load(project=PROJECT + "runs_dir: runs\n")
    assert loaded.runs_dir == (places.project.parent / "runs").resolve()


def test_fabric_database_url_sets_the_durable_database(places: Places) -> None:
    url = "postgresql://db.example/fabric"
    assert places.load(FABRIC_DATABASE_URL=url).config.serve.durable_database == url


# --- where each value came from ---------------------------------------------------------------


def test_origins_name_the_file_and_line_the_variable_the_option_or_default(
    places: Places,
) -> None:
    flags: Flags = {"--backend": (("llm", "backend"), "ollama")}
    origins = places.load(flags=flags, FABRIC_LLM__TEMPERATURE="0.5").origins
    user, project = places.user, places.project
    assert origins.origin(("llm", "models", "default")) == f"{user}:{line_of(user, 'models')}"
    assert origins.origin(("llm", "models", "coder")) == f"{project}:2"
    assert origins.origin(("llm", "auto")) == f"{project}:{line_of(project, 'auto')}"
    assert origins.origin(("llm", "temperature")) == "$FABRIC_LLM__TEMPERATURE"
    assert origins.origin(("llm", "backend")) == "--backend"
    assert origins.origin(("llm", "retry", "attempts")) == "default"
    assert origins.origin(("packs", "eng", "sandbox", "allowed_commands")) == (
        f"{project}:{line_of(project, 'allowed_commands')}"
    )


def test_a_value_replaced_whole_takes_its_origin_with_it(places: Places) -> None:
    project = PROJECT.replace("llm:\n", "llm:\n  backends: {openai: {kind: ollama}}\n", 1)
    origins = places.load(project=project).origins
    assert origins.origin(("llm", "backends", "openai", "kind")) == f"{places.project}:2"
    assert origins.origin(("llm", "backends", "openai", "api_key_env")) == "default"


# --- mistakes: where, which key, what would be right ------------------------------------------


def test_an_unknown_key_in_the_user_config_names_its_line_and_the_closest_keys(
    places: Places,
) -> None:
    message = places.error(USER.replace("temperature:", "temprature:"))
    line = line_of(places.user, "temprature")
    assert f"{places.user}:{line}: llm.temprature: unknown key" in message
    assert "did you mean temperature?" in message
    assert f"fix the key in {places.user}" in message


def test_an_unknown_key_in_the_project_file_names_its_line_and_the_closest_keys(
    places: Places,
) -> None:
    message = places.error(USER, PROJECT + "serve: {prot: 9000}\n")
    assert f"{places.project}:{line_of(places.project, 'prot')}: serve.prot: unknown key" in message
    assert "(valid keys: host, port," in message and "did you mean port?" in message


def test_a_value_not_among_its_choices_lists_them(places: Places) -> None:
    project = PROJECT.replace("{allowed_commands: [python]}", "{confinement: landlok}")
    message = places.error(USER, project)
    assert f"{places.project}:{line_of(places.project, 'landlok')}: " in message
    assert "packs.eng.sandbox.confinement: Input should be 'auto', 'bwrap', 'landlock' or " in (
        message
    )
    assert "not 'landlok'; did you mean 'landlock'?" in message


def test_an_unknown_kind_lists_the_kinds(places: Places) -> None:
    message = places.error(USER.replace("{kind: openai,", "{kind: openia,"))
    assert f"{places.user}:4: llm.backends.openai.kind: 'openia' is not one of openai, " in message
    assert "did you mean 'openai'?" in message


def test_a_backend_of_another_kind_lists_the_keys_of_its_own_kind(places: Places) -> None:
    user = "llm:\n  backends:\n    claude: {kind: anthropic, max_tokns: 9}\n"
    message = places.error(user)
    assert (
        "llm.backends.claude.max_tokns: unknown key (valid keys: models, kind, base_url, "
        + ("api_key_env, max_tokens, stream); did you mean max_tokens?")
        in message
    )


def test_a_bad_environment_value_names_the_variable(places: Places) -> None:
    message = places.error(FABRIC_SERVE__PORT="lots")
    assert "FABRIC_SERVE__PORT='lots': serve.port: Input should be a valid integer" in message
    assert "fix or unset the environment variable" in message
    message = places.error(FABRIC_LLM__TEMPRATURE="0.2")
    assert "FABRIC_LLM__TEMPRATURE='0.2': llm.temprature: unknown key" in message
    assert "did you mean temperature?" in message
    message = places.error(FABRIC_LLM__AUTO="[ollama")
    assert "FABRIC_LLM__AUTO='[ollama' is not a YAML value" in message


def test_two_variables_for_one_key_are_an_error(places: Places) -> None:
    message = places.error(FABRIC_MODEL="a", FABRIC_LLM__MODELS__CODER="b")
    assert "FABRIC_LLM__MODELS__CODER and FABRIC_MODEL both set llm.models.coder" in message


def test_a_bad_option_names_the_option(places: Places) -> None:
    with pytest.raises(ConfigError) as info:
        places.load(flags={"--backend": (("llm", "backend"), "nope")})
    assert "--backend='nope': llm.backend: llm.backend 'nope' is not 'auto'" in str(info.value)
    assert "fix the command-line option" in str(info.value)


def test_a_mistake_in_a_file_counts_even_where_a_variable_replaces_the_value(
    places: Places,
) -> None:
    message = places.error(USER.replace("backend: openai", "backend: olama"), FABRIC_BACKEND="auto")
    assert f"{places.user}:2: llm.backend:" in message


def test_a_credential_in_a_variable_is_not_repeated(places: Places) -> None:
    message = places.error(FABRIC_BASE_URL="http://me:hunter2@127.0.0.1:9/v1")
    assert "hunter2" not in message and "FABRIC_BASE_URL='http://***@127.0.0.1:9/v1'" in message


def test_a_packs_own_settings_point_at_the_layer_that_set_them(places: Places) -> None:
    """A pack's keys are checked by its builder's model, when it is built: a mistake there
    names the user's file too."""
    loaded = places.load(USER.replace("tools: [read_file]", "tools: [read_file]\n    toolz: 1"))
    with pytest.raises(FabricError) as info:
        load_pack(loaded, "notes")
    line = line_of(places.user, "toolz")
    assert f"{places.user}:{line}: packs.notes.toolz: unknown key" in str(info.value)


# --- which files fabric reads, and which it checks first ----------------------------------------


def test_found_files_are_checked_before_they_are_read(
    places: Places, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's config and ./fabric.yaml are found, not given: the caller's check (the
    CLI's run ledger, ADR 0013) sees each first; a --config file is the user's own choice."""
    write(places.user.parent, USER, "config.yaml")
    write(places.project.parent, PROJECT)
    seen: list[Path] = []
    load_config(places.project, env=places.env, check_found=seen.append)
    assert seen == [places.user]
    monkeypatch.chdir(places.project.parent)
    seen.clear()
    load_config(env=places.env, check_found=seen.append)
    assert seen == [places.user, Path("fabric.yaml")]

    def refuse(path: Path) -> None:
        raise ConfigError(f"{path} was planted")

    with pytest.raises(ConfigError, match=r"config\.yaml was planted"):
        load_config(env=places.env, check_found=refuse)


def test_xdg_config_home_must_be_absolute(places: Places, tmp_path: Path) -> None:
    write(tmp_path / "home" / ".config" / "fabric", "llm: {temperature: 1.5}\n", "config.yaml")
    env = {**places.env, "XDG_CONFIG_HOME": "relative/xdg"}  # ignored, as XDG says
    write(places.project.parent, PROJECT)
    assert load_config(places.project, env=env).config.llm.temperature == 1.5


def test_without_a_user_config_the_project_file_is_taken_as_written(places: Places) -> None:
    loaded = places.load(user=None)
    backend = loaded.config.llm.backends["openai"]
    assert isinstance(backend, OpenAIBackend)
    assert str(backend.base_url) == "http://127.0.0.1:8080/v1"  # the built-in one
    assert loaded.config.llm.models == {"coder": "project-coder"}


def test_only_true_and_false_are_booleans(places: Places) -> None:
    """The README's fallback example loads: `on:` is the trigger's key, not the boolean YAML
    1.1 makes of it; `yes` and `off` are words where a text is expected, and a yes/no setting
    still takes them."""
    project = """\
llm:
  backends:
    anthropic: {kind: anthropic, api_key_env: [ANTHROPIC_API_KEY]}
    openai: {kind: openai, base_url: "http://127.0.0.1:9001/v1", stream: no}
  fallback: [{backend: anthropic, model: claude-sonnet-4-5, on: [capability]}]
packs:
  notes:
    builder: declarative
    description: yes
    system_prompt: off
    tools: [read_file]
    finish_schema: {type: object}
"""
    config = places.load(user=None, project=project).config
    (step,) = config.llm.fallback
    assert (step.backend, step.model, step.on) == ("anthropic", "claude-sonnet-4-5", ["capability"])
    notes = config.packs["notes"]
    assert (notes.description, notes.model_extra["system_prompt"]) == ("yes", "off")  # type: ignore[index]
    openai = config.llm.backends["openai"]
    assert isinstance(openai, OpenAIBackend) and openai.stream is False
