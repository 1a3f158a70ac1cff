"""The shared embedded model servers' folder (their API keys, and the lease locks that keep
them alive) is out of every run's reach: a command could otherwise read a key, or hold a
lock that makes other runs' servers look stopping."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from support import write

from fabric.config.loader import load_config
from fabric.infrastructure.tools.shell import scrubbed_env
from fabric.interfaces.compose import build_runner


def test_no_command_of_a_run_can_read_the_embedded_servers_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
    config = write(
        tmp_path,
        """\
        version: 1
        llm: {backend: embedded, backends: {embedded: {kind: embedded}}}
        packs:
          engineering: {builder: engineering, sandbox: {allowed_commands: [cat]}}
        """,
    )
    runner = build_runner(load_config(config))
    state = tmp_path / "runtime" / "fabric" / "embedded"
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700
    assert state in runner.protected_paths
    (state / "server.json").write_text('{"api_key": "sk-embedded-secret"}')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    commands = runner.commands_for(runner.pack("engineering"), workspace)
    assert commands is not None
    cat = shutil.which("cat")
    assert cat is not None
    env = scrubbed_env(runner.pack("engineering").settings.sandbox, os.environ)
    outcome = asyncio.run(commands.run([cat, str(state / "server.json")], env=env, timeout=30))
    assert outcome.exit_code != 0 and "sk-embedded-secret" not in outcome.output
