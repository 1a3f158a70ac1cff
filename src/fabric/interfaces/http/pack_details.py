"""What ``GET /packs`` says of each pack beyond ``fabric packs``: its policy, limits, finish
schema and tools in full, and what ``POST /tasks`` accepts for it (the console's new-task
form)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fabric.application.job import Control
from fabric.application.pack import FINISH_TOOL
from fabric.config.schema import ServeSettings
from fabric.interfaces.runner import Runner

from .shapes import MAX_STEPS


def pack_details(
    runner: Runner, name: str, serve: ServeSettings, roots: Sequence[Path]
) -> dict[str, Any]:
    """``policy``, ``limits``, ``finish_schema``, ``tools_detail`` and ``inputs`` of pack
    ``name`` (as configured: the policy and limits a task of it runs with)."""
    loaded = runner.pack(name)
    pack, settings = runner.with_delegates(loaded.pack, loaded, None, Control()), loaded.settings
    tools = [
        {"name": t.spec.name, "description": t.spec.description, "parameters": t.spec.parameters}
        for t in pack.tools
    ]
    tools.append(
        {
            "name": FINISH_TOOL,
            "description": pack.finish_description,
            "parameters": pack.finish_schema,
        }
    )
    return {
        "policy": settings.sandbox.policy.model_dump(mode="json"),
        "limits": settings.limits.model_dump(mode="json"),
        "finish_schema": pack.finish_schema,
        "tools_detail": tools,
        "inputs": {
            "task": {"max_chars": serve.max_task_chars},
            "workspace": True,
            "workspace_roots": [str(root) for root in roots],
            "verify": list(settings.sandbox.allowed_commands),
            "verify_default": settings.verify.command,
            "max_steps": {"default": settings.limits.max_steps, "max": MAX_STEPS},
            "budget": settings.limits.budget.set(),  # a task's own may only be lower
        },
    }
