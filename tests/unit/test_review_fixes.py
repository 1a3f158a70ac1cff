"""Regressions found in review: damaged model files, service settings that could never work,
and file tools reaching the service's own files."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest
from pydantic import ValidationError

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings, ServeSettings
from fabric.domain.errors import SandboxError
from fabric.infrastructure.llm.gguf import read_header
from fabric.infrastructure.tools.files import read_file, search_files, write_file


def test_a_truncated_gguf_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    model = tmp_path / "cut.gguf"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + struct.pack("<Q", 12) + b"general"
    model.write_bytes(header)  # the key's bytes end early
    with pytest.raises(ValueError, match="truncated"):
        read_header(model)
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62))
    with pytest.raises(ValueError, match="damaged"):
        read_header(huge)


def test_service_settings_that_could_never_work_are_refused() -> None:
    with pytest.raises(ValidationError):
        ServeSettings(workspace_roots=[])
    with pytest.raises(ValidationError):
        ServeSettings(pack_concurrency={"engineering": 0})


def test_file_tools_neither_read_nor_write_protected_files(tmp_path: Path) -> None:
    database = tmp_path / "tasks.sqlite3"
    database.write_text("other clients' tasks")
    ctx = ToolContext("r", tmp_path, SandboxSettings(), (database,))
    with pytest.raises(SandboxError, match="protected"):
        asyncio.run(read_file(ctx, "tasks.sqlite3"))
    with pytest.raises(SandboxError, match="protected"):
        write_file(ctx, "tasks.sqlite3", "overwritten")
    assert database.read_text() == "other clients' tasks"
    assert search_files(ctx, "clients").startswith("no matches")


def test_packs_made_from_a_model_check_finish_arguments_strictly() -> None:
    """The engineering pack checks finish_task with its pydantic model, as strictly as its
    JSON Schema says: no coercion, no extra keys, required fields required."""
    from packs.engineering import EngineeringSettings, build

    check = build(EngineeringSettings(builder="engineering")).finish_check()
    assert check({"summary": "done", "artifacts": ["a.py"]}) == []
    assert any(p.startswith("summary:") for p in check({"summary": 5}))
    assert any(p.startswith("artifacts.0:") for p in check({"summary": "s", "artifacts": [1]}))
    assert any("summary" in p for p in check({}))
    assert any(p.startswith("surprise:") for p in check({"summary": "s", "surprise": 1}))
