"""A pack's section: the keys fabric reads (limits, sandbox, verification); the rest is for
its builder's own settings model."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import KeyProblem, _Strict
from .instructions import InstructionsSettings
from .mcp import McpUse
from .memory import MemorySettings
from .plan import PlanSettings
from .sandbox import SandboxSettings
from .skills import SkillSettings
from .tool_search import ToolSearchSettings

PACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")
"""A pack's name: it becomes part of tool names (``delegate_<pack>``, the MCP server's tools)
and of URLs, so letters, digits, ``-`` and ``_``, starting with a letter."""


def pack_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a pack, or None."""
    if PACK_NAME.match(name):
        return None
    return (
        f"{name!r} cannot name a pack: use letters, digits, '-' and '_', starting with a letter, "
        "at most 48 characters (the name becomes part of tool names and URLs)"
    )


class Budget(_Strict):
    """What a run may spend, in all: with the runs it delegates to (its task tree). A run that
    reaches a limit ends ``budget_exceeded``; none is checked when unset."""

    tokens: int | None = Field(
        None, ge=1, description="Prompt and completion tokens of every model call."
    )
    cost_usd: float | None = Field(
        None,
        gt=0,
        description="US dollars of model calls, at the prices in llm.model_options (the "
        "model needs both).",
    )
    seconds: float | None = Field(None, gt=0, description="Wall-clock time from the run's start.")
    tool_calls: int | None = Field(None, ge=1, description="Tool calls, finish_task not counted.")
    model_calls: int | None = Field(None, ge=1, description="Model calls.")

    def tightened(self, other: Budget | None) -> Budget:
        """The lower of the two for each limit (a run's own budget never widens its pack's)."""
        if other is None:
            return self
        values = {}
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            values[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return Budget(**values)

    def set(self) -> dict[str, float]:
        """The limits that are set, by name."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Limits(_Strict):
    """Bounds on one run."""

    max_steps: int = Field(30, ge=1, description="Model calls at most.")
    finish_repairs: int = Field(
        2,
        ge=0,
        description="Extra chances after a finish_task is refused: its arguments fail "
        "validation, or the work fails the pack's verification (one budget for both).",
    )
    tool_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds one tool call may take before the model is told it timed out "
        "(caps shell's command_timeout too).",
    )
    max_depth: int = Field(
        3,
        ge=0,
        le=10,
        description="How many levels of delegation a run started with this pack may have "
        "below it (0: it may not delegate).",
    )
    tool_output_chars: int = Field(
        16_000,
        ge=256,
        description="Tool output longer than this is cut for the model; the full text is kept "
        "as an artifact beside the runlog.",
    )
    budget: Budget = Field(
        default_factory=Budget,
        description="What a run may spend in all, its delegated runs included: tokens, "
        "cost_usd, seconds, tool_calls, model_calls (unset: no limit).",
    )


class VerifySettings(_Strict):
    """How a pack checks the work before a run may end ``completed``."""

    command: str | None = Field(
        None,
        description="Run in the workspace (confined like the pack's commands) after a valid "
        "finish_task; exit code 0 passes, anything else goes back to the model as a failed "
        "finish (a repair round), and the run ends 'unverified' when the rounds run out. "
        "'auto': the project's pytest tests, when the workspace has any. Unset: no command.",
    )
    when: Literal["changed", "always"] = Field(
        "changed",
        description="changed: only for runs that did more than read (wrote a file, ran a "
        "command); always: after every finish_task.",
    )
    timeout: float | None = Field(
        None, gt=0, description="Seconds the command may take (default: sandbox.command_timeout)."
    )


class PackSettings(BaseModel):
    """The part of a pack's YAML section fabric itself reads. A builder's own settings model
    subclasses this and adds its keys; unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    builder: str = Field(
        description="Where the pack is built: 'module:callable', or a built-in short name."
    )
    description: str = Field("", description="One line shown by `fabric packs`.")
    model: str = Field("default", description="Key into llm.models.")
    limits: Limits = Field(default_factory=Limits, description="Bounds on each run.")
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings, description="What the pack's tools may touch."
    )
    mcp: list[McpUse] = Field(
        [],
        description="MCP servers (names under mcp_servers) whose tools the pack's runs get, "
        "as server__tool, with include/exclude globs on the server's tool names.",
    )
    verify: VerifySettings = Field(
        default_factory=VerifySettings,
        description="How the work is checked before a run ends completed (per task: "
        "--verify / --no-verify, or the task's verify field).",
    )
    delegates: list[str] = Field(
        [],
        description="Packs this pack may hand part of its task to: each becomes a tool "
        "delegate_<pack>(task) whose result is that pack's finish_task payload. The sub-run "
        "works in the same workspace with its own tools, within this run's sandbox and policy.",
    )
    instructions: InstructionsSettings = Field(
        default_factory=InstructionsSettings,
        description="The workspace's AGENTS.md (its root's, and a subfolder's when a tool "
        "call reaches into it) given to the model as the project's guidance (ADR 0026).",
    )
    memory: MemorySettings = Field(
        default_factory=MemorySettings,
        description="Memory across runs (off by default): facts runs keep for later runs in "
        "the same workspace, which those can search (enabled, fact_chars, max_facts, "
        "search_results).",
    )
    tool_search: ToolSearchSettings = Field(
        default_factory=ToolSearchSettings,
        description="Above this many tools, the model searches them and loads what it needs "
        "instead of getting every schema in every request: threshold, always, max_results.",
    )
    skills: SkillSettings = Field(
        default_factory=SkillSettings,
        description="Skills the pack's runs are offered: folders with a SKILL.md found in "
        "configured folders and in the workspace (ADR 0027).",
    )
    plan: PlanSettings = Field(
        default_factory=PlanSettings,
        description="A checklist the model keeps with update_plan while it works (off by "
        "default): enabled, max_items, item_chars.",
    )

    def unusable(self) -> list[KeyProblem]:
        """Settings that load but leave part of the pack unable to work (a tool its own
        sandbox refuses every call of), each at its key: what ``fabric packs --check`` reports
        besides what stops a pack from loading. A builder's settings model may add its own."""
        return []


class RawPackSection(PackSettings):
    """A pack section before its builder's own model has checked the extra keys."""

    model_config = ConfigDict(extra="allow", frozen=True)
