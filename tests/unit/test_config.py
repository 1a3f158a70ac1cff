"""fabric.yaml: where it is found, environment overrides, and what a broken file says."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import line_of, write

from fabric.config.loader import PACKAGED, LoadedConfig, load_config
from fabric.config.schema import OpenAIBackend, SandboxSettings
from fabric.domain.errors import ConfigError
from fabric.infrastructure.llm.backends import api_key

REPO = Path(__file__).resolve().parents[2]


def config_error(path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return str(info.value)


# --- the packaged default -------------------------------------------------------------------


def test_packaged_default_is_the_repos_fabric_yaml() -> None:
    packaged = REPO / "src" / "fabric" / "config" / "default.yaml"
    assert packaged.read_bytes() == (REPO / "fabric.yaml").read_bytes()


def test_packaged_default_loads_the_built_in_packs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./fabric.yaml here
    loaded = load_config()
    assert loaded.source == PACKAGED
    assert list(loaded.config.packs) == ["engineering", "research", "reviewer"]
    assert loaded.config.default_pack == "engineering"
    assert loaded.runs_dir == (tmp_path / "runs").resolve()


# --- where the config comes from ------------------------------------------------------------


@pytest.fixture
def three_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A ./fabric.yaml in the cwd, one for FABRIC_CONFIG and one for --config, told apart by
    their runs_dir."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return {
        "cwd": write(cwd, "runs_dir: from-cwd\n"),
        "env": write(tmp_path, "runs_dir: from-env\n", "env.yaml"),
        "flag": write(tmp_path, "runs_dir: from-flag\n", "flag.yaml"),
    }


def test_explicit_config_wins_over_env_and_cwd(
    three_configs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_CONFIG", str(three_configs["env"]))
    loaded = load_config(three_configs["flag"])
    assert loaded.config.runs_dir == "from-flag"
    assert loaded.source == str(three_configs["flag"])


def test_fabric_config_env_wins_over_cwd(
    three_configs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_CONFIG", str(three_configs["env"]))
    assert load_config().config.runs_dir == "from-env"


def test_cwd_fabric_yaml_is_used_when_nothing_is_given(three_configs: dict[str, Path]) -> None:
    loaded = load_config()
    assert loaded.config.runs_dir == "from-cwd"
    # runs_dir is relative to the config file's folder, not to wherever fabric was started
    assert loaded.runs_dir == (three_configs["cwd"].parent / "from-cwd").resolve()


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    message = config_error(tmp_path / "nope.yaml")
    assert "nope.yaml" in message
    assert "does not exist" in message


def test_fabric_config_pointing_nowhere_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "runs_dir: here\n")  # must not be used silently instead
    monkeypatch.setenv("FABRIC_CONFIG", str(tmp_path / "gone.yaml"))
    message = config_error()
    assert "FABRIC_CONFIG" in message
    assert "gone.yaml" in message


def test_empty_file_means_all_defaults(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, ""))
    llm = loaded.config.llm
    assert loaded.config.packs == {}
    assert llm.backend == "auto"
    assert llm.auto == ["ollama", "embedded"]  # local only, by design
    assert sorted(llm.backends) == ["anthropic", "embedded", "ollama", "openai"]
    assert str(llm.backends["openai"].base_url) == "http://127.0.0.1:8080/v1"  # type: ignore[union-attr]


# --- environment overrides ------------------------------------------------------------------


MODELS_YAML = """\
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://10.0.0.1:8000/v1", models: {coder: big-on-openai}}
  models: {default: small, coder: big}
packs:
  p:
    builder: engineering
    model: coder
  q:
    builder: engineering
    model: other
"""


def _openai_url(loaded: LoadedConfig, name: str = "openai") -> str:
    backend = loaded.config.llm.backends[name]
    assert isinstance(backend, OpenAIBackend)
    return str(backend.base_url)


def test_fabric_base_url_overrides_the_active_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", "http://127.0.0.1:9999/v1")
    loaded = load_config(write(tmp_path, MODELS_YAML))
    assert _openai_url(loaded) == "http://127.0.0.1:9999/v1"
    assert loaded.config.llm.backend == "openai"


def test_fabric_base_url_with_auto_means_an_openai_compatible_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", "http://127.0.0.1:9999/v1")
    loaded = load_config(write(tmp_path, ""))
    assert loaded.config.llm.backend == "openai"
    assert _openai_url(loaded) == "http://127.0.0.1:9999/v1"


def test_fabric_base_url_cannot_apply_to_the_embedded_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_BACKEND", "embedded")
    monkeypatch.setenv("FABRIC_BASE_URL", "http://127.0.0.1:9999/v1")
    message = config_error(write(tmp_path, ""))
    assert "FABRIC_BASE_URL" in message and "embedded" in message


def test_fabric_backend_picks_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_BACKEND", "ollama")
    assert load_config(write(tmp_path, MODELS_YAML)).config.llm.backend == "ollama"
    monkeypatch.setenv("FABRIC_BACKEND", "nonsense")
    message = config_error(write(tmp_path, MODELS_YAML))
    assert "FABRIC_BACKEND='nonsense'" in message
    assert "ollama" in message and "embedded" in message


def test_fabric_model_overrides_every_model_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_MODEL", "llama3.1:8b")
    loaded = load_config(write(tmp_path, MODELS_YAML))
    # every key the file names, including a pack's key that llm.models lacks
    assert loaded.config.llm.models == {
        "default": "llama3.1:8b",
        "coder": "llama3.1:8b",
        "other": "llama3.1:8b",
    }
    # and a backend's own table, which would otherwise win
    assert loaded.config.llm.backends["openai"].models == {"coder": "llama3.1:8b"}


def test_without_env_the_file_is_taken_as_written(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, MODELS_YAML))
    assert _openai_url(loaded) == "http://10.0.0.1:8000/v1"
    assert loaded.config.llm.models == {"default": "small", "coder": "big"}
    # backends given in the file replace the built-in ones by name; the others stay
    assert sorted(loaded.config.llm.backends) == ["anthropic", "embedded", "ollama", "openai"]


def test_invalid_fabric_base_url_names_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", "not a url")
    message = config_error(write(tmp_path, MODELS_YAML))
    assert "FABRIC_BASE_URL" in message
    assert "'not a url'" in message


def test_env_override_on_a_wrongly_typed_llm_section_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FABRIC_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("FABRIC_MODEL", "m")
    path = write(tmp_path, "version: 1\nllm: 5\n")
    message = config_error(path)
    assert f"{path}:2: llm:" in message


def test_unknown_backend_names_are_config_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "llm:\n  backend: olama\n")
    message = config_error(path)
    # the line of the value that is wrong, not of `llm:` where pydantic reports the check
    assert f"{path}:2: llm.backend:" in message and "'olama'" in message and "ollama" in message


def test_a_backend_of_the_wrong_kind_names_its_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "llm:\n  backends:\n    mine: {kind: openai, ensure_available: true}\n")
    message = config_error(path)
    assert "llm.backends.mine.ensure_available: unknown key" in message


def test_api_key_comes_from_fabric_api_key_first(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = OpenAIBackend(kind="openai")
    assert api_key(backend) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key(backend) == "sk-openai"
    monkeypatch.setenv("FABRIC_API_KEY", "sk-fabric")
    assert api_key(backend) == "sk-fabric"


def test_api_key_env_list_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_API_KEY", "sk-fabric")
    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-mine")
    loaded = load_config(
        write(
            tmp_path,
            "llm:\n  backends:\n    openai: {kind: openai, api_key_env: [MY_PROVIDER_KEY]}\n",
        )
    )
    backend = loaded.config.llm.backends["openai"]
    assert isinstance(backend, OpenAIBackend)
    assert api_key(backend) == "sk-mine"


def test_empty_api_key_variable_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_API_KEY", "")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert api_key(OpenAIBackend(kind="openai")) == "sk-openai"


# --- broken files: one ConfigError with file, key path and line -----------------------------


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        llm:
          models: {default: m}
        packs:
          p:
            builder: "engineering
        runs_dir: x
        """,
    )
    message = config_error(path)
    assert message.startswith(f"{path}:")
    assert "not valid YAML" in message
    line = int(message.split(":")[1])
    assert line >= line_of(path, "builder:")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "- a\n- b\n"))
    assert "top level must be a mapping" in message


def test_unknown_top_level_key_lists_the_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "version: 1\nrun_dir: runs\n")
    message = config_error(path)
    assert f"{path}:2: run_dir: unknown key" in message
    for key in ("version", "llm", "runs_dir", "default_pack", "packs"):
        assert key in message.split("valid keys:")[1]


def test_unknown_nested_key_lists_that_sections_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        llm:
          models: {default: m}
          timeouts:
            connect: 5
            reed: 60
        """,
    )
    message = config_error(path)
    assert f"{path}:{line_of(path, 'reed')}: llm.timeouts.reed: unknown key" in message
    assert "valid keys: connect, read, write" in message


def test_unknown_key_in_a_packs_sandbox(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          eng:
            builder: engineering
            sandbox:
              allowed_comands: [python]
        """,
    )
    message = config_error(path)
    key_line = line_of(path, "allowed_comands")
    assert f"{path}:{key_line}: packs.eng.sandbox.allowed_comands: unknown key" in message
    assert "allowed_commands" in message.split("valid keys:")[1]


def test_wrong_type_names_key_path_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          eng:
            builder: engineering
            limits:
              max_steps: many
        """,
    )
    message = config_error(path)
    assert f"{path}:{line_of(path, 'max_steps')}: packs.eng.limits.max_steps:" in message
    assert "integer" in message


def test_all_problems_come_in_one_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        version: 2
        llm:
          temperature: 9
        runs_dir: [a]
        """,
    )
    message = config_error(path)
    assert message.startswith("invalid configuration")
    assert f"{path}:1: version:" in message
    assert f"{path}:3: llm.temperature:" in message
    assert f"{path}:4: runs_dir:" in message


def test_duplicate_key_is_an_error_not_a_silent_overwrite(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          eng:
            builder: engineering
          eng:
            builder: research
        """,
    )
    message = config_error(path)
    assert f"{path}:4:" in message
    assert "duplicate key 'eng'" in message
    assert "line 2" in message


def test_duplicate_key_on_one_line_is_found_too(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "llm: {models: {default: a, default: b}}\n"))
    assert "duplicate key 'default'" in message


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          a: &base
            builder: engineering
            model: default
          b:
            <<: *base
            description: second
        """,
    )
    packs = load_config(path).config.packs
    assert packs["b"].builder == "engineering"
    assert packs["b"].description == "second"


def test_secret_looking_env_passthrough_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          eng:
            builder: engineering
            sandbox:
              env_passthrough: [CI, GITHUB_TOKEN]
        """,
    )
    message = config_error(path)
    assert (
        f"{path}:{line_of(path, 'env_passthrough')}: packs.eng.sandbox.env_passthrough" in message
    )
    assert "GITHUB_TOKEN" in message
    assert "secret" in message


@pytest.mark.parametrize(
    "name", ["OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "NPM_AUTH", "GH_TOKEN"]
)
def test_sandbox_settings_refuse_secret_names(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SandboxSettings(env_passthrough=[name])


def test_sandbox_settings_allow_ordinary_names() -> None:
    settings = SandboxSettings(env_passthrough=["CI", "GIT_AUTHOR_NAME", "PYTHONHASHSEED"])
    assert settings.env_passthrough == ["CI", "GIT_AUTHOR_NAME", "PYTHONHASHSEED"]


def test_where_points_at_a_key_or_just_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MODELS_YAML)
    loaded = load_config(path)
    assert loaded.where("packs", "q", "model") == f"{path}:{line_of(path, 'model: other')}"
    # a key that is not in the file points at its nearest parent
    assert loaded.where("packs", "q", "limits") == f"{path}:{line_of(path, '  q:')}"


def test_a_models_own_temperature_replaces_the_global_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's own temperature wins over llm.temperature; the packaged config sets none (the
    embedded model at 0.2 repeated one failing call until its steps ran out)."""
    from fabric.config.schema import LLMSettings
    from fabric.infrastructure.llm.backends import Backends

    monkeypatch.chdir(tmp_path)  # no ./fabric.yaml here: the packaged default
    packaged = Backends(load_config().config.llm)
    assert packaged.temperature("qwen2.5-coder-1.5b-instruct-q4_k_m") is None
    own = LLMSettings.model_validate(
        {"temperature": 0.7, "model_options": {"small": {"temperature": 0.0}}}
    )
    assert Backends(own).temperature("small") == 0.0  # 0 is a setting, not "unset"
    assert Backends(own).temperature("other") == 0.7
