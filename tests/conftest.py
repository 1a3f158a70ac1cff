from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.infrastructure.sandbox import command_runner


@pytest.fixture(scope="session")
def _no_user_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder as $XDG_CONFIG_HOME: no user config (``~/.config/fabric/config.yaml``)."""
    return tmp_path_factory.mktemp("xdg-config")


@pytest.fixture(scope="session")
def _no_user_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder as $XDG_DATA_HOME: the memory store is not the developer's."""
    return tmp_path_factory.mktemp("xdg-data")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, _no_user_config: Path, _no_user_data: Path) -> None:
    """Tests never see the developer's fabric, provider or OpenTelemetry settings: no user
    config, no FABRIC_* variable that sets a key (a test sets its own), no OTEL_* variable,
    and a memory store of the tests' own."""
    for name in (
        "FABRIC_CONFIG", "FABRIC_BASE_URL", "FABRIC_MODEL", "FABRIC_API_KEY", "FABRIC_BACKEND",
        "FABRIC_GGUF", "FABRIC_DATABASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
        "OLLAMA_HOST", "FABRIC_MEMORY_DB",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:  # tracing: the tests say
        monkeypatch.delenv(name)
    for name in [n for n in os.environ if n.startswith("FABRIC_") and "__" in n]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(_no_user_config))
    monkeypatch.setenv("XDG_DATA_HOME", str(_no_user_data))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    """A tool context like the engineering pack's: python, ls, cat and git allowed, no network."""
    sandbox = SandboxSettings(
        allowed_commands=["python", "python3", "ls", "cat", "git", "sleep"], command_timeout=20
    )
    return ToolContext("test-run", workspace, sandbox, commands=command_runner(sandbox, workspace))
