"""The typed shape of ``fabric.yaml``. YAML is parsed once, at the edge, into these models."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE", re.IGNORECASE)
"""Environment variable names that look like secrets; they never reach tools."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    """How long to wait for the model server, in seconds."""

    connect: float = Field(10.0, gt=0, description="Opening a connection.")
    read: float = Field(600.0, gt=0, description="Waiting for a reply (local models are slow).")
    write: float = Field(60.0, gt=0, description="Sending a request.")


class LLMSettings(_Strict):
    """The model backend."""

    kind: Literal["openai"] = Field(
        "openai",
        description="Backend protocol. 'openai' is any OpenAI-compatible server "
        "(Ollama's /v1, vLLM, llama.cpp server, LM Studio, OpenAI, OpenRouter).",
    )
    base_url: HttpUrl = Field(
        HttpUrl("http://127.0.0.1:11434/v1"),
        description="Base URL of the chat API, up to and including /v1. "
        "FABRIC_BASE_URL overrides it.",
    )
    api_key_env: list[str] = Field(
        default_factory=lambda: ["FABRIC_API_KEY", "OPENAI_API_KEY"],
        description="Environment variables to read the API key from, first set wins. "
        "Keys are never written in this file.",
    )
    models: dict[str, str] = Field(
        default_factory=lambda: {"default": "qwen2.5-coder:7b"},
        description="Model keys (used by packs) mapped to model names the server knows. "
        "FABRIC_MODEL overrides every key.",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts, description="Request timeouts.")
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature; unset leaves the server default."
    )


class SandboxSettings(_Strict):
    """What a pack's tools may touch."""

    allowed_commands: list[str] = Field(
        default_factory=list,
        description="Programs the shell tool may start, by bare name (e.g. 'python', 'git').",
    )
    network: bool = Field(False, description="Whether tools may use the network.")
    allow_private_addresses: bool = Field(
        False,
        description="Whether fetch_url may reach loopback, private and link-local addresses.",
    )
    command_timeout: float = Field(60.0, gt=0, description="Seconds a shell command may run.")
    env_passthrough: list[str] = Field(
        default_factory=list,
        description="Extra environment variables passed to commands. Names that look like "
        "secrets (KEY, TOKEN, SECRET, PASSWORD, AUTH, CREDENTIAL, COOKIE) are refused.",
    )

    @field_validator("env_passthrough")
    @classmethod
    def _no_secrets(cls, names: list[str]) -> list[str]:
        secret = [n for n in names if SECRET_NAME.search(n)]
        if secret:
            raise ValueError(
                f"{', '.join(secret)} look(s) like a secret; secrets are never passed to "
                "commands (remove the name from env_passthrough)"
            )
        return names


class WebSearchSettings(_Strict):
    """A search backend for the web_search tool."""

    kind: Literal["searxng"] = Field(
        "searxng", description="Backend protocol: a SearXNG instance's JSON API."
    )
    url: HttpUrl = Field(description="Base URL of the instance, e.g. http://127.0.0.1:8888.")
    max_results: int = Field(8, ge=1, le=50, description="Results returned at most.")


class WebSettings(_Strict):
    """Caps for fetch_url and the web_search backend."""

    max_bytes: int = Field(2_000_000, ge=1024, description="Largest response body read.")
    timeout: float = Field(20.0, gt=0, description="Seconds for one fetch, redirects included.")
    max_redirects: int = Field(5, ge=0, le=20, description="Redirects followed at most.")
    search: WebSearchSettings | None = Field(
        None, description="Where web_search sends queries; unset means web_search is off."
    )


class Limits(_Strict):
    """Bounds on one run."""

    max_steps: int = Field(30, ge=1, description="Model calls at most.")
    finish_repairs: int = Field(
        2, ge=0, description="Extra chances after finish_task arguments fail validation."
    )
    tool_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds one tool call may take before the model is told it timed out "
        "(caps shell's command_timeout too).",
    )
    tool_output_chars: int = Field(
        16_000,
        ge=256,
        description="Tool output longer than this is cut for the model; the full text is kept "
        "as an artifact beside the runlog.",
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


class RawPackSection(PackSettings):
    """A pack section before its builder's own model has checked the extra keys."""

    model_config = ConfigDict(extra="allow", frozen=True)


class FabricConfig(_Strict):
    """The whole of ``fabric.yaml``."""

    version: Literal[1] = Field(1, description="Format version of this file.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="The model backend.")
    runs_dir: str = Field(
        "runs",
        description="Where runlogs go; relative paths are taken from the config file's folder.",
    )
    default_pack: str | None = Field(None, description="Pack used when --pack is not given.")
    packs: dict[str, RawPackSection] = Field(default_factory=dict, description="Packs by name.")
