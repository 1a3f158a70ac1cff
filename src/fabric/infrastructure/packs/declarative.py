"""A pack made of YAML alone: a prompt, library tools by name, and a finish schema.

packs:
  reviewer:
    builder: declarative
    description: Reviews a file and reports problems.
    system_prompt: You review code...
    tools: [read_file, list_files, search_files]
    finish_schema:
      type: object
      properties: {verdict: {type: string}, problems: {type: array, items: {type: string}}}
      required: [verdict]
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from fabric.application.pack import Pack, finish_schema_problem
from fabric.config.schema import PackSettings, WebSettings
from fabric.infrastructure.tools.library import LIBRARY, library_tools


class DeclarativeSettings(PackSettings):
    """A pack declared entirely in fabric.yaml."""

    system_prompt: str = Field(min_length=1, description="What the specialist is and does.")
    tools: list[str] = Field(
        default_factory=list, description=f"Library tools by name: {', '.join(LIBRARY)}."
    )
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
        unknown = [n for n in names if n not in LIBRARY]
        if unknown:
            raise ValueError(
                f"unknown tool(s) {', '.join(unknown)}; library tools: {', '.join(LIBRARY)}"
            )
        return names

    @field_validator("finish_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        problem = finish_schema_problem(schema)
        if problem:
            raise ValueError(problem)
        return schema


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
