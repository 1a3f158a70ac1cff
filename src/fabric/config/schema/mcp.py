"""``mcp_servers:``: MCP servers whose tools packs may use, and a pack's ``mcp:`` list of the
servers it uses (ADR 0019)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from .base import _Strict

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,30}$")
"""A server's name: its tools are called ``name__tool``, so no ``_`` (the separator) and short."""


class McpServerSettings(_Strict):
    """One MCP server: a program fabric starts (stdio) or a URL (streamable HTTP)."""

    command: str | None = Field(
        None,
        description="stdio: the program to start, by bare name (looked up on the scrubbed "
        "PATH) or as an absolute path. It runs confined like the pack's shell commands.",
    )
    args: list[str] = Field([], description="stdio: the program's arguments.")
    env: list[str] = Field(
        [],
        description="stdio: names of environment variables passed on from fabric's "
        "environment, besides the short base set shell commands get. Nothing else reaches "
        "the server, no secret unless named here.",
    )
    cwd: str | None = Field(
        None,
        description="stdio: the folder the server starts in (relative paths are taken from "
        "the config file's folder; default: the run's workspace).",
    )
    network: bool = Field(
        False, description="stdio: whether the confined server may use the network."
    )
    url: str | None = Field(
        None, description="streamable HTTP: the server's endpoint, e.g. http://127.0.0.1:9000/mcp."
    )
    headers: dict[str, str] = Field(
        {},
        description="streamable HTTP: request headers, each taken from the environment "
        "variable named as its value (e.g. Authorization: MY_SERVER_AUTH).",
    )
    protocol: Literal["auto", "legacy"] = Field(
        "auto",
        description="auto: the newest protocol revision the server speaks (2026-07-28 "
        "first); legacy: the initialize handshake of the older revisions.",
    )
    start_timeout: float = Field(
        20.0, gt=0, description="Seconds the server may take to start and list its tools."
    )
    call_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds one tool call may take before the model is told it timed out "
        "(the pack's limits.tool_timeout caps it too).",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either 'command' (a server fabric starts, over stdio) or 'url' (a "
                "streamable HTTP server), not both or neither"
            )
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


class McpUse(_Strict):
    """A server a pack uses, and which of its tools."""

    server: str = Field(description="A name under mcp_servers.")
    include: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Globs of the server's own tool names to offer (default: all).",
    )
    exclude: list[str] = Field(
        [], description="Globs of tool names never offered (wins over include)."
    )


def check_server_name(name: str) -> str:
    if not SERVER_NAME.match(name):
        raise ValueError(
            f"MCP server name {name!r}: use 1-31 letters, digits and '-' (no '_': tools are "
            "named server__tool)"
        )
    return name
