from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.infrastructure.sandbox import command_runner


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's fabric, provider or OpenTelemetry settings."""
    for name in (
        "FABRIC_CONFIG", "FABRIC_BASE_URL", "FABRIC_MODEL", "FABRIC_API_KEY", "FABRIC_BACKEND",
        "FABRIC_GGUF", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OLLAMA_HOST",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:  # tracing: the tests say
        monkeypatch.delenv(name)


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
