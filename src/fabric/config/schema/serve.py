"""``serve:``: the HTTP task service."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import _Strict


class ServeSettings(_Strict):
    """The HTTP task service (`fabric serve`)."""

    host: str = Field("127.0.0.1", description="Address to bind; loopback unless you need more.")
    port: int = Field(8321, ge=0, le=65535, description="Port to bind (0: any free port).")
    token_env: str = Field(
        "FABRIC_API_TOKEN",
        description="Environment variable holding the bearer token. Unset: fabric generates "
        "one and keeps it owner-only in token_file.",
    )
    token_file: str = Field(
        "~/.config/fabric/api-token", description="Where a generated token is kept."
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "::1"],
        description="Host header values accepted (blocks DNS rebinding); the bound address "
        "is added.",
    )
    cors_origins: list[str] = Field(
        [], description="Browser origins allowed to call the API (none)."
    )
    max_body_bytes: int = Field(1_000_000, ge=1024, description="Largest request body accepted.")
    workspace_roots: list[str] = Field(
        default_factory=lambda: ["."],
        min_length=1,
        description="Folders a task's workspace must lie under (relative to the config "
        "file's folder). The first is the default workspace.",
    )
    max_task_chars: int = Field(100_000, ge=1, description="Longest task text accepted.")
    share_workspaces: bool = Field(
        False,
        description="Let tasks on the same workspace run at the same time. Off: a task whose "
        "workspace is, contains or lies inside a running or earlier waiting task's workspace "
        "stays queued until that one ends, so two runs never edit the same files at once.",
    )
    concurrency: int = Field(4, ge=1, description="Tasks running at once, in all.")
    pack_concurrency: dict[str, Annotated[int, Field(ge=1)]] = Field(
        {}, description="Tasks of one pack running at once, by pack name."
    )
    mcp: bool = Field(
        True,
        description="Offer the packs as MCP tools and the runs as resources at /mcp "
        "(streamable HTTP), behind the same token, Host and Origin checks as the API.",
    )
    shutdown_grace: float = Field(
        20.0, ge=0, description="Seconds running tasks get to finish on shutdown."
    )
    durable_database: str = Field(
        "durable.sqlite3",
        description="The database of the service's tasks and of every durable run (ADR "
        "0020): a SQLite file relative to the config's folder (one machine), or a Postgres URL "
        "(many API nodes and workers); $FABRIC_DATABASE_URL overrides it.",
    )
