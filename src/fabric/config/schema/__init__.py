"""The typed shape of ``fabric.yaml``. YAML is parsed once, at the edge, into these models:
``llm`` (model backends), ``sandbox`` (what tools may touch), ``packs`` (a pack's section),
``serve`` (the HTTP service), ``telemetry`` (OpenTelemetry traces); ``FabricConfig`` is the
whole file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import KeyProblem, _Strict
from .llm import (
    AnthropicBackend,
    Backend,
    EmbeddedBackend,
    FallbackStep,
    LLMSettings,
    ModelOptions,
    OllamaBackend,
    OpenAIBackend,
    RetrySettings,
    SelectionSettings,
    Timeouts,
)
from .mcp import McpServerSettings, McpUse, check_server_name
from .memory import MemorySettings
from .packs import (
    Budget,
    Limits,
    PackSettings,
    RawPackSection,
    VerifySettings,
    pack_name_problem,
)
from .plan import PlanSettings
from .sandbox import ResourceLimits, SandboxSettings, WebSearchSettings, WebSettings
from .serve import ServeSettings
from .skills import SkillSettings
from .telemetry import TelemetrySettings
from .tool_search import ToolSearchSettings

__all__ = [
    "AnthropicBackend",
    "Backend",
    "Budget",
    "EmbeddedBackend",
    "FabricConfig",
    "FallbackStep",
    "KeyProblem",
    "LLMSettings",
    "Limits",
    "McpServerSettings",
    "McpUse",
    "MemorySettings",
    "ModelOptions",
    "OllamaBackend",
    "OpenAIBackend",
    "PackSettings",
    "PlanSettings",
    "RawPackSection",
    "ResourceLimits",
    "RetrySettings",
    "SandboxSettings",
    "SelectionSettings",
    "ServeSettings",
    "SkillSettings",
    "TelemetrySettings",
    "Timeouts",
    "ToolSearchSettings",
    "VerifySettings",
    "WebSearchSettings",
    "WebSettings",
    "pack_name_problem",
]


class FabricConfig(_Strict):
    """The whole of ``fabric.yaml``."""

    version: Literal[1] = Field(1, description="Format version of this file.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="The model backend.")
    runs_dir: str = Field(
        "runs",
        description="Where runlogs go; relative paths are taken from the config file's folder.",
    )
    default_pack: str | None = Field(None, description="Pack used when --pack is not given.")
    serve: ServeSettings = Field(default_factory=ServeSettings, description="fabric serve.")
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings, description="OpenTelemetry traces of runs."
    )
    mcp_servers: dict[str, McpServerSettings] = Field(
        {},
        description="MCP servers by name, whose tools packs may use (a pack's mcp: list).",
    )
    packs: dict[str, RawPackSection] = Field({}, description="Packs by name.")

    @field_validator("packs")
    @classmethod
    def _delegates_are_packs(cls, packs: dict[str, RawPackSection]) -> dict[str, RawPackSection]:
        for name, section in packs.items():
            problem = pack_name_problem(name)
            if problem:
                raise KeyProblem(problem, (name,))
            unknown = [d for d in section.delegates if d not in packs]
            if unknown:
                raise ValueError(
                    f"packs.{name}.delegates names {', '.join(unknown)}, which is not a pack "
                    f"here (packs: {', '.join(packs)})"
                )
        return packs

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            check_server_name(name)
        return servers
