"""A run's request against its pack: what ``Runner`` checks before a run starts or goes on
(the task's own ``verify``, the pack's web_search), and what the request changes in the
pack's settings for that run (limits, tool search, the ``run_started`` it records)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fabric.config.schema import Budget, Limits, ToolSearchSettings
from fabric.domain.errors import ConfigError
from fabric.infrastructure.packs.registry import LoadedPack
from fabric.infrastructure.tools.search_check import search_problem

if TYPE_CHECKING:
    from fabric.application.pack import Pack
    from fabric.application.ports import Tool


async def check_search(name: str, loaded_pack: LoadedPack) -> None:
    """Refuse a run of a pack whose web_search cannot work: every search would fail steps
    later, after the model was loaded and asked."""
    problem = await search_problem(name, loaded_pack)
    if problem is not None:
        raise problem


def run_tool_search(loaded_pack: LoadedPack, pack: Pack, mcp: Sequence[Tool]) -> ToolSearchSettings:
    """The pack's tool search for a run of ``pack`` (ADR 0028): the tools that are not its
    MCP servers' are offered always, unless the settings have them searched too."""
    served = {t.spec.name for t in mcp}
    own = [t.spec.name for t in pack.tools if t.spec.name not in served]
    return loaded_pack.settings.tool_search.for_run(own)


def check_verify(loaded_pack: LoadedPack, verify: str | None, *, remote: bool) -> None:
    """A command that cannot be parsed is refused now, not when the task runs. A remote
    caller's check may use only what the pack's commands may (its allowed programs)."""
    loaded_pack.for_run(verify)
    if not remote or verify is None or verify.strip() == "off":
        return
    program = shlex.split(verify)[0]
    allowed = loaded_pack.settings.sandbox.allowed_commands
    if program not in allowed:
        raise ConfigError(
            f"verify: {program!r} is not one of the allowed commands of pack "
            f"{loaded_pack.pack.name!r}, so a task may not run it",
            hint=f"use one of: {', '.join(allowed)}; or 'off'" if allowed else "use 'off'",
        )


def verify_meta(verify: str | None) -> dict[str, str]:
    """A task's own verification, kept in ``run_started`` so a resumed run checks the same."""
    return {} if verify is None else {"verify_override": verify}


def run_limits(limits: Limits, max_steps: int | None, budget: Budget | None = None) -> Limits:
    """The pack's limits with a run's own: its step limit, and its budget (tightening)."""
    if budget is not None:
        limits = limits.model_copy(update={"budget": limits.budget.tightened(budget)})
    if max_steps is None:
        return limits
    if max_steps < 1:
        raise ConfigError("--max-steps must be at least 1")
    return limits.model_copy(update={"max_steps": max_steps})
