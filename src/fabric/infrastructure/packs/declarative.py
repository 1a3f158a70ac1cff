"""A pack made of YAML alone: a prompt, fabric's tools by name, MCP servers' tools, limits,
sandbox and policy, and the finish schema as JSON Schema.

packs:
  reviewer:
    builder: declarative
    description: Reviews a file and reports problems.
    system_prompt: You review code...
    tools: [read_file, list_files, search_files]
    mcp: [{server: issues, include: ["get_*"]}]      # names under mcp_servers
    limits: {max_steps: 20}
    sandbox: {policy: {rules: [{tool: read_file, path: "**/.env", verdict: deny}]}}
    finish_schema:
      type: object
      properties: {verdict: {type: string}, problems: {type: array, items: {type: string}}}
      required: [verdict]

The tool names and the schema (against the JSON Schema metaschema; the error names the key
inside it) are checked when the config loads; ``fabric packs --check`` also says when a tool
cannot work in the pack's sandbox (``shell`` needs programs to run, the web tools the network).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from fabric.application.pack import Pack, finish_schema_issue
from fabric.config.schema import KeyProblem, PackSettings, WebSettings
from fabric.infrastructure.tools.library import LIBRARY, library_tools

NEEDS_NETWORK = ("web_search", "fetch_url")


class DeclarativeSettings(PackSettings):
    """A pack declared entirely in fabric.yaml."""

    system_prompt: str = Field(min_length=1, description="What the specialist is and does.")
    tools: list[str] = Field([], description=f"fabric's tools by name: {', '.join(LIBRARY)}.")
    finish_schema: dict[str, Any] = Field(
        description="JSON Schema (2020-12) of the final output: finish_task's arguments."
    )
    web: WebSettings = Field(
        default_factory=WebSettings, description="Caps and search backend for the web tools."
    )
    finish_description: str = Field(
        "Finish the task and return the final result.",
        description="The finish_task tool's description.",
    )

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            if name not in LIBRARY:
                raise KeyProblem(
                    f"unknown tool {name!r}; fabric's tools: {', '.join(LIBRARY)} (MCP "
                    "servers' tools go under mcp:, by server)",
                    (index,),
                )
            if name in names[:index]:
                raise KeyProblem(f"{name!r} is listed twice", (index,))
        return names

    @field_validator("finish_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        issue = finish_schema_issue(schema)
        if issue:
            raise KeyProblem(issue[1], issue[0])
        return schema

    def unusable(self) -> list[KeyProblem]:
        """A tool the pack's own sandbox refuses every call of: the pack loads and runs (the
        model is told why each call fails), and ``fabric packs --check`` says it."""
        found = []
        for index, name in enumerate(self.tools):
            if name == "shell" and not self.sandbox.allowed_commands:
                problem = "sandbox.allowed_commands is empty: every command would be refused"
                hint = "list the programs it may start (sandbox: {allowed_commands: [python]})"
            elif name in NEEDS_NETWORK and not self.sandbox.network:
                problem = "sandbox.network is off: every call would be refused"
                hint = "set sandbox: {network: true}"
            else:
                continue
            found.append(
                KeyProblem(
                    f"{name} is listed but {problem}", ("tools", index), f"{hint}, or drop {name}"
                )
            )
        return found


def build(settings: DeclarativeSettings) -> Pack:
    return Pack(
        name="declarative",
        description=settings.description,
        system_prompt=settings.system_prompt,
        tools=library_tools(*settings.tools, bind={"web": settings.web}),
        finish_schema=settings.finish_schema,
        finish_description=settings.finish_description,
        sandbox=settings.sandbox,
    )
